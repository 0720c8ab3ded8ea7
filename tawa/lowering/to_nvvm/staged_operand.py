"""An epilogue operand read through the TMA store's own staging boxes (a residual added before the store).

An epilogue such as `y = gelu(acc + bias) + load(R, (pid_m, pid_n), (BM, BN))` loads a 2-D tile in the
accumulator's (wgmma) layout. Loaded element by element, each warp-wide load touches 8 rows of 8 bytes: 8 partly
used sectors, and a 128x256 tile issues 128 such loads per thread. ncu shows the epilogue then waiting on L1TEX
for most of its time, and the cooperative 128x256 linear layer ran at 62% of the plain GEMM.

When the stored value is computed lazily while it is staged (`memory.tma_store_tile`), such a tile is instead
copied by TMA into the very staging box the result is about to occupy: thread 0 issues the box's copy (coalesced,
zero-filled outside the tensor like the predicated loads), every thread waits on the box's mbarrier, reads its
elements of the box (paired 16-bit elements in one 4-byte shared load, at the swizzled positions the staging
writes use), computes its results, and writes them over what it read. The operand tile has the stored tile's
register mapping, so each thread overwrites exactly the elements it read itself, after reading all of them.

A persistent kernel's staging is idle while the main loop runs, so a `tawa.prefetch` of the operand (placed before
the loop by `epilogue_prefetch`) copies its first boxes there already, after the previous tile's stores have read
the staging (`lower_prefetch`), and loads the boxes that would wait for a staging buffer into registers
(`_load_late_boxes`); the store then copies only the boxes neither brought (`take_prefetched`).

The box mbarriers are used once per staging box; after every thread's wait, thread 0 arrives once more (and waits
for that second phase, which its arrival completes) so that each use completes two phases and every wait for
the data is for parity 0: no phase to carry across a persistent tile loop.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from mlir import ir

from tawa.ir import attrs
from tawa.ir.ops import LoadOp, PrefetchOp, StoreOp
from tawa.ir.types import elem_bytes, elem_type
from tawa.lowering.assign_layouts import swizzle_width
from tawa.lowering.epilogue import staging_key, stored_by_kernel

from .. import layouts as L
from . import sync
from .builder import V
from .context import Ctx, LazyTile, SWIZZLE_BYTES, staging_registers, swizzled_register
from .global_access import element_address, load_b32, predicated_load


class OperandBoxes:
    """The column boxes (`box_cols` elements, 128 bytes wide) of a `rows`-row tile of the global tensor `src` at
    the i32 element offsets `offsets`, each copied by TMA into one staging box."""

    def __init__(self, ctx: Ctx, src: ir.Value, offsets: list, rows: int, box_cols: int):
        self.ctx = ctx
        self.offsets = offsets
        self.box_cols = box_cols
        self.box_bytes = rows * SWIZZLE_BYTES
        self.tmap = ctx.params.tile_map(src, rows, box_cols, SWIZZLE_BYTES)

    def issue(self, box: int, dst: int, bar: V) -> None:
        """Copy column box `box` to the staging offset `dst` (caller: the thread issuing stores)."""
        b = self.ctx.b
        sync.mbarrier_expect_tx(b, bar, self.box_bytes)
        coords = sync.box_coords(b, self.offsets, box, self.box_cols)
        sync.tma_load(b, self.tmap, self.ctx.smem_ptr(b.i32(dst)), bar, coords)

    def prefetch_l2(self, box: int) -> None:
        """Bring column box `box` into L2 (caller: the thread issuing stores), for a box whose staging buffer is
        still in use: its copy, issued once the buffer is free, then finds it there."""
        sync.tma_prefetch_l2(self.ctx.b, self.tmap, sync.box_coords(self.ctx.b, self.offsets, box, self.box_cols))


class StagedOperand(OperandBoxes):
    """A lazy register load served from the staging boxes of one TMA store (see module docstring)."""

    def __init__(self, ctx: Ctx, value: ir.Value, rows: int, box_cols: int):
        load = LoadOp(value.owner)
        super().__init__(ctx, load.src, [ctx.get(v) for v in load.offsets], rows, box_cols)
        self.tile = tile = ctx.get_lazy(value)
        self._fallback = tile.redirect(self._serve)
        self._box = None                 # (box index, its staging offset) while a box is being staged
        accesses = staging_registers(tile.layout, elem_bytes(tile.elem))
        self._box_of = {i: box for i, _, box in accesses}
        self._pair_of = {i: pair for i, pair, _ in accesses}
        self._box_of.update({pair: box for _, pair, box in accesses if pair is not None})

    def read_box(self, box: int, off: int, bar: V) -> None:
        """Wait for box `box` at staging offset `off`; from here until `finish_box` this thread's elements of it
        are read from there as the result's registers ask for them. Each result overwrites only the position of
        the element (pair) it was computed from, which the thread has read just before, so reads and writes may
        interleave: reading the whole box first kept 32 more registers live beside a ping-pong 128x192 tile's
        192 accumulators, and ptxas spilled."""
        sync.mbarrier_wait(self.ctx.b, bar, self.ctx.b.i32(0))
        self._box = (box, off)

    def take_registers(self, box: int, late: dict) -> None:
        """This thread's elements of box `box`, loaded into registers by the prefetch (`Prefetched.late`)."""
        b, elem = self.ctx.b, self.tile.elem
        for i, (pair, word, in_box) in late.items():
            if in_box != box:
                continue
            if elem_bytes(elem) == 4:
                self.tile.provide(i, b.op(f"arith.bitcast {word} : i32 to {elem}", elem))
                continue
            vec = f"vector<2x{elem}>"
            both = b.op(f"llvm.bitcast {word} : i32 to {vec}", vec)
            self.tile.provide(i, b.op(f"llvm.extractelement {both}[{b.i32(0)} : i32] : {vec}", elem))
            if pair is not None:
                self.tile.provide(pair, b.op(f"llvm.extractelement {both}[{b.i32(1)} : i32] : {vec}", elem))

    def finish_box(self) -> None:
        """The box is overwritten from here on: registers asked for later come from global memory."""
        self._box = None

    def release(self, bar: V) -> None:
        """After every thread's wait (a barrier since): the second phase of this use (thread 0 only), which its
        own arrival completes; thread 0 observes it, so that no phase it arrived on goes unwaited."""
        b = self.ctx.b
        sync.mbarrier_arrive(b, bar)
        sync.mbarrier_wait(b, bar, b.i32(1))

    def _serve(self, i: int) -> V:
        if self._box is None or self._box[0] != self._box_of[i] or i not in self._pair_of:
            return self._fallback(i)     # needed outside the staging of its box: loaded from global memory
        ctx, b, elem = self.ctx, self.ctx.b, self.tile.elem
        ro, co = self.tile.layout.regs[i]
        within = swizzled_register(b, ctx.base_coords(self.tile.layout), ro, co, elem_bytes(elem))
        ptr = ctx.smem_ptr(b.add(within, self._box[1]))
        pair = self._pair_of[i]
        if pair is None:
            return b.op(f"llvm.load {ptr} : !llvm.ptr<3> -> {elem}", elem)
        vec = f"vector<2x{elem}>"
        both = b.op(f"llvm.load {ptr} : !llvm.ptr<3> -> {vec}", vec)
        self.tile.provide(pair, b.op(f"llvm.extractelement {both}[{b.i32(1)} : i32] : {vec}", elem))
        return b.op(f"llvm.extractelement {both}[{b.i32(0)} : i32] : {vec}", elem)


