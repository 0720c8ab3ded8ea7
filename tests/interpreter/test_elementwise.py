"""Elementwise arith/math ops on tiles and scalars against numpy references (random inputs, ragged N)."""
import math

import ml_dtypes
import numpy as np
import pytest
from interp_kernels import elementwise, parse

from tawa.runtime.interpreter import run_kernel

N = 100  # not a multiple of the 64-element block: the last program is ragged
RNG = np.random.default_rng(1)


def run(inputs, out, body, arrays, scalars=(), scalar_values=()):
    y = np.zeros(N, dtype=np.dtype(_np(out)))
    run_kernel(parse(elementwise(inputs, out, body, scalars=list(scalars))), [*arrays, y, *scalar_values],
               (math.ceil(N / 64),))
    return y


def _np(t):
    return {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "i32": np.int32,
            "i1": np.bool_}[t]


FLOAT_BINARY = {
    "addf": np.add, "subf": np.subtract, "mulf": np.multiply, "divf": np.divide,
    "maximumf": np.maximum, "minimumf": np.minimum, "maxnumf": np.fmax, "minnumf": np.fmin, "remf": np.fmod,
}


@pytest.mark.parametrize("op", sorted(FLOAT_BINARY))
def test_float_binary(op):
    a = RNG.standard_normal(N).astype(np.float32)
    b = RNG.standard_normal(N).astype(np.float32) + 0.1
    y = run(["f32", "f32"], "f32", f"%y = arith.{op} %x0, %x1 : T<f32>", [a, b])
    np.testing.assert_array_equal(y, FLOAT_BINARY[op](a, b))


def test_nan_semantics_of_max():
    a = np.array([np.nan, 1.0, 2.0] * 34, np.float32)[:N]
    b = np.array([0.5, np.nan, 3.0] * 34, np.float32)[:N]
    y = run(["f32", "f32"], "f32", "%y = arith.maximumf %x0, %x1 : T<f32>", [a, b])
    np.testing.assert_array_equal(np.isnan(y), np.isnan(a) | np.isnan(b))
    y = run(["f32", "f32"], "f32", "%y = arith.maxnumf %x0, %x1 : T<f32>", [a, b])
    assert not np.isnan(y).any()


MATH = {
    "exp": np.exp, "exp2": np.exp2, "log": lambda x: np.log(np.abs(x) + 0.5), "log2": lambda x: np.log2(np.abs(x) + 0.5),
    "sqrt": lambda x: np.sqrt(np.abs(x)), "rsqrt": lambda x: 1 / np.sqrt(np.abs(x) + 0.5), "absf": np.abs,
    "tanh": np.tanh, "erf": lambda x: np.array([math.erf(v) for v in x]), "floor": np.floor, "ceil": np.ceil,
}
# Inputs are shifted so log/sqrt stay in their domain: the kernel applies the same shift with absf/addf.
_PRE = {"log": "abs_shift", "log2": "abs_shift", "rsqrt": "abs_shift", "sqrt": "abs"}


@pytest.mark.parametrize("op", sorted(MATH))
def test_math_unary(op):
    x = (RNG.standard_normal(N) * 2).astype(np.float32)
    pre = _PRE.get(op)
    if pre == "abs_shift":
        body = """%h = arith.constant 0.5 : f32
  %hs = "tawa.splat"(%h) : (f32) -> T<f32>
  %ax = math.absf %x0 : T<f32>
  %z = arith.addf %ax, %hs : T<f32>
  %y = math.OP %z : T<f32>"""
    elif pre == "abs":
        body = """%z = math.absf %x0 : T<f32>
  %y = math.OP %z : T<f32>"""
    else:
        body = "%y = math.OP %x0 : T<f32>"
    y = run(["f32"], "f32", body.replace("OP", op), [x])
    np.testing.assert_allclose(y, MATH[op](x).astype(np.float32), rtol=2e-6, atol=1e-6)


def test_fma_and_negf():
    a, b, c = (RNG.standard_normal(N).astype(np.float32) for _ in range(3))
    y = run(["f32", "f32", "f32"], "f32", """%p = math.fma %x0, %x1, %x2 : T<f32>
  %y = arith.negf %p : T<f32>""", [a, b, c])
    np.testing.assert_allclose(y, -(a.astype(np.float64) * b + c).astype(np.float32), rtol=1e-6)


def _c_div(a, b):
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q).astype(np.int32)


