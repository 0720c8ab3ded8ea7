"""Tiles carried through loops and branches: flattened to register lists and rebuilt from them.

A tile-valued loop argument or branch result becomes one SSA value per register of its layout (the layout the
loop or branch op records in `tawa.layouts`); scalars stay one value.
"""
from __future__ import annotations

from tawa.errors import InternalCompilerError
from tawa.ir import attrs
from tawa.ir.types import elem_type

from .. import layouts as L
from .context import Ctx, SmemTile, Tile


def iter_layouts(op) -> list:
    descs = attrs.LAYOUTS.get(op)
    if descs is None:
        return [None] * len(op.results)
    return [L.parse(d) if d else None for d in descs]


def flatten(ctx: Ctx, value, layout) -> list:
    if isinstance(value, SmemTile):
        raise InternalCompilerError("a shared-memory tile cannot be carried through a loop or branch")
    if layout is not None:
        from .shape import as_tile
        return as_tile(ctx, value, layout, value.elem if isinstance(value, Tile) else value.type).regs
    return [value]


def flat_types(ir_values, layouts) -> list:
    out = []
    for v, lay in zip(ir_values, layouts):
        t = v.type
        if lay is not None:
            out.extend([elem_type(t)] * len(lay.regs))
        else:
            out.append(str(t))
    return out


def unflatten(vals: list, ir_values, layouts) -> list:
    out, pos = [], 0
    for v, lay in zip(ir_values, layouts):
        if lay is not None:
            n = len(lay.regs)
            out.append(Tile(vals[pos:pos + n], lay, elem_type(v.type)))
            pos += n
        else:
            out.append(vals[pos])
            pos += 1
    return out
