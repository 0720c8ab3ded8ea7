"""Two CTAs per SM (`ctas_per_sm`, tawa/lowering/occupancy.py), compiled for sm_90a and assembled by ptxas on the
CPU: which kernels the compiler keeps two to an SM by itself (attention whose register tiles fit half the register
file), what that changes in the code (`.minnctapersm 2`, register budgets from half the register file, a ring
sized to half the shared memory, the lookahead off), the fallback when ptxas spills, and the located errors of an
explicit `ctas_per_sm=2` that cannot fit. The GPU runs are in tests/e2e/test_occupancy_gpu.py."""
import pathlib
import re

import pytest

from tawa import hopper
from tawa.compiler import compile_source, decide
from tawa.errors import CompilationError
from tawa.frontend import parse_and_lower
from tawa.lowering import occupancy
from tawa.options import CompileOptions
from ws_support import EXAMPLES, SERIALIZED, compile_example, spill_bytes



def _plan(example, **options):
    consts = {k: v for k, v in options.items() if k.isupper()}
    opts = CompileOptions(constants=consts, **{k: v for k, v in options.items() if not k.isupper()})
    path = EXAMPLES / f"{example}.tawa"
    return decide(parse_and_lower(path.read_text(), str(path), consts), opts)


@pytest.mark.parametrize("example,options,ctas", [
    # head dim 64 with 64-key blocks: S, P and O of a 64-row slab take 80 registers per consumer thread
    ("flash_attention", {"HEAD_DIM": 64, "BLOCK_N": 64}, 2),
    ("flash_attention", {"HEAD_DIM": 64, "BLOCK_N": 64, "CAUSAL": 1}, 2),
    ("gqa_attention", {"HEAD_DIM": 64, "BLOCK_N": 64}, 2),
    # too many registers for half the register file: 128-key blocks, or head dim 128
    ("flash_attention", {"HEAD_DIM": 64, "BLOCK_N": 128}, 1),
    ("flash_attention", {"HEAD_DIM": 128, "BLOCK_N": 64}, 1),
    ("flash_attention", {}, 1),
    # asked for one; or not warp-specialized
    ("flash_attention", {"HEAD_DIM": 64, "BLOCK_N": 64, "ctas_per_sm": 1}, 1),
    ("flash_attention", {"HEAD_DIM": 64, "BLOCK_N": 64, "warp_specialize": False}, 1),
    # an explicit ring too deep for half the shared memory
    ("flash_attention", {"HEAD_DIM": 64, "BLOCK_N": 64, "num_buffers": 7}, 1),
    # GEMM main loops only accumulate: their ring wants the whole SM
    ("gemm", {"BLOCK_N": 128, "schedule": "tile"}, 1),
    ("gemm", {}, 1),
    ("swiglu", {"BLOCK_N": 64, "schedule": "tile"}, 1),
])
def test_decision(example, options, ctas):
    plan, notes = _plan(example, **options)
    assert plan.ctas_per_sm == ctas
    said = [n for n in notes if "CTAs resident per SM" in n]
    assert len(said) == (ctas > 1)