def candidate(ctx: Ctx, value: LazyTile, op):
    """The pending register load (its IR value) that the TMA store `op` of the lazy `value` can bring in through
    its staging boxes: an untouched 2-D tile of a tensor the kernel only reads, with `value`'s shape, register
    mapping and element size (16 or 32 bits), each element held by one thread, whose rows fill 128-byte staging
    boxes; None when there is none."""
    if ctx.loop_depth and not ctx.persistent:
        # (a store in a loop the program writes: the one-shot staging's barriers would be waited on again at a
        # phase already complete; the operand is loaded into registers instead)
        return None
    dst = StoreOp(op).dst
    es = elem_bytes(elem_type(dst.type))
    # (the operand's boxes are copied and read as 128-byte ones: rows staged in narrower boxes load per thread)
    if es not in (2, 4) or swizzle_width(value.shape[1] * es) != SWIZZLE_BYTES:
        return None
    for v in ctx.pending:
        tile = ctx.env.get(v)
        if not isinstance(tile, LazyTile) or not tile.loaded or tile.touched or v.owner.name != LoadOp.NAME:
            continue
        src = LoadOp(v.owner).src
        if src != dst and not stored_by_kernel(src) and elem_bytes(tile.elem) == es and tile.layout.rank == 2 \
                and tile.layout.same_mapping(value.layout) and not tile.layout.replicated:
            # (replicated, as a 64-row tile over 8 uniform warps: each owner overwrites what it read with its
            # results, with no barrier between, so one could read another's result instead of the operand)
            return v
    return None


