"""Lowering of `tawa.load`, `tawa.load_scalar`, `tawa.store`, `tawa.dim`: TMA into swizzled shared memory, or per-thread global access.

- A load feeding dots (marked `tawa.smem` by assign-layouts) becomes TMA copies of 128-byte-wide boxes into a
  shared tile (128-byte swizzle, the layout wgmma descriptors expect), completing on an mbarrier with expect-tx.
  Elements outside the tensor are zero-filled by the copy engine.
- A load with a register layout becomes one predicated global load per element (masked elements read 0).
- A store of a wgmma-layout tile goes registers -> swizzled shared memory -> TMA store (clipped by the engine);
  any other store is one predicated global store per element.
"""
from __future__ import annotations

import contextlib

from mlir import ir

from tawa.ir.ops import NO_LIMIT, DimOp, LoadOp, LoadScalarOp, PrefetchOp, StoreOp
from tawa.errors import CompilationError, InternalCompilerError

from .. import layouts as L
from ..assign_layouts import check_dot_tile, copy_blocks, smem_swizzle, swizzle_width
from . import broadcast_operand, staged_operand, sync, vector_access
from .chunk_loads import ChunkLoads, chunk_loads
from .builder import V
from .fp8 import from_storage, storage_type, to_storage
from tawa.ir import attrs
from tawa.ir.location import source_location
from tawa.ir.traversal import int_constant
from tawa.ir.types import elem_bytes, elem_type, tile_shape

from .global_access import (column_pairs, element_address, leading_in_bounds, load_words, paired_load, pair_aligned,
                            predicated_load, raw_to)
from .context import Ctx, LazyTile, SmemTile, Tile, SWIZZLE_BYTES, box_offset, staging_registers, swizzled_register
from .staged_operand import (StagedOperand, candidate, drain_prefetched, persistent_staging,
                             take_prefetched)
from ..epilogue import staging_key, stored_by_kernel


# ---- TMA loads into shared tiles ---------------------------------------------------------------------------
class TmaLoad:
    """How one `tawa.load` of a 2-D tile is cut into TMA boxes: rows of a multiple of 128 bytes into 128-byte
    column boxes with the 128-byte swizzle, other rows of a multiple of 32 bytes into 64- or 32-byte boxes
    (`assign_layouts.smem_swizzle`, which the dot lowering reads the same way)."""

    def __init__(self, ctx: Ctx, op, parts: int = 1):
        self.op = op
        shape = tile_shape(op.results[0].type)
        loc = source_location(op)
        if len(shape) != 2:   # dot operands are 2-D (verifier rule `dot-shape`), and so is their transpose
            raise InternalCompilerError(f"a tile read by a dot is not 2-D: {op.results[0].type}", op=op.name,
                                        location=loc)
        check_dot_tile(op.results[0].type, loc)    # assign-layouts checked the loads it saw; this is the rest
        self.rows, self.cols = shape
        self.elem = elem_type(op.results[0].type)
        es = elem_bytes(self.elem)
        width = smem_swizzle(self.cols, self.elem)
        self.box_cols = width // es
        self.nbox = self.cols // self.box_cols
        self.box_bytes = self.rows * width
        self.bytes = self.nbox * self.box_bytes
        # A tile the CTAs of a cluster share (`tawa.multicast`) is copied in `parts` row blocks, one per CTA; a
        # part taller than one copy moves (a K-major B of 320 rows) in `blocks` copies of equal rows.
        self.part_rows = self.rows // parts
        self.blocks = copy_blocks(self.part_rows)
        self.copy_rows = self.part_rows // self.blocks
        self.width = width
        self.tmap = ctx.params.tile_map(LoadOp(op).src, self.copy_rows, self.box_cols, width)

    def issue(self, ctx: Ctx, offsets: list, dst_offset: V, bar: V, part: int = 0, multicast: V | None = None) \
            -> None:
        """Issue the copies (caller: one elected thread). `offsets`: i32 element offsets, outermost first. A
        tile cut into parts: the copies of row block `part`, to the CTAs of the `multicast` mask."""
        b = ctx.b
        for j in range(self.nbox):
            for block in range(self.blocks):
                skip = part * self.part_rows + block * self.copy_rows
                row = b.add(offsets[-2], skip) if skip else offsets[-2]
                coords = sync.box_coords(b, offsets, j, self.box_cols, row)
                into = j * self.box_bytes + skip * self.width
                dst = ctx.smem_ptr(b.add(dst_offset, into) if into else dst_offset)
                sync.tma_load(b, self.tmap, dst, bar, coords, multicast)


