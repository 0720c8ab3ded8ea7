"""The builtin functions of the language and the methods of tiles (`x.to`, `x.T`, `x.shape`).

Each builtin takes the lowerer, the `Call` node, evaluated positional arguments and a dict of evaluated keyword
arguments, checks them, and emits IR through the lowerer's `Emitter`. The table `BUILTINS` maps the names a
kernel sees to these functions.
"""
from __future__ import annotations

from mlir import ir

from tawa.ir.ops import NO_LIMIT

from . import syntax as S
from .dtypes import DTYPES, DType
from .ops import BOOL, F32, I32, check_tile_size, i32_attr, tawa_op, tile_type
from .values import (Builtin, Method, TensorArg, describe, dtype_of_value, elem_type, is_scalar, is_tile_extent,
                     is_static, is_tile, is_value, shape_of)


def bind(L, call, args, kwargs, names: list, required: int) -> list:
    """Match arguments to parameter `names` (the first `required` are mandatory); None for missing ones."""
    fname = call.func.id if isinstance(call.func, S.Name) else getattr(call.func, "attr", "function")
    if len(args) > len(names):
        raise L.diag.error(call, f"{fname}() takes {_count(names, required)}, got {len(args) + len(kwargs)}")
    out = list(args) + [None] * (len(names) - len(args))
    given = [True] * len(args) + [False] * (len(names) - len(args))
    for k, v in kwargs.items():
        if k not in names:
            raise L.diag.error(call, f"{fname}() got an unexpected keyword argument '{k}'")
        i = names.index(k)
        if given[i]:
            raise L.diag.error(call, f"{fname}() got multiple values for argument '{k}'")
        out[i], given[i] = v, True
    if not all(given[:required]):
        raise L.diag.error(call, f"{fname}() takes {_count(names, required)}, got {len(args) + len(kwargs)}")
    return out


def _count(names, required) -> str:
    if required == len(names):
        return f"{required} argument{'s' if required != 1 else ''}"
    return f"{required} to {len(names)} arguments"


def _arg_node(call, i):
    return call.args[i] if i < len(call.args) else call


def _static_int(L, v, node, what) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise L.diag.error(node, f"{what} must be a compile-time integer, got {describe(v)}")
    return v


def _round_up_note(d: int, what: str) -> str | None:
    """The tile sizes next above `d` (the next multiple of 16 and the next power of two), and how a tensor dim of
    `d` is read in them; None where they pass the largest tile dim."""
    from .ops import MAX_TILE_DIM
    if d <= 0:
        return None
    power = 1 << (d - 1).bit_length()
    sixteens = next(e for e in range(d + 1, d + 17) if is_tile_extent(e))
    if power > MAX_TILE_DIM:
        return None
    sizes = f"{sixteens} or {power}" if sixteens != power else f"{power}"
    if not what.startswith("load"):
        return f"the next tile sizes are {sizes} (a register tile outside a dot takes a power of two)"
    return (f"read a tensor dim of {d} in tiles of {sizes}, declared as a shape symbol (X: bf16[S, D]): elements "
            f"past a tensor's extent read as 0 and are not stored, which a dot's sums take as they are (attention "
            f"at a head dim of 40 or 72); before a max, sum or exp, mask them with where(), and outside a dot a "
            f"register tile takes the power of two")


def _tile_shape(L, v, node, what) -> list:
    dims = list(v) if isinstance(v, tuple) else [v]
    if not dims:
        raise L.diag.error(node, f"{what}: a tile needs at least one dimension")
    for d in dims:
        _static_int(L, d, node, f"{what}: tile dimension")
        if not is_tile_extent(d):
            raise L.diag.error(node, f"{what}: tile dimension {d} is not a power of two or a multiple of 16",
                               note=_round_up_note(d, what))
    check_tile_size(L.diag, dims, node, what)
    return dims


def _dtype(L, v, node, what) -> DType:
    if not isinstance(v, DType):
        raise L.diag.error(node, f"{what}: expected a dtype ({', '.join(DTYPES)}), got {describe(v)}")
    return v


