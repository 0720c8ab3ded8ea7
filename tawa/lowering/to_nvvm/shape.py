"""Lowering of tile construction and shape ops: splat, arange, expand_dims, broadcast, trans; layout conversion.

With linear layouts (tawa.lowering.layouts) `expand_dims` and `trans` only relabel coordinates, and `broadcast`
picks, for each result register, the source register with the same coordinates once the stretched dimensions
are zeroed: no data moves when the source has the collapsed form of the result's layout (what assign-layouts
arranges, e.g. a bias vector in the column slice of the accumulator layout). Otherwise the source is converted
first, through shared memory.

A tile that lives in shared memory (`SmemTile`, as TMA wrote it) is read into registers where register code uses
it (`read_smem`, `smem_offset`: the swizzle TMA applied is undone per element): a warp-specialized consumer
computing on a tile an aref delivered, and a dot whose A operand wgmma must take from registers.
"""
from __future__ import annotations

from tawa.ir.ops import BroadcastOp, ExpandDimsOp, SplatOp, TransOp
from tawa.errors import InternalCompilerError

from .. import layouts as L
from .builder import V
from tawa.ir import attrs
from tawa.ir.location import source_location
from tawa.ir.types import elem_bytes, elem_type, tile_shape

from .context import Ctx, LazyTile, SmemTile, Tile, swizzled


def register_tile(value, op, ctx: Ctx | None = None) -> Tile:
    """`value` as a register tile for `op`, which computes on it. A tile that lives in shared memory (a dot
    operand an aref delivered to a warp-specialized consumer) is read into registers in the `blocked` layout,
    the one assign-layouts gave it for its non-dot users (`ctx` is needed for that)."""
    if isinstance(value, Tile):
        return value
    if isinstance(value, SmemTile) and ctx is not None:
        return read_smem(ctx, value, L.shared_read(value.shape, value.transposed, ctx.num_warps))
    if isinstance(value, SmemTile):
        raise InternalCompilerError("a shared-memory tile reached register code without a context", op=op.name,
                                    location=source_location(op))
    raise InternalCompilerError(f"expected a register tile, got {type(value).__name__}", op=op.name,
                                location=source_location(op))


def smem_offset(ctx: Ctx, t: SmemTile, row: V, col: V) -> V:
    """Byte offset (i32) in the shared segment of element (row, col) of the tile `t` as used (after its
    transpose, if any), where TMA wrote it: column box, then the row's swizzled bytes (`context.swizzled`)."""
    from ..assign_layouts import smem_swizzle
    b = ctx.b
    if t.transposed:
        row, col = col, row
    w = smem_swizzle(t.cols, t.elem)
    if w is None:    # check_dot_tile refused such a load before anything was emitted
        raise InternalCompilerError(f"a shared tile of {t.cols} {t.elem} columns has no swizzle mode")
    byte = b.mul(col, elem_bytes(t.elem))
    box = b.shr(byte, w.bit_length() - 1)
    if t.rows % 8:
        # TMA swizzles by address: the chunk mask comes from the offset's bits from 7 up, which count the lines of
        # the whole tile, not of one box. Where a box is not whole swizzle atoms of 8 rows (a [1, 64] i32 row of
        # segment ids delivered through a ring slot), the boxes before this one shift the mask.
        return b.add(swizzled(b, b.add(row, b.mul(box, t.rows)), byte, w), t.offset)
    return b.add(b.add(swizzled(b, row, byte, w), b.mul(box, t.rows * w)), t.offset)


