"""Dots on masked loaded tiles (`masked-dots`) and a 2-D tile that only masks the scores before the key loop,
compiled for sm_90a and assembled by ptxas on the CPU: the dot moves into both branches of the bounds test only where
the kernel is warp-specialized, the accumulator keeps the wgmma layout through that branch (no shared-memory
conversion, no ring slot lost to one), and a segment-id column loaded before the loop leaves attention persistent.
The GPU runs are in tests/e2e/test_user_kernels_gpu.py (gemm_ragged_k, gemm_tril_a, gemm_mask_b, attn_segments)."""
import pathlib

import pytest

import tawa
from ws_support import spill_bytes

USER = pathlib.Path(__file__).resolve().parents[1] / "e2e" / "kernels" / "user"


def _compile(name, **options):
    kernel = tawa.compile(str(USER / f"{name}.tawa"), cache=False, **options)
    assert kernel.cubin[:4] == b"\x7fELF"
    return kernel.compiled


def _wgmma_groups(ptx: str) -> int:
    """Runs of wgmma.mma_async instructions in the PTX (one per dot the code issues)."""
    runs, inside = 0, False
    for line in ptx.splitlines():
        is_mma = "wgmma.mma_async" in line
        runs += is_mma and not inside
        inside = is_mma or (inside and not line.strip().startswith(("wgmma.commit", "wgmma.wait", "$L", "bra", "@")))
    return runs


@pytest.mark.parametrize("name,options,consumer_copies", [
    ("gemm_ragged_k", {}, 1),
    ("gemm_ragged_k", {"BLOCK_N": 256, "schedule": "persistent", "dynamic_tiles": False}, 1),
    ("gemm_mask_b", {"schedule": "pingpong"}, 2),         # each ping-pong group's loop is its own code
    ("gemm_tril_a", {"schedule": "tile"}, 1),
    ("gemm_ragged_k_ab", {}, 1),                          # both operands masked: one branch under both tests
])
def test_warp_specialized_dot_in_both_branches(name, options, consumer_copies):
    compiled = _compile(name, **options)
    assert "setmaxnreg" in compiled.ptx            # a producer warp group and consumer warp groups
    # one dot on the slot's tile and one on the masked tile
    assert _wgmma_groups(compiled.ptx) == 2 * consumer_copies, compiled.notes
    assert spill_bytes(type("K", (), {"compiled": compiled})) == 0
    # the ring keeps the depth it was sized for (an accumulator converted through shared memory had cost slots)
    assert not any("slots per aref ring" in n for n in compiled.notes), compiled.notes


def test_uniform_warps_keep_the_select():
    compiled = _compile("gemm_mask_b", warp_specialize=False)
    assert "setmaxnreg" not in compiled.ptx
    # the software pipeline's one dot, in flight across iterations (a prologue copy of it may be peeled)
    assert "selp.b16" in compiled.ptx or "selp.b32" in compiled.ptx
    assert _wgmma_groups(compiled.ptx) <= 2


@pytest.mark.parametrize("options", [{"D": 128, "BLOCK_N": 128}, {"D": 128, "BLOCK_N": 128, "dynamic_tiles": True}])
def test_segment_column_before_the_loop_stays_persistent(options):
    compiled = _compile("attn_segments", **options)
    assert compiled.persistent, compiled.notes
    assert spill_bytes(type("K", (), {"compiled": compiled})) == 0


def test_a_tile_masked_before_the_loop_gets_a_note():
    """A query block loaded through a view that ends (`Q[h, start:end]`) is masked before the key loop, so the
    scores' dot reads it from registers and completes every iteration (20% slower on the GPU): the compiler says so
    and names the unmasked view; the example as written (`Q[h, start:]`) gets no such note."""
    from tawa.compiler import decide
    from tawa.frontend import parse_and_lower
    from tawa.options import CompileOptions
    path = USER / "attn_varlen_packed.tawa"
    source = path.read_text()
    _, notes = decide(parse_and_lower(source, str(path), {}), CompileOptions())
    assert not any("masked before the loop" in n for n in notes), notes
    masked = source.replace("q = load(Q[h, start:], ", "q = load(Q[h, start:end], ")
    assert masked != source
    _, notes = decide(parse_and_lower(masked, str(path), {}), CompileOptions())
    note = [n for n in notes if "masked before the loop" in n]
    assert len(note) == 1 and "the A operand of the dot at" in note[0] and "attn_varlen_packed.tawa:17:13" in note[0] \
        and "Q[h, start:]" in note[0], notes