def issue_elected(ctx: Ctx, pred: V | None, body) -> None:
    """Run `body()` in one elected lane of warp 0 (warp-uniform branch + elect.sync), optionally predicated."""
    b = ctx.b
    with b.if_(ctx.is_warp0()):
        e = sync.elect_sync(b)
        cond = b.and_(e, pred) if pred is not None else e
        with b.if_(cond):
            body()


def restart_barriers(ctx: Ctx, bars: list) -> None:
    """Initialise the mbarriers `bars` (arrival count 1) again, for a copy or a ring that runs once per iteration
    of a loop: every thread is first done with the shared memory they guarded (generic accesses made visible to
    the async proxy that writes next), and no one waits on them before they are valid again."""
    b = ctx.b
    sync.fence_proxy_async(b)
    ctx.sync_threads()
    with b.if_(b.cmpi("eq", ctx.tid(), 0)):
        for bar in bars:
            sync.mbarrier_inval(b, bar)
            sync.mbarrier_init(b, bar, b.i32(1))
    sync.fence_mbarrier_init(b)
    ctx.sync_threads()


def offsets_of(ctx: Ctx, op) -> list:
    return [ctx.get(v) for v in LoadOp(op).offsets]


def lower_load(ctx: Ctx, op) -> None:
    if attrs.SMEM.get(op):
        if ctx.schedule.owns(op):
            ctx.set(op.results[0], ctx.schedule.current_tile(op))
            return
        if not ctx.tma:
            return lower_thread_copy(ctx, op)
        load = TmaLoad(ctx, op)
        off = ctx.smem.alloc(load.bytes)
        bar = ctx.smem_ptr(ctx.alloc_barriers(1, 1))
        dst = ctx.b.i32(off)
        if ctx.loop_depth:
            # A one-shot copy in a loop (a Q block loaded in a loop over heads, around the pipelined key loop):
            # its tile and barrier are reused every iteration. Every thread is done with the last iteration's tile
            # (generic reads, and wgmma's: the loop after it waited for its groups) before the barrier starts over.
            restart_barriers(ctx, [bar])
        issue = lambda: (sync.mbarrier_expect_tx(ctx.b, bar, load.bytes),
                         load.issue(ctx, offsets_of(ctx, op), dst, bar))
        issue_elected(ctx, None, issue)
        sync.mbarrier_wait(ctx.b, bar, ctx.b.i32(0))
        ctx.set(op.results[0], SmemTile(dst, load.rows, load.cols, load.elem))
        return
    lower_register_load(ctx, op)


