"""The ping-pong GEMM schedule's code, compiled for sm_90a and assembled by ptxas on the CPU: two consumer warp
groups, each with its own epilogue barrier, whose main loops take turns on two named barriers of 256 threads;
no serialized wgmma and no spills for the examples' ping-pong tiles; and the located reasons it is refused. Also
the 0-spill 128x256 fused epilogue (bias + GELU + residual) of the cooperative persistent schedule. The GPU runs
are in tests/e2e/test_pingpong_gpu.py."""

import pytest

import tawa
from ws_support import EXAMPLES, SERIALIZED, compile_example, spill_bytes
from tawa.errors import CompilationError



@pytest.mark.parametrize("example,constants", [("gemm", {"BLOCK_N": 128}), ("linear_gelu_residual", {"BLOCK_N": 128}),
                                               ("gemm_bias_act", {"BLOCK_N": 128}), ("swiglu", {"BLOCK_N": 64}),
                                               ("gemm_fp8", {"BLOCK_N": 128}), ("gemm", {"BLOCK_N": 192}),
                                               ("linear_gelu_residual", {"BLOCK_N": 192})])
def test_pingpong_kernels_take_turns_without_spills(example, constants):
    k = compile_example(example, schedule="pingpong", **constants)
    ptx, notes = k.ptx, "\n".join(k.compiled.notes)
    assert "uses the pingpong schedule" in notes and k.compiled.persistent
    assert k.compiled.num_threads == 384                       # a producer and two single-group consumers
    assert spill_bytes(k) == 0 and not SERIALIZED.search(notes)
    # Each group's epilogue syncs its own 128 threads; the main loops take turns on barriers 14 and 15.
    assert "bar.sync \t2, 128;" in ptx and "bar.sync \t3, 128;" in ptx
    assert "bar.sync \t14, 256;" in ptx and "bar.sync \t15, 256;" in ptx
    assert ptx.count("bar.arrive") >= 2


def test_fused_epilogue_of_128x256_tiles_has_no_spills():
    """The 128x256 tile with bias + GELU + residual: the epilogue's loads and math are emitted element by element
    and stored box by box, so its registers fit next to the accumulator (it spilled 1000+ bytes before)."""
    k = compile_example("linear_gelu_residual", BLOCK_N=256, schedule="persistent")
    assert spill_bytes(k) == 0
    assert spill_bytes(compile_example("linear_gelu_residual", BLOCK_N=256, schedule="tile")) == 0


def test_compiler_picks_pingpong_up_to_192_accumulators():
    """Where each group can hold a whole tile (128x128, 128x192: 192 registers) the compiler picks ping-pong
    itself; the 128x256 tile (256) stays cooperative, and the linear layer's default 128x192 tile runs ping-pong."""
    def notes(example, **constants):
        return "\n".join(compile_example(example, **constants).compiled.notes)
    assert "uses the pingpong schedule" in notes("gemm", BLOCK_N=192)
    assert "uses the pingpong schedule" in notes("gemm", BLOCK_N=128)
    assert "uses the persistent schedule" in notes("gemm")
    assert "uses the pingpong schedule" in notes("linear_gelu_residual")


def test_pingpong_chosen_by_the_compiler_falls_back_when_ptxas_spills():
    """A heavier epilogue (a second residual) beside a 128x192 group's 192 accumulators spills under ping-pong:
    the compiler's own choice then falls back to the cooperative schedule and says why; asked for, ping-pong
    stays (and spills)."""
    import pathlib
    source = (EXAMPLES / "linear_gelu_residual.tawa").read_text()
    source = source.replace("R: bf16[M, N], Y", "R: bf16[M, N], R2: bf16[M, N], Y").replace(
        "y = g + load(R", "y = g * load(R2, (pid_m, pid_n), (BLOCK_M, BLOCK_N)).to(f32) + load(R")
    auto = tawa.compile(source, cache=False)
    notes = "\n".join(auto.compiled.notes)
    assert "uses the persistent schedule" in notes and "under ping-pong, ptxas spilled" in notes
    assert spill_bytes(auto) == 0
    assert spill_bytes(tawa.compile(source, cache=False, schedule="pingpong")) > 0


def test_fused_128x192_epilogue_reads_its_residual_boxes_as_it_writes():
    """Ping-pong 128x192 with bias + GELU + residual: 192 accumulators leave no room for the residual's third box
    in registers across the main loop, for all 32 words of a staged box read ahead of the results, or for an
    address register per word (each spilled: 780, 356 and 120 bytes). Each staged word is read from shared
    memory right before its result is written (interleaved ld/st.shared), with few distinct address registers."""
    import re
    k = compile_example("linear_gelu_residual", BLOCK_N=192, schedule="pingpong")
    assert spill_bytes(k) == 0
    # the staged residual's reads (two bf16 per ld) and the results' writes (two bf16 per st)
    kinds = "".join(op[0] for op in re.findall(r"\b(l)d\.shared\.v2\.b16|\b(s)t\.shared\.b32", k.ptx)
                    for op in [op[0] or op[1]])
    assert kinds.count("s") == 2 * 3 * 32                       # both groups' three boxes of 32 words
    assert kinds.count("l") >= 2 * 3 * 32                       # the residual's (and the bias's) reads
    # one address register per 16-byte column chunk of the box (the rows fold into the immediates)
    reads = set(re.findall(r"ld\.shared\.v2\.b16\s+\{[^}]*\}, \[(%rd?\d+)\+?\d*\]", k.ptx))
    assert 0 < len(reads) <= 2 * 3 * 8
    assert "llll" not in kinds                                  # no run of staged reads ahead of the writes


@pytest.mark.parametrize("example,constants,reason", [
    ("gemm", {}, "would hold 256 accumulator registers per thread"),
    ("gemm", {"BLOCK_N": 128, "split_k": 2}, "split-K gives the programs of a tile K loops of different lengths"),
    ("flash_attention", {}, "before the loop is shared by the tile's consumer groups"),
])
def test_pingpong_refusals_say_why(example, constants, reason):
    with pytest.raises(CompilationError) as info:
        tawa.compile(str(EXAMPLES / f"{example}.tawa"), cache=False, schedule="pingpong", **constants)
    assert reason in info.value.message and info.value.location is not None


@pytest.mark.parametrize("example", ["gemm", "linear_gelu_residual"])
def test_pingpong_ring_is_at_most_four_deep(example):
    """Ping-pong takes at most 4 ring slots by itself (5 and 6 fit at 128x128 but ran slower); an explicit
    num_buffers still wins, and the cooperative schedule keeps the deeper rings."""
    import re
    from tawa.compiler import compile_source
    from tawa.options import CompileOptions
    path = EXAMPLES / f"{example}.tawa"
    depth = re.compile(r"tawa\.aref<\[[^\]]*\], (\d+) : i32>")

    def depths(**options):
        module = compile_source(path.read_text(), str(path), CompileOptions(constants={"BLOCK_N": 128}, **options),
                                emit="mlir")
        return set(depth.findall(str(module)))
    assert depths(schedule="pingpong") == {"4"}
    assert depths(schedule="pingpong", num_buffers=5) == {"5"}
    assert depths(schedule="persistent") == {"6"}
