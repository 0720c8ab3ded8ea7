"""Code generation for the dots and tiles the GPU backend used to refuse, compiled for sm_90a and assembled by
ptxas on the CPU: transposed A (`tnspA`), f32 dots as tf32, tiles of 16 or 32 rows (A from registers, warps
holding copies), 32- and 64-byte swizzled rows (TMA boxes and wgmma descriptors), and fp8 / i32 register code.
The GPU runs of the same kernels are tests/e2e/test_gpu_coverage.py."""
import pathlib
import re

import pytest

import tawa
from tawa.lowering import layouts as L
from ws_support import SERIALIZED

KERNELS = pathlib.Path(__file__).resolve().parents[1] / "e2e" / "kernels"
GEMM = str(KERNELS / "gemm_layouts.tawa")
WGMMA = re.compile(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k(\d+)\.f32\.(\w+)\.\w+ \{[^}]*\}, (\{[^}]*\}|%rd\d+), "
                   r"%rd\d+, p, 1, 1(?:, (\d))?(?:, (\d))?;")


def gemm(**kw):
    options = {k: kw.pop(k) for k in ("warp_specialize", "num_warps", "num_consumer_groups", "tma") if k in kw}
    consts = dict(DTYPE="bf16", BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, A_T=0, B_T=0, A_COMPUTED=0)
    consts.update(kw)
    kernel = tawa.compile(GEMM, cache=False, **consts, **options)
    assert kernel.cubin and kernel.cubin[:4] == b"\x7fELF"
    return kernel


def wgmmas(kernel):
    """(n, k, type, A in registers, trans-a, trans-b) of every wgmma in the PTX."""
    found = WGMMA.findall(kernel.ptx)
    assert found, "no wgmma in the PTX"
    out = set()
    for n, k, t, a, first, second in found:
        registers = a.startswith("{")
        # A from registers has no trans-a flag: the one flag there is trans-b.
        trans_a, trans_b = ("", first) if registers else (first, second)
        out.add((int(n), int(k), t, registers, trans_a, trans_b))
    return out


def swizzles(kernel):
    """{box: swizzle} of the tensor maps of the operands A and B (arguments 0 and 1; C's is the epilogue's)."""
    return {tuple(p.box): p.swizzle for p in kernel.compiled.abi if p.kind == "tensormap" and p.arg in (0, 1)}


@pytest.mark.parametrize("ws", [None, False], ids=["auto", "uniform"])
def test_transposed_a_reads_shared_memory_mn_major(ws):
    # trans-a = 1 for A stored [K, M]; B stored [K, N] is MN-major (trans-b = 1) as before.
    assert wgmmas(gemm(A_T=1, warp_specialize=ws)) == {(128, 16, "bf16", False, "1", "1")}
    assert wgmmas(gemm(A_T=1, B_T=1, warp_specialize=ws)) == {(128, 16, "bf16", False, "1", "0")}


@pytest.mark.parametrize("ws", [None, True, False], ids=["auto", "ws", "uniform"])
def test_computed_transposed_a_compiles(ws):
    """`dot(at.T * 2.0, b, acc)`: the computed transpose feeds wgmma from registers (under warp specialization the
    slot tile is read into registers first). This once crashed the compiler (`'SmemTile' object has no attribute
    'name'`), then was refused."""
    assert wgmmas(gemm(A_T=1, A_COMPUTED=1, warp_specialize=ws)) == {(128, 16, "bf16", True, "", "1")}


@pytest.mark.parametrize("ws", [None, False], ids=["auto", "uniform"])
def test_f32_dot_runs_as_tf32(ws):
    assert wgmmas(gemm(DTYPE="f32", B_T=1, BLOCK_K=32, warp_specialize=ws)) == {(128, 8, "tf32", False, "", "")}
    # A transposed (MN-major), which tf32 cannot read from shared memory, goes through registers.
    assert wgmmas(gemm(DTYPE="f32", A_T=1, B_T=1, BLOCK_K=32, warp_specialize=ws)) == \
        {(128, 8, "tf32", True, "", "")}