# ---- shared tiles copied by the threads (no TMA) -------------------------------------------------------------
def lower_thread_copy(ctx: Ctx, op) -> None:
    """A dot operand's tile copied into shared memory by every thread of the CTA, for tensors whose rows or base
    address break TMA's 16-byte rules (compile option `tma=False`): each thread loads elements (consecutive
    threads, consecutive columns; 0 outside the tensor, through predicated loads), `_COPY_CHUNK` of them before
    storing them where TMA would have put them (128-byte column boxes, 128-byte swizzle), so the dot lowering
    reads the tile as usual. A barrier before the copy lets
    every warp finish reading the previous contents (each dot waited for its wgmmas); after it, a proxy fence
    makes the stores visible to wgmma's asynchronous reads and a second barrier publishes them."""
    b = ctx.b
    t = op.results[0].type
    rows, cols = tile_shape(t)
    elem = elem_type(t)
    es = elem_bytes(elem)
    if (cols * es) % SWIZZLE_BYTES:
        raise CompilationError(
            f"a tile read by a dot without TMA needs rows of a multiple of {SWIZZLE_BYTES} bytes, got {cols} "
            f"{elem} elements", source_location(op),
            note=f"make the loaded tile's last dimension a multiple of {SWIZZLE_BYTES // es} (tma=False)")
    off = ctx.smem.alloc(rows * cols * es)
    src = LoadOp(op).src
    arg = ctx.params.arg_index(src)
    rank = ir.MemRefType(src.type).rank
    offsets = offsets_of(ctx, op)
    st = storage_type(elem)
    total, threads = rows * cols, ctx.num_threads
    lead = leading_in_bounds(ctx, arg, offsets, rank - 2)
    ctx.sync_threads()
    # A loop over chunks: each chunk's loads are all issued before its stores, so that several are in flight (a
    # loop of load-then-store per element waits a memory round trip per element), and the loop bounds the
    # registers they take.
    per_thread = (total + threads - 1) // threads
    chunk_len = min(_COPY_CHUNK, per_thread)
    ci = V(b.fresh("chunk"), "i32")
    b.line(f"scf.for {ci} = {b.i32(0)} to {b.i32((per_thread + chunk_len - 1) // chunk_len)} step {b.i32(1)} "
           f": i32 {{")
    with b.indented():
        first = b.add(b.mul(ci, chunk_len * threads), ctx.tid())
        chunk = [b.add(first, j * threads) for j in range(chunk_len)]
        loaded = []
        for e in chunk:
            if cols & (cols - 1):       # rows of 192 elements, say
                r, c = b.divu(e, cols), b.remu(e, cols)
            else:
                r, c = b.shr(e, cols.bit_length() - 1), b.and_(e, cols - 1)
            pred = b.cmpi("slt", e, total) if total % threads else None
            if lead is not None:
                pred = lead if pred is None else b.and_(pred, lead)
            ptr, pred = element_address(ctx, arg, rank, offsets, [r, c], pred, elem)
            loaded.append((r, c, e, predicated_load(b, ptr, pred, st, read_only=True, ordered=False)))
        for r, c, e, value in loaded:
            addr = box_offset(b, r, c, rows, es)
            store = f"llvm.store {value}, {ctx.smem_ptr(b.add(addr, off))} : {st}, !llvm.ptr<3>"
            if total % threads:
                with b.if_(b.cmpi("slt", e, total)):
                    b.line(store)
            else:
                b.line(store)
    b.line("}")
    sync.fence_proxy_async(b)
    ctx.sync_threads()
    ctx.set(op.results[0], SmemTile(b.i32(off), rows, cols, elem))


#: Elements each thread loads before storing them, in a copy without TMA.
_COPY_CHUNK = 16
def _addressing(ctx: Ctx, op, src: ir.Value, offsets: list, layout: L.Layout, extents: list | None = None):
    """For every register: (pointer, in-bounds predicate), the bounds being `extents` where given."""
    arg = ctx.params.arg_index(src)
    rank = ir.MemRefType(src.type).rank
    elem = elem_type(src.type)
    ctx.params.ptr(arg)         # parameters are numbered by first use: the pointer before the leading dims
    base_pred = leading_in_bounds(ctx, arg, offsets, rank - layout.rank, extents)
    return [element_address(ctx, arg, rank, offsets, ctx.coords(layout, r), base_pred, elem, extents)
            for r in range(len(layout.regs))], elem


def store_extents(ctx: Ctx, op) -> list | None:
    """The bounds of a store through a view that ends (`O[h, start:end]`: `tawa.store`'s limits), one per dim:
    the tensor's extent, or the limit where it is smaller (0 for a negative one); None for a store without limits."""
    if not StoreOp(op).limits:
        return None
    b = ctx.b
    arg = ctx.params.arg_index(StoreOp(op).dst)
    ctx.params.ptr(arg)         # parameters are numbered by first use: the pointer before the dims
    out = [ctx.params.dim(arg, d) for d in range(StoreOp(op).rank)]
    for d, limit in _bounding_limits(op):
        lim = ctx.get(limit)
        lim = b.select(b.cmpi("slt", lim, 0), b.i32(0), lim)
        out[d] = b.select(b.cmpi("slt", lim, out[d]), lim, out[d])
    return out


def _bounding_limits(op) -> list:
    """(dim, limit value) of the limits of a `tawa.store` that bound something (not `NO_LIMIT`)."""
    return [(d, limit) for d, limit in enumerate(StoreOp(op).limits) if int_constant(limit) != NO_LIMIT]


