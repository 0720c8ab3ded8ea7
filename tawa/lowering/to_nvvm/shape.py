"""Lowering of tile construction and shape ops: splat, arange, expand_dims, broadcast, trans; layout conversion.

With linear layouts (tawa.lowering.layouts) `expand_dims` and `trans` only relabel coordinates, and `broadcast`
picks, for each result register, the source register with the same coordinates once the stretched dimensions
are zeroed: no data moves when the source has the collapsed form of the result's layout (what assign-layouts
arranges, e.g. a bias vector in the column slice of the accumulator layout). Otherwise the source is converted
first, through shared memory.
"""
from __future__ import annotations

from tawa.ir.ops import BroadcastOp, ExpandDimsOp, SplatOp, TransOp
from tawa.errors import CompilationError, InternalCompilerError

from .. import layouts as L
from ..assign_layouts import SMEM_TILE_MESSAGE, SMEM_TILE_NOTE
from . import sync
from .builder import V, is_float
from tawa.ir import attrs
from tawa.ir.location import source_location
from tawa.ir.types import elem_bytes, elem_type, tile_shape

from .context import Ctx, SmemTile, Tile


def register_tile(value, op) -> Tile:
    """`value` as a register tile for `op`, which computes on it; a tile that lives in shared memory (a dot
    operand loaded by TMA or delivered by an aref) is refused with a located error."""
    if isinstance(value, Tile):
        return value
    if isinstance(value, SmemTile):
        raise CompilationError(SMEM_TILE_MESSAGE.format(op=op.name), source_location(op), note=SMEM_TILE_NOTE)
    raise InternalCompilerError(f"expected a register tile, got {type(value).__name__}", op=op.name,
                                location=source_location(op))


def layout_of(op, index: int = 0) -> L.Layout:
    attr = op.attributes[attrs.LAYOUT.name]
    if hasattr(attr, "value"):
        return L.parse(attr.value)
    return L.parse(attr[index].value)


def as_tile(ctx: Ctx, value, layout: L.Layout, elem: str, op=None) -> Tile:
    """A scalar used where a tile is expected is splatted. `op`: the op using the value, for errors."""
    if isinstance(value, Tile):
        return convert(ctx, value, layout)
    if isinstance(value, SmemTile):
        if op is not None:
            register_tile(value, op)
        raise InternalCompilerError("a shared-memory tile reached register code")
    return Tile([value] * len(layout.regs), layout, elem)


def convert(ctx: Ctx, tile: Tile, layout: L.Layout) -> Tile:
    """Redistribute a register tile to another layout through shared memory (a barrier on each side)."""
    if not isinstance(tile, Tile):   # callers pass register tiles (`register_tile` refuses the others)
        raise InternalCompilerError(f"a layout conversion of a {type(tile).__name__}, not a register tile")
    if tile.layout.same_mapping(layout):
        return tile if tile.layout.desc == layout.desc else Tile(tile.regs, layout, tile.elem)
    if tile.shape != layout.shape:
        raise InternalCompilerError(f"no conversion from layout {tile.layout} to {layout}")
    if len({r.name for r in tile.regs}) == 1:
        # A splat is the same value in every register of every thread: nothing to move.
        return Tile([tile.regs[0]] * len(layout.regs), layout, tile.elem)
    b = ctx.b
    es = elem_bytes(tile.elem)
    total = 1
    for s in tile.shape:
        total *= s
    ctx.smem.push()
    off = ctx.smem.alloc(total * es, align=16)
    ctx.smem.pop()

    def flat(lay, r):
        coords = ctx.coords(lay, r)
        idx = coords[0]
        for d in range(1, lay.rank):
            idx = b.add(b.mul(idx, lay.shape[d]), coords[d])
        return ctx.smem_ptr(b.add(b.mul(idx, es), off))

    ctx.sync_threads()
    for r, v in enumerate(tile.regs):
        b.line(f"llvm.store {v}, {flat(tile.layout, r)} : {tile.elem}, !llvm.ptr<3>")
    ctx.sync_threads()
    regs = [b.op(f"llvm.load {flat(layout, r)} : !llvm.ptr<3> -> {tile.elem}", tile.elem)
            for r in range(len(layout.regs))]
    ctx.sync_threads()
    return Tile(regs, layout, tile.elem)


def lower_splat(ctx: Ctx, op) -> None:
    layout = layout_of(op)
    value = ctx.get(SplatOp(op).value)
    ctx.set(op.results[0], Tile([value] * len(layout.regs), layout, elem_type(op.results[0].type)))


def lower_arange(ctx: Ctx, op) -> None:
    layout = layout_of(op)
    start = op.attributes["start"].value
    b = ctx.b
    regs = [b.add(ctx.coords(layout, r)[0], start) for r in range(len(layout.regs))]
    ctx.set(op.results[0], Tile(regs, layout, "i32"))


def lower_expand_dims(ctx: Ctx, op) -> None:
    src = register_tile(ctx.get(ExpandDimsOp(op).src), op)
    lay = L.expand(src.layout, op.attributes["axis"].value)
    out = Tile(src.regs, lay, src.elem)
    want = layout_of(op)
    ctx.set(op.results[0], convert(ctx, out, want))


def lower_broadcast(ctx: Ctx, op) -> None:
    src = register_tile(ctx.get(BroadcastOp(op).src), op)
    layout = layout_of(op)
    src_shape = tile_shape(BroadcastOp(op).src.type)
    need = L.collapse(layout, src_shape)
    src = convert(ctx, src, need)
    index = {c: i for i, c in enumerate(src.layout.regs)}
    regs = []
    for c in layout.regs:
        key = tuple(0 if src_shape[d] == 1 else c[d] for d in range(len(c)))
        regs.append(src.regs[index[key]])
    ctx.set(op.results[0], Tile(regs, layout, src.elem))


def lower_trans(ctx: Ctx, op) -> None:
    src = ctx.get(TransOp(op).src)
    if isinstance(src, SmemTile):
        ctx.set(op.results[0], SmemTile(src.offset, src.rows, src.cols, src.elem, not src.transposed))
        return
    out = Tile(src.regs, L.transpose(src.layout), src.elem)
    ctx.set(op.results[0], convert(ctx, out, layout_of(op)))
