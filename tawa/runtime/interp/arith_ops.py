"""Closures for the `arith` dialect: constants, integer and float arithmetic, comparisons, select and casts.

Float ops compute in float32 and round the result to the op's result type (so bf16 arithmetic rounds to bf16
after every op, as the GPU does). Integer ops wrap to their width: numpy does it for tiles, `wrap_int` for the
Python ints that represent scalars.
"""
from __future__ import annotations

import re

import numpy as np
from mlir import ir

from tawa.runtime.interp.compiler import handler, int_attr
from tawa.runtime.interp.dtypes import F32, TypeInfo, make_scalar, to_repr, wrap_int


# ---------------------------------------------------------------------------------------------------------------
# constants

def _dense_array(attr, info: TypeInfo) -> np.ndarray:
    if attr.is_splat:
        value = _scalar_attr(attr.get_splat_value(), info)
        return np.full(info.shape, value, dtype=info.dtype)
    try:
        array = np.array(attr)
    except Exception:  # noqa: BLE001 - the bindings refuse f16/bf16/fp8 buffers: read the printed form
        array = _parse_dense(str(attr), info)
    return np.asarray(array).reshape(info.shape).astype(info.dtype)


def _parse_dense(text: str, info: TypeInfo) -> np.ndarray:
    hexed = re.match(r'dense<"0x([0-9A-Fa-f]*)">', text)
    if hexed:
        return np.frombuffer(bytes.fromhex(hexed.group(1)), dtype=info.dtype).copy()
    body = text[text.index("<") + 1: text.rindex(">", 0, text.index(":") if ":" in text else len(text))]
    words = re.findall(r"true|false|[-+]?(?:inf|nan|0x[0-9A-Fa-f]+|[0-9.]+(?:e[-+]?\d+)?)", body)
    values = [1.0 if w == "true" else 0.0 if w == "false" else float(w) for w in words]
    return np.array(values, dtype=np.float64)


def _scalar_attr(attr, info: TypeInfo):
    if isinstance(attr, ir.BoolAttr):
        return make_scalar(attr.value, info)
    if isinstance(attr, ir.IntegerAttr):
        return make_scalar(attr.value, info)
    if isinstance(attr, ir.FloatAttr):
        return make_scalar(attr.value, info)
    raise TypeError(f"unsupported constant attribute {attr}")


@handler("arith.constant")
def _constant(c, op):
    info = c.info(op.results[0].type)
    attr = op.attributes["value"]
    if info.is_tensor:
        value = _dense_array(attr, info)
        value.flags.writeable = False
    else:
        value = _scalar_attr(attr, info)
    (r,) = c.results(op)

    def run(env):
        env[r] = value
    return run, False


# ---------------------------------------------------------------------------------------------------------------
# float arithmetic

def _float_map(c, op, fn):
    """An elementwise float op: `fn` on float32 operands, result rounded to the result type."""
    args = c.operands(op)
    (r,) = c.results(op)
    info = c.info(op.results[0].type)
    dt = info.dtype
    exact = dt == F32 and all(c.info(v.type).dtype == F32 for v in op.operands)
    if len(args) == 1:
        (a,) = args
        if exact:
            def run(env):
                env[r] = fn(env[a])
        else:
            def run(env):
                env[r] = fn(env[a].astype(F32)).astype(dt)
    elif len(args) == 2:
        a, b = args
        if exact:
            def run(env):
                env[r] = fn(env[a], env[b])
        else:
            def run(env):
                env[r] = fn(env[a].astype(F32), env[b].astype(F32)).astype(dt)
    else:
        a, b, d = args
        if exact:
            def run(env):
                env[r] = fn(env[a], env[b], env[d])
        else:
            def run(env):
                env[r] = fn(env[a].astype(F32), env[b].astype(F32), env[d].astype(F32)).astype(dt)
    return run, False


_FLOAT_BINARY = {
    "arith.addf": np.add, "arith.subf": np.subtract, "arith.mulf": np.multiply, "arith.divf": np.divide,
    "arith.remf": np.fmod, "arith.maximumf": np.maximum, "arith.minimumf": np.minimum,
    "arith.maxnumf": np.fmax, "arith.minnumf": np.fmin,
}


@handler(*_FLOAT_BINARY)
def _float_binary(c, op):
    return _float_map(c, op, _FLOAT_BINARY[op.name])


@handler("arith.negf")
def _negf(c, op):
    return _float_map(c, op, np.negative)


# ---------------------------------------------------------------------------------------------------------------
# integer arithmetic

def _s_divsi(a, b):
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _t_divsi(a, b):
    return np.floor_divide(a - np.fmod(a, b), b)