def lower_register_load(ctx: Ctx, op) -> None:
    b = ctx.b
    layout = L.parse(attrs.LAYOUT.get(op))
    prefetched = broadcast_operand.take(ctx, op)
    if prefetched is not None:
        tile = broadcast_operand.shared_tile(ctx, prefetched, layout)
        ctx.set(op.results[0], tile if ctx.lazy else tile.materialize())
        return
    src = LoadOp(op).src
    arg, rank, elem = ctx.params.arg_index(src), ir.MemRefType(src.type).rank, elem_type(src.type)
    offsets = offsets_of(ctx, op)
    ctx.params.ptr(arg)         # parameters are numbered by first use: the pointer before the leading dims
    lead = leading_in_bounds(ctx, arg, offsets, rank - layout.rank)
    st = storage_type(elem)     # fp8 is loaded as i8
    read_only = not stored_by_kernel(src)
    runs = vector_access.row_runs(layout, elem) if vector_access.applies(ctx, layout) else []
    if runs:        # a kernel without dots: the runs of each thread's row in vectors
        regs = vector_access.load_tile_regs(ctx, arg, rank, offsets, lead, elem, layout, read_only, runs)
        ctx.set(op.results[0], Tile([from_storage(b, raw_to(b, v, st), elem) for v in regs], layout, elem))
        return

    def address(i):
        ptr, pred = element_address(ctx, arg, rank, offsets, ctx.coords(layout, i), lead, elem)
        return ptr, pred if pred is not None else b.const(1, "i1")

    # One predicated load per register, without a branch; in an epilogue's mma layout, one per pair of adjacent
    # columns. Not in the loops a schedule lowers: there ptxas interleaved the paired loads of attention's bias with
    # the wgmmas of the next scores, and the kernel ran 6x slower (31 against 181 TFLOP/s, H200), for a reason the
    # profile did not show; element by element it keeps its speed.
    lower_of, upper_of = column_pairs(layout, elem) if ctx.lazy else ({}, {})
    aligned = pair_aligned(ctx, arg, rank, offsets, lead, elem, layout.rank) if lower_of else None

    def load(i):
        if i in lower_of:           # the pair's first register emits both
            tile.reg(lower_of[i])
            return tile.reg(i)
        if i in upper_of:
            ptr, pred_lo = address(i)
            _, pred_hi = address(upper_of[i])
            lo, hi = paired_load(b, ptr, b.and_(aligned, pred_hi), pred_lo, pred_hi, elem_bytes(elem), read_only)
            tile.provide(upper_of[i], from_storage(b, raw_to(b, hi, st), elem))
            return from_storage(b, raw_to(b, lo, st), elem)
        return from_storage(b, predicated_load(b, *address(i), st, read_only), elem)
    tile = LazyTile(layout, elem, load, loaded=True)
    es = elem_bytes(elem)
    if ctx.lazy and layout.rank == 2 and es in (2, 4) and not elem.startswith("f8"):
        # (the test is computed once, with the first chunk: a store issues its chunks in one block)
        inside = []

        def load_batch(regs):
            if not inside:
                inside.append(_inside_tensor(ctx, arg, offsets, lead, layout, aligned))
            return _load_batch(ctx, regs, layout, elem, read_only, address, lower_of, upper_of, inside[0])
        tile.load_batch = load_batch
    ctx.set(op.results[0], tile if ctx.lazy else tile.materialize())


def _inside_tensor(ctx: Ctx, arg: int, offsets: list, lead, layout: L.Layout, aligned) -> V:
    """Whether the whole tile at `offsets` is inside the tensor (and its column pairs aligned, where `aligned`
    says so): uniform over the threads. A block before the tensor's start (`pid - 1`) is outside: the offsets'
    sign bits are tested together (one test: a compare per dimension made a heavy epilogue spill)."""
    b = ctx.b
    rank = len(offsets)
    inside = lead if lead is not None else b.const(1, "i1")
    signs = None
    for d in range(rank - layout.rank, rank):
        extent = layout.shape[d - (rank - layout.rank)]
        inside = b.and_(inside, b.cmpi("sle", b.add(offsets[d], extent), ctx.params.dim(arg, d)))
        signs = offsets[d] if signs is None else b.or_(signs, offsets[d])
    inside = b.and_(inside, b.cmpi("sge", signs, 0))
    return inside if aligned is None else b.and_(inside, aligned)