INT_BINARY = {
    "addi": lambda a, b: (a.astype(np.int64) + b).astype(np.int32),
    "subi": lambda a, b: (a.astype(np.int64) - b).astype(np.int32),
    "muli": lambda a, b: (a.astype(np.int64) * b).astype(np.int32),
    "divsi": _c_div,
    "remsi": lambda a, b: (a - b * _c_div(a, b)).astype(np.int32),
    "floordivsi": lambda a, b: a // b,
    "ceildivsi": lambda a, b: -(-a // b),
    "maxsi": np.maximum, "minsi": np.minimum,
    "andi": np.bitwise_and, "ori": np.bitwise_or, "xori": np.bitwise_xor,
}


@pytest.mark.parametrize("op", sorted(INT_BINARY))
def test_int_binary(op):
    a = RNG.integers(-1000, 1000, N).astype(np.int32)
    b = RNG.integers(1, 50, N).astype(np.int32) * RNG.choice([-1, 1], N).astype(np.int32)
    if op in ("addi", "muli"):
        a[:3] = [2**31 - 1, -2**31, 2**30]  # wraps like i32
        b[:3] = [1, -1, 4]
    y = run(["i32", "i32"], "i32", f"%y = arith.{op} %x0, %x1 : T<i32>", [a, b])
    np.testing.assert_array_equal(y, INT_BINARY[op](a, b))


CMPI = {"eq": np.equal, "ne": np.not_equal, "slt": np.less, "sle": np.less_equal, "sgt": np.greater,
        "sge": np.greater_equal,
        "ult": lambda a, b: a.view(np.uint32) < b.view(np.uint32),
        "uge": lambda a, b: a.view(np.uint32) >= b.view(np.uint32)}


@pytest.mark.parametrize("pred", sorted(CMPI))
def test_cmpi_select(pred):
    a = RNG.integers(-5, 5, N).astype(np.int32)
    b = RNG.integers(-5, 5, N).astype(np.int32)
    y = run(["i32", "i32"], "i32", f"""%c = arith.cmpi {pred}, %x0, %x1 : T<i32>
  %y = arith.select %c, %x0, %x1 : T<i1>, T<i32>""", [a, b])
    np.testing.assert_array_equal(y, np.where(CMPI[pred](a, b), a, b))


CMPF = {"oeq": lambda a, b: a == b, "ogt": lambda a, b: a > b, "oge": lambda a, b: a >= b,
        "olt": lambda a, b: a < b, "ole": lambda a, b: a <= b,
        "one": lambda a, b: (a != b) & ~np.isnan(a) & ~np.isnan(b), "ord": lambda a, b: ~np.isnan(a) & ~np.isnan(b),
        "ueq": lambda a, b: (a == b) | np.isnan(a) | np.isnan(b), "ugt": lambda a, b: ~(a <= b),
        "uge": lambda a, b: ~(a < b), "ult": lambda a, b: ~(a >= b), "ule": lambda a, b: ~(a > b),
        "une": lambda a, b: a != b, "uno": lambda a, b: np.isnan(a) | np.isnan(b),
        "false": lambda a, b: np.zeros_like(a, bool), "true": lambda a, b: np.ones_like(a, bool)}


@pytest.mark.parametrize("pred", sorted(CMPF))
def test_cmpf(pred):
    a = RNG.integers(-2, 3, N).astype(np.float32)
    b = RNG.integers(-2, 3, N).astype(np.float32)
    a[::7] = np.nan
    y = run(["f32", "f32"], "i32", f"""%c = arith.cmpf {pred}, %x0, %x1 : T<f32>
  %y = arith.extui %c : T<i1> to T<i32>""", [a, b])
    np.testing.assert_array_equal(y, CMPF[pred](a, b).astype(np.int32))


def test_casts():
    x = (RNG.standard_normal(N) * 100).astype(np.float32)
    y = run(["f32"], "i32", "%y = arith.fptosi %x0 : T<f32> to T<i32>", [x])
    np.testing.assert_array_equal(y, np.trunc(x).astype(np.int32))
    i = RNG.integers(-10**6, 10**6, N).astype(np.int32)
    y = run(["i32"], "f32", "%y = arith.sitofp %x0 : T<i32> to T<f32>", [i])
    np.testing.assert_array_equal(y, i.astype(np.float32))
    y = run(["f32"], "i32", "%y = arith.bitcast %x0 : T<f32> to T<i32>", [x])
    np.testing.assert_array_equal(y, x.view(np.int32))
    y = run(["i32"], "i32", """%t = arith.cmpi slt, %x0, %x0 : T<i32>
  %c1 = arith.constant dense<true> : T<i1>
  %u = arith.xori %t, %c1 : T<i1>
  %y = arith.extsi %u : T<i1> to T<i32>""", [i])
    np.testing.assert_array_equal(y, np.full(N, -1, np.int32))  # sign-extending true gives -1


def test_scalar_params_and_scalar_math():
    """Scalar f32/i32 arguments, scalar arith, splat, and a constant tile."""
    x = RNG.standard_normal(N).astype(np.float32)
    y = run(["f32"], "f32", """%two = arith.constant 2 : i32
  %k = arith.muli %s1, %two : i32
  %kf = arith.sitofp %k : i32 to f32
  %sc = arith.mulf %s0, %kf : f32
  %e = math.exp %sc : f32
  %es = "tawa.splat"(%e) : (f32) -> T<f32>
  %ones = arith.constant dense<1.5> : T<f32>
  %p = arith.mulf %x0, %es : T<f32>
  %y = arith.addf %p, %ones : T<f32>""", [x], scalars=["f32", "i32"], scalar_values=[0.25, 3])
    expected = x * np.float32(np.exp(np.float32(0.25 * 6))) + np.float32(1.5)
    np.testing.assert_allclose(y, expected, rtol=1e-6)