@pytest.mark.parametrize("bm", [16, 32])
@pytest.mark.parametrize("dtype,bk,b_t", [("bf16", 64, 0), ("f32", 32, 1), ("f8e4m3", 128, 1)])
def test_small_tiles_feed_a_from_registers(bm, dtype, bk, b_t):
    kernel = gemm(DTYPE=dtype, BLOCK_M=bm, BLOCK_K=bk, B_T=b_t, BLOCK_N=64)
    ((n, k, t, registers, _, _),) = wgmmas(kernel)
    assert (n, registers) == (64, True)
    assert "ld.shared" in kernel.ptx


@pytest.mark.parametrize("dtype,bk,width", [("bf16", 16, 32), ("bf16", 32, 64), ("f32", 8, 32), ("f32", 16, 64),
                                            ("f8e4m3", 64, 64)])
def test_narrow_k_tiles_use_narrow_swizzles(dtype, bk, width):
    kernel = gemm(DTYPE=dtype, BLOCK_K=bk, B_T=1, warp_specialize=False)
    assert set(swizzles(kernel).values()) == {width}
    # The K-major descriptors' constant part: 8-row groups 8W bytes apart (bits 32-45, in 16-byte units), the
    # swizzle mode in bits 62-63 (2 = 64 bytes, 3 = 32 bytes) and the unused leading offset 1 (bit 16); PTX
    # prints the 64-bit constant signed.
    constant = ((8 * width >> 4) | ({64: 2, 32: 3}[width] << 30)) << 32 | 1 << 16
    assert f"{constant - (1 << 64)};" in kernel.ptx


def test_narrow_mn_major_b():
    kernel = gemm(BLOCK_N=16, warp_specialize=False)
    assert swizzles(kernel)[(64, 16)] == 32


@pytest.mark.parametrize("dtype,bk,width", [("bf16", 16, 32), ("bf16", 32, 64), ("f8e4m3", 64, 64)])
def test_narrow_k_tiles_travel_through_aref_slots(dtype, bk, width):
    """Under warp specialization the producer's TMA writes 32- or 64-byte rows into the ring slots with the
    swizzle of that width, and the consumers' wgmma descriptors read them so (once refused)."""
    kernel = gemm(DTYPE=dtype, BLOCK_K=bk, B_T=1, warp_specialize=True)
    assert "setmaxnreg" in kernel.ptx                   # warp specialized: a producer and consumer warp groups
    assert set(swizzles(kernel).values()) == {width}
    constant = ((8 * width >> 4) | ({64: 2, 32: 3}[width] << 30)) << 32 | 1 << 16
    assert f"{constant - (1 << 64)};" in kernel.ptx


@pytest.mark.parametrize("dtype", ["f8e4m3", "f8e5m2"])
@pytest.mark.parametrize("ws", [None, False], ids=["auto", "uniform"])
def test_fp8_elementwise_code_converts_through_f32(dtype, ws):
    kernel = tawa.compile(str(KERNELS / "f8_elementwise.tawa"), cache=False, DTYPE=dtype, warp_specialize=ws)
    ptx = kernel.ptx
    name = {"f8e4m3": "e4m3x2", "f8e5m2": "e5m2x2"}[dtype]
    assert f"cvt.rn.f16x2.{name}" in ptx and f"cvt.rn.satfinite.{name}.f32" in ptx


def test_i32_tensors_compile():
    kernel = tawa.compile(str(KERNELS / "i32_ops.tawa"), cache=False)
    assert kernel.cubin and "ld.global.nc.b32" in kernel.ptx and "st.global.b32" in kernel.ptx


# ---- layouts --------------------------------------------------------------------------------------------------
def _owners(lay):
    out = {}
    for w in range(lay.num_warps):
        for lane in range(32):
            for c in L.coords_of(lay, lane, w):
                out.setdefault(c, set()).add((w, lane))
    return out