def _load_batch(ctx: Ctx, regs: list, layout: L.Layout, elem: str, read_only: bool, address, lower_of: dict,
                upper_of: dict, inside: V) -> dict:
    """{register: value} of registers `regs` of a register load, loaded together (`chunk_loads`): where the tile
    is inside the tensor (a uniform branch), one unpredicated load per element or pair of adjacent columns, else
    each element predicated, zero outside. No select: the branch's two sides yield the same registers."""
    b = ctx.b
    es, st = elem_bytes(elem), storage_type(elem)
    raw = "i32" if es == 4 else "i16"
    want = set(regs)
    units = [(i, upper_of[i] if upper_of.get(i) in want else None) for i in sorted(want)
             if not (i in lower_of and lower_of[i] in want)]

    def in_tensor():
        out = []
        for lo, hi in units:
            ptr, _ = address(lo)
            if hi is None:
                out.append(load_words(b, ptr, 1, read_only)[0] if es == 4 else
                           predicated_load(b, ptr, b.const(1, "i1"), raw, read_only))
            elif es == 4:
                out += load_words(b, ptr, 2, read_only)
            else:
                word = load_words(b, ptr, 1, read_only)[0]
                out += [b.cast("trunci", word, "i16"), b.cast("trunci", b.shr(word, 16), "i16")]
        return out

    def at_edge():
        out = []
        for lo, hi in units:
            out += [predicated_load(b, *address(r), raw, read_only) for r in ((lo,) if hi is None else (lo, hi))]
        return out

    order = [r for lo, hi in units for r in ((lo,) if hi is None else (lo, hi))]
    values = b.if_else_values(inside, in_tensor, at_edge, [raw] * len(order))
    return {r: from_storage(b, raw_to(b, v, st), elem) for r, v in zip(order, values)}


def lower_prefetch(ctx: Ctx, op) -> None:
    """`tawa.prefetch`: a 2-D tile into the TMA store's staging (`staged_operand`), a 1-D block spread over the
    threads' registers (`broadcast_operand`)."""
    if len(PrefetchOp(op).shape) == 1:
        broadcast_operand.lower_prefetch(ctx, op)
    else:
        staged_operand.lower_prefetch(ctx, op)


def _lazy_staging(ctx: Ctx, op):
    """Whether the TMA store `op` computes its lazy value while it stages it, so that the lazy tiles pending need
    not be materialized first: None when it does not, else (the lazy value, the operand it brings in through its
    staging or None). It does in a persistent kernel (box by box: between two boxes a barrier keeps ptxas from
    hoisting the next box's loads), and anywhere it has an operand to bring in (`staged_operand.candidate`, found
    here once per store) or register loads to issue in chunks (`chunk_loads`). Not when a pending tile loads the
    stored tensor (its loads must come before the store)."""
    dst = StoreOp(op).dst
    value = ctx.get_lazy(StoreOp(op).value)
    if not (isinstance(value, LazyTile) and ctx.tma and _tma_storable(value, op) and value.elem == elem_type(dst.type)):
        return None
    if any(v.owner.name == LoadOp.NAME and LoadOp(v.owner).src == dst for v in ctx.pending):
        return None
    operand = candidate(ctx, value, op)
    chunked = bool(chunk_loads(ctx, StoreOp(op).value, value, operand))
    return (value, operand) if ctx.persistent or operand is not None or chunked else None


def _tma_storable(value, op) -> bool:
    elem = elem_type(StoreOp(op).dst.type)
    return value.layout.desc.startswith("mma<") and value.layout.rank == 2 and \
        swizzle_width(value.shape[1] * elem_bytes(elem)) is not None


