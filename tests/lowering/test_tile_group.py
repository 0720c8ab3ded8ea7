"""The grouped order of persistent kernels (`persistent_tiles.tile_group`): the run of tiles along M visited for
each tile along N is chosen from the operand bytes each tile loads along M and along N, so that the tiles resident
at once read the fewest bytes per k-step; `group_m` overrides it, and the kernel's notes say which it is. That
every tile is still visited exactly once, for any group, is tested under interleavings in
tests/interleavings/test_ws_interleavings.py."""
import re

import pytest

from tawa.compiler import compile_source
from tawa.options import CompileOptions
from ws_support import EXAMPLES


def compiled_mlir(example, **options):
    constants = {k: options.pop(k) for k in list(options) if k.isupper()}
    path = EXAMPLES / f"{example}.tawa"
    return compile_source(path.read_text(), str(path), CompileOptions(constants=constants, **options), emit="mlir")


def group_of(example, **options):
    m = re.search(r"tawa\.tile_group = (-?\d+)", str(compiled_mlir(example, **options)))
    return int(m.group(1)) if m else None


@pytest.mark.parametrize("example,options,group", [
    # B's tile (64x256) is twice A's (128x64): 16 tiles along M by about 8 along N fill 132 SMs with the
    # fewest bytes; 8 along M (the old fixed group) left 16.5 along N resident, a quarter more DRAM traffic.
    ("gemm", dict(BLOCK_N=256, schedule="persistent"), 16),
    # With 2x1 clusters the loop walks pairs along M: 8 pairs are the same 16 tiles.
    ("gemm", dict(BLOCK_N=256, schedule="persistent", cluster="2x1"), 8),
    ("gemm", dict(BLOCK_N=256, schedule="persistent", cluster="1x2"), 16),
    # A tall tile: A's tile is the larger, so the run along M is shorter.
    ("gemm", dict(BLOCK_M=256, BLOCK_N=128, schedule="persistent"), 8),
    # Ping-pong keeps two tiles per CTA resident.
    ("gemm", dict(BLOCK_N=128, schedule="pingpong"), 16),
    ("gemm", dict(BLOCK_M=64, BLOCK_N=256, schedule="pingpong"), 32),
    # SwiGLU loads two tiles along N (B1 and B2) for one along M.
    ("swiglu", dict(BLOCK_N=128, schedule="persistent"), 16),
    ("gemm", dict(BLOCK_N=256, schedule="persistent", group_m=4), 4),
])
def test_group_follows_the_operand_bytes(example, options, group):
    assert group_of(example, **options) == group


@pytest.mark.parametrize("causal,dynamic,group", [(0, None, 0), (1, False, -1), (1, None, 0)],
                         ids=["whole-axis", "snake", "dynamic"])
def test_persistent_attention_walks_the_query_blocks_of_a_head_together(causal, dynamic, group):
    """Attention's query blocks of one head share its K and V: the persistent order walks all of them before the
    next head (WHOLE_AXIS), every other head backwards where causal masking makes the blocks' loops grow along the
    axis and the CTAs take fixed shares (SNAKE: a CTA taking every 132nd tile of 4-block heads would otherwise
    always take the same block); with dynamic tiles (causal's default) whole heads in order, each longest first."""
    options = dict(schedule="persistent", dynamic_tiles=dynamic)
    assert group_of("flash_attention", CAUSAL=causal, **options) == group
    path = EXAMPLES / "flash_attention.tawa"
    k = compile_source(path.read_text(), str(path), CompileOptions(constants={"CAUSAL": causal}, **options))
    assert any("all of grid axis 0 for each tile along axis 1" in n for n in k.notes)
    assert any("takes its tiles from a counter" in n for n in k.notes) == bool(causal and dynamic is None)
    assert any("every other row backwards" in n for n in k.notes) == bool(causal and dynamic is False)


def test_notes_say_the_group_and_why():
    path = EXAMPLES / "gemm.tawa"
    k = compile_source(path.read_text(), str(path), CompileOptions(constants={"BLOCK_N": 256}, schedule="persistent"))
    note = next(n for n in k.notes if "runs of" in n)
    assert "runs of 16 along grid axis 0" in note and "32768 / 16384 operand bytes" in note
    k = compile_source(path.read_text(), str(path), CompileOptions(constants={"BLOCK_N": 256}, group_m=2))
    assert any("runs of 2 along grid axis 0 for each tile along axis 1 (group_m=2)" in n for n in k.notes)


def test_kernels_that_are_not_persistent_have_no_group():
    assert group_of("gemm", schedule="tile") is None
    # two specialized CTAs per SM keep one block per CTA; the examples' default at head dim 64 is uniform
    assert group_of("flash_attention", CAUSAL=1, HEAD_DIM=64, BLOCK_N=64) is None
    assert group_of("flash_attention", CAUSAL=1, HEAD_DIM=64) is None
    assert group_of("flash_attention", CAUSAL=1, dynamic_tiles=False) is None
    path = EXAMPLES / "gemm.tawa"
    k = compile_source(path.read_text(), str(path), CompileOptions(schedule="tile", group_m=4))
    assert any("ignores group_m=4: only a persistent schedule" in n for n in k.notes)
