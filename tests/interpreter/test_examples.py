"""The shipped examples, lowered by the frontend and run by the interpreter, against numpy references.

Outputs are poisoned with NaN before each launch, so an element the kernel fails to write makes the test fail.
"""
import math
import pathlib

import ml_dtypes
import numpy as np
import pytest

from tawa.runtime.grid import bind_numpy_args, eval_grid
from tawa.runtime.interpreter import attr_to_python, kernel_function, run_kernel

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
BF16 = ml_dtypes.bfloat16
RNG = np.random.default_rng(11)


def launch(name, args, seed=0, **constants):
    from tawa.frontend import parse_and_lower
    path = EXAMPLES / f"{name}.tawa"
    module = parse_and_lower(path.read_text(), str(path), constants)
    func = kernel_function(module)
    params = attr_to_python(func.attributes["tawa.params"])
    grid = eval_grid(attr_to_python(func.attributes["tawa.grid"]), bind_numpy_args(params, args),
                     attr_to_python(func.attributes["tawa.constants"]))
    run_kernel(module, args, grid, seed=seed)


def rand(*shape, dtype=np.float32, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(dtype)


def f32(x):
    return np.asarray(x).astype(np.float32)


def test_gemm_example():
    a, b = rand(150, 70, dtype=BF16), rand(70, 90, dtype=BF16)
    c = np.full((150, 90), np.nan, BF16)
    launch("gemm", [a, b, c], BLOCK_M=64, BLOCK_N=64, BLOCK_K=32)
    np.testing.assert_allclose(f32(c), f32((f32(a) @ f32(b)).astype(BF16)), rtol=1e-2, atol=1e-2)


def test_softmax_example():
    x = rand(10, 50, scale=3)
    y = np.full_like(x, np.nan)
    launch("softmax", [x, y], BLOCK_N=64)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


def _sigmoid(x):
    return 1 / (1 + np.exp(-np.clip(x, -80, 80)))


def test_gemm_bias_gelu_example():
    a, b, bias = rand(70, 40, dtype=BF16), rand(40, 50, dtype=BF16), rand(50)
    c = np.full((70, 50), np.nan, BF16)
    launch("gemm_bias_act", [a, b, bias, c], BLOCK_M=64, BLOCK_N=32, BLOCK_K=16)
    x = f32(a) @ f32(b) + bias[None, :]
    y = x * _sigmoid(1.5957691216057308 * (x + 0.044715 * x ** 3))
    np.testing.assert_allclose(f32(c), y, rtol=2e-2, atol=2e-2)


def test_gemm_fp8_example():
    e4m3 = ml_dtypes.float8_e4m3fn
    a, b = rand(70, 100, dtype=e4m3), rand(45, 100, dtype=e4m3)
    sa, sb = rand(70) + 2, rand(45) + 2
    c = np.full((70, 45), np.nan, BF16)
    launch("gemm_fp8", [a, b, sa, sb, c], BLOCK_M=64, BLOCK_N=32, BLOCK_K=32)
    ref = (f32(a) @ f32(b).T) * sa[:, None] * sb[None, :]
    np.testing.assert_allclose(f32(c), ref, rtol=2e-2, atol=5e-2)


def test_swiglu_example():
    a, b1, b2 = rand(40, 30, dtype=BF16), rand(30, 50, dtype=BF16), rand(30, 50, dtype=BF16)
    c = np.full((40, 50), np.nan, BF16)
    launch("swiglu", [a, b1, b2, c], BLOCK_M=32, BLOCK_N=32, BLOCK_K=16)
    g, u = f32(a) @ f32(b1), f32(a) @ f32(b2)
    np.testing.assert_allclose(f32(c), g * _sigmoid(g) * u, rtol=2e-2, atol=5e-2)


@pytest.mark.parametrize("causal", [0, 1])
def test_flash_attention_example(causal):
    z, h, s, d = 1, 2, 70, 32
    q, k, v = (rand(z, h, s, d, dtype=BF16) for _ in range(3))
    o = np.full((z, h, s, d), np.nan, BF16)
    scale = 1 / math.sqrt(d)
    launch("flash_attention", [q, k, v, o, scale], HEAD_DIM=d, BLOCK_M=32, BLOCK_N=16, CAUSAL=causal)
    logits = np.einsum("zhqd,zhkd->zhqk", f32(q), f32(k)) * scale
    if causal:
        logits = np.where(np.tril(np.ones((s, s), bool)), logits, -np.inf)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    ref = np.einsum("zhqk,zhkd->zhqd", p / p.sum(-1, keepdims=True), f32(v))
    np.testing.assert_allclose(f32(o), ref, rtol=3e-2, atol=3e-2)


def _gqa_reference(q, k, v, scale, causal):
    group = q.shape[1] // k.shape[1]
    kk, vv = np.repeat(f32(k), group, axis=1), np.repeat(f32(v), group, axis=1)
    logits = np.einsum("zhqd,zhkd->zhqk", f32(q), kk) * scale
    if causal:
        s = q.shape[2]
        logits = np.where(np.tril(np.ones((s, s), bool)), logits, -np.inf)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    return np.einsum("zhqk,zhkd->zhqd", p / p.sum(-1, keepdims=True), vv)


@pytest.mark.parametrize("heads,kv_heads", [(8, 2), (4, 1), (3, 3)], ids=["gqa", "mqa", "mha"])
@pytest.mark.parametrize("causal", [0, 1])
def test_gqa_attention_example(heads, kv_heads, causal):
    z, s, d = 2, 45, 32
    q = rand(z, heads, s, d, dtype=BF16)
    k, v = (rand(z, kv_heads, s, d, dtype=BF16) for _ in range(2))
    o = np.full((z, heads, s, d), np.nan, BF16)
    scale = 1 / math.sqrt(d)
    launch("gqa_attention", [q, k, v, o, scale], HEAD_DIM=d, BLOCK_M=32, BLOCK_N=16, CAUSAL=causal)
    np.testing.assert_allclose(f32(o), _gqa_reference(q, k, v, scale, causal), rtol=3e-2, atol=3e-2)
