"""Every op rounds to its result type: bf16/f16 arithmetic per op, fp8 truncation, checked against ml_dtypes."""
import math

import ml_dtypes
import numpy as np
import pytest
from interp_kernels import elementwise, parse

from tawa.runtime.interpreter import run_kernel

N = 200
BF16, E4M3, E5M2 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
NP = {"bf16": BF16, "f16": np.float16, "f32": np.float32, "f8E4M3FN": E4M3, "f8E5M2": E5M2}


def run(inputs, out, body, arrays):
    y = np.zeros(N, NP[out])
    run_kernel(parse(elementwise(inputs, out, body)), [*arrays, y], (math.ceil(N / 64),))
    return y


@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_half_precision_math_rounds_after_every_op(dt):
    rng = np.random.default_rng(2)
    a, b, c = (rng.standard_normal(N).astype(NP[dt]) for _ in range(3))
    y = run([dt] * 3, dt, f"""%p = arith.mulf %x0, %x1 : T<{dt}>
  %y = arith.addf %p, %x2 : T<{dt}>""", [a, b, c])
    f = np.float32
    per_op = ((a.astype(f) * b.astype(f)).astype(NP[dt]).astype(f) + c.astype(f)).astype(NP[dt])
    fused = (a.astype(f) * b.astype(f) + c.astype(f)).astype(NP[dt])
    np.testing.assert_array_equal(y.astype(f), per_op.astype(f))
    assert (per_op != fused).any()  # the inputs are such that skipping the intermediate rounding shows


@pytest.mark.parametrize("dt", ["f8E4M3FN", "f8E5M2", "bf16", "f16"])
def test_truncf_matches_ml_dtypes(dt):
    x = (np.random.default_rng(3).standard_normal(N) * 8).astype(np.float32)
    y = run(["f32"], dt, f"%y = arith.truncf %x0 : T<f32> to T<{dt}>", [x])
    expected = x.astype(NP[dt])
    np.testing.assert_array_equal(y.astype(np.float32), expected.astype(np.float32))
    assert (expected.astype(np.float32) != x).any()  # really rounded


def test_fp8_round_trip_through_extf():
    x = (np.random.default_rng(4).standard_normal(N) * 3).astype(np.float32)
    y = run(["f32"], "f32", """%t = arith.truncf %x0 : T<f32> to T<f8E4M3FN>
  %y = arith.extf %t : T<f8E4M3FN> to T<f32>""", [x])
    np.testing.assert_array_equal(y, x.astype(E4M3).astype(np.float32))


def test_bf16_exp_rounds_result():
    x = np.random.default_rng(5).standard_normal(N).astype(BF16)
    y = run(["bf16"], "bf16", "%y = math.exp %x0 : T<bf16>", [x])
    np.testing.assert_array_equal(y.astype(np.float32),
                                  np.exp(x.astype(np.float32)).astype(BF16).astype(np.float32))


def test_bf16_constant_and_sitofp_round():
    i = np.arange(N, dtype=np.int32) * 1001  # large ints are not exact in bf16
    y = run(["i32"], "bf16", """%f = arith.sitofp %x0 : T<i32> to T<bf16>
  %c = arith.constant dense<0.1> : T<bf16>
  %y = arith.addf %f, %c : T<bf16>""", [i])
    f = np.float32
    expected = (i.astype(BF16).astype(f) + np.float32(BF16(0.1))).astype(BF16)
    np.testing.assert_array_equal(y.astype(f), expected.astype(f))
