"""IR construction with the language's typing rules: constants, splats, numpy-style broadcasting, casts,
elementwise arithmetic and comparisons on scalars and tiles.

Takes values as described in `tawa.frontend.values` and emits upstream arith/math ops plus `tawa.splat`,
`tawa.expand_dims` and `tawa.broadcast` at the current insertion point. Compile-time operands fold in Python.
Every rule violation raises a `CompilationError` at the node given.
"""
from __future__ import annotations

import math as pymath

from mlir import ir
from mlir.dialects import arith, math

from .dtypes import DTYPES, DType, dtype_of
from .values import (describe, dtype_of_value, elem_type, is_scalar, is_static, is_tile, is_value, shape_of)

I32 = DTYPES["i32"]
F32 = DTYPES["f32"]
BOOL = DTYPES["bool"]

_CMPF = {"<": "olt", "<=": "ole", ">": "ogt", ">=": "oge", "==": "oeq", "!=": "une"}
_CMPI = {"<": "slt", "<=": "sle", ">": "sgt", ">=": "sge", "==": "eq", "!=": "ne"}


def tawa_op(name: str, results: list, operands: list, attributes: dict | None = None) -> ir.Operation:
    return ir.Operation.create(f"tawa.{name}", results=results, operands=operands, attributes=attributes or {})


def i32_attr(n: int) -> ir.IntegerAttr:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(32), n)


def tile_type(shape, dtype: DType) -> ir.RankedTensorType:
    return ir.RankedTensorType.get(list(shape), dtype.mlir())


# The largest tile the frontend accepts: beyond this, later passes (register allocation, unrolled GPU code, the
# interpreter's arrays) take unbounded time or memory instead of failing. Every example and test is far below.
MAX_TILE_DIM = 2**16
MAX_TILE_ELEMENTS = 2**20


def check_tile_size(diag, dims, node, what) -> None:
    for d in dims:
        if d > MAX_TILE_DIM:
            raise diag.error(node, f"{what}: tile dimension {d} is too large (at most {MAX_TILE_DIM})")
    n = 1
    for d in dims:
        n *= d
    if n > MAX_TILE_ELEMENTS:
        raise diag.error(node, f"{what}: a tile of {n} elements ({'x'.join(map(str, dims))}) is too large "
                         f"(at most {MAX_TILE_ELEMENTS} elements per tile)")


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


