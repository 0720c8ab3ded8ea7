"""The GPU backend on a Hopper GPU: compiled examples checked against torch (ragged shapes, NaN-poisoned outputs).

Needs an sm_90 GPU, torch and the compiler's MLIR bindings on the same machine; skipped otherwise.
(`bench/bench_gemm.py build` / `run` splits compilation and execution across machines.)
"""
import os

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _gpu_ok():
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


if not _gpu_ok():
    pytest.skip("needs a Hopper GPU", allow_module_level=True)

fe = pytest.importorskip("tawa.frontend")


def _kernel(example, constants=None, **opts):
    from tawa.compiler import compile_module
    from tawa.options import CompileOptions
    from tawa.runtime.launcher import GpuLauncher
    path = os.path.join(ROOT, "examples", example)
    module = fe.parse_and_lower(open(path).read(), path, dict(constants or {}))
    with module.context:
        return GpuLauncher(compile_module(module, CompileOptions(**opts)))


def _rel(got, ref):
    return ((got.float() - ref.float()).norm() / ref.float().norm()).item()


# The uniform-warp schedule: 4 warps for a 128x128 tile, 8 for 128x256 (gemm.tawa's default).
@pytest.mark.parametrize("dtype,warps,consts", [("bf16", 4, {"BLOCK_N": 128}),
                                                ("f16", 4, {"BLOCK_N": 128, "DTYPE": "f16"}),
                                                ("bf16", 8, {"BLOCK_N": 256})])
@pytest.mark.parametrize("shape", [(1000, 1000, 1000), (777, 1000, 520), (130, 136, 72), (256, 384, 40)])
def test_gemm(dtype, warps, consts, shape):
    M, N, K = shape
    dt = torch.float16 if dtype == "f16" else torch.bfloat16
    k = _kernel("gemm.tawa", consts, num_warps=warps, num_stages=3)
    a = torch.randn(M, K, device="cuda", dtype=dt)
    b = torch.randn(K, N, device="cuda", dtype=dt)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=dt)
    k.launch([a, b, c])
    torch.cuda.synchronize()
    assert _rel(c, a.float() @ b.float()) < 1e-2


def test_gemm_bias_gelu():
    k = _kernel("gemm_bias_act.tawa")
    M, N, K = 1000, 1000, 1000
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(N, device="cuda")
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    k.launch([a, b, bias, c])
    torch.cuda.synchronize()
    ref = torch.nn.functional.gelu(a.float() @ b.float() + bias, approximate="tanh")
    assert _rel(c, ref) < 2e-2


def test_softmax():
    k = _kernel("softmax.tawa")
    x = torch.randn(123, 781, device="cuda")
    y = torch.full_like(x, float("nan"))
    k.launch([x, y])
    torch.cuda.synchronize()
    assert _rel(y, torch.softmax(x, -1)) < 1e-4


@pytest.mark.parametrize("causal", [0, 1])
def test_flash_attention(causal):
    k = _kernel("flash_attention.tawa", {"CAUSAL": causal}, num_warps=8, num_stages=2)
    q, kk, v = (torch.randn(1, 2, 1000, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o = torch.full_like(q, float("nan"))
    k.launch([q, kk, v, o, 128 ** -0.5])
    torch.cuda.synchronize()
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), kk.float(), v.float(), is_causal=bool(causal))
    assert _rel(o, ref) < 2e-2
