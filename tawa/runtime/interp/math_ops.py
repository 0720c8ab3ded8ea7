"""Closures for the `math` dialect: transcendental and rounding functions, elementwise on scalars and tiles.

Like `arith` float ops they compute in float32 and round the result to the result type.
"""
from __future__ import annotations

import math

import numpy as np

from tawa.runtime.interp.arith_ops import _float_map
from tawa.runtime.interp.compiler import handler


def _erf(x):
    try:
        from scipy.special import erf
    except ImportError:  # scipy is optional: fall back to the exact scalar function
        return np.vectorize(math.erf, otypes=[np.float64])(x).astype(np.asarray(x).dtype)
    return erf(x)


def _rsqrt(x):
    return np.float32(1) / np.sqrt(x)


def _fma(a, b, c):
    # float64 holds a*b exactly for float32 inputs, so this rounds once like a fused multiply-add.
    return (np.asarray(a, np.float64) * b + c).astype(np.float32)


def _round_half_away(x):
    return np.copysign(np.floor(np.abs(x) + np.float32(0.5)), x)


_MATH = {
    "math.exp": np.exp, "math.exp2": np.exp2, "math.expm1": np.expm1,
    "math.log": np.log, "math.log2": np.log2, "math.log10": np.log10, "math.log1p": np.log1p,
    "math.sqrt": np.sqrt, "math.rsqrt": _rsqrt, "math.absf": np.abs, "math.tanh": np.tanh,
    "math.sin": np.sin, "math.cos": np.cos, "math.tan": np.tan, "math.atan": np.arctan,
    "math.sinh": np.sinh, "math.cosh": np.cosh, "math.asin": np.arcsin, "math.acos": np.arccos,
    "math.erf": _erf, "math.floor": np.floor, "math.ceil": np.ceil, "math.trunc": np.trunc,
    "math.round": _round_half_away, "math.roundeven": np.rint,
    "math.atan2": np.arctan2, "math.powf": np.power, "math.copysign": np.copysign,
    "math.fma": _fma,
}


@handler(*_MATH)
def _math(c, op):
    fn = _MATH[op.name]
    return _float_map(c, op, fn)


@handler("math.absi")
def _absi(c, op):
    (a,) = c.operands(op)
    (r,) = c.results(op)
    info = c.info(op.results[0].type)
    if info.is_tensor:
        def run(env):
            env[r] = np.abs(env[a])
    else:
        from tawa.runtime.interp.dtypes import wrap_int
        bits = info.bits

        def run(env):
            env[r] = wrap_int(abs(env[a]), bits)
    return run, False