class Emitter:
    def __init__(self, diag, const_anchor: ir.Operation | None = None):
        """`const_anchor`: an op at the start of the function's entry block; scalar constants are created once,
        before it, so they dominate every use and the IR stays readable."""
        self.diag = diag
        self.const_anchor = const_anchor
        self.const_cache: dict = {}

    def fail(self, node, msg, note=None):
        raise self.diag.error(node, msg, note)

    # ---- constants and scalars -----------------------------------------------------------------------------
    def constant(self, value, dtype: DType) -> ir.Value:
        if self.const_anchor is None:
            return self._make_constant(value, dtype)
        key = (dtype.name, repr(float(value)) if dtype.is_float else int(value))
        if key not in self.const_cache:
            with ir.InsertionPoint(self.const_anchor), ir.Location.unknown():
                self.const_cache[key] = self._make_constant(value, dtype)
        return self.const_cache[key]

    def _make_constant(self, value, dtype: DType) -> ir.Value:
        t = dtype.mlir()
        if dtype.is_float:
            return arith.ConstantOp(t, ir.FloatAttr.get(t, float(value))).result
        if dtype.name == "bool":
            return arith.ConstantOp(t, ir.IntegerAttr.get(t, 1 if value else 0)).result
        v = int(value)
        if not -2**31 <= v < 2**31:
            raise OverflowError(v)
        return arith.ConstantOp(t, ir.IntegerAttr.get(t, v)).result

    def materialize(self, v, node, like: ir.Type | None = None) -> ir.Value:
        """A run-time value for `v`: compile-time numbers become constants (of `like`'s element type if given)."""
        if is_value(v):
            return v
        if not is_static(v):
            self.fail(node, f"expected a number or a tile, got {describe(v)}")
        if like is not None:
            dt = dtype_of(like.element_type if isinstance(like, ir.RankedTensorType) else like)
            if isinstance(v, float) and not dt.is_float:
                self.fail(node, f"float constant {v} where a {dt} value is expected")
            c = self.checked_constant(v, dt, node)
            return self.splat(c, shape_of_type(like)) if isinstance(like, ir.RankedTensorType) else c
        if isinstance(v, bool):
            return self.constant(v, BOOL)
        if isinstance(v, int):
            return self.checked_constant(v, I32, node)
        return self.constant(v, F32)

    def checked_constant(self, v, dtype: DType, node) -> ir.Value:
        try:
            return self.constant(v, dtype)
        except OverflowError:
            self.fail(node, f"integer constant {v} does not fit in i32")

    def index(self, v, node, what: str) -> ir.Value | int:
        """An integer operand (compile-time int or i32 scalar)."""
        if isinstance(v, bool) or not (isinstance(v, int) or (is_scalar(v) and dtype_of_value(v) == I32)):
            self.fail(node, f"{what} must be an integer, got {describe(v)}")
        return v

    # ---- shapes ----------------------------------------------------------------------------------------------
    def splat(self, scalar: ir.Value, shape) -> ir.Value:
        return tawa_op("splat", [ir.RankedTensorType.get(list(shape), scalar.type)], [scalar]).result

    def expand_dims(self, v, axis: int) -> ir.Value:
        shape = shape_of(v)
        shape.insert(axis, 1)
        t = ir.RankedTensorType.get(shape, elem_type(v))
        return tawa_op("expand_dims", [t], [v], {"axis": i32_attr(axis)}).result

    def broadcast_to(self, v, shape, node) -> ir.Value:
        src = shape_of(v)
        if len(src) > len(shape):
            self.fail(node, f"cannot broadcast {describe(v)} to shape {list(shape)}")
        while len(src) < len(shape):
            v = self.expand_dims(v, 0)
            src = shape_of(v)
        if src == list(shape):
            return v
        for s, d in zip(src, shape):
            if s != d and s != 1:
                self.fail(node, f"cannot broadcast {describe(v)} to shape {list(shape)}")
        t = ir.RankedTensorType.get(list(shape), elem_type(v))
        return tawa_op("broadcast", [t], [v]).result

    def broadcast_shape(self, shapes, node, values) -> list:
        rank = max(len(s) for s in shapes)
        out = []
        for i in range(rank):
            dims = {s[i - rank + len(s)] for s in shapes if i - rank + len(s) >= 0} - {1}
            if len(dims) > 1:
                self.fail(node, "shapes cannot broadcast: " + " vs ".join(describe(v) for v in values))
            out.append(dims.pop() if dims else 1)
        check_tile_size(self.diag, out, node, "broadcast")
        return out

    # ---- casts -----------------------------------------------------------------------------------------------
    def cast(self, v, dtype: DType, node) -> ir.Value:
        """`v.to(dtype)`: float<->float, int<->float, bool<->int/float."""
        if is_static(v):
            if isinstance(v, float) and not dtype.is_float:
                if dtype.name == "bool":
                    return self.constant(v != 0.0, dtype)
                if v != v or v in (float("inf"), float("-inf")):
                    raise self.diag.error(node, f"{v} has no {dtype.name} value",
                                         note="convert a finite number, or build the value with where()")
                v = int(v)
            return self.checked_constant(v, dtype, node)
        src = dtype_of_value(v)
        if src == dtype:
            return v
        tile = is_tile(v)
        target = tile_type(shape_of(v), dtype) if tile else dtype.mlir()
        if src.is_float and dtype.is_float:
            if src.bits == dtype.bits:       # bf16 <-> f16: through f32
                return self.cast(self.cast(v, F32, node), dtype, node)
            op = arith.ExtFOp if dtype.bits > src.bits else arith.TruncFOp
            return op(target, v).result
        if dtype.is_float:                     # i32/bool -> float
            op = arith.UIToFPOp if src == BOOL else arith.SIToFPOp
            return op(target, v).result
        if dtype == BOOL:                      # x != 0
            zero = self.like_constant(0, v)
            return self.compare("!=", v, zero, node)
        if src == BOOL:                        # bool -> i32
            return arith.ExtUIOp(target, v).result
        return arith.FPToSIOp(target, v).result   # float -> i32

    def like_constant(self, value, v) -> ir.Value:
        c = self.constant(value, dtype_of_value(v))
        return self.splat(c, shape_of(v)) if is_tile(v) else c

    # ---- operand unification -------------------------------------------------------------------------------
    def unify(self, operands: list, node, what: str) -> list:
        """Bring run-time/compile-time operands to one dtype and (for tiles) one broadcast shape."""
        tiles = [v for v in operands if is_tile(v)]
        scalars = [v for v in operands if is_scalar(v)]
        for v in operands:
            if not (is_static(v) or is_value(v)):
                self.fail(node, f"{what}: expected a number or a tile, got {describe(v)}")
        if tiles:
            dts = {dtype_of_value(t) for t in tiles}
            if len(dts) > 1:
                self.fail(node, f"{what}: dtype mismatch: " + " vs ".join(describe(t) for t in tiles),
                          note="convert one operand explicitly with .to(dtype)")
            dt = dts.pop()
        elif scalars:
            dts = {dtype_of_value(s) for s in scalars}
            if len(dts) == 1:
                dt = dts.pop()
            elif BOOL in dts and len(dts - {BOOL}) >= 1:
                self.fail(node, f"{what}: cannot mix bool and numbers: "
                          + " vs ".join(describe(s) for s in scalars))
            else:
                dt = F32 if any(d.is_float for d in dts) else I32
        else:
            return operands
        if any(isinstance(v, float) and not isinstance(v, bool) for v in operands) and not dt.is_float:
            if tiles or dt == BOOL:
                self.fail(node, f"{what}: float constant with a {dt} operand; convert with .to(f32) first")
            dt = F32
        out = []
        for v in operands:
            if is_static(v):
                if isinstance(v, bool) != (dt == BOOL):
                    self.fail(node, f"{what}: cannot mix bool and numbers")
                out.append(self.checked_constant(v, dt, node))
            elif is_scalar(v) and dtype_of_value(v) != dt:
                sd = dtype_of_value(v)
                if (sd == BOOL) != (dt == BOOL) or (sd.is_float and not dt.is_float):
                    self.fail(node, f"{what}: dtype mismatch: {describe(v)} with {dt} operands",
                              note="convert explicitly with .to(dtype)")
                out.append(self.cast(v, dt, node))
            else:
                out.append(v)
        if tiles:
            shape = self.broadcast_shape([shape_of(t) for t in tiles], node, tiles)
            out = [self.broadcast_to(v, shape, node) if is_tile(v) else self.splat(v, shape) for v in out]
        return out

    # ---- arithmetic ----------------------------------------------------------------------------------------
    def binary(self, op: str, a, b, node):
        if is_static(a) and is_static(b):
            return self._fold(op, a, b, node)
        if op in ("and", "or"):
            return self.logical(op, a, b, node)
        if op == "/":
            # true division: integers become f32 first
            a, b = [self.cast(v, F32, node) if is_value(v) and not dtype_of_value(v).is_float else v
                    for v in (a, b)]
            if is_static(a) and not isinstance(a, float):
                a = float(a)
            if is_static(b) and not isinstance(b, float):
                b = float(b)
        x, y = self.unify([a, b], node, f"'{op}'")
        dt = dtype_of_value(x)
        if op in _CMPF:
            return self.compare(op, x, y, node)
        if op in ("&", "|"):
            if dt.is_float:
                self.fail(node, f"'{op}' needs bool or integer operands, got {describe(x)}")
            return (arith.AndIOp if op == "&" else arith.OrIOp)(x, y).result
        if dt == BOOL:
            self.fail(node, f"'{op}' on bool operands; convert with .to(i32) first")
        if dt.is_float:
            table = {"+": arith.AddFOp, "-": arith.SubFOp, "*": arith.MulFOp, "/": arith.DivFOp,
                     "%": arith.RemFOp, "max": arith.MaximumFOp, "min": arith.MinimumFOp}
            if op == "//":
                self.fail(node, "'//' needs integer operands; use '/' for floats")
        else:
            table = {"+": arith.AddIOp, "-": arith.SubIOp, "*": arith.MulIOp, "//": arith.DivSIOp,
                     "%": arith.RemSIOp, "max": arith.MaxSIOp, "min": arith.MinSIOp}
            if op in ("//", "%") and is_static(b) and b == 0:
                # (a GPU divides by zero silently: an integer division's result is then undefined)
                self.fail(node, f"integer '{op}' by zero")
        return table[op](x, y).result

    def compare(self, op: str, x, y, node) -> ir.Value:
        if dtype_of_value(x).is_float:
            pred = getattr(arith.CmpFPredicate, _CMPF[op].upper())
            return arith.CmpFOp(pred, x, y).result
        pred = getattr(arith.CmpIPredicate, _CMPI[op])
        return arith.CmpIOp(pred, x, y).result

    def logical(self, op: str, a, b, node):
        # A compile-time operand decides `and`/`or` on its own where it can.
        for s, other in ((a, b), (b, a)):
            if is_static(s):
                if op == "and":
                    return self.truth(other, node) if s else False
                return True if s else self.truth(other, node)
        x, y = self.unify([self.truth(a, node), self.truth(b, node)], node, f"'{op}'")
        return (arith.AndIOp if op == "and" else arith.OrIOp)(x, y).result

    def truth(self, v, node):
        """A bool (i1) scalar or tile for a condition."""
        if is_static(v):
            return bool(v)
        if not is_value(v):
            self.fail(node, f"expected a condition, got {describe(v)}")
        if dtype_of_value(v) == BOOL:
            return v
        return self.cast(v, BOOL, node)

    def negate(self, v, node):
        if is_static(v):
            if isinstance(v, bool):
                self.fail(node, "unary '-' on a bool")
            return -v
        if not is_value(v):
            self.fail(node, f"unary '-' on {describe(v)}")
        dt = dtype_of_value(v)
        if dt == BOOL:
            self.fail(node, "unary '-' on a bool; use 'not'")
        if dt.is_float:
            return arith.NegFOp(v).result
        return arith.SubIOp(self.like_constant(0, v), v).result

    def logical_not(self, v, node):
        t = self.truth(v, node)
        if isinstance(t, bool):
            return not t
        return arith.XOrIOp(t, self.like_constant(1, t)).result

    def _fold(self, op, a, b, node):
        try:
            if op == "+": return a + b
            if op == "-": return a - b
            if op == "*": return a * b
            if op == "/": return a / b
            if op == "//":
                if isinstance(a, float) or isinstance(b, float):
                    self.fail(node, "'//' needs integer operands; use '/' for floats")
                return _trunc_div(a, b)
            if op == "%":
                if isinstance(a, float) or isinstance(b, float):
                    return pymath.fmod(a, b)
                return a - b * _trunc_div(a, b)
            if op == "&": return a & b
            if op == "|": return a | b
            if op == "and": return bool(a) and bool(b)
            if op == "or": return bool(a) or bool(b)
            if op == "max": return max(a, b)
            if op == "min": return min(a, b)
            return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}[op]
        except ZeroDivisionError:
            self.fail(node, "division by zero in a constant expression")
        except TypeError:
            self.fail(node, f"'{op}' cannot combine {describe(a)} and {describe(b)}")

    # ---- math ------------------------------------------------------------------------------------------------
    def unary_math(self, name: str, v, node):
        if is_static(v):
            v = float(v)
            table = {"exp": pymath.exp, "exp2": lambda x: 2.0 ** x, "log": pymath.log, "sqrt": pymath.sqrt,
                     "rsqrt": lambda x: 1.0 / pymath.sqrt(x), "abs": abs,
                     "sigmoid": lambda x: 1.0 / (1.0 + pymath.exp(-x)),
                     "silu": lambda x: x / (1.0 + pymath.exp(-x)), "tanh": pymath.tanh}
            try:
                return table[name](v)
            except (ValueError, OverflowError, ZeroDivisionError):
                self.fail(node, f"{name}({v}) is undefined")
        if not is_value(v):
            self.fail(node, f"{name}: expected a number or a tile, got {describe(v)}")
        dt = dtype_of_value(v)
        if name == "abs" and not dt.is_float:
            if dt == BOOL:
                self.fail(node, "abs of a bool")
            return math.AbsIOp(v).result
        if not dt.is_float:
            self.fail(node, f"{name} needs a float operand, got {describe(v)}", note="convert with .to(f32)")
        if name == "sigmoid":
            one = self.like_constant(1.0, v)
            return arith.DivFOp(one, arith.AddFOp(one, math.ExpOp(arith.NegFOp(v).result).result).result).result
        if name == "silu":
            return arith.MulFOp(v, self.unary_math("sigmoid", v, node)).result
        op = {"exp": math.ExpOp, "exp2": math.Exp2Op, "log": math.LogOp, "sqrt": math.SqrtOp,
              "rsqrt": math.RsqrtOp, "abs": math.AbsFOp, "tanh": math.TanhOp}[name]
        return op(v).result

    def select(self, cond, a, b, node):
        if not (is_value(cond) or is_static(cond)):
            self.fail(node, f"where: condition must be a bool tile or scalar, got {describe(cond)}")
        if is_value(cond) and dtype_of_value(cond) != BOOL:
            self.fail(node, f"where: condition must be bool, got {describe(cond)}")
        if is_static(cond) and not is_tile(a) and not is_tile(b):
            return a if cond else b
        x, y = self.unify([a, b], node, "where")
        if is_static(x) and is_static(y):     # two compile-time branches: constants of their common dtype
            x, y = self._static_pair(x, y, node, "where")
        c = self.materialize(cond, node) if is_static(cond) else cond
        if is_tile(c) or is_tile(x):
            shapes = [shape_of(v) for v in (c, x) if is_tile(v)]
            shape = self.broadcast_shape(shapes, node, [v for v in (c, x) if is_tile(v)])
            c = self.broadcast_to(c, shape, node) if is_tile(c) else self.splat(c, shape)
            x = self.broadcast_to(x, shape, node) if is_tile(x) else self.splat(x, shape)
            y = self.broadcast_to(y, shape, node) if is_tile(y) else self.splat(y, shape)
        return arith.SelectOp(c, x, y).result

    def _static_pair(self, a, b, node, what: str) -> list:
        """Two compile-time numbers as run-time constants of one dtype: bool if both are bool, f32 if either
        is a float, else i32."""
        if isinstance(a, bool) != isinstance(b, bool):
            self.fail(node, f"{what}: cannot mix bool and numbers")
        if isinstance(a, bool):
            dt = BOOL
        elif isinstance(a, float) or isinstance(b, float):
            dt = F32
        else:
            dt = I32
        return [self.checked_constant(v, dt, node) for v in (a, b)]


def shape_of_type(t: ir.RankedTensorType) -> list:
    return list(t.shape)