def lower_store(ctx: Ctx, op) -> None:
    """A store materializes the lazy tiles pending itself (`kernel.lower_block` leaves them to it), its operands
    first, unless it computes them while staging them (`_lazy_staging`)."""
    from .shape import register_tile
    # A store through a view that ends (`O[h, start:end]`): TMA clips a box at the tensor's extent only, so the
    # box goes through TMA where it lies inside the view and is written from registers, each element under its
    # bound, where it crosses the view's end (a uniform branch: the bounds are scalars).
    bounded = bool(StoreOp(op).limits)
    staging = None if bounded else _lazy_staging(ctx, op)
    if staging is not None:
        tma_store_tile(ctx, op, staging[0], [ctx.get(v) for v in StoreOp(op).offsets], operand=staging[1])
        return
    if ctx.pending:
        ctx.flush(first=op.operands)
    elem = elem_type(StoreOp(op).dst.type)
    value = register_tile(ctx.get(StoreOp(op).value), op, ctx)
    if value.elem != elem:   # the frontend and the verifier (`store-dtype`) guarantee equal element types
        raise InternalCompilerError(f"storing a {value.elem} tile into a {elem} tensor", op=op.name,
                                    location=source_location(op))
    offsets = [ctx.get(v) for v in StoreOp(op).offsets]
    tma = ctx.tma and _tma_storable(value, op)
    if tma and not bounded:
        tma_store_tile(ctx, op, value, offsets)
        return
    b = ctx.b
    drain_prefetched(ctx)     # (a TMA store takes or drains them itself; before the branch, which both sides need)
    if tma:
        b.if_else(_inside_limits(ctx, op, value, offsets), lambda: tma_store_tile(ctx, op, value, offsets),
                  lambda: _register_store(ctx, op, value, offsets, elem))
        return
    _register_store(ctx, op, value, offsets, elem)


def _inside_limits(ctx: Ctx, op, value: Tile, offsets: list) -> V:
    """Whether the box `value` is stored to at `offsets` ends, along every dim a limit bounds, at or before its
    limit (uniform over the threads)."""
    b = ctx.b
    lead = len(offsets) - len(value.shape)
    inside = b.const(1, "i1")
    for d, limit in _bounding_limits(op):
        if d >= lead:
            end = b.add(offsets[d], value.shape[d - lead])
            inside = b.and_(inside, b.cmpi("sle", end, ctx.get(limit)))
    return inside


def _register_store(ctx: Ctx, op, value: Tile, offsets: list, elem: str) -> None:
    """The tile written element by element from the threads' registers (in vectors of a row's run in a kernel
    without dots), each under its bounds: the tensor's, and a store's limits where it has them."""
    b = ctx.b
    bounded = bool(StoreOp(op).limits)
    value = vector_access.along_rows(ctx, value, elem)
    extents = store_extents(ctx, op)
    addrs, _ = _addressing(ctx, op, StoreOp(op).dst, offsets, value.layout, extents)

    def store_element(r):
        # Replicated elements are stored by each owner; the writes are identical.
        ptr, pred = addrs[r]
        with b.if_(pred) if pred is not None else contextlib.nullcontext():
            b.line(f"llvm.store {to_storage(b, value.regs[r])}, {ptr} : {storage_type(elem)}, !llvm.ptr<1>")

    def each_element():
        for r in range(len(value.regs)):
            store_element(r)

    runs = vector_access.row_runs(value.layout, elem) if vector_access.applies(ctx, value.layout) else []
    if not runs:
        each_element()
        return
    # a kernel without dots: the runs of each thread's row in vectors, bounded by the tensor (through a view that
    # ends: where the tile lies inside the view, element by element where it crosses the end)
    dst = StoreOp(op).dst
    arg, rank = ctx.params.arg_index(dst), ir.MemRefType(dst.type).rank
    lead = leading_in_bounds(ctx, arg, offsets, rank - value.layout.rank)
    raw = [_raw_bits(b, v) for v in value.regs]

    def in_vectors():
        vector_access.store_tile_regs(ctx, arg, rank, offsets, lead, elem, value.layout, raw, runs, store_element)
    if bounded:
        b.if_else(_inside_limits(ctx, op, value, offsets), in_vectors, each_element)
    else:
        in_vectors()


def _raw_bits(b, v: V) -> V:
    """A register's bits as the integer of its size (`vector_access.RAW`)."""
    v = to_storage(b, v)
    raw = vector_access.RAW[elem_bytes(v.type)]
    return v if v.type == raw else b.op(f"arith.bitcast {v} : {v.type} to {raw}", raw)


