"""Tile values that repeat along rows or columns (splats of a scalar, broadcasts of a row or column) and math on
them at the rank they vary at: `exp-base2` multiplies a softmax's row maximum by log2(e) once per row and
`divide-by-row` takes one reciprocal per row, where computing on the broadcast tile would cost one instruction per
element."""
from __future__ import annotations

from typing import Callable

from mlir import ir
from mlir.dialects import arith

from tawa.ir.kernel_info import kernels
from tawa.ir.ops import BroadcastOp, ExpandDimsOp, SplatOp
from tawa.ir.traversal import defining_op, walk


def is_f32_tile(value) -> bool:
    t = value.type
    return isinstance(t, ir.RankedTensorType) and isinstance(t.element_type, ir.F32Type)


def repeats(value) -> bool:
    """Whether `value` is a splat, or a broadcast of a tile with fewer elements (one value per row or column)."""
    op = defining_op(value)
    return op is not None and op.name in (SplatOp.NAME, BroadcastOp.NAME)


def splat(scalar: ir.Value, t) -> ir.Value:
    return ir.Operation.create(SplatOp.NAME, results=[t], operands=[scalar]).result


def f32_like(value: ir.Value, c: float) -> ir.Value:
    """The f32 constant `c` as a scalar, or splatted to `value`'s tile type."""
    scalar = arith.ConstantOp(ir.F32Type.get(), c).result
    return scalar if isinstance(value.type, ir.F32Type) else splat(scalar, value.type)


def splatted_f32(value):
    """The f32 scalar that `value` splats, or None."""
    op = defining_op(value)
    if op is None or op.name != SplatOp.NAME:
        return None
    scalar = SplatOp(op).value
    return scalar if isinstance(scalar.type, ir.F32Type) else None


def map_at_source_rank(value: ir.Value, on_scalar: Callable, on_tile: Callable) -> ir.Value:
    """`f(value)` for an elementwise f, computed before `value`'s broadcasts and expand_dims: on the splatted scalar
    (`on_scalar(s)`, then splat) or on the smallest tile (`on_tile(t)`), then reshaped as `value` was. Builds at the
    current insertion point."""
    op = defining_op(value)
    if op is not None and op.name == SplatOp.NAME and splatted_f32(value) is not None:
        return splat(on_scalar(splatted_f32(value)), value.type)
    if op is not None and op.name in (BroadcastOp.NAME, ExpandDimsOp.NAME):
        src = map_at_source_rank(op.operands[0], on_scalar, on_tile)
        attributes = {op.attributes[i].name: op.attributes[i].attr for i in range(len(op.attributes))}
        return ir.Operation.create(op.name, results=[value.type], operands=[src], attributes=attributes).result
    return on_tile(value)


def erase_if_unused(value: ir.Value) -> None:
    """Erase the splat, broadcast, expand_dims or arith op defining `value` when nothing reads it any more, and
    then its operands' in turn: a rewrite that replaced a reader leaves no dead tiles for the layout pass to place
    (a dead broadcast would still get a layout, and may need one the backend refuses)."""
    op = defining_op(value)
    if op is None or list(value.uses) or op.regions or len(op.results) != 1 or \
            not (op.name in (SplatOp.NAME, BroadcastOp.NAME, ExpandDimsOp.NAME, "tawa.arange")
                 or op.name.startswith("arith.")):
        return
    operands = list(dict.fromkeys(op.operands))      # (an op may read one value twice: erase its source once)
    op.erase()
    for operand in operands:
        erase_if_unused(operand)


def replace_op(op, value: ir.Value, source: ir.Value) -> None:
    """Replace `op`'s one result by `value`, erase `op`, then `source` (what `op` read) where nothing else reads it."""
    op.results[0].replace_all_uses_with(value)
    op.erase()
    erase_if_unused(source)


def rewrite_each(module, name: str, rewrite: Callable) -> object:
    """`rewrite(op)` for every op called `name` in the module's kernels (each pass of this kind's `run`)."""
    with module.context:
        for func in kernels(module):
            for op in [o for o in walk(func) if o.name == name]:
                rewrite(op)
    return module