def _tile(L, v, node, what) -> ir.Value:
    if not is_tile(v):
        raise L.diag.error(node, f"{what}: expected a tile, got {describe(v)}")
    return v


def _axis(L, v, rank, node, what) -> int:
    a = _static_int(L, v, node, f"{what}: axis")
    if not -rank <= a < rank:
        raise L.diag.error(node, f"{what}: axis {a} is out of range for a {rank}-D tile")
    return a % rank


# ---- program geometry -------------------------------------------------------------------------------------
def _program_query(op):
    def fn(L, call, args, kwargs):
        (axis,) = bind(L, call, args, kwargs, ["axis"], 1)
        a = _static_int(L, axis, _arg_node(call, 0), f"{op}: axis")
        if a not in (0, 1, 2):
            raise L.diag.error(_arg_node(call, 0), f"{op}: axis must be 0, 1 or 2, got {a}")
        return tawa_op(op, [I32.mlir()], [], {"axis": i32_attr(a)}).result
    return fn


# ---- scalar helpers ---------------------------------------------------------------------------------------
def _cdiv(L, call, args, kwargs):
    a, b = bind(L, call, args, kwargs, ["a", "b"], 2)
    for i, v in enumerate((a, b)):
        if not (is_static(v) and isinstance(v, int) and not isinstance(v, bool)) and not (
                is_value(v) and dtype_of_value(v) == I32):
            raise L.diag.error(_arg_node(call, i), f"cdiv: expected integers, got {describe(v)}")
    if is_static(a) and is_static(b):
        if b == 0:
            raise L.diag.error(call, "cdiv: division by zero")
        return -(-a // b)
    e = L.emit
    return e.binary("//", e.binary("-", e.binary("+", a, b, call), 1, call), b, call)


def _min_max(kind):
    def fn(L, call, args, kwargs):
        # With a tile first, min/max reduce (`max(x, axis)`); elementwise is `maximum(a, b)`.
        if (args and is_tile(args[0])) or "axis" in kwargs or "x" in kwargs:
            axis = args[1] if len(args) > 1 else kwargs.get("axis")
            if axis is not None and not isinstance(axis, int):     # (a bool: _static_int says so)
                # `max(m_i, max(s, axis=1))`, meant as Python's max of two values: the running maximum
                raise L.diag.error(call, f"{kind}(x, axis) reduces a tile over an axis, and its second argument is "
                                   f"{describe(axis)}, not a compile-time integer",
                                   note=f"for the elementwise {kind}imum of two values use {kind}imum(a, b)")
            return _reduce(kind, L, call, args, kwargs)
        a, b = bind(L, call, args, kwargs, ["a", "b"], 2)
        return L.emit.binary(kind, a, b, call)
    return fn


def _elementwise_min_max(kind):
    def fn(L, call, args, kwargs):
        a, b = bind(L, call, args, kwargs, ["a", "b"], 2)
        return L.emit.binary(kind, a, b, call)
    return fn


def _reduce(kind, L, call, args, kwargs):
    name = {"max": "max", "min": "min", "sum": "sum"}[kind]
    x, axis = bind(L, call, args, kwargs, ["x", "axis"], 1)
    x = _tile(L, x, _arg_node(call, 0), name)
    shape = shape_of(x)
    if axis is None:
        if len(shape) != 1:
            raise L.diag.error(call, f"{name}: give the axis to reduce over a {len(shape)}-D tile")
        axis = 0
    a = _axis(L, axis, len(shape), call, name)
    if dtype_of_value(x) == BOOL:
        raise L.diag.error(call, f"{name}: cannot reduce a bool tile; convert with .to(i32)")
    rest = shape[:a] + shape[a + 1:]
    rtype = ir.RankedTensorType.get(rest, elem_type(x)) if rest else elem_type(x)
    return tawa_op("reduce", [rtype], [x], {"axis": i32_attr(a), "kind": ir.StringAttr.get(kind)}).result


def _sum(L, call, args, kwargs):
    return _reduce("sum", L, call, args, kwargs)


# ---- memory -----------------------------------------------------------------------------------------------
def _address(L, call, t, coords, shape_or_none, what, load=False):
    """The element offsets of block `coords` of `t`: its leading indices, then each block coordinate times its
    extent, counted from the view's origin where `t` is a view (`Q[h, start:]`). For a `load` through a view that
    ends, a block of extent 1 past the end is read at offset -1, outside the tensor, which reads 0: no mask, so
    that `sum(load(X[s:e], i, 1))` stays a scalar read (`scalar-loads`)."""
    if not isinstance(t, TensorArg):
        raise L.diag.error(_arg_node(call, 0), f"{what}: first argument must be a tensor parameter, got "
                           f"{describe(t)}")
    block_rank = t.rank - len(t.indices)
    cs = _coords(coords)
    if len(cs) != block_rank:
        sel = f" ({len(t.indices)} selected by index)" if t.indices else ""
        raise L.diag.error(_arg_node(call, 1), f"{what}: tensor {t.name} has {t.rank} dims{sel}; expected "
                           f"{block_rank} block coordinates, got {len(cs)}")
    offsets = list(t.indices)
    origins = t.origins or [None] * block_rank
    ends = t.ends or [None] * block_rank
    for c, extent, origin, end in zip(cs, shape_or_none, origins, ends):
        L.emit.index(c, _arg_node(call, 1), f"{what}: block coordinate")
        off = L.emit.binary("*", c, extent, call)
        if origin is not None:
            off = L.emit.binary("+", origin, off, call)
        if load and extent == 1 and end is not None:
            off = L.emit.select(L.emit.binary("<", c, _view_length(L, call, origin, end), call), off, -1, call)
        offsets.append(L.emit.materialize(off, call))
    return offsets


def _view_mask(L, call, t, coords, dims):
    """Where a view ends before its tensor does (`K[h, start:end]`), the bool mask of a block's elements inside
    it: `c * s + arange(0, s) < end - start` along each bounded dim, the same affine comparison a program writes
    for its own masks, so that `mask-elision` and `masked-dots` drop it on blocks wholly inside the view. None for
    a view without ends."""
    if not t.ends_early:
        return None
    mask = None
    for axis, (c, s, origin, end) in enumerate(zip(_coords(coords), dims, t.origins, t.ends)):
        if end is None or s == 1:          # (a block of extent 1 past the end is read outside the tensor: `_address`)
            continue
        rows = tawa_op("arange", [tile_type([s], I32)], [], {"start": i32_attr(0), "end": i32_attr(s)}).result
        rows = L.emit.binary("+", L.emit.binary("*", c, s, call), rows, call)
        inside = L.emit.binary("<", rows, _view_length(L, call, origin, end), call)
        for other in range(len(dims)):
            if other != axis:
                inside = L.emit.expand_dims(inside, other)
        mask = inside if mask is None else L.emit.binary("&", mask, inside, call)
    return mask


def _coords(coords) -> list:
    """Block coordinates as a list (one scalar or a tuple of them)."""
    return list(coords) if isinstance(coords, tuple) else [coords]


def _view_length(L, call, origin, end):
    """The rows of a view from `origin` (None: 0) to `end`."""
    return end if origin is None else L.emit.binary("-", end, origin, call)


def _load(L, call, args, kwargs):
    t, coords, shape = bind(L, call, args, kwargs, ["tensor", "coords", "shape"], 3)
    dims = _tile_shape(L, shape, _arg_node(call, 2), "load")
    if isinstance(t, TensorArg) and len(dims) != t.rank - len(t.indices):
        raise L.diag.error(_arg_node(call, 2), f"load: block shape has {len(dims)} dims but tensor {t.name} "
                           f"needs {t.rank - len(t.indices)}")
    offsets = _address(L, call, t, coords, dims, "load", load=True)
    tile = tawa_op("load", [tile_type(dims, t.dtype)], [t.value] + offsets).result
    mask = _view_mask(L, call, t, coords, dims)
    # the elements past the view's end read as 0, as those past the tensor's end do
    return tile if mask is None else L.emit.select(mask, tile, 0, call)


def _store(L, call, args, kwargs):
    t, coords, value = bind(L, call, args, kwargs, ["tensor", "coords", "value"], 3)
    value = _tile(L, value, _arg_node(call, 2), "store")
    dims = shape_of(value)
    if isinstance(t, TensorArg):
        need = t.rank - len(t.indices)
        if len(dims) != need:
            raise L.diag.error(_arg_node(call, 2), f"store: tile {describe(value)} has {len(dims)} dims but "
                               f"tensor {t.name} needs {need}-D tiles")
        if dtype_of_value(value) != t.dtype:
            raise L.diag.error(_arg_node(call, 2), f"store: tile dtype {dtype_of_value(value)} does not match "
                               f"tensor {t.name} ({t.dtype})", note=f"convert with .to({t.dtype})")
    offsets = _address(L, call, t, coords, dims, "store")
    limits = []
    if t.ends_early:
        # the element index each dim must stay below: the view's end, or no limit
        limits = [L.emit.materialize(NO_LIMIT if e is None else e, call) for e in [None] * len(t.indices) + t.ends]
    tawa_op("store", [], [t.value, value] + offsets + limits)
    return None


# ---- tile creation ----------------------------------------------------------------------------------------
def _zeros(L, call, args, kwargs):
    shape, dtype = bind(L, call, args, kwargs, ["shape", "dtype"], 1)
    dims = _tile_shape(L, shape, _arg_node(call, 0), "zeros")
    dt = F32 if dtype is None else _dtype(L, dtype, _arg_node(call, 1), "zeros")
    return L.emit.splat(L.emit.constant(0, dt), dims)


def _full(L, call, args, kwargs):
    shape, value, dtype = bind(L, call, args, kwargs, ["shape", "value", "dtype"], 2)
    dims = _tile_shape(L, shape, _arg_node(call, 0), "full")
    if is_static(value):
        dt = (F32 if isinstance(value, float) else (BOOL if isinstance(value, bool) else I32)) \
            if dtype is None else _dtype(L, dtype, _arg_node(call, 2), "full")
        if isinstance(value, float) and not dt.is_float and dt != BOOL:
            raise L.diag.error(_arg_node(call, 1), f"full: float value {value} for a {dt} tile")
        return L.emit.splat(L.emit.checked_constant(value, dt, call), dims)
    if not is_scalar(value):
        raise L.diag.error(_arg_node(call, 1), f"full: value must be a scalar, got {describe(value)}")
    if dtype is not None:
        value = L.emit.cast(value, _dtype(L, dtype, _arg_node(call, 2), "full"), call)
    return L.emit.splat(value, dims)


def _arange(L, call, args, kwargs):
    start, end = bind(L, call, args, kwargs, ["start", "end"], 2)
    s = _static_int(L, start, _arg_node(call, 0), "arange: start")
    e = _static_int(L, end, _arg_node(call, 1), "arange: end")
    for i, (what, v) in enumerate((("start", s), ("end", e))):
        if not -2**31 <= v < 2**31:      # the op keeps both bounds as i32 attributes
            raise L.diag.error(_arg_node(call, i), f"arange: {what} {v} does not fit in i32")
    if not is_tile_extent(e - s):
        raise L.diag.error(call, f"arange: length {e - s} is not a power of two or a multiple of 16")
    check_tile_size(L.diag, [e - s], call, "arange")
    return tawa_op("arange", [tile_type([e - s], I32)], [],
                   {"start": i32_attr(s), "end": i32_attr(e)}).result


# ---- math ---------------------------------------------------------------------------------------------------
def _dot(L, call, args, kwargs):
    a, b, acc = bind(L, call, args, kwargs, ["a", "b", "acc"], 2)
    a = _tile(L, a, _arg_node(call, 0), "dot")
    b = _tile(L, b, _arg_node(call, 1), "dot")
    sa, sb = shape_of(a), shape_of(b)
    if len(sa) != 2 or len(sb) != 2:
        raise L.diag.error(call, f"dot: operands must be 2-D tiles, got {describe(a)} and {describe(b)}")
    da, db = dtype_of_value(a), dtype_of_value(b)
    if da != db:
        raise L.diag.error(call, f"dot: operand dtypes differ ({da} vs {db})",
                           note="convert one operand with .to(dtype)")
    if da.name not in ("f16", "bf16", "f8e4m3", "f8e5m2", "f32"):
        raise L.diag.error(call, f"dot: operands must be f16, bf16, f8e4m3, f8e5m2 or f32, got {da}")
    if sa[1] != sb[0]:
        raise L.diag.error(call, f"dot: inner dimensions differ ({sa[1]} vs {sb[0]})")
    out = [sa[0], sb[1]]
    check_tile_size(L.diag, out, call, "dot")
    if acc is None:
        acc = L.emit.splat(L.emit.constant(0.0, F32), out)
    else:
        acc = _tile(L, acc, _arg_node(call, 2), "dot: accumulator")
        if dtype_of_value(acc) != F32:
            raise L.diag.error(_arg_node(call, 2), f"dot: accumulator must be f32, got {describe(acc)}")
        if shape_of(acc) != out:
            raise L.diag.error(_arg_node(call, 2), f"dot: accumulator shape {shape_of(acc)} does not match "
                               f"the product shape {out}")
    return tawa_op("dot", [acc.type], [a, b, acc]).result


def _unary(name):
    def fn(L, call, args, kwargs):
        (x,) = bind(L, call, args, kwargs, ["x"], 1)
        return L.emit.unary_math(name, x, call)
    return fn


def _where(L, call, args, kwargs):
    c, a, b = bind(L, call, args, kwargs, ["cond", "x", "y"], 3)
    return L.emit.select(c, a, b, call)


def _trans(L, call, args, kwargs):
    (x,) = bind(L, call, args, kwargs, ["x"], 1)
    return transpose(L, x, call)


def transpose(L, x, node):
    x = _tile(L, x, node, "trans")
    s = shape_of(x)
    if len(s) != 2:
        raise L.diag.error(node, f"trans: expected a 2-D tile, got {describe(x)}")
    return tawa_op("trans", [ir.RankedTensorType.get([s[1], s[0]], elem_type(x))], [x]).result


def _range(L, call, args, kwargs):
    raise L.diag.error(call, "range() may only be used as the iterable of a for loop")


#: The elementwise math functions.
UNARY_MATH = ("exp", "exp2", "log", "sqrt", "rsqrt", "abs", "sigmoid", "silu", "tanh")

BUILTINS = {
    "program_id": _program_query("program_id"),
    "num_programs": _program_query("num_programs"),
    "cdiv": _cdiv,
    "min": _min_max("min"),
    "max": _min_max("max"),
    "sum": _sum,
    "maximum": _elementwise_min_max("max"),
    "minimum": _elementwise_min_max("min"),
    "load": _load,
    "store": _store,
    "zeros": _zeros,
    "full": _full,
    "arange": _arange,
    "dot": _dot,
    "where": _where,
    "trans": _trans,
    "range": _range,
    **{n: _unary(n) for n in UNARY_MATH},
}

BUILTIN_VALUES = {name: Builtin(name, fn) for name, fn in BUILTINS.items()}


# ---- methods of tiles -----------------------------------------------------------------------------------
def attribute(L, node, value, attr: str):
    """`value.attr`: `.T`, `.shape`, `.dtype` or a method (`.to`)."""
    if attr == "T":
        return transpose(L, value, node)
    if attr == "shape":
        if not is_tile(value):
            raise L.diag.error(node, f".shape of {describe(value)}")
        return tuple(shape_of(value))
    if attr == "dtype":
        if is_value(value):
            return dtype_of_value(value)
        if isinstance(value, TensorArg):
            return value.dtype
    if attr == "to" and (is_value(value) or is_static(value)):
        return Method("to", value)
    raise L.diag.error(node, f"{describe(value)} has no attribute '{attr}'")


def call_method(L, call, method: Method, args, kwargs):
    if method.name == "to":
        (dt,) = bind(L, call, args, kwargs, ["dtype"], 1)
        return L.emit.cast(method.target, _dtype(L, dt, _arg_node(call, 0), ".to"), call)
    raise L.diag.error(call, f"unknown method {method.name}")
