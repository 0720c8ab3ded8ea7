"""Resource checks of the GPU backend: shared memory per block and the warp count (needs no GPU)."""
from __future__ import annotations

import os

import pytest

import tawa
from tawa import hopper
from tawa.errors import CompilationError
from tawa.frontend import parse_and_lower

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GEMM = os.path.join(ROOT, "examples", "gemm.tawa")
GEMM_LOOP_LINE = 12     # `for k in range(cdiv(K, BLOCK_K)):` in examples/gemm.tawa
GEMM_DEF_LINE = 7


def _compile(path, **options):
    return tawa.compile(path, cache=False, **options).compiled


def _line_of(path, text):
    with open(path) as f:
        return next(i + 1 for i, line in enumerate(f) if text in line)


def test_gemm_lines_are_where_the_tests_expect():
    assert _line_of(GEMM, "for k in range") == GEMM_LOOP_LINE
    assert _line_of(GEMM, "def gemm") == GEMM_DEF_LINE


# ---- shared memory

# gemm.tawa's default 128x256x64 bf16 tile takes 48 KiB per ring slot: four slots (and the epilogue's staging)
# fit in the 226 KiB a block can use, five do not.
@pytest.mark.parametrize("num_buffers", [5, 8, 20])
@pytest.mark.parametrize("ws", [None, True])
def test_too_many_buffers_refused_at_the_loop(num_buffers, ws):
    with pytest.raises(CompilationError) as info:
        _compile(GEMM, num_buffers=num_buffers, warp_specialize=ws)
    e = info.value
    assert "shared memory" in e.message and f"num_buffers={num_buffers}" in e.message
    assert e.location is not None and e.location.filename == GEMM
    assert e.location.line == GEMM_LOOP_LINE
    assert e.note and "num_buffers=4 or less" in e.note and "smaller tiles" in e.note


@pytest.mark.parametrize("num_buffers", [None, 1, 2, 3, 4])
def test_buffers_that_fit_compile_within_the_limit(num_buffers):
    k = _compile(GEMM, num_buffers=num_buffers)
    assert 0 < k.shared_bytes <= hopper.SMEM_PER_BLOCK


STORE_IN_LOOP = """\
@grid(cdiv(M, BLOCK_M), cdiv(N, BLOCK_N))
def k(A: bf16[M, K], B: bf16[K, N], C: bf16[M, N],
      BLOCK_M: const = 128, BLOCK_N: const = 128, BLOCK_K: const = 64):
    pid_m = program_id(0)
    pid_n = program_id(1)
    acc = zeros((BLOCK_M, BLOCK_N), f32)
    for k in range(cdiv(K, BLOCK_K)):
        a = load(A, (pid_m, k), (BLOCK_M, BLOCK_K))
        b = load(B, (k, pid_n), (BLOCK_K, BLOCK_N))
        acc = dot(a, b, acc)
        store(C, (pid_m, pid_n), acc.to(bf16))
"""


def test_ring_that_overflows_next_to_other_tiles_refused_by_the_backend_at_the_loop(tmp_path):
    """Seven slots fit alone (224 KiB) but not next to the tile stored in the loop: convert-to-nvvm refuses
    the kernel, at the loop whose ring takes the memory."""
    path = tmp_path / "store_in_loop.tawa"
    path.write_text(STORE_IN_LOOP)
    assert _compile(str(path), num_buffers=6).shared_bytes <= hopper.SMEM_PER_BLOCK
    with pytest.raises(CompilationError) as info:
        _compile(str(path), num_buffers=7)
    e = info.value
    assert e.message.startswith("the kernel needs 263168 bytes (257 KiB) of shared memory")
    assert (e.location.filename, e.location.line, e.location.column) == (str(path), 7, 5)
    assert "num_buffers below 7" in e.note and "smaller tiles" in e.note
    assert "for k in range" in str(e)


@pytest.mark.parametrize("options", [{}, {"schedule": "tile"}, {"BLOCK_N": 256}, {"schedule": "persistent"}])
def test_transposed_register_tile_is_counted_beside_the_ring(options):
    """A residual loaded [BLOCK_N, BLOCK_M] and transposed in registers goes through scratch shared memory above
    the ring (`shape.convert`): the ring is sized beside it, so the kernel compiles with its defaults (it was
    refused, asking for fewer buffers than the automatic choice, 257 KiB of 227; and the ping-pong fallback's error
    had lost its source location)."""
    path = os.path.join(ROOT, "tests", "e2e", "kernels", "user", "gemm_residual_t.tawa")
    assert _compile(path, **options).shared_bytes <= hopper.SMEM_PER_BLOCK


def test_an_error_of_the_fallback_compile_keeps_its_location(monkeypatch):
    """The second compile of an automatic choice (ping-pong, then the tile shared) parses the first's input with its
    locations: an error there points into the source."""
    from tawa.lowering import aref_insertion
    monkeypatch.setattr(aref_insertion, "other_smem_bytes", lambda *a, **k: 0)   # the ring then overflows
    path = os.path.join(ROOT, "tests", "e2e", "kernels", "user", "gemm_residual_t.tawa")
    with pytest.raises(CompilationError) as info:
        _compile(path, num_buffers=6)       # (an automatic depth would be lowered until it fits)
    assert info.value.location is not None and info.value.location.filename == path