@pytest.mark.parametrize("example,options,specialized", [
    # head dim 64, 128-key blocks: 128 registers of tiles a consumer thread, one specialized CTA per SM; uniform
    ("flash_attention", {"HEAD_DIM": 64, "BLOCK_N": 128}, False),
    ("flash_attention", {"HEAD_DIM": 64, "BLOCK_N": 128, "CAUSAL": 1}, False),
    ("gqa_attention", {"HEAD_DIM": 64, "BLOCK_N": 128}, False),
    # the examples' default key block: 128 at every head dim
    ("flash_attention", {"HEAD_DIM": 64}, False),
    ("gqa_attention", {"HEAD_DIM": 64, "CAUSAL": 1}, False),
    # two specialized CTAs fit (64-key blocks); head dim 128; three consumer groups over 192 rows (FA3's tile)
    ("flash_attention", {"HEAD_DIM": 64, "BLOCK_N": 64}, True),
    ("flash_attention", {"HEAD_DIM": 128, "BLOCK_N": 128}, True),
    ("flash_attention", {"HEAD_DIM": 64, "BLOCK_M": 192, "BLOCK_N": 128}, True),
    # the choice is the user's: specialization asked for, or an option only the specialized schedule reads
    ("flash_attention", {"HEAD_DIM": 64, "BLOCK_N": 128, "warp_specialize": True}, True),
    ("flash_attention", {"HEAD_DIM": 64, "BLOCK_N": 128, "num_buffers": 2}, True),
    ("flash_attention", {"HEAD_DIM": 64, "BLOCK_N": 128, "schedule": "tile"}, True),
    # GEMMs chain no dots
    ("gemm", {"BLOCK_N": 128}, True),
])
def test_attention_at_head_dim_64_on_one_cta_takes_the_uniform_path(example, options, specialized):
    """Where the register tiles keep a specialized attention kernel at head dim 64 to one CTA per SM (two warp
    groups of math), the uniform-warp kernel runs faster (occupancy.uniform_is_faster), and the notes say why."""
    plan, notes = _plan(example, **options)
    assert plan.warp_specialize is specialized
    said = [n for n in notes if "its exponentials bound the key loop" in n]
    assert len(said) == (not specialized), notes
    if said:
        assert "uses the uniform-warp schedule" in said[0] and "warp_specialize=True" in said[0]


def test_the_uniform_choice_is_checked_against_ptxas():
    """The uniform kernel chosen at head dim 64 must keep two CTAs per SM: where ptxas gives it too many registers
    (a key-padding mask's row, loaded in the loop) the kernel is compiled specialized after all, and says why;
    where it fits (the plain example) it stays uniform. A loop without exponentials (two chained GEMMs) or whose
    tile coordinates are read in the loop (not pipelined on the uniform path) is left specialized."""
    from tawa.frontend import read_source
    src, fn = read_source(str(EXAMPLES.parent / "tests" / "e2e" / "kernels" / "user" / "attn_keypad.tawa"))
    k = compile_source(src, fn, CompileOptions(constants={"D": 64, "BLOCK_N": 128}))
    notes = "\n".join(k.notes)
    assert k.num_threads == 384 and "is warp-specialized after all" in notes and "one CTA per SM" in notes
    assert not k.uniform_by_choice and k.ctas_per_sm == 1
    assert f"ptxas: {k.registers} registers" in notes     # (ptxas's count, recorded for the check)
    plain = compile_example("flash_attention", HEAD_DIM=64, BLOCK_N=128)
    assert plain.compiled.num_threads == 256 and "its exponentials bound the key loop" in "\n".join(
        plain.compiled.notes)
    # (what the launch rules read: the compiler's own choice, two CTAs resident)
    assert plain.compiled.uniform_by_choice and plain.compiled.ctas_per_sm == 2
    assert 2 * plain.compiled.registers * plain.compiled.num_threads <= hopper.REGISTER_FILE
    asked = compile_example("flash_attention", HEAD_DIM=64, BLOCK_N=128, warp_specialize=False)
    assert not asked.compiled.uniform_by_choice and asked.compiled.num_threads == 256
    b2b = """
@grid(cdiv(M, 128))
def b2b(A: bf16[M, 64], B: bf16[64, N], C: bf16[N, 64], O: f32[M, 64]):
    pid = program_id(0)
    a = load(A, (pid, 0), (128, 64))
    acc = zeros((128, 64), f32)
    for j in range(cdiv(N, 128)):
        t = dot(a, load(B, (0, j), (64, 128)))
        acc = dot(t.to(bf16), load(C, (j, 0), (128, 64)), acc)
    store(O, (pid, 0), acc)
"""
    plan, _ = decide(parse_and_lower(b2b, "b2b.tawa", {}), CompileOptions())
    assert plan.warp_specialize


