"""Register tiles moved between layouts (`to_nvvm.shape.convert`): what the PTX shows of it (the GPU checks are
tests/e2e/test_layout_conversions_gpu.py)."""
import pathlib

import pytest

from tawa.compiler import compile_source
from tawa.lowering.emit_ptx import find_ptxas
from tawa.options import CompileOptions


def test_a_tile_of_one_register_a_thread_is_moved_between_layouts():
    # A row vector reduced from a [8, 16] tile holds one register a thread, repeated in no other slot; broadcast onto
    # the [8, 256] tiles of the loop it must go through shared memory (it was taken for a splat: every row read the
    # row of the thread that held it).
    path = pathlib.Path(__file__).resolve().parents[1] / "e2e" / "kernels" / "row_vector_across_layouts.tawa"
    k = compile_source(path.read_text(), str(path), CompileOptions())
    assert "st.shared" in k.ptx and "ld.shared" in k.ptx


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("block_n", [64, 128])
def test_fp8_attention_trades_p_by_shuffles(block_n):
    # P rounded to e4m3 moves into the P V dot's A fragments by shuffles inside each warp (`warp_shuffle`), not
    # through shared memory behind barriers over both consumer warp groups (18 such barriers in the kernel, three
    # conversions of the f32 scores per key block: 136 against 711 TFLOP/s now, H200). Its bytes are packed
    # behind the wait for the previous P V (no C7513) and the 128-key kernel no longer spills.
    path = pathlib.Path(__file__).resolve().parents[1] / "e2e" / "kernels" / "user" / "attn_fp8.tawa"
    k = compile_source(path.read_text(), str(path), CompileOptions(constants={"BLOCK_N": block_n}))
    assert "shfl.sync.idx.b32" in k.ptx
    assert k.ptx.count("bar.sync \t2, 256;") <= 3          # the epilogue's staging of O, not the loop
    # P (at most 256, lazy-rescale's bound) is rounded without the check for e4m3's overflow (|x| > 464.0)
    assert "0f43E80000" not in k.ptx
    report = " ".join(n for n in k.notes if n.startswith("ptxas:"))
    assert "0 bytes spill stores, 0 bytes spill loads" in report, report
    assert "C75" not in report, report


MASKED_FP8_P = """
@grid(1)
def masked_p(A: f8e4m3[64, 64], B: f8e4m3[64, 64], O: f32[64, 64]):
    a = load(A, (0, 0), (64, 64))
    b = load(B, (0, 0), (64, 64))
    s = dot(a, b.T)
    m = s > 0.0
    p = where(m, s.to(f8e4m3), zeros((64, 64), f8e4m3))
    t = where(m, s, 0.0)
    store(O, (0, 0), dot(p, b.T, t))
"""


def test_a_mask_wanted_in_fp8_fragments_is_not_shuffled_as_bytes():
    # The mask `m` (i1, one byte wide too) is wanted both in the fp8 A fragments (`where` on the rounded P) and in
    # the accumulator layout: it moves through shared memory (it was taken for i8 bytes and failed to compile).
    k = compile_source(MASKED_FP8_P, "masked_p.tawa", CompileOptions())
    assert k.ptx and "wgmma.mma_async" in k.ptx


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
def test_a_delivered_row_is_read_straight_into_its_broadcast_layout():
    # Document masking (`segq == segk`, segk a [1, BLOCK_N] row of segment ids the producer delivers each key block):
    # the consumers read the row straight into the layout its broadcast onto the scores wants (one barrier), not in
    # the generic one and then through shared memory (three more barriers a key block, over both consumer warp
    # groups). At head dim 64 the conversion's registers had kept the kernel from two CTAs per SM.
    path = pathlib.Path(__file__).resolve().parents[1] / "e2e" / "kernels" / "user" / "attn_segments.tawa"
    k = compile_source(path.read_text(), str(path), CompileOptions())
    assert k.ctas_per_sm == 2 and not any("keeps 1 CTA per SM" in n for n in k.notes), k.notes
    k = compile_source(path.read_text(), str(path), CompileOptions(constants={"D": 128}))
    assert k.ptx.count("bar.sync") <= 8, k.ptx.count("bar.sync")          # 14 with the conversion
