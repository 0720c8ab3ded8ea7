"""Register tiles moved between layouts (`to_nvvm.shape.convert`) where a thread holds a single register of the
source: a row vector reduced from a narrow tile and used against wide ones (row statistics shifted by each row's
first element), and a GEMM's A scaled by a row scale reduced from a [BLOCK_M, 2] tile in its K loop. A tile of one
register a thread repeats that register in every slot, and was once taken for a splat and not moved: every row
read the row of the thread that held it (relative errors of 0.6 to 70). NaN-poisoned outputs, float64
references. fp8 attention's P, moved by quad shuffles into the P V dot's fragments."""
import pathlib

import numpy as np
import pytest

from e2e_support import compiled, poisoned, rel_err

KERNELS = pathlib.Path(__file__).resolve().parent / "kernels"


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(8, 256), (333, 1000), (37, 5000)])
@pytest.mark.parametrize("options", [{}, {"BLOCK_M": 4}])
def test_row_vector_from_a_narrow_tile(shape, options):
    kernel = compiled(str(KERNELS / "row_vector_across_layouts.tawa"), **options)
    import torch
    m, n = shape
    torch.manual_seed(m + n)
    x = torch.randn(m, n, device="cuda")
    y = poisoned(torch, (m, n), torch.float32)
    kernel(x, y)
    torch.cuda.synchronize()
    ref = x.double() - x.double()[:, :1]
    assert not torch.isnan(y).any() and rel_err(y, ref) < 1e-6


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(333, 1000), (64, 4096), (37, 5000)])
def test_row_mean_and_variance_shifted_by_a_narrow_tile(shape):
    kernel = compiled(str(KERNELS / "user" / "mean_var.tawa"))
    import torch
    m, n = shape
    torch.manual_seed(m * n)
    x = (torch.randn(m, n, device="cuda") * 3 + 5).to(torch.float16)
    mean, var = poisoned(torch, (m,), torch.float32), poisoned(torch, (m,), torch.float32)
    kernel(x, mean, var)
    torch.cuda.synchronize()
    xd = x.double()
    assert rel_err(mean, xd.mean(1)) < 1e-5 and rel_err(var, xd.var(1, unbiased=False)) < 1e-4


@pytest.mark.gpu
@pytest.mark.parametrize("options", [{}, {"warp_specialize": False}])
def test_gemm_row_scale_reduced_in_the_k_loop(options):
    kernel = compiled(str(KERNELS / "gemm_row_scale_reduced.tawa"), **options)
    import torch
    m, n, k = 200, 136, 256
    torch.manual_seed(7)
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(k, n, device="cuda").to(torch.bfloat16)
    sa = torch.rand(m, 2 * (k // 64), device="cuda") + 0.5
    c = poisoned(torch, (m, n), torch.float32)
    kernel(a, b, sa, c)
    torch.cuda.synchronize()
    ref = torch.zeros(m, n, dtype=torch.float64, device="cuda")
    for kb in range(k // 64):
        s = sa[:, 2 * kb:2 * kb + 2].double().max(1).values
        ak = (a[:, 64 * kb:64 * (kb + 1)].float() * s.float()[:, None]).to(torch.bfloat16).double()
        ref += ak @ b[64 * kb:64 * (kb + 1)].double()
    assert not torch.isnan(c).any() and rel_err(c, ref) < 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("s", [256, 1008])
@pytest.mark.parametrize("options", [{}, {"BLOCK_N": 64}])
def test_fp8_attention_p_shuffled_and_finite_when_the_maximum_grows(s, options):
    # fp8 attention's P rounded to e4m3 moves into the P V dot's A fragments by quad shuffles; one key past the
    # first 128 scores about 7 (base e) above the rest, where a stale maximum kept up to growth 8 rounded P to NaN
    kernel = compiled(str(KERNELS / "user" / "attn_fp8.tawa"), **options)
    import torch
    f8 = torch.float8_e4m3fn
    z, h, d = 2, 3, 128
    torch.manual_seed(s)
    q = torch.randn(z, h, s, d, device="cuda") * 0.1
    k = torch.randn(z, h, s, d, device="cuda") * 0.1
    q[..., 0] = 8.0
    k[:, :, 130, :] = 0.0
    k[:, :, 130, 0] = 10.0
    q, k, v = q.to(f8), k.to(f8), torch.randn(z, h, s, d, device="cuda").to(f8)
    scale = d ** -0.5
    o = poisoned(torch, (z, h, s, d), torch.bfloat16)
    kernel(q, k, v.transpose(-1, -2).contiguous(), o, scale, 1.0)
    torch.cuda.synchronize()
    logits = q.double() @ k.double().transpose(-1, -2) * scale
    ref = torch.softmax(logits, -1) @ v.double()
    assert not torch.isnan(o).any() and rel_err(o, ref) < 5e-2
