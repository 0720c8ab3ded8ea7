"""Attention with the lazy-rescale pass computes what the plain online softmax computes: the interpreter runs the
example after the tile-level passes (target='cpu') on scores whose row maximum grows by more than the threshold
in later key blocks (so some blocks rescale and others keep a stale maximum), against a float64 reference."""
import math
import pathlib

import ml_dtypes
import numpy as np
import pytest

import tawa
from tawa.lowering.lazy_rescale import THRESHOLD

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "flash_attention.tawa"
BF16 = ml_dtypes.bfloat16


def reference(q, k, v, scale, causal):
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    logits = np.einsum("zhqd,zhkd->zhqk", q, k) * scale
    if causal:
        s = q.shape[2]
        logits = np.where(np.tril(np.ones((s, s), bool)), logits, -np.inf)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    return np.einsum("zhqk,zhkd->zhqd", p / p.sum(-1, keepdims=True), v)


def growing_keys(rng, z, h, s, d):
    """Keys whose scale rises along the sequence in steps, so each query row's maximum jumps by more than
    THRESHOLD (in exp2 units) at some key blocks and by less at others."""
    ramp = (1.0 + np.floor(np.arange(s) / 16) * 1.5)[None, None, :, None]
    return (rng.standard_normal((z, h, s, d)) * ramp).astype(BF16)


@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("s", [70, 129])
def test_lazy_rescale_matches_the_exact_softmax(causal, s):
    rng = np.random.default_rng(s + causal)
    z, h, d = 1, 2, 32
    q = rng.standard_normal((z, h, s, d)).astype(BF16)
    k = growing_keys(rng, z, h, s, d)
    v = rng.standard_normal((z, h, s, d)).astype(BF16)
    scale = 1 / math.sqrt(d)
    logits = np.einsum("zhqd,zhkd->zhqk", q.astype(np.float64), k.astype(np.float64)) * scale / math.log(2)
    # The inputs exercise both branches: between 16-key blocks, some row maxima grow by more than the threshold.
    block_max = np.maximum.accumulate(logits.reshape(z, h, s, -1)[..., : s - s % 16].reshape(z, h, s, -1, 16)
                                      .max(-1), axis=-1)
    jumps = np.diff(block_max, axis=-1)
    assert (jumps > THRESHOLD).any() and ((jumps > 0) & (jumps <= THRESHOLD)).any()
    o = np.full((z, h, s, d), np.nan, BF16)
    kernel = tawa.compile(str(EXAMPLE), target="cpu", HEAD_DIM=d, BLOCK_M=32, BLOCK_N=16, CAUSAL=causal)
    kernel(q, k, v, o, scale)
    np.testing.assert_allclose(o.astype(np.float64), reference(q, k, v, scale, causal), rtol=2e-2, atol=2e-2)


def test_the_pass_fires_on_the_example():
    """The example's loop really is rewritten (else the test above would test nothing new)."""
    from tawa.compiler import compile_source
    from tawa.options import CompileOptions
    text = str(compile_source(EXAMPLE.read_text(), str(EXAMPLE),
                              CompileOptions(target="cpu", constants={"HEAD_DIM": 32, "BLOCK_M": 32,
                                                                      "BLOCK_N": 16}), emit="mlir"))
    assert text.count("tawa.unit_scale_operand") == 1 and "arith.cmpf ogt" in text


def test_fp8_probabilities_stay_finite_when_the_maximum_grows():
    """fp8 attention (P rounded to e4m3, largest finite value 448) whose row maxima grow by about 7 (in the
    exponential's units, base e) at the second key block: a stale maximum kept up to growth 8 made P reach
    e^7 > 448 and every row NaN. The threshold is ln(256) there."""
    f8 = ml_dtypes.float8_e4m3fn
    kernel_path = pathlib.Path(__file__).resolve().parents[1] / "e2e" / "kernels" / "user" / "attn_fp8.tawa"
    rng = np.random.default_rng(7)
    z, h, s, d = 1, 1, 256, 128
    q = (rng.standard_normal((z, h, s, d)) * 0.1).astype(f8)
    k = (rng.standard_normal((z, h, s, d)) * 0.1).astype(f8)
    v = rng.standard_normal((z, h, s, d)).astype(f8)
    q[..., 0], k[..., 130, :], k[..., 130, 0] = 8.0, 0.0, 10.0      # one key of the second block scores ~7.07
    scale = d ** -0.5
    logits = np.einsum("zhqd,zhkd->zhqk", q.astype(np.float64), k.astype(np.float64)) * scale
    assert (logits[..., 128:].max(-1) - logits[..., :128].max(-1) > math.log(448)).all()
    o = np.full((z, h, s, d), np.nan, BF16)
    tawa.compile(str(kernel_path), target="cpu")(q, k, np.ascontiguousarray(v.swapaxes(-1, -2)), o, scale, 1.0)
    ref = reference(q, k, v, scale, 0)
    got = o.astype(np.float64)
    assert not np.isnan(got).any()
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 5e-2


MASKED_THEN_FP8 = """
@grid(cdiv(M, BLOCK))
def masked_then_fp8(X: f32[M, N], V: f8e4m3[N, 32], O: f32[M, 32], BLOCK: const = 32):
    m_i = full((BLOCK,), -inf, f32)
    l_i = zeros((BLOCK,), f32)
    acc = zeros((BLOCK, 32), f32)
    for j in range(cdiv(N, BLOCK)):
        x = load(X, (program_id(0), j), (BLOCK, BLOCK))
        m_new = maximum(m_i, max(x, axis=1))
        p = exp(x - m_new[:, None])
        alpha = exp(m_i - m_new)
        if j * BLOCK + BLOCK > N:
            p = where((j * BLOCK + arange(0, BLOCK))[None, :] < N, p, 0.0)
        l_i = l_i * alpha + sum(p, axis=1)
        acc = acc * alpha[:, None] + dot(p.to(f8e4m3), load(V, (j, 0), (BLOCK, 32)))
        m_i = m_new
    store(O, (program_id(0), 0), acc / l_i[:, None])
"""


def test_probabilities_masked_in_a_branch_before_fp8_stay_finite():
    """The same, with P masked in a branch (an `scf.if` yielding it) before its rounding: the pass leaves the
    maximum exact (a stale one let P reach e^7.5 there, rounded to NaN)."""
    x = np.zeros((32, 64), np.float32)
    x[:, 32] = 7.5                                  # the second key block's maximum grows by 7.5
    v = np.ones((64, 32), ml_dtypes.float8_e4m3fn)
    o = np.full((32, 32), np.nan, np.float32)
    tawa.compile(MASKED_THEN_FP8, target="cpu")(x, v, o)
    assert not np.isnan(o).any()
    np.testing.assert_allclose(o, 1.0, rtol=2e-2)   # softmax rows against a V of ones
