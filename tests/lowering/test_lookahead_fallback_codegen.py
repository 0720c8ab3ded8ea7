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


def test_a_spilling_kernel_without_a_lookahead_is_built_once(monkeypatch):
    """A GEMM that spills has no lookahead to drop: one build, not a second one thrown away."""
    from tawa.lowering import backend
    builds = []
    real = backend.build_kernel
    monkeypatch.setattr(backend, "build_kernel", lambda module: builds.append(1) or real(module))
    kernel = compile_example("gemm", BLOCK_M=256, BLOCK_N=256, num_buffers=2)
    assert spill_bytes(kernel) > 0 and len(builds) == 1


def test_the_note_names_the_schedules_that_go_with_the_lookahead():
    kernel = compile_example("flash_attention", **SMALL_ROWS)
    note = next(n for n in kernel.compiled.notes if "without the lookahead" in n)
    assert "softmax pipeline" in note and "ping-pong" in note