def _unsigned(x, bits):
    mask = (1 << bits) - 1
    if isinstance(x, np.ndarray):
        return x.astype(np.uint64) & np.uint64(mask) if bits < 64 else x.view(np.uint64)
    return int(x) & mask


def _int_binary(scalar_fn, tensor_fn, unsigned=False):
    def compile_fn(c, op):
        a, b = c.operands(op)
        (r,) = c.results(op)
        info = c.info(op.results[0].type)
        bits = info.bits
        if info.is_tensor:
            dt = info.dtype
            if unsigned:
                def run(env):
                    env[r] = tensor_fn(_unsigned(env[a], bits), _unsigned(env[b], bits)).astype(dt)
            else:
                def run(env):
                    env[r] = tensor_fn(env[a], env[b])
        elif unsigned:
            def run(env):
                env[r] = wrap_int(scalar_fn(_unsigned(env[a], bits), _unsigned(env[b], bits)), bits)
        elif bits == 1:
            def run(env):
                env[r] = bool(scalar_fn(int(env[a]), int(env[b])) & 1)
        else:
            def run(env):
                env[r] = wrap_int(scalar_fn(env[a], env[b]), bits)
        return run, False
    return compile_fn


_INT_BINARY = {
    "arith.addi": (lambda a, b: a + b, np.add, False),
    "arith.subi": (lambda a, b: a - b, np.subtract, False),
    "arith.muli": (lambda a, b: a * b, np.multiply, False),
    "arith.divsi": (_s_divsi, _t_divsi, False),
    "arith.remsi": (lambda a, b: a - b * _s_divsi(a, b), np.fmod, False),
    "arith.floordivsi": (lambda a, b: a // b, np.floor_divide, False),
    "arith.ceildivsi": (lambda a, b: -(-a // b), lambda a, b: np.negative(np.floor_divide(np.negative(a), b)),
                        False),
    "arith.divui": (lambda a, b: a // b, np.floor_divide, True),
    "arith.remui": (lambda a, b: a % b, np.remainder, True),
    "arith.maxsi": (max, np.maximum, False),
    "arith.minsi": (min, np.minimum, False),
    "arith.maxui": (max, np.maximum, True),
    "arith.minui": (min, np.minimum, True),
    "arith.andi": (lambda a, b: a & b, np.bitwise_and, False),
    "arith.ori": (lambda a, b: a | b, np.bitwise_or, False),
    "arith.xori": (lambda a, b: a ^ b, np.bitwise_xor, False),
    "arith.shli": (lambda a, b: a << b if 0 <= b < 64 else 0, np.left_shift, False),
    "arith.shrsi": (lambda a, b: a >> b if b >= 0 else 0, np.right_shift, False),
    "arith.shrui": (lambda a, b: a >> b if b >= 0 else 0, np.right_shift, True),
}
for _name, (_s, _t, _u) in _INT_BINARY.items():
    handler(_name)(_int_binary(_s, _t, _u))


# ---------------------------------------------------------------------------------------------------------------
# comparisons and select

_CMPI = ["eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge"]
_CMP_FN = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
           "ge": np.greater_equal}


@handler("arith.cmpi")
def _cmpi(c, op):
    pred = _CMPI[int_attr(op, "predicate")]
    a, b = c.operands(op)
    (r,) = c.results(op)
    src = c.info(op.operands[0].type)
    bits, fn = src.bits, _CMP_FN[pred[-2:]]
    unsigned = pred[0] == "u"
    tensor = src.is_tensor
    if unsigned:
        def run(env):
            out = fn(_unsigned(env[a], bits), _unsigned(env[b], bits))
            env[r] = out if tensor else bool(out)
    elif tensor:
        def run(env):
            env[r] = fn(env[a], env[b])
    else:
        def run(env):
            env[r] = bool(fn(env[a], env[b]))
    return run, False


def _isnan(x):
    return np.isnan(x)


_CMPF = {
    0: lambda a, b: np.zeros(np.broadcast(a, b).shape, bool),
    1: np.equal, 2: np.greater, 3: np.greater_equal, 4: np.less, 5: np.less_equal,
    6: lambda a, b: np.not_equal(a, b) & ~_isnan(a) & ~_isnan(b),
    7: lambda a, b: ~_isnan(a) & ~_isnan(b),
    8: lambda a, b: np.equal(a, b) | _isnan(a) | _isnan(b),
    9: lambda a, b: ~np.less_equal(a, b), 10: lambda a, b: ~np.less(a, b),
    11: lambda a, b: ~np.greater_equal(a, b), 12: lambda a, b: ~np.greater(a, b),
    13: np.not_equal,
    14: lambda a, b: _isnan(a) | _isnan(b),
    15: lambda a, b: np.ones(np.broadcast(a, b).shape, bool),
}


@handler("arith.cmpf")
def _cmpf(c, op):
    fn = _CMPF[int_attr(op, "predicate")]
    a, b = c.operands(op)
    (r,) = c.results(op)
    src = c.info(op.operands[0].type)
    up = src.dtype != F32
    if src.is_tensor:
        def run(env):
            x, y = env[a], env[b]
            if up:
                x, y = x.astype(F32), y.astype(F32)
            env[r] = np.asarray(fn(x, y), dtype=bool)
    else:
        def run(env):
            env[r] = bool(fn(np.float32(env[a]), np.float32(env[b])))
    return run, False


@handler("arith.select")
def _select(c, op):
    cond, a, b = c.operands(op)
    (r,) = c.results(op)
    if c.info(op.operands[0].type).is_tensor:
        def run(env):
            env[r] = np.where(env[cond], env[a], env[b])
    else:
        def run(env):
            env[r] = env[a] if env[cond] else env[b]
    return run, False


# ---------------------------------------------------------------------------------------------------------------
# casts

def _cast(compute):
    """A cast handler; `compute(x, src, dst)` works on the source value, returns a numpy value or Python int."""
    def compile_fn(c, op):
        (a,) = c.operands(op)
        (r,) = c.results(op)
        src, dst = c.info(op.operands[0].type), c.info(op.results[0].type)

        def run(env):
            env[r] = to_repr(compute(env[a], src, dst), dst)
        return run, False
    return compile_fn


def _as_array(x, info: TypeInfo):
    """Operand as a numpy array/scalar of a signed integer or float dtype (i1 signed: true is -1)."""
    if info.kind in ("int", "index") and info.bits == 1:
        return -np.asarray(x, dtype=np.int64)
    return np.asarray(x) if not isinstance(x, np.ndarray) else x


def _float_cast(x, src, dst):
    x = np.asarray(x)
    if src.dtype not in (F32, np.dtype(np.float64)):
        x = x.astype(F32)  # one exact widening, then one rounding to the target
    return x.astype(dst.dtype)


def _sitofp(x, src, dst):
    return _as_array(x, src).astype(np.float64).astype(dst.dtype)


def _uitofp(x, src, dst):
    return np.asarray(_unsigned(x, src.bits)).astype(np.float64).astype(dst.dtype)


def _fptosi(x, src, dst):
    with np.errstate(all="ignore"):
        y = np.trunc(np.asarray(x).astype(np.float64))
        y = np.nan_to_num(y, nan=0.0, posinf=2.0 ** (dst.bits - 1) - 1, neginf=-2.0 ** (dst.bits - 1))
        return y.astype(np.int64).astype(dst.dtype) if dst.bits > 1 else (y != 0)


def _fptoui(x, src, dst):
    with np.errstate(all="ignore"):
        y = np.nan_to_num(np.trunc(np.asarray(x).astype(np.float64)))
        return y.astype(np.int64).astype(dst.dtype)


def _extsi(x, src, dst):
    return _as_array(x, src).astype(dst.dtype)


def _extui(x, src, dst):
    if src.bits == 1:
        return np.asarray(x).astype(dst.dtype)
    return np.asarray(_unsigned(x, src.bits)).astype(np.int64).astype(dst.dtype)


def _trunci(x, src, dst):
    if dst.bits == 1:
        return (np.asarray(x).astype(np.int64) & 1).astype(bool)
    return np.asarray(x).astype(np.int64).astype(dst.dtype)  # numpy narrows by dropping the high bits


def _index_castui(x, src, dst):
    return np.asarray(_unsigned(x, src.bits)).astype(np.int64).astype(dst.dtype)


def _bitcast(x, src, dst):
    array = np.ascontiguousarray(np.asarray(x).astype(src.dtype))
    return array.view(dst.dtype)


handler("arith.extf", "arith.truncf")(_cast(_float_cast))
handler("arith.sitofp")(_cast(_sitofp))
handler("arith.uitofp")(_cast(_uitofp))
handler("arith.fptosi")(_cast(_fptosi))
handler("arith.fptoui")(_cast(_fptoui))
handler("arith.extsi", "arith.index_cast")(_cast(_extsi))
handler("arith.extui")(_cast(_extui))
handler("arith.trunci")(_cast(_trunci))
handler("arith.index_castui")(_cast(_index_castui))
handler("arith.bitcast")(_cast(_bitcast))