def read_smem(ctx: Ctx, t: SmemTile, layout: L.Layout, sync_after: bool = True) -> Tile:
    """A shared tile read into registers in `layout` (one shared load per register). `sync_after`: a barrier over
    this context's threads follows, so that every thread has read the tile before any of them lets it be
    overwritten (a warp-specialized consumer releases the slot from one thread; a dot reading its A fragments
    needs none, since its wgmma is a warp-group-wide instruction issued after the reads)."""
    from .fp8 import from_storage, storage_type
    if tuple(layout.shape) != tuple(t.shape):
        raise InternalCompilerError(f"reading a {t.shape} shared tile in the layout {layout}")
    from .global_access import column_pairs
    b = ctx.b
    st = storage_type(t.elem)
    # A thread's two 16-bit elements at adjacent columns (an even one and the next: one 16-byte swizzle chunk
    # holds both) are one 4-byte load: a 64x64 bf16 A tile read for wgmma took 32 loads a thread, element by element.
    _, upper_of = column_pairs(layout, t.elem) if elem_bytes(t.elem) == 2 and not t.transposed \
        and st in ("bf16", "f16", "i16") else ({}, {})
    regs: list = [None] * len(layout.regs)
    # Elsewhere, a thread's registers at consecutive bytes of a stored row (a blocked layout's four, or its
    # transpose's on a transposed tile) are one vector load of up to 8 bytes.
    runs = [] if upper_of else _row_runs(layout, t)
    for run in runs:
        i, j = ctx.coords(layout, run[0])
        ptr = ctx.smem_ptr(smem_offset(ctx, t, i, j))
        vec = f"vector<{len(run)}x{st}>"
        loaded = b.op(f"llvm.load {ptr} : !llvm.ptr<3> -> {vec}", vec)
        for d, r in enumerate(run):
            regs[r] = from_storage(b, b.op(f"llvm.extractelement {loaded}[{b.i32(d)} : i32] : {vec}", st), t.elem)
    for r in range(len(layout.regs)):
        if regs[r] is not None:
            continue
        i, j = ctx.coords(layout, r)
        ptr = ctx.smem_ptr(smem_offset(ctx, t, i, j))
        if r in upper_of and regs[upper_of[r]] is None:
            vec = f"vector<2x{st}>"
            pair = b.op(f"llvm.load {ptr} : !llvm.ptr<3> -> {vec}", vec)
            regs[r] = b.op(f"llvm.extractelement {pair}[{b.i32(0)} : i32] : {vec}", st)
            regs[upper_of[r]] = b.op(f"llvm.extractelement {pair}[{b.i32(1)} : i32] : {vec}", st)
            continue
        regs[r] = from_storage(b, b.op(f"llvm.load {ptr} : !llvm.ptr<3> -> {st}", st), t.elem)
    if sync_after:
        ctx.sync_threads()
    return Tile(regs, layout, t.elem)


def _row_runs(layout: L.Layout, t: SmemTile) -> list:
    """Runs of `layout`'s registers at consecutive bytes of one row of `t` as stored (its columns; a transposed
    tile's used rows), 2, 4 or 8 bytes each, aligned (`layouts.vector_runs`); none where there are no such runs."""
    # (two bytes: an fp8 A read in wgmma's A layout, pairs along K)
    return L.widest_runs(layout, 0 if t.transposed else 1, elem_bytes(t.elem), (8, 4, 2))


def layout_of(op, index: int = 0) -> L.Layout:
    attr = op.attributes[attrs.LAYOUT.name]
    if hasattr(attr, "value"):
        return L.parse(attr.value)
    return L.parse(attr[index].value)


def as_tile(ctx: Ctx, value, layout: L.Layout, elem: str, op=None) -> Tile:
    """A scalar used where a tile is expected is splatted; a shared tile is read straight into `layout`. `op`: the
    op using the value, for errors."""
    if isinstance(value, Tile):
        return convert(ctx, value, layout)
    if isinstance(value, SmemTile):
        return read_smem(ctx, value, layout)
    return Tile([value] * len(layout.regs), layout, elem, uniform=True)


