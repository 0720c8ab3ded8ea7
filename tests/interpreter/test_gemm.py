"""GEMM kernels (plain and warp-specialized) on ragged shapes against numpy, for every input dtype."""
import math

import ml_dtypes
import numpy as np
import pytest
from interp_kernels import gemm, gemm_ws, parse

from tawa.runtime.interpreter import run_kernel, run_with_interleavings

DTYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32,
          "f8E4M3FN": ml_dtypes.float8_e4m3fn, "f8E5M2": ml_dtypes.float8_e5m2}


def operands(m, n, k, dt, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(DTYPES[dt])
    b = rng.standard_normal((k, n)).astype(DTYPES[dt])
    return a, b, a.astype(np.float32) @ b.astype(np.float32)


@pytest.mark.parametrize("dt", sorted(DTYPES))
@pytest.mark.parametrize("shape", [(70, 45, 37), (64, 64, 32), (33, 95, 10), (5, 7, 3)])
def test_gemm_ragged(dt, shape):
    m, n, k = shape  # K=37: 3 iterations (odd); K=10 and 3: one ragged iteration
    a, b, ref = operands(m, n, k, dt)
    c = np.full((m, n), 7.0, np.float32)  # every element must be overwritten
    run_kernel(parse(gemm(dt)), [a, b, c], (math.ceil(m / 32), math.ceil(n / 32)))
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)


def test_gemm_does_not_write_outside_c():
    """C is a view inside a larger buffer; the clipped stores must leave the border untouched."""
    a, b, ref = operands(50, 40, 20, "bf16", seed=3)
    big = np.full((60, 48), -3.0, np.float32)
    c = big[:50, :40]
    assert c.strides[-1] == 4
    run_kernel(parse(gemm()), [a, b, c], (2, 2))
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)
    assert (big[50:, :] == -3).all() and (big[:, 40:] == -3).all()


def test_gemm_bigger_tiles():
    a, b, ref = operands(200, 130, 150, "bf16", seed=4)
    c = np.zeros((200, 130), np.float32)
    run_kernel(parse(gemm("bf16", 128, 128, 64)), [a, b, c], (2, 2))
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("k", [10, 37, 64])
def test_warp_specialized_gemm_all_interleavings(depth, k):
    m, n = 45, 70
    a, b, ref = operands(m, n, k, "bf16", seed=k)

    def make_args():
        return [a, b, np.zeros((m, n), np.float32)]

    def check(args):
        np.testing.assert_allclose(args[2], ref, rtol=1e-5, atol=1e-4)

    runs = run_with_interleavings(parse(gemm_ws(depth=depth)), make_args, (2, 3), seeds=range(20), check=check)
    assert len(runs) == 20


def test_warp_specialized_fp8():
    a, b, ref = operands(40, 33, 50, "f8E4M3FN", seed=9)
    c = np.zeros((40, 33), np.float32)
    run_kernel(parse(gemm_ws("f8E4M3FN", depth=2)), [a, b, c], (2, 2), seed=5)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)


def test_gemm_tiles_that_are_not_powers_of_two():
    """48 x 80 tiles with a 16-deep K step (multiples of 16): the clipped edges of ragged shapes included."""
    a, b, ref = operands(100, 170, 50, "bf16", seed=5)
    c = np.full((100, 170), np.nan, np.float32)
    run_kernel(parse(gemm("bf16", 48, 80, 16)), [a, b, c], (math.ceil(100 / 48), math.ceil(170 / 80)))
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)
