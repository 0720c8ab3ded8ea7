"""The ping-pong schedule on the GPU (each consumer warp group computes every other tile of its CTA) against
float64 torch references: fresh random inputs, NaN-poisoned outputs, ragged shapes (tiles that do not divide M, N
or K, K smaller than BLOCK_K, a single tile, tile counts that are not a multiple of the SM count), every fused
epilogue of the examples."""
import pytest

from e2e_support import compiled, poisoned, rel_err
from test_examples_gpu import GEMM_SHAPES

pytestmark = pytest.mark.gpu
PINGPONG = {"schedule": "pingpong"}


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("shape", GEMM_SHAPES + [(8, 4096, 4096), (1000, 33000, 64)],
                         ids=lambda s: "x".join(map(str, s)))
def test_gemm(shape, dtype):
    kernel = compiled("gemm.tawa", DTYPE=dtype, BLOCK_N=128, **PINGPONG)
    import torch
    tdt = {"bf16": torch.bfloat16, "f16": torch.float16}[dtype]
    torch.manual_seed(sum(shape) + 1)
    m, n, k = shape
    a, b = torch.randn(m, k, device="cuda", dtype=tdt), torch.randn(k, n, device="cuda", dtype=tdt)
    for launch in range(2):
        c = poisoned(torch, (m, n), tdt)
        kernel(a, b, c)
        torch.cuda.synchronize()
        assert not c.isnan().any(), f"launch {launch}"
        assert rel_err(c, a.double() @ b.double()) < 1e-2, f"launch {launch}"


@pytest.mark.parametrize("shape", [(333, 520, 200), (1000, 3000, 712), (64, 72, 40), (2048, 4096, 1024)],
                         ids=lambda s: "x".join(map(str, s)))
def test_linear_gelu_residual(shape):
    kernel = compiled("linear_gelu_residual.tawa", BLOCK_N=128, **PINGPONG)
    import torch
    torch.manual_seed(sum(shape))
    m, n, k = shape
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    r = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    y = poisoned(torch, (m, n), torch.bfloat16)
    kernel(x, w, bias, r, y)
    torch.cuda.synchronize()
    assert not y.isnan().any()
    h = x.double() @ w.double().T + bias.double()
    ref = h * torch.sigmoid(1.5957691216057308 * (h + 0.044715 * h ** 3)) + r.double()
    assert rel_err(y, ref) < 1e-2


def test_gemm_bias_act():
    kernel = compiled("gemm_bias_act.tawa", BLOCK_N=128, **PINGPONG)
    import torch
    torch.manual_seed(5)
    m, n, k = 1333, 520, 200
    a, b = torch.randn(m, k, device="cuda", dtype=torch.bfloat16), torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(n, device="cuda", dtype=torch.float32)
    c = poisoned(torch, (m, n), torch.bfloat16)
    kernel(a, b, bias, c)
    torch.cuda.synchronize()
    x = a.double() @ b.double() + bias.double()
    ref = x * torch.sigmoid(1.5957691216057308 * (x + 0.044715 * x ** 3))
    assert rel_err(c, ref) < 1e-2


def test_swiglu():
    kernel = compiled("swiglu.tawa", BLOCK_N=64, **PINGPONG)
    import torch
    torch.manual_seed(6)
    m, n, k = 1300, 696, 264
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b1, b2 = (torch.randn(k, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    c = poisoned(torch, (m, n), torch.bfloat16)
    kernel(a, b1, b2, c)
    torch.cuda.synchronize()
    g, u = a.double() @ b1.double(), a.double() @ b2.double()
    assert rel_err(c, torch.nn.functional.silu(g) * u) < 1e-2


def test_gemm_fp8():
    kernel = compiled("gemm_fp8.tawa", BLOCK_N=128, **PINGPONG)
    import torch
    torch.manual_seed(7)
    m, n, k = 1500, 296, 400
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
    sa, sb = torch.rand(m, device="cuda") + 0.5, torch.rand(n, device="cuda") + 0.5
    c = poisoned(torch, (m, n), torch.bfloat16)
    kernel(a, b, sa, sb, c)
    torch.cuda.synchronize()
    ref = (a.double() @ b.double().T) * sa.double()[:, None] * sb.double()[None, :]
    assert rel_err(c, ref) < 1e-2
