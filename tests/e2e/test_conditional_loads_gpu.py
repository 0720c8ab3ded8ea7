"""Dot operands loaded under a run-time `if` inside the loop (block-sparse K, causal attention skipping the
blocks above the diagonal). Warp specialization does not apply (its producer issues the same loads every
iteration) and the uniform-warp pipeline loads them ahead for every iteration, the dots staying conditional
(`software_pipeline`; they were an internal compiler error). Ragged shapes, NaN-poisoned outputs, float64
references; the interpreter agrees with the same references."""
import math
import pathlib

import numpy as np
import pytest

import tawa
from e2e_support import check_attention, compiled, rel_err, poisoned

KERNELS = pathlib.Path(__file__).resolve().parent / "kernels"
GEMM = str(KERNELS / "gemm_skip_blocks.tawa")
ATTENTION = str(KERNELS / "attention_skip_blocks.tawa")


def _gemm_reference(a, b, kmax, block_k=64):
    k = min(kmax * block_k, a.shape[1]) if kmax > 0 else 0
    return a[:, :k].astype(np.float64) @ b[:k].astype(np.float64)


@pytest.mark.gpu
@pytest.mark.parametrize("kmax", [0, 1, 3, 99])
@pytest.mark.parametrize("options", [{}, {"num_stages": 1}, {"tma": False}], ids=["auto", "stages1", "no-tma"])
def test_gemm_skipping_k_blocks(kmax, options):
    kernel = compiled(GEMM, **options)
    import torch
    torch.manual_seed(kmax)
    m, n, k = 200, 136, 300                                     # 5 K blocks, the last one ragged
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = poisoned(torch, (m, n), torch.bfloat16)
    kernel(a, b, kmax, c)
    torch.cuda.synchronize()
    assert not c.isnan().any()
    kk = min(kmax * 64, k)
    ref = a[:, :kk].double() @ b[:kk].double()
    if kk == 0:
        assert (c == 0).all()
    else:
        assert rel_err(c, ref) < 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 2, 77, 64), (2, 3, 200, 64), (1, 2, 1000, 64), (1, 1, 1, 64),
                                   (1, 2, 300, 128)], ids=lambda s: "x".join(map(str, s)))
def test_attention_skipping_blocks_above_the_diagonal(shape):
    kernel = compiled(ATTENTION, D=shape[3])
    import torch
    check_attention(torch, kernel, shape, causal=1, seed=sum(shape))


def test_compiles_on_the_uniform_pipeline_with_a_note():
    """No internal error: the kernel compiles (the uniform pipeline) and says why it is not specialized."""
    kernel = tawa.compile(GEMM, cache=False)
    notes = "\n".join(kernel.notes)
    assert "uniform-warp schedule" in notes and "inside a conditional" in notes


def test_interpreter_matches_the_reference():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((70, 300)).astype(np.float32)
    b = rng.standard_normal((300, 40)).astype(np.float32)
    kernel = tawa.compile(GEMM, BLOCK_M=64, BLOCK_N=64, target="cpu")
    import ml_dtypes
    for kmax in (0, 2, 99):
        c = np.full((70, 40), np.nan, dtype=ml_dtypes.bfloat16)
        a16, b16 = a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16)
        kernel(a16, b16, kmax, c)
        ref = _gemm_reference(a16, b16, kmax)
        got = c.astype(np.float64)
        assert np.isfinite(got).all()
        assert np.abs(got - ref).max() <= 1e-2 * max(1.0, np.abs(ref).max())
