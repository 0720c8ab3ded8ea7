"""The consumer lookahead left automatic (`consumer_lookahead` unset) and ptxas spilling with it: the compiler
builds the kernel again without it and keeps that build where it spills nothing (`compiler._without_lookahead`).
Compiled for sm_90a and assembled by ptxas on the CPU."""
import pytest

from ws_support import SERIALIZED, compile_example, spill_bytes

SMALL_ROWS = {"HEAD_DIM": 64, "BLOCK_M": 64, "BLOCK_N": 256}     # one consumer warp group, 64x256 score tiles


@pytest.mark.parametrize("causal", [0, 1])
def test_spilling_lookahead_is_dropped(causal):
    kernel = compile_example("flash_attention", CAUSAL=causal, **SMALL_ROWS)
    assert spill_bytes(kernel) == 0
    assert not any(SERIALIZED.search(n) for n in kernel.compiled.notes), kernel.compiled.notes
    assert any("without the lookahead" in n and "spilled" in n for n in kernel.compiled.notes), kernel.compiled.notes


def test_lookahead_asked_for_is_kept():
    kernel = compile_example("flash_attention", consumer_lookahead=True, **SMALL_ROWS)
    assert spill_bytes(kernel) > 0
    assert not any("without the lookahead" in n for n in kernel.compiled.notes)


def test_default_attention_keeps_its_lookahead():
    kernel = compile_example("flash_attention")
    assert spill_bytes(kernel) == 0
    assert not any("without the lookahead" in n for n in kernel.compiled.notes)