def convert(ctx: Ctx, tile: Tile, layout: L.Layout) -> Tile:
    """Redistribute a register tile to another layout: inside each warp by shuffles where `warp_shuffle` has a plan
    for the two layouts (fp8 P into wgmma A fragments), else through shared memory (a barrier on each side)."""
    if not isinstance(tile, Tile):   # callers pass register tiles (`register_tile` refuses the others)
        raise InternalCompilerError(f"a layout conversion of a {type(tile).__name__}, not a register tile")
    if tile.layout.same_mapping(layout):
        return tile if tile.layout.desc == layout.desc else Tile(tile.regs, layout, tile.elem)
    if tile.shape != layout.shape:
        raise InternalCompilerError(f"no conversion from layout {tile.layout} to {layout}")
    if tile.uniform:
        # A splat is the same value in every register of every thread: nothing to move.
        return Tile([tile.regs[0]] * len(layout.regs), layout, tile.elem, uniform=True)
    from .fp8 import from_storage, storage_type, to_storage
    b = ctx.b
    es = elem_bytes(tile.elem)
    if es == 1:
        from .warp_shuffle import convert_by_shuffles
        shuffled = convert_by_shuffles(ctx, tile, layout)
        if shuffled is not None:
            return shuffled
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

    st = storage_type(tile.elem)
    ctx.sync_threads()
    for r, v in enumerate(tile.regs):
        b.line(f"llvm.store {to_storage(b, v)}, {flat(tile.layout, r)} : {st}, !llvm.ptr<3>")
    ctx.sync_threads()
    regs = [from_storage(b, b.op(f"llvm.load {flat(layout, r)} : !llvm.ptr<3> -> {st}", st), tile.elem)
            for r in range(len(layout.regs))]
    ctx.sync_threads()
    return Tile(regs, layout, tile.elem)


def lower_splat(ctx: Ctx, op) -> None:
    layout = layout_of(op)
    value = ctx.get(SplatOp(op).value)
    ctx.set(op.results[0], Tile([value] * len(layout.regs), layout, elem_type(op.results[0].type), uniform=True))


def lower_arange(ctx: Ctx, op) -> None:
    layout = layout_of(op)
    start = op.attributes["start"].value
    b = ctx.b
    regs = [b.add(ctx.coords(layout, r)[0], start) for r in range(len(layout.regs))]
    ctx.set(op.results[0], Tile(regs, layout, "i32"))


def lower_expand_dims(ctx: Ctx, op) -> None:
    want = layout_of(op)
    lazy = ctx.get_lazy(ExpandDimsOp(op).src)
    if isinstance(lazy, LazyTile):
        lay = L.expand(lazy.layout, op.attributes["axis"].value)
        if lay.same_mapping(want):      # the same registers, one more (extent-1) dim
            ctx.set(op.results[0], LazyTile(want, lazy.elem, lazy.reg))
            return
    src = register_tile(ctx.get(ExpandDimsOp(op).src), op, ctx)
    lay = L.expand(src.layout, op.attributes["axis"].value)
    out = Tile(src.regs, lay, src.elem, uniform=src.uniform)
    ctx.set(op.results[0], convert(ctx, out, want))


def lower_broadcast(ctx: Ctx, op) -> None:
    layout = layout_of(op)
    src_shape = tile_shape(BroadcastOp(op).src.type)
    need = L.collapse(layout, src_shape)
    lazy = ctx.get_lazy(BroadcastOp(op).src)
    if isinstance(lazy, LazyTile) and lazy.layout.same_mapping(need):
        src = lazy
    elif isinstance(delivered := ctx.get(BroadcastOp(op).src), SmemTile):
        # a tile an aref delivered (a consumer loop's row of segment ids): read straight into the broadcast's
        # layout, one barrier, rather than in the generic one and moved through shared memory (three more)
        src = read_smem(ctx, delivered, need)
    else:
        src = convert(ctx, register_tile(ctx.get(BroadcastOp(op).src), op, ctx), need)
    index = {c: i for i, c in enumerate(src.layout.regs)}
    # Register i of the result is register pick[i] of the source.
    pick = [index[tuple(0 if src_shape[d] == 1 else c[d] for d in range(len(c)))] for c in layout.regs]
    if isinstance(src, LazyTile):
        ctx.set(op.results[0], LazyTile(layout, src.elem, lambda i: src.reg(pick[i])))
        return
    ctx.set(op.results[0], Tile([src.regs[j] for j in pick], layout, src.elem, uniform=src.uniform))


def lower_trans(ctx: Ctx, op) -> None:
    src = ctx.get(TransOp(op).src)
    if isinstance(src, SmemTile):
        ctx.set(op.results[0], SmemTile(src.offset, src.rows, src.cols, src.elem, not src.transposed))
        return
    out = Tile(src.regs, L.transpose(src.layout), src.elem)
    ctx.set(op.results[0], convert(ctx, out, layout_of(op)))