# ---- prefetch: the first boxes copied while the main loop runs -------------------------------------------------
def persistent_staging(ctx: Ctx, key: tuple, barriers: bool) -> list:
    """[shared offset, mbarrier offset or None] of a persistent epilogue's staging `key` (`staging_key`), with one
    mbarrier per buffer when `barriers`: one per region and geometry, shared by its TMA stores (each waits for the
    stores before it to have read the staging) and the prefetch that fills it."""
    box_bytes, buffers = key
    if key not in ctx.stagings:
        # Above every transient scratch laid out so far (a layout conversion's, a reduction's across warps): those
        # run again in the next tile's main loop while this tile's stores still read their staging.
        ctx.smem.top = max(ctx.smem.top, ctx.smem.peak)
        ctx.stagings[key] = [ctx.scratch(buffers * box_bytes), None]
    area = ctx.stagings[key]
    if barriers and area[1] is None:
        area[1] = ctx.alloc_barriers(buffers, 1)
    return area


#: Registers (of 4 bytes) a thread may hold across the main loop for the late boxes of a prefetched operand: the
#: two that wait for a staging buffer of a 128x256 bf16 tile take 16 each.
MAX_LATE_REGISTERS = 32
#: Registers a thread may hold across the main loop for the stored tile's f32 accumulators and the late boxes
#: together. 128 + 32 (a cooperative 128x256 or ping-pong 64x256 tile) leaves the epilogue room; a ping-pong
#: 128x192 tile's 192 accumulators + 32 late registers spilled 216 bytes under its 232-register budget, so there
#: its third box waits for a staging buffer instead.
MAX_LIVE_WITH_LATE = 160


@dataclass
class Prefetched:
    """An operand whose first column boxes, one per buffer, a `tawa.prefetch` copied into the staging `key`, and
    whose later boxes it may have loaded into registers (`late`: register -> (its pair or None, the two packed
    16-bit elements or the 32-bit element as an i32))."""
    src: ir.Value
    offsets: list
    key: tuple
    late: dict = field(default_factory=dict)

    @property
    def boxes(self) -> int:
        return self.key[1]

    @property
    def late_boxes(self) -> set:
        return {box for _, _, box in self.late.values()}


def lower_prefetch(ctx: Ctx, op) -> None:
    """`tawa.prefetch` (placed before the main loop by `epilogue_prefetch`). In a persistent kernel the store's
    staging is idle while the main loop runs: thread 0 waits until the previous tile's stores have read it and
    copies the operand's first boxes into it (as the store would after the loop), so its DRAM latency passes
    under the main loop; the store takes them (`take_prefetched`). With one tile per CTA the staging is the
    drained ring, free only after the loop, so the tile goes into L2 instead. Without TMA there is nothing to do.

    The copies are issued inside the main loop, at its second iteration (`control.lower_for`), not before it.
    Before the loop, thread 0 would first wait for the previous tile's stores to read the staging, holding its
    warp group's first wgmma back by that latency on every tile, and at the kernel's start every CTA's operand
    copies would compete with the ring's first loads. Issued at iteration 1, the cooperative 128x256 linear layer
    ran 2-6% faster (4096^3: 596 -> 627 TFLOP/s, H100); ping-pong tiles, whose epilogue the other group's main
    loop hides, did not move. The boxes the prefetch loads into registers (`_load_late_boxes`) stay before the
    loop: their values must be live after it."""
    p = PrefetchOp(op)
    es = elem_bytes(elem_type(p.src.type))
    shape = p.shape
    if not ctx.tma or len(shape) != 2 or es not in (2, 4) or (shape[1] * es) % SWIZZLE_BYTES:
        return
    rows, cols = shape
    box_cols = SWIZZLE_BYTES // es
    nbox = cols // box_cols
    boxes = OperandBoxes(ctx, p.src, [ctx.get(v) for v in p.offsets], rows, box_cols)
    b = ctx.b
    key = staging_key(rows, nbox, SWIZZLE_BYTES)
    if not ctx.persistent or any(r.key == key for r in ctx.prefetched):
        def to_l2():
            with b.if_(b.cmpi("eq", ctx.tid(), 0)):
                for j in range(nbox):
                    boxes.prefetch_l2(j)
        ctx.main_loop_copies.append(to_l2)
        return
    off, full = persistent_staging(ctx, key, barriers=True)
    early = Prefetched(p.src, list(p.offsets), key)

    def to_staging():
        with b.if_(b.cmpi("eq", ctx.tid(), 0)):
            sync.bulk_wait_read(b, 0)
            for j in range(early.boxes):
                boxes.issue(j, off + j * boxes.box_bytes, ctx.smem_ptr(full + 8 * j))
    ctx.main_loop_copies.append(to_staging)
    load = p.served_load()
    if load is not None and attrs.LAYOUT.get(load):
        early.late = _load_late_boxes(ctx, p, L.parse(attrs.LAYOUT.get(load)), early.boxes)
    ctx.prefetched.append(early)