def tma_store_tile(ctx: Ctx, op, tile: Tile, offsets: list, operand: ir.Value | None = None) -> None:
    """Registers -> swizzled shared staging (column boxes of 128 bytes, or of 64 or 32 where the rows are not a
    multiple of 128 bytes: `assign_layouts.swizzle_width`) -> TMA store, one box per copy; a lazy tile's `operand`
    (`_lazy_staging`, 128-byte boxes only) is brought in through the staging boxes.

    One program per CTA: the whole tile is staged at once (in the drained ring when it is large enough), stored,
    and waited for. A persistent kernel's ring is never drained, so its staging is `epilogue.STORE_BUFFERS`
    boxes used in turn: box j waits (thread 0, which issues every store) until the store that last used its
    buffer has read it, is written, and is stored without waiting; the last stores drain while the next tile's
    main loop runs."""
    b = ctx.b
    rows, cols = tile.shape
    es = elem_bytes(tile.elem)
    width = swizzle_width(cols * es)
    box_cols = width // es
    nbox = cols // box_cols
    box_bytes = rows * width
    tmap = ctx.params.tile_map(StoreOp(op).dst, rows, box_cols, width)

    def store_box(j, src):
        coords = sync.box_coords(b, offsets, j, box_cols)
        sync.tma_store(b, tmap, ctx.smem_ptr(b.i32(src)), coords)

    staged = StagedOperand(ctx, operand, rows, box_cols) if operand is not None else None
    # the register loads the value is computed from, a chunk ahead of the order the staging computes it in
    loads = None
    if isinstance(tile, LazyTile):
        regs = staging_registers(tile.layout, es, width)
        by_box = sorted(regs, key=lambda r: r[2]) if ctx.persistent or staged else regs   # (the writes' order)
        order = [k for i, pair, _ in by_box for k in ((i,) if pair is None else (i, pair))]
        loads = ChunkLoads(ctx, StoreOp(op).value, tile, order, skip=operand)
    if ctx.persistent:
        key = staging_key(rows, nbox, width)
        nbuf = key[1]
        early = take_prefetched(ctx, operand, key)
        drain_prefetched(ctx)
        off, full = persistent_staging(ctx, key, barriers=staged is not None)
        buffer = lambda j: off + (j % nbuf) * box_bytes
        bar = lambda j: ctx.smem_ptr(full + 8 * (j % nbuf))
        # the operand's boxes the prefetch loaded into registers need no copy (`staged_operand._load_late_boxes`)
        in_registers = early.late_boxes if early else set()
        copied = lambda boxes: [k for k in boxes if k not in in_registers]
        for j in range(nbox):
            if loads and j == 0:
                loads.start()
            if j == 0 or j >= nbuf:
                # j = 0: the previous tile's stores (whatever buffer they used) must have read their staging;
                # later: the store of box j - nbuf, the last user of this buffer.
                wait_stores_read(ctx, 0 if j == 0 else nbuf - 1)
                ctx.sync_threads()
                # the staged operand's boxes for every free buffer: all at first (but those a prefetch copied
                # during the main loop), then box j; the boxes that must wait for a buffer are brought into L2
                # meanwhile (their copies then wait on L2, not on DRAM)
                first = early.boxes if early else 0
                issue = copied(range(first, nbuf) if j == 0 else [j]) if staged else []
                to_l2 = copied(range(nbuf, nbox) if j == 0 else []) if staged else []
                if issue or to_l2:
                    with b.if_(b.cmpi("eq", ctx.tid(), 0)):
                        for k in issue:
                            staged.issue(k, buffer(k), bar(k))
                        for k in to_l2:
                            staged.prefetch_l2(k)
            if staged and j in in_registers:
                staged.take_registers(j, early.late)
            elif staged:
                staged.read_box(j, buffer(j), bar(j))
            _write_staging(ctx, tile, buffer(j), box_bytes, box=j, width=width, loads=loads)
            if staged:
                staged.finish_box()
            sync.fence_proxy_async(b)
            ctx.sync_threads()
            with b.if_(b.cmpi("eq", ctx.tid(), 0)):
                if staged and j not in in_registers:
                    staged.release(bar(j))
                store_box(j, buffer(j))
                sync.bulk_commit(b)
        ctx.stores_in_flight = True
        return

    off = ctx.scratch(nbox * box_bytes)
    if loads:
        loads.start()
    # Everyone must be done with whatever shared memory the staging area reuses (a pipeline or aref ring).
    ctx.sync_threads()
    if staged:
        full = ctx.alloc_barriers(nbox, 1)
        with b.if_(b.cmpi("eq", ctx.tid(), 0)):
            for j in range(nbox):
                staged.issue(j, off + j * box_bytes, ctx.smem_ptr(full + 8 * j))
        for j in range(nbox):
            staged.read_box(j, off + j * box_bytes, ctx.smem_ptr(full + 8 * j))
            _write_staging(ctx, tile, off + j * box_bytes, box_bytes, box=j, width=width, loads=loads)
            staged.finish_box()
    else:
        _write_staging(ctx, tile, off, box_bytes, width=width, loads=loads)
    sync.fence_proxy_async(b)
    ctx.sync_threads()

    def body():
        for j in range(nbox):
            store_box(j, off + j * box_bytes)
        sync.bulk_commit(b)
        sync.bulk_wait_read(b, 0)
    issue_elected(ctx, None, body)
    # The staging area may be reused by a later store: wait until the copy engine has read it.
    ctx.sync_threads()