def test_attention_at_two_ctas_per_sm():
    k = compile_example("flash_attention", HEAD_DIM=64, BLOCK_N=64)
    c = k.compiled
    assert c.ctas_per_sm == 2 and c.num_threads == 384
    ptx = k.ptx
    assert re.search(r"\.maxntid 384, 1, 1\s+\.minnctapersm 2", ptx)
    # Half the register file: 80 each at entry; the producer drops to 24, the consumers rise to 104.
    assert "setmaxnreg.dec.sync.aligned.u32 \t24;" in ptx and "setmaxnreg.inc.sync.aligned.u32 \t104;" in ptx
    # Two CTAs (with the 1 KiB the SM reserves for each) fit the SM's shared memory.
    assert c.shared_bytes <= hopper.smem_per_block(2)
    assert 2 * (c.shared_bytes + hopper.SMEM_RESERVED_PER_BLOCK) <= hopper.SMEM_PER_SM
    notes = "\n".join(c.notes)
    assert spill_bytes(k) == 0 and not SERIALIZED.search(notes)
    # One CTA per SM when asked: the full register budgets.
    one = compile_example("flash_attention", HEAD_DIM=64, BLOCK_N=64, ctas_per_sm=1)
    assert one.compiled.ctas_per_sm == 1 and ".minnctapersm 1" in one.ptx
    assert "setmaxnreg.inc.sync.aligned.u32 \t232;" in one.ptx


def test_lookahead_off_at_two_ctas_unless_asked():
    from tawa.compiler import compile_module
    path = EXAMPLES / "flash_attention.tawa"

    def lookahead(**options):
        consts = {"HEAD_DIM": 64, "BLOCK_N": 64}
        module = compile_module(parse_and_lower(path.read_text(), str(path), consts),
                                CompileOptions(constants=consts, **options), stop_after="assign-warp-groups")
        return "tawa.lookahead" in str(module)
    assert not lookahead()
    assert lookahead(ctas_per_sm=1)


def test_spills_at_two_fall_back_to_one(monkeypatch):
    # Pretend head dim 128 fits: ptxas spills at half the register file, and the compiler keeps one CTA per SM.
    monkeypatch.setattr(occupancy, "TILE_REGISTER_LIMIT", 1000)
    path = EXAMPLES / "flash_attention.tawa"
    k = compile_source(path.read_text(), str(path), CompileOptions(constants={"BLOCK_N": 64}))
    assert k.ctas_per_sm == 1 and k.spill_bytes == 0
    assert any("keeps 1 CTA per SM: at 2, " in n for n in k.notes)
    assert not any("CTAs resident per SM" in n for n in k.notes)


def test_explicit_two_that_cannot_fit_is_a_located_error():
    path = EXAMPLES / "gemm.tawa"
    src = path.read_text()
    # the default 128x256 GEMM ring, asked to be 4 deep, does not fit half the shared memory
    with pytest.raises(CompilationError, match=r"with 2 blocks per SM \(ctas_per_sm\)") as e:
        compile_source(src, str(path), CompileOptions(ctas_per_sm=2, num_buffers=4, schedule="tile"))
    assert e.value.location is not None and "ctas_per_sm=1" in e.value.note
    # a 128x128 tile's wgmma needs more than the 80 registers a thread starts with at two CTAs per SM
    with pytest.raises(CompilationError, match="registers per thread its launch size allows") as e:
        compile_source(src, str(path), CompileOptions(constants={"BLOCK_N": 128}, ctas_per_sm=2, schedule="tile"))
    assert e.value.location is not None and "ctas_per_sm=1" in e.value.note


@pytest.mark.parametrize("value", [0, 3, "2", True])
def test_option_values(value):
    with pytest.raises(CompilationError, match="ctas_per_sm"):
        CompileOptions(ctas_per_sm=value).validate()