@pytest.mark.parametrize("m,warps,copies", [(16, 4, 4), (32, 4, 2), (64, 8, 2), (16, 8, 8)])
def test_small_accumulators_are_replicated(m, warps, copies):
    owners = _owners(L.mma(m, 32, warps))
    assert len(owners) == m * 32
    assert {len(v) for v in owners.values()} == {copies}
    # Warp w of a 64-row wgmma holds rows 16w..16w+15: with fewer rows, row r mod M.
    for w in range(warps):
        for lane in range(32):
            for (r, _), i in zip(L.coords_of(L.mma(m, 32, warps), lane, w), range(64)):
                assert r == (16 * (w % 4) + lane // 4 + 8 * ((i // 2) % 2) + 64 * (w // 4)) % m


@pytest.mark.parametrize("elem_bytes,step", [(1, 32), (4, 8)])
def test_wgmma_a_matches_ptx_fragments(elem_bytes, step):
    """PTX ISA register fragments of A: register j of lane l in warp w holds row 16w + l/4 + 8 (j % 2) and
    columns v (l % 4) + (step / 2) (j / 2) + [0, v), v = 4 / elem_bytes elements per register."""
    v = 4 // elem_bytes
    lay = L.wgmma_a(64, 2 * step, 4, elem_bytes)
    for w in range(4):
        for lane in range(32):
            want = [(16 * w + lane // 4 + 8 * (j % 2), step * kk + v * (lane % 4) + (step // 2) * (j // 2) + e)
                    for kk in range(2) for j in range(4) for e in range(v)]
            assert L.coords_of(lay, lane, w) == want
    assert L.parse(lay.desc).same_mapping(lay) and L.parse(lay.desc).desc == lay.desc
    assert L.wgmma_a(64, 32, 4, 2).desc == L.mma(64, 32, 4).desc


@pytest.mark.parametrize("ws", [None, False], ids=["auto", "uniform"])
def test_register_a_dot_completes_before_its_fragments_are_rewritten(ws):
    """A dot whose A goes through registers (here a transposed f32 A) waits for its wgmma group to complete
    (`wait_group 0`) right after committing it: the next iteration rewrites those fragment registers. Leaving
    the group in flight, as for an A in shared memory, gave wrong results on the GPU."""
    kernel = gemm(DTYPE="f32", A_T=1, B_T=1, BLOCK_K=32, BLOCK_M=64, BLOCK_N=64, warp_specialize=ws)
    waits = re.findall(r"wgmma\.commit_group\.sync\.aligned;\s*(?://.*\s*)*wgmma\.wait_group\.sync\.aligned\s*(\d)",
                       kernel.ptx)
    assert waits and set(waits) == {"0"}, waits


@pytest.mark.parametrize("example,constants", [("gemm.tawa", {}), ("flash_attention.tawa", {"CAUSAL": 1}),
                                               ("gemm_fp8.tawa", {})])
def test_tma_off_copies_tiles_with_the_threads(example, constants):
    """tma=False (the variant for tensors whose rows break TMA's 16-byte rules): no bulk tensor copy anywhere;
    the threads load the operands with per-element global loads into the swizzled tiles, fence them for the
    async proxy that wgmma reads through, and store the output per element; the kernel runs uniform-warp."""
    path = pathlib.Path(__file__).resolve().parents[2] / "examples" / example
    kernel = tawa.compile(str(path), cache=False, tma=False, **constants)
    assert "cp.async.bulk" not in kernel.ptx and "mbarrier" not in kernel.ptx
    assert "fence.proxy.async.shared::cta" in kernel.ptx and "wgmma.mma_async" in kernel.ptx
    assert re.search(r"ld\.global(\.nc)?\.(b16|b8|u16|u8)", kernel.ptx)
    assert any("tma=False" in n for n in kernel.notes)
    assert not any(p.kind == "tensormap" for p in kernel.compiled.abi)
    assert not any(SERIALIZED.search(n) for n in kernel.notes if n.startswith("ptxas")), kernel.notes


def test_tma_off_needs_128_byte_rows():
    with pytest.raises(tawa.CompilationError) as e:
        gemm(BLOCK_K=32, warp_specialize=False, tma=False)
    assert e.value.location is not None and "tma=False" in e.value.note


@pytest.mark.parametrize("consts,chunks", [
    (dict(BLOCK_N=320), {192, 128}),                          # MN-major B in 64-column boxes: cut at a box
    (dict(BLOCK_N=384, A_T=1), {192}),
    (dict(DTYPE="f16", BLOCK_N=288), {160, 128}),             # 576-byte rows: 64-byte swizzle, 32-column boxes
    (dict(BLOCK_N=320, A_COMPUTED=1), {192, 128}),            # A from registers
    (dict(BLOCK_N=320, B_T=1), {160}),                        # K-major B: cut at 8 rows, copied in 2 x 160 rows
    (dict(DTYPE="f16", BLOCK_N=384, B_T=1, A_T=1), {192}),
], ids=["320", "384-at", "288-f16", "320-computed-a", "320-bt", "384-at-bt"])
def test_tiles_wider_than_one_wgmma_take_two(consts, chunks):
    """N above 256 columns: per 64-row slab and k-step one wgmma per chunk of N, each on its accumulator
    registers; no serialized wgmma and no spill with the 128-row tile's two consumer groups."""
    kernel = gemm(**consts)
    assert {n for n, *_ in wgmmas(kernel)} == chunks
    assert len(WGMMA.findall(kernel.ptx)) % len(chunks) == 0
    report = [n for n in kernel.notes if n.startswith("ptxas")]
    assert report and "0 bytes spill stores" in report[0], kernel.notes
    assert not any(SERIALIZED.search(n) for n in report), report


@pytest.mark.parametrize("consts, copies", [
    (dict(BLOCK_N=320, B_T=1), {(160, 64)}),                  # B [320, 64]: two copies of 160 rows
    (dict(DTYPE="f16", BLOCK_N=384, B_T=1), {(192, 64)}),
], ids=["b-320-rows", "b-384-rows"])
def test_tiles_taller_than_one_copy_are_copied_in_equal_row_blocks(consts, copies):
    """One TMA copy moves at most 256 rows: a taller tile's tensor map has boxes of half its rows, copied twice
    into the slot (tests/e2e/test_gpu_coverage.py runs both on the GPU)."""
    assert copies <= set(swizzles(gemm(**consts)))


@pytest.mark.parametrize("ws", [None, False], ids=["auto", "uniform"])
def test_dot_tiles_of_more_than_256_rows_are_refused(ws):
    """An A of 384 rows loads in two copies, but the output tile is stored in copies of at most 256 rows: refused
    when compiled, not when the runtime builds the output's tensor map."""
    with pytest.raises(tawa.CompilationError, match="dot tile M=384 (must be at most 256|is not supported)"):
        gemm(BLOCK_M=384, warp_specialize=ws)


@pytest.mark.parametrize("rows", [400, 512])
def test_tiles_that_do_not_split_into_equal_copies_are_refused(rows):
    with pytest.raises(tawa.CompilationError, match="copied in equal blocks"):
        gemm(BLOCK_N=rows, B_T=1)


@pytest.mark.parametrize("consts, message", [
    (dict(BLOCK_M=256, BLOCK_N=320), "one 64-row slab per consumer warp group"),      # 2 slabs: 320 registers
    (dict(BLOCK_M=192, BLOCK_N=320), "one 64-row slab per consumer warp group"),      # three groups of 160
    (dict(BLOCK_N=320, num_consumer_groups=1), "one 64-row slab per consumer warp group"),
    (dict(BLOCK_N=384, A_COMPUTED=1), "cannot take its A from registers"),            # wgmmas serialized
    (dict(DTYPE="f32", BLOCK_N=384, BLOCK_K=32, A_T=1, B_T=1), "cannot take its A from registers"),
    (dict(BLOCK_M=32, BLOCK_N=384), "cannot take its A from registers"),                # 32 rows: A in registers
], ids=["256x320", "192x320", "one-group", "384-computed-a", "384-tf32-at", "384-32-rows"])
def test_wide_tiles_whose_accumulator_cannot_stay_in_registers_are_refused(consts, message):
    """Each 64-row slab of a warp group holds N / 2 accumulator registers a thread: these spilled kilobytes or
    serialized the wgmmas (ptxas C7512) before they were refused, with the dot's location."""
    with pytest.raises(tawa.CompilationError, match=message) as error:
        gemm(**consts)
    assert "gemm_layouts.tawa:" in str(error.value)


def test_tile_wider_than_two_wgmmas_fit_is_refused():
    with pytest.raises(tawa.CompilationError, match="at most 384"):
        gemm(BLOCK_N=448)
