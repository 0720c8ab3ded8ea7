"""A 1-D epilogue operand broadcast over the tile (a bias, a per-column scale), loaded once per block before the
main loop and shared by the threads through shared memory.

Loaded as a register tile in the accumulator's layout, `load(bias, pid_n, BN)[None, :]` has each thread load
every column its registers hold: a 128x256 tile gives each of 256 threads 64 predicated 2-byte loads, each with
its own index, bounds check and zeroing (about 320 instructions per thread), issued after the main loop. ncu
showed the cooperative linear layer's epilogue stalled on them (long scoreboard) while the tensor cores idled.

With a `tawa.prefetch` of the block placed before the main loop (`epilogue_prefetch`), each thread of the region
loads one element of the block there instead (or a few, when the block is larger than the region): a coalesced
load whose latency passes under the main loop, in one register. At the `tawa.load` after the loop the threads
write those elements into a small shared buffer, and each register of the tile is then read from it: paired
16-bit elements in one 4-byte shared load, with no index math or bounds check left (elements outside the tensor
were loaded as zero, as the register load would).

Two barriers of the region guard the buffer: one before the writes (in a persistent kernel, the previous tile's
reads of it must be done) and one after them.
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from tawa.ir import attrs
from tawa.ir.ops import LoadOp, PrefetchOp
from tawa.ir.types import elem_bytes, elem_type

from .. import layouts as L
from .builder import V
from .context import Ctx, LazyTile
from .fp8 import storage_type
from .global_access import element_address, predicated_load

#: Apply when the tile's registers outnumber the elements each thread prefetches by at least this much (a bias
#: in the accumulator's layout: 64 registers against 1 element); a row scale held in 2 registers per thread
#: gains nothing worth two barriers.
MIN_REPLICATION = 4


@dataclass
class RowPrefetch:
    """The block `src[offsets : offsets + n]`, of which this thread loaded elements tid + k * threads."""
    src: ir.Value
    offsets: list
    n: int
    elem: str
    regs: list


def lower_prefetch(ctx: Ctx, op) -> None:
    """`tawa.prefetch` of a 1-D block: each thread loads its elements of it into registers (see module
    docstring); nothing when the block is not worth sharing."""
    p = PrefetchOp(op)
    elem = elem_type(p.src.type)
    load = p.served_load()
    n = p.shape[0]
    per_thread = -(-n // ctx.num_threads)
    if load is None or not attrs.LAYOUT.get(load) or elem_bytes(elem) not in (2, 4) or \
            ir.MemRefType(p.src.type).rank != 1:
        return
    layout = L.parse(attrs.LAYOUT.get(load))
    if layout.rank != 1 or len(layout.regs) < MIN_REPLICATION * per_thread:
        return
    b = ctx.b
    arg = ctx.params.arg_index(p.src)
    offsets = [ctx.get(v) for v in p.offsets]
    ctx.params.ptr(arg)         # parameters are numbered by first use: the pointer before the dims
    regs = []
    for k in range(per_thread):
        e = _element_index(ctx, k)
        ptr, pred = element_address(ctx, arg, 1, offsets, [e], None, elem)
        if (k + 1) * ctx.num_threads > n:
            pred = b.and_(pred, b.cmpi("ult", e, b.i32(n)))
        regs.append(predicated_load(b, ptr, pred, storage_type(elem), read_only=True))
    ctx.row_prefetches.append(RowPrefetch(p.src, list(p.offsets), n, elem, regs))


def _element_index(ctx: Ctx, k: int) -> V:
    """The block element that this thread loads as its `k`-th (the threads take consecutive elements)."""
    return ctx.b.add(ctx.tid(), k * ctx.num_threads) if k else ctx.tid()


def take(ctx: Ctx, op) -> RowPrefetch | None:
    """The prefetch of the block the register load `op` reads, if there was one; it is the load's from here on."""
    load = LoadOp(op)
    for rec in ctx.row_prefetches:
        if rec.src == load.src and rec.offsets == list(load.offsets):
            ctx.row_prefetches.remove(rec)
            return rec
    return None


def shared_tile(ctx: Ctx, rec: RowPrefetch, layout: L.Layout) -> LazyTile:
    """The block written to shared memory by the threads that prefetched it, as a lazy register tile of
    `layout` read back from there."""
    b = ctx.b
    es = elem_bytes(rec.elem)
    st = storage_type(rec.elem)
    off = ctx.smem.alloc(rec.n * es, align=16)
    if ctx.persistent:
        ctx.sync_threads()      # the previous tile's reads of the buffer are done
    for k, value in enumerate(rec.regs):
        e = _element_index(ctx, k)
        store = f"llvm.store {value}, {ctx.smem_ptr(b.add(b.mul(e, es), off))} : {st}, !llvm.ptr<3>"
        if (k + 1) * ctx.num_threads > rec.n:
            with b.if_(b.cmpi("ult", e, b.i32(rec.n))):
                b.line(store)
        else:
            b.line(store)
    ctx.sync_threads()

    base = ctx.base_coords(layout)[0]
    column = {co: i for i, (co,) in enumerate(layout.regs)}
    # 16-bit pairs (even column, odd column) share one 4-byte load when every thread's base column is even
    pairs = es == 2 and all(v[0] % 2 == 0 for v in layout.lanes + layout.warps + (layout.group or (0,),))
    tile = None

    def read(i: int):
        (co,) = layout.regs[i]
        if pairs and co % 2 and (co - 1) in column:
            tile.reg(column[co - 1])            # the pair's load provides this register
            return tile.reg(i)
        ptr = ctx.smem_ptr(b.add(b.mul(b.add(base, co), es), off))
        partner = column.get(co + 1) if pairs and co % 2 == 0 else None
        if partner is None:
            return b.op(f"llvm.load {ptr} : !llvm.ptr<3> -> {rec.elem}", rec.elem)
        vec = f"vector<2x{rec.elem}>"
        both = b.op(f"llvm.load {ptr} : !llvm.ptr<3> -> {vec}", vec)
        tile.provide(partner, b.op(f"llvm.extractelement {both}[{b.i32(1)} : i32] : {vec}", rec.elem))
        return b.op(f"llvm.extractelement {both}[{b.i32(0)} : i32] : {vec}", rec.elem)

    tile = LazyTile(layout, rec.elem, read)
    return tile