def _write_staging(ctx: Ctx, tile: Tile, off: int, box_bytes: int, box: int | None = None,
                   width: int = SWIZZLE_BYTES, loads: ChunkLoads | None = None) -> None:
    """Each thread writes its registers into the staging area at `off` (column boxes of `width` bytes, swizzled
    as wide); with `box`, only the registers of that column box, into a one-box area (`staging_registers`:
    which, paired into 4-byte stores for 16-bit data). `loads`: the register loads a lazy tile is computed from,
    told before each register is computed (`chunk_loads`)."""
    b = ctx.b
    es = elem_bytes(tile.elem)
    base = ctx.base_coords(tile.layout)
    for i, pair, in_box in staging_registers(tile.layout, es, width):
        if box is not None and in_box != box:
            continue
        if loads is not None:
            loads.before(i)
        ro, co = tile.layout.regs[i]
        within = swizzled_register(b, base, ro, co, es, width)
        addr = within if box is not None else \
            b.add(b.mul(b.shr(b.mul(b.add(base[1], co), es), width.bit_length() - 1), box_bytes), within)
        ptr = ctx.smem_ptr(b.add(addr, off))
        if pair is not None:
            vec = f"vector<2x{tile.elem}>"
            u = b.op(f"llvm.mlir.undef : {vec}", vec)
            u = b.op(f"llvm.insertelement {_reg(tile, i)}, {u}[{b.i32(0)} : i32] : {vec}", vec)
            u = b.op(f"llvm.insertelement {_reg(tile, pair)}, {u}[{b.i32(1)} : i32] : {vec}", vec)
            b.line(f"llvm.store {u}, {ptr} : {vec}, !llvm.ptr<3>")
        else:
            b.line(f"llvm.store {to_storage(b, _reg(tile, i))}, {ptr} : {storage_type(tile.elem)}, !llvm.ptr<3>")


def _reg(tile, i: int) -> V:
    """Register i of a tile; of a lazy one, computed now (a persistent store computes box by box)."""
    return tile.reg(i) if isinstance(tile, LazyTile) else tile.regs[i]


def wait_stores_read(ctx: Ctx, pending: int = 0) -> None:
    """Thread 0, which issues a persistent kernel's TMA stores, waits until all but the `pending` most recent of
    them have read their shared memory."""
    b = ctx.b
    with b.if_(b.cmpi("eq", ctx.tid(), 0)):
        sync.bulk_wait_read(b, pending)


def lower_dim(ctx: Ctx, op) -> None:
    arg = ctx.params.arg_index(DimOp(op).tensor)
    ctx.set(op.results[0], ctx.params.dim(arg, op.attributes["axis"].value))


def lower_load_scalar(ctx: Ctx, op) -> None:
    """One element of a tensor the kernel never writes, 0 outside it: every thread loads it (the threads of a warp
    ask for one address, one request) through the read-only path."""
    load = LoadScalarOp(op)
    arg = ctx.params.arg_index(load.src)
    rank = ir.MemRefType(load.src.type).rank
    offsets = [ctx.get(v) for v in load.offsets]
    elem = str(load.result.type)
    ptr, pred = element_address(ctx, arg, rank, offsets, [], leading_in_bounds(ctx, arg, offsets, rank), elem)
    ctx.set(load.result, predicated_load(ctx.b, ptr, pred, elem, read_only=True, ordered=False))
