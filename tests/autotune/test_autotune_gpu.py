"""Autotuning on a Hopper GPU: examples/gemm.tawa tuned with CUDA-event timing (L2 flushed) on ragged shapes and
checked against torch, the result reused by a new tuner, and the timer measuring the GPU rather than the host.

On a GPU machine without the compiler, prefill the cache where the compiler is:
`TAWA_PREFILL=1 TAWA_CACHE_DIR=DIR pytest tests/autotune -m gpu` compiles the example's declared space and skips,
then `TAWA_TEST_KEEP_CACHE=1 TAWA_CACHE_DIR=DIR pytest tests/autotune -m gpu` runs there.
"""
from __future__ import annotations

import os
import pathlib

import pytest

import tawa

pytestmark = pytest.mark.gpu

GEMM = str(pathlib.Path(__file__).resolve().parents[2] / "examples" / "gemm.tawa")
PREFILL = os.environ.get("TAWA_PREFILL") == "1"
#: Ragged shapes: M, N, K not multiples of any tile (N and K multiples of 8: TMA needs 16-byte row strides), and
#: a decode shape whose M prunes the larger tiles.
SHAPES = [(1000, 1480, 776), (8, 2056, 1032)]


@pytest.fixture(scope="module")
def torch():
    if PREFILL:
        outcomes = tawa.autotune.compile_space(GEMM)
        assert sum(o.kernel is not None for o in outcomes) >= 2, [o.error for o in outcomes]
        pytest.skip("the tuning space is compiled into the cache; the check runs on a GPU")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    torch.manual_seed(0)
    return torch


def _operands(torch, m, n, k):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    return a, b, torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)


def _rel_err(out, ref) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


def test_gemm_tuned_on_ragged_shapes_matches_torch(torch, no_results):
    tuner = tawa.autotune(GEMM, show_progress=True)
    assert tuner.origin == "declared" and tuner.key == ["M", "N", "K"]
    for m, n, k in SHAPES:
        a, b, c = _operands(torch, m, n, k)
        tuner(a, b, c)
        torch.cuda.synchronize()
        assert _rel_err(c, a.float() @ b.float()) < 1e-2, (m, n, k)
        choice = tuner.tune(a, b, c)
        print(f"\n{m}x{n}x{k}: {choice.how}\n{choice.report()}")
        timed = [t for t in choice.timings if t.get("ms") is not None]
        assert choice.how == "tuned" and len(timed) >= 2
        assert all(t["ms"] > 0 for t in timed) and choice.ms == min(t["ms"] for t in timed)
        if m == 8:
            assert choice.config["BLOCK_M"] == 64       # the larger tiles were pruned by shape
    # A new tuner (as in a new process) reuses the stored choice and computes the same result.
    a, b, c = _operands(torch, *SHAPES[0])
    again = tawa.autotune(GEMM)
    again(a, b, c)
    torch.cuda.synchronize()
    assert again.tune(a, b, c).how == "stored"
    assert _rel_err(c, a.float() @ b.float()) < 1e-2


def test_event_timer_measures_the_gpu(torch):
    from tawa.runtime.timing import CudaEventTimer
    timer = CudaEventTimer(warmup_ms=5, rep_ms=20)
    stream = torch.cuda.current_stream().cuda_stream
    small = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    large = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    t_small = timer(lambda: torch.mm(small, small), stream=stream)
    t_large = timer(lambda: torch.mm(large, large), stream=stream)
    # 8x the FLOPs: the host-side cost of the two launches is the same, so only GPU time can make this hold.
    assert 4 < t_large / t_small < 12, (t_small, t_large)
    assert timer.device_name()
    timer.close()