def test_uniform_kernel_over_the_limit_refused_at_its_def(monkeypatch):
    """Any kernel whose dynamic shared memory exceeds the limit is refused, located, by convert-to-nvvm (here a
    smaller limit makes the uniform gemm too large)."""
    monkeypatch.setattr(hopper, "SMEM_PER_BLOCK", 64 * 1024)
    with pytest.raises(CompilationError) as info:
        _compile(GEMM, warp_specialize=False)
    e = info.value
    assert "of shared memory, more than the 65536 bytes (64 KiB)" in e.message
    assert e.location is not None and e.location.line == GEMM_DEF_LINE
    assert "num_stages" in e.note and "smaller tiles" in e.note


def test_backend_check_is_only_a_safety_net(monkeypatch):
    """build-kernel keeps an unlocated check; a kernel over the limit is refused, located, before it."""
    from tawa.lowering import backend
    calls = []
    monkeypatch.setattr(backend, "_build_kernel", lambda *a: calls.append(a))
    monkeypatch.setattr(hopper, "SMEM_PER_BLOCK", 64 * 1024)
    with pytest.raises(CompilationError) as info:
        _compile(GEMM, warp_specialize=False)
    assert info.value.location is not None and not calls


# ---- @num_warps

KERNEL = """\
@grid(cdiv(M, 64))
@num_warps({n})
def row_max(X: f32[M, N], Y: f32[M], BLOCK_N: const = 128):
    x = load(X, (program_id(0), 0), (64, BLOCK_N))
    store(Y, program_id(0), max(x, axis=1))
"""


@pytest.mark.parametrize("n", [0, 1, 2, 12, 16, 32, 1024, -4])
def test_num_warps_decorator_refused_at_the_decorator(n):
    with pytest.raises(CompilationError) as info:
        parse_and_lower(KERNEL.format(n=n), "k.tawa")
    e = info.value
    assert e.message == f"@num_warps must be 4 or 8 (one or two warp groups), got {n}"
    assert (e.location.line, e.location.column) == (2, 1)
    assert "@num_warps(4) or @num_warps(8)" in e.note


@pytest.mark.parametrize("n", [4, 8])
def test_num_warps_decorator_accepted(n, tmp_path):
    path = tmp_path / "k.tawa"
    path.write_text(KERNEL.format(n=n))
    k = _compile(str(path))
    assert k.num_threads == 32 * n
    assert f".maxntid {32 * n}, 1, 1" in k.ptx


# ---- num_warps and warp specialization

def test_num_warps_with_forced_specialization_is_an_error():
    with pytest.raises(CompilationError) as info:
        _compile(GEMM, num_warps=8, warp_specialize=True)
    e = info.value
    assert "cannot warp-specialize kernel 'gemm'" in e.message and "num_warps=8" in e.message
    assert e.location.line == GEMM_DEF_LINE
    assert "num_consumer_groups" in e.note and "warp_specialize=False" in e.note


@pytest.mark.parametrize("warps", [4, 8])
def test_num_warps_with_auto_specialization_uses_the_uniform_path(warps):
    k = _compile(GEMM, num_warps=warps)
    assert k.num_threads == 32 * warps
    assert any("uniform-warp schedule" in n and f"num_warps={warps}" in n for n in k.notes), k.notes
    assert "setmaxnreg" not in k.ptx
    # ... the same PTX as asking for the uniform path
    assert k.ptx == _compile(GEMM, num_warps=warps, warp_specialize=False).ptx


def test_num_warps_decorator_with_auto_specialization_uses_the_uniform_path(tmp_path):
    src = open(GEMM).read().replace("@grid(", "@num_warps(8)\n@grid(", 1)
    path = tmp_path / "gemm8.tawa"
    path.write_text(src)
    k = _compile(str(path))
    assert k.num_threads == 256
    assert any("@num_warps(8)" in n for n in k.notes), k.notes
    with pytest.raises(CompilationError, match=r"@num_warps\(8\)"):
        _compile(str(path), warp_specialize=True)


def test_num_warps_matching_the_consumer_groups_specializes():
    k = _compile(GEMM, num_warps=8, num_consumer_groups=1)
    assert k.num_threads == 256 and "setmaxnreg" in k.ptx
    assert not any("uniform-warp" in n for n in k.notes)
    assert k.ptx == _compile(GEMM, num_consumer_groups=1).ptx


def test_without_num_warps_auto_still_specializes():
    k = _compile(GEMM)
    assert k.num_threads == 384 and "setmaxnreg" in k.ptx


def test_accumulating_addition_folds_into_the_dot():
    """`acc += dot(a, b)` becomes `dot(a, b, acc)` (canonicalize), so a 128x128 specialized GEMM with it fits in
    shared memory like `acc = dot(a, b, acc)` (found by the fuzz corpus: it asked for 257 KiB)."""
    from tawa.compiler import compile_source
    from tawa.options import CompileOptions
    src = """
@grid(cdiv(M, BM), cdiv(N, BN))
def k(A: f16[M, K], Bt: f16[N, K], bias: f32[N], C: f16[M, N], BM: const = 128, BN: const = 128, BK: const = 64):
    pid_m = program_id(0)
    pid_n = program_id(1)
    acc = zeros((BM, BN), f32)
    for k in range(cdiv(K, BK)):
        a = load(A, (pid_m, k), (BM, BK))
        b = load(Bt, (pid_n, k), (BN, BK)).T
        acc += dot(a, b)
    bv = load(bias, pid_n, BN)
    store(C, (pid_m, pid_n), (bv[None, :] + acc).to(f16))
"""
    tile = str(compile_source(src, "k.tawa", CompileOptions(), emit="mlir"))
    assert "arith.addf %arg" not in tile.split("tawa.dot")[1].split("scf.yield")[0]
    kernel = compile_source(src, "k.tawa", CompileOptions())
    assert kernel.shared_bytes <= 227 * 1024