def _load_late_boxes(ctx: Ctx, p: PrefetchOp, layout: L.Layout, first: int) -> dict:
    """This thread's elements of the column boxes from `first` on, loaded into registers now: with two staging
    buffers, box 2 of a 4-box tile could otherwise be copied in only once the store of box 0 has read its buffer,
    and the epilogue waited for that copy (ncu: the residual's cost was mostly that wait). A tile inside the
    tensor is read with one 4-byte load per pair of 16-bit elements; a tile at its edge element by element,
    predicated (zero outside, as the store's copies give). Nothing when that needs too many registers, alone or
    beside the tile's accumulators (one f32 register per element the thread holds, `layout.regs`)."""
    b = ctx.b
    elem = elem_type(p.src.type)
    es = elem_bytes(elem)
    access = [(i, pair, box) for i, pair, box in staging_registers(layout, es) if box >= first]
    if not access or len(access) > MAX_LATE_REGISTERS or len(layout.regs) + len(access) > MAX_LIVE_WITH_LATE:
        return {}
    arg = ctx.params.arg_index(p.src)
    offsets = [ctx.get(v) for v in p.offsets]
    interior = None
    for d, extent in enumerate(p.shape):
        ok = b.cmpi("sle", b.add(offsets[d], extent), ctx.params.dim(arg, d))
        interior = ok if interior is None else b.and_(interior, ok)
    raw = "i16" if es == 2 else "i32"

    def element(i):
        return element_address(ctx, arg, 2, offsets, ctx.coords(layout, i), None, elem)

    def inside():
        return [load_b32(b, element(i)[0]) if pair is not None or es == 4 else
                b.cast("extui", predicated_load(b, element(i)[0], b.const(1, "i1"), raw, read_only=True), "i32")
                for i, pair, _ in access]

    def at_edge():
        out = []
        for i, pair, _ in access:
            lo = predicated_load(b, *element(i), raw, read_only=True)
            if es == 4:
                out.append(lo)
                continue
            word = b.cast("extui", lo, "i32")
            if pair is not None:
                hi = b.cast("extui", predicated_load(b, *element(pair), raw, read_only=True), "i32")
                word = b.or_(word, b.shl(hi, 16))
            out.append(word)
        return out

    words = b.if_else_values(interior, inside, at_edge, ["i32"] * len(access))
    return {i: (pair, word, box) for (i, pair, box), word in zip(access, words)}


def take_prefetched(ctx: Ctx, operand: ir.Value | None, key: tuple) -> Prefetched | None:
    """The prefetch of the store's staged `operand` (a `tawa.load` result) into the staging `key`, if there
    was one; it is the store's from here on."""
    if operand is None:
        return None
    load = LoadOp(operand.owner)
    for rec in ctx.prefetched:
        if rec.key == key and rec.src == load.src and rec.offsets == load.offsets:
            ctx.prefetched.remove(rec)
            return rec
    return None


def drain_prefetched(ctx: Ctx) -> None:
    """Boxes prefetched into a staging that the store about to run does not take (it stages another operand, or
    none, or stores without staging): thread 0 waits for their copies and completes their barriers' phases, so
    that the staging is written again only after the copies landed (a TMA store's barrier follows) and every
    barrier starts its next use at the phase the protocol expects."""
    b = ctx.b
    for rec in ctx.prefetched:
        full = ctx.stagings[rec.key][1]
        with b.if_(b.cmpi("eq", ctx.tid(), 0)):
            for j in range(rec.boxes):
                bar = ctx.smem_ptr(full + 8 * j)
                sync.mbarrier_wait(b, bar, b.i32(0))
                sync.mbarrier_arrive(b, bar)
                sync.mbarrier_wait(b, bar, b.i32(1))
    ctx.prefetched.clear()