def test_shared_memory_short_at_two_falls_back_to_one(monkeypatch):
    # The choice's shared memory is estimated before the passes; where the backend then lays out more than half
    # the SM's (a conversion's scratch the estimate missed), the compiler keeps one CTA per SM instead of refusing.
    import tawa.compiler as compiler
    from tawa.errors import CompilationError
    real = compiler.run_pipeline

    def short_at_two(module, options, plan, **kw):
        if options.ctas_per_sm == 2:
            raise CompilationError("the kernel needs 115968 bytes (114 KiB) of shared memory, more than the 115712 "
                                   "bytes (113 KiB) a Hopper block can use with 2 blocks per SM (ctas_per_sm)")
        return real(module, options, plan, **kw)
    monkeypatch.setattr(compiler, "run_pipeline", short_at_two)
    path = EXAMPLES / "flash_attention.tawa"
    k = compile_source(path.read_text(), str(path), CompileOptions(constants={"HEAD_DIM": 64, "BLOCK_N": 64}))
    assert k.ctas_per_sm == 1
    assert any("keeps 1 CTA per SM: at 2, the kernel needs 115968 bytes" in n for n in k.notes)
    # asked for two, the error stands
    with pytest.raises(CompilationError, match="shared memory"):
        compile_source(path.read_text(), str(path),
                       CompileOptions(constants={"HEAD_DIM": 64, "BLOCK_N": 64}, ctas_per_sm=2))



def test_ring_depth_chosen_beforehand_too_deep_keeps_fewer_slots():
    # A dot on a masked loaded tile (masked-dots computes the masked A in registers, beside its ring slot): the ring
    # depth is chosen (6) from an estimate of the other shared memory made before the passes, and the laid-out
    # kernel needs 229 KiB; the compiler keeps fewer slots instead of refusing. (fp8 attention, whose scores were
    # converted through shared memory for its P V dot, was the case until P moved by shuffles.)
    path = pathlib.Path(__file__).resolve().parents[1] / "passes" / "masked-dots.tawa"
    k = compile_source(path.read_text(), str(path), CompileOptions())
    assert any("keeps 5 slots per aref ring: with the 6 chosen beforehand, the kernel needs" in n for n in k.notes)
    assert k.shared_bytes <= hopper.smem_per_block(1)
    # asked for six, the error stands, with the deepest ring's depth
    from tawa.errors import SharedMemoryError
    with pytest.raises(SharedMemoryError, match="shared memory") as e:
        compile_source(path.read_text(), str(path), CompileOptions(num_buffers=6))
    assert e.value.ring_depth == 6 and "num_buffers below 6" in e.value.note


def test_persistent_staging_lies_above_the_main_loops_scratch():
    """fp8 attention converts P into wgmma's fp8 A layout through a transient shared scratch in every key block. A
    persistent epilogue's staging, which the next tile's main loop runs beside while the stores still read it, was
    laid out over that scratch: wrong rows in some GPU runs (64-key blocks, 2x8x2048; 12 of 15 runs across three
    option sets), none once the staging is laid out above it (24 of 24). The staging now starts at the peak."""
    import types
    from tawa.lowering.to_nvvm.context import SharedAllocator
    from tawa.lowering.to_nvvm.staged_operand import persistent_staging
    smem = SharedAllocator(1024)
    smem.alloc(65536)                       # the ring
    smem.push()
    scratch = smem.alloc(16384)             # a layout conversion's scratch, dead after it in program order
    smem.pop()
    ctx = types.SimpleNamespace(smem=smem, stagings={}, scratch=lambda n: smem.alloc(n))
    off, _ = persistent_staging(ctx, (16384, 2), barriers=False)
    assert off >= scratch + 16384


def test_a_ring_of_one_slot_is_noted():
    """At head dim 256, 128-key blocks leave room for one slot of K and V beside Q: the compiler says so and what
    helps; 80-key blocks get two and no such note, nor does a depth the user asked for."""
    one = compile_example("flash_attention", HEAD_DIM=256, BLOCK_N=128)
    notes = [n for n in one.notes if "room for one slot (128 KiB) of its loop's aref ring" in n]
    assert len(notes) == 1 and "BLOCK_N or BLOCK_K" in notes[0]
    assert not any("room for one slot" in n for n in compile_example("flash_attention", HEAD_DIM=256,
                                                                     BLOCK_N=80).notes)
    assert not any("room for one slot" in n for n in compile_example("flash_attention", HEAD_DIM=256,
                                                                     BLOCK_N=128, num_buffers=1).notes)
