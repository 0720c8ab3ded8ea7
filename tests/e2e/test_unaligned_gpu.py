"""Tensors whose rows break TMA's 16-byte rules (odd N or K in bf16, a vocabulary of 50257) on the GPU: a kernel
from `tawa.compile` launches its variant compiled with tma=False (the threads copy the tiles), with a warning,
and computes the right result; aligned arguments keep the TMA kernel; with tma=True the launch is refused with a
clear error. Float64 references, fresh random inputs, NaN-poisoned outputs."""
import pytest

import tawa
from e2e_support import EXAMPLES, PREFILL, bias_act_case, gemm_case, poisoned, rel_err

pytestmark = pytest.mark.gpu

# (M, N, K): odd N (B's and C's rows), odd K (A's rows), both, a vocabulary-sized N, and K below one tile.
SHAPES = [(1000, 1001, 712), (333, 520, 201), (129, 257, 77), (64, 50257, 128), (100, 123, 8)]
CASES = [pytest.param("gemm.tawa", {}, id="gemm"), pytest.param("gemm.tawa", {"BLOCK_N": 128}, id="gemm-n128"),
         pytest.param("gemm_bias_act.tawa", {}, id="gemm_bias_act")]


def kernels(example, constants):
    """The example as `tawa.compile` gives it (tma automatic), its tma=False variant from the same cache, and
    the tma=True kernel; in prefill mode, compile them all and skip."""
    path = str(EXAMPLES / example)
    auto = tawa.compile(path, **constants)
    off = tawa.compile(path, tma=False, **constants)
    on = tawa.compile(path, tma=True, **constants)
    if PREFILL:
        # Calls launch a per-shape variant (tawa.compile without tile constants): its variant without TMA too,
        # where its schedule has one (a persistent or clustered one has not: the kernel's own, `off`, takes those).
        for m, n, k in SHAPES:
            variant = auto.variant_for(*_shaped(example, m, n, k))
            if variant is not auto:
                try:
                    variant._without_tma()
                except tawa.CompilationError:
                    pass
        pytest.skip("kernels compiled into the cache; the check runs on a GPU")
    return auto, off, on


class _Shape:
    def __init__(self, *shape):
        self.shape = shape


def _shaped(example, m, n, k) -> list:
    """Stand-ins with the shapes of the example's arguments (what the per-shape defaults read)."""
    extra = [_Shape(n)] if example == "gemm_bias_act.tawa" else []
    return [_Shape(m, k), _Shape(k, n), *extra, _Shape(m, n)]


def operands(torch, example, m, n, k):
    case = bias_act_case if example == "gemm_bias_act.tawa" else gemm_case
    return case(torch, m, n, k, seed=m + n + k)


@pytest.mark.parametrize("example,constants", CASES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_unaligned_rows_run_without_tma(example, constants, shape):
    auto, _, _ = kernels(example, constants)
    import torch
    m, n, k = shape
    args, ref = operands(torch, example, m, n, k)
    c = poisoned(torch, (m, n), torch.bfloat16)
    with pytest.warns(tawa.TawaPerformanceWarning, match="without TMA"):
        auto(*args, c)
    torch.cuda.synchronize()
    assert not c.isnan().any()
    assert rel_err(c, ref) < 1e-2
    # the per-shape variant's variant without TMA (small M), or the kernel's own where the variant has none
    # (a persistent or clustered schedule)
    variant = auto.variant_for(*args, c)
    assert (variant._fallback or auto._fallback) is not None


@pytest.mark.parametrize("example,constants", CASES)
def test_aligned_rows_keep_tma_and_tma_true_refuses_unaligned(example, constants):
    import torch
    from tawa.errors import TmaAlignmentError
    auto, off, on = kernels(example, constants)
    args, ref = operands(torch, example, 300, 264, 200)
    for kernel in (auto, off):                      # the variant without TMA is also right on aligned tensors
        c = poisoned(torch, (300, 264), torch.bfloat16)
        kernel(*args, c)
        torch.cuda.synchronize()
        assert rel_err(c, ref) < 1e-2
    assert auto._fallback is None
    args, _ = operands(torch, example, 100, 70, 70)  # 140-byte rows
    with pytest.raises(TmaAlignmentError, match="16") as info:
        on(*args, poisoned(torch, (100, 70), torch.bfloat16))
    assert "tma=False" in info.value.note


TUNED = [{"BLOCK_N": 128}, {"BLOCK_N": 256}]


def test_autotuned_kernel_runs_unaligned_rows_without_tma():
    """A `tawa.autotune` tuner on tensors with odd N: its candidates launch their tma=False variants (tuning times
    those), and the result is right."""
    gemm = str(EXAMPLES / "gemm.tawa")
    if PREFILL:
        for configs in (TUNED, [dict(c, tma=False) for c in TUNED]):
            outcomes = tawa.autotune.compile_space(gemm, configs=configs)
            assert all(o.kernel is not None for o in outcomes), [o.error for o in outcomes]
        pytest.skip("kernels compiled into the cache; the check runs on a GPU")
    import torch
    tuner = tawa.autotune(gemm, configs=TUNED, show_progress=False)
    args, ref = operands(torch, "gemm.tawa", 500, 777, 264)
    c = poisoned(torch, (500, 777), torch.bfloat16)
    with pytest.warns(tawa.TawaPerformanceWarning, match="without TMA"):
        tuner(*args, c)
    torch.cuda.synchronize()
    assert not c.isnan().any() and rel_err(c, ref) < 1e-2
