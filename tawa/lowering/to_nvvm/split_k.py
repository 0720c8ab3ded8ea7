"""Lowering of split-K's partial accumulators (`tawa.split_k_store` / `split_k_arrive` / `split_k_sum`).

The runtime passes a workspace (ABI kind `workspace`) of one record per output tile of the grid the kernel was
written for, zeroed when it is allocated:

    record(tile) = [split 0: slot 0, slot 1, ...][split 1: ...] ... [split S-1: ...][counter: 4 bytes, padded]

A slot holds one accumulator as its threads hold it: register group g (four f32 registers) of thread t at
`(g * threads + t) * 16`, so every partial is written and read back with coalesced 16-byte accesses and no
layout conversion. The record's size goes into the kernel's launch metadata (`workspace_per_tile`).

Ordering (the PTX memory model): each thread stores its partials and fences them (`fence.acq_rel.gpu`); after a
barrier over the context's threads, one thread increments the tile's counter (`atom.acq_rel.gpu`) and publishes
whether it saw S-1 (the last arrival; that thread also resets the counter for the next launch) in shared memory;
after a second barrier every thread reads the flag, and the last program's threads fence again before loading
the partials, which they add in split order, whichever program arrived last (with two splits, the other split's
partial to their own registers: a + b is b + a, so the sum is the same either way).
"""
from __future__ import annotations

from tawa.errors import InternalCompilerError
from tawa.ir.ops import SplitKArriveOp, SplitKStoreOp, SplitKSumOp
from tawa.ir.traversal import ops_of

from . import sync
from .builder import V
from .context import Ctx, Tile

#: Bytes of a record's counter (padded so that records stay 128-byte aligned).
COUNTER_BYTES = 128
#: f32 registers per 16-byte access.
VECTOR = 4
VTYPE = f"vector<{VECTOR}xf32>"


def _slot_bytes(ctx: Ctx, tile: Tile) -> int:
    groups = -(-len(tile.regs) // VECTOR)
    return groups * ctx.num_threads * 4 * VECTOR


def _record(ctx: Ctx, op) -> dict:
    """The record layout of the split-K ops around `op`: slot offsets within one split, bytes per split, the
    counter's offset and the record's size. Computed once, from the partials of the `split_k_store` ops (they
    follow the K loop, so their tiles are lowered before any of these ops)."""
    found = ctx._bases.get("split_k")
    if found is not None:
        return found
    stores = [o for o in ops_of(op.block) if o.name == SplitKStoreOp.NAME]
    if not stores:
        raise InternalCompilerError("split-K without split_k_store ops", op=op.name)
    offsets, top = {}, 0
    for st in sorted(stores, key=lambda o: SplitKStoreOp(o).slot):
        offsets[SplitKStoreOp(st).slot] = top
        top += _slot_bytes(ctx, ctx.get(SplitKStoreOp(st).value))
    splits = _splits(stores[0])
    record = {"slots": offsets, "per_split": top, "counter": splits * top, "size": splits * top + COUNTER_BYTES,
              "splits": splits}
    ctx._bases["split_k"] = record
    ctx.params.workspace_per_tile = record["size"]
    return record


def _splits(store_op) -> int:
    """The split count of the kernel a split_k_store belongs to (its arrive op carries it)."""
    for o in ops_of(store_op.block):
        if o.name == SplitKArriveOp.NAME:
            return SplitKArriveOp(o).splits
    raise InternalCompilerError("split_k_store without split_k_arrive", op=store_op.name)


def _record_base(ctx: Ctx, tile: V, record: dict) -> V:
    b = ctx.b
    offset = b.mul(b.ext_i64(tile), b.const(record["size"], "i64"))
    return b.gep(ctx.params.workspace(), offset)


def _slot_base(ctx: Ctx, tile: V, split: V | int, slot: int, record: dict) -> V:
    """The address of slot `slot` of split `split` (a value, or a split known here) in the tile's record."""
    b = ctx.b
    base = _record_base(ctx, tile, record)
    if isinstance(split, int):
        base = b.gep(base, split * record["per_split"])
    else:
        base = b.gep(base, b.mul(b.ext_i64(split), b.const(record["per_split"], "i64")))
    return b.gep(base, record["slots"][slot])


def _thread_offsets(ctx: Ctx, groups: int) -> list:
    """Byte offset of each register group of this thread within a slot."""
    b = ctx.b
    mine = b.mul(ctx.tid(), VECTOR * 4)
    return [b.ext_i64(b.add(mine, g * ctx.num_threads * VECTOR * 4)) for g in range(groups)]


def _vector(regs: list) -> list:
    """The registers in groups of four (the last padded with its first register; the pad is never read)."""
    return [regs[i:i + VECTOR] + [regs[i]] * (VECTOR - len(regs[i:i + VECTOR])) for i in range(0, len(regs), VECTOR)]


def _load(b, base: V, off: V) -> V:
    """One register group (16 bytes) of a slot, from global memory."""
    return b.op(f"llvm.load {b.gep(base, off)} {{alignment = 16 : i64}} : !llvm.ptr<1> -> {VTYPE}", VTYPE)


def _elements(b, vec: V) -> list:
    return [b.op(f"llvm.extractelement {vec}[{b.i32(i)} : i32] : {VTYPE}", "f32") for i in range(VECTOR)]


def lower_split_k_store(ctx: Ctx, op) -> None:
    b = ctx.b
    view = SplitKStoreOp(op)
    record = _record(ctx, op)
    tile = ctx.get(view.value)
    base = _slot_base(ctx, ctx.get(view.tile), ctx.get(view.split), view.slot, record)
    groups = _vector(tile.regs)
    for off, group in zip(_thread_offsets(ctx, len(groups)), groups):
        vec = b.op(f"llvm.mlir.undef : {VTYPE}", VTYPE)
        for i, r in enumerate(group):
            vec = b.op(f"llvm.insertelement {r}, {vec}[{b.i32(i)} : i32] : {VTYPE}", VTYPE)
        b.line(f"llvm.store {vec}, {b.gep(base, off)} {{alignment = 16 : i64}} : {VTYPE}, !llvm.ptr<1>")


def lower_split_k_arrive(ctx: Ctx, op) -> None:
    b = ctx.b
    view = SplitKArriveOp(op)
    record = _record(ctx, op)
    flag = ctx.smem_ptr(ctx.alloc_word())
    fence_gpu(b)                         # this thread's partials, before the count says they are there
    ctx.sync_threads()
    with b.if_(b.cmpi("eq", ctx.tid(), 0)):
        counter = b.gep(_record_base(ctx, ctx.get(view.tile), record), record["counter"])
        old = b.op(f'"llvm.inline_asm"({counter}) <{{asm_string = "atom.add.acq_rel.gpu.global.u32 $0, [$1], 1;", '
                   f'constraints = "=r,l", has_side_effects}}> : (!llvm.ptr<1>) -> i32', "i32")
        last = b.cmpi("eq", old, view.splits - 1)
        with b.if_(last):                # every split has arrived: the next launch starts from 0
            b.line(f"llvm.store {b.i32(0)}, {counter} : i32, !llvm.ptr<1>")
        b.line(f"llvm.store {b.cast('extui', last, 'i32')}, {flag} : i32, !llvm.ptr<3>")
    ctx.sync_threads()
    seen = b.op(f"llvm.load {flag} : !llvm.ptr<3> -> i32", "i32")
    ctx.set(op.results[0], b.cmpi("ne", seen, 0))


def lower_split_k_sum(ctx: Ctx, op) -> None:
    b = ctx.b
    view = SplitKSumOp(op)
    record = _record(ctx, op)
    tile = ctx.get(view.value)
    fence_gpu(b)                         # the other programs' partials, after the count said they are there
    groups = -(-len(tile.regs) // VECTOR)
    offsets = _thread_offsets(ctx, groups)
    if view.splits == 2:
        _add_other_half(ctx, view, tile, record, offsets)
        return
    bases = [_slot_base(ctx, ctx.get(view.tile), s, view.slot, record)
             for s in range(view.splits)]
    sums: list = []
    # Group by group, so that only one group's partials are in flight (LLVM would otherwise load every partial
    # first, which needs splits x the accumulator's registers and spills).
    for g, off in enumerate(offsets):
        acc = None
        for base in bases:
            parts = _elements(b, _load(b, base, off))
            acc = parts if acc is None else [b.op(f"arith.addf {x}, {y} : f32", "f32") for x, y in zip(acc, parts)]
        # The asm counts as a memory access for LLVM, so the next group's loads are not hoisted above it.
        sums.extend(sync.fence_registers(b, acc))
    ctx.set(view.result, Tile(sums[:len(tile.regs)], tile.layout, tile.elem))


#: Register groups (of four f32) of the other split's partial loaded before any is added: 8 keep 32 registers in
#: flight, so that the loads overlap (a group at a time pays a round trip to L2 per 16 bytes of every thread).
GROUPS_IN_FLIGHT = 8


def _add_other_half(ctx: Ctx, view: SplitKSumOp, tile: Tile, record: dict, offsets: list) -> None:
    """Two splits: this program's partial is in its registers and the other's is loaded. a + b == b + a, so the
    sum is the same whichever program arrived last."""
    b = ctx.b
    other = b.sub(b.i32(1), ctx.get(view.split))
    base = _slot_base(ctx, ctx.get(view.tile), other, view.slot, record)
    mine = _vector(tile.regs)
    sums: list = []
    for first in range(0, len(offsets), GROUPS_IN_FLIGHT):
        batch = range(first, min(first + GROUPS_IN_FLIGHT, len(offsets)))
        loaded = [_load(b, base, offsets[g]) for g in batch]
        added = []
        for g, vec in zip(batch, loaded):
            parts = _elements(b, vec)
            added.extend(b.op(f"arith.addf {x}, {y} : f32", "f32") for x, y in zip(mine[g], parts))
        sums.extend(sync.fence_registers(b, added))
    ctx.set(view.result, Tile(sums[:len(tile.regs)], tile.layout, tile.elem))


def fence_gpu(b) -> None:
    """`fence.acq_rel.gpu`: order this thread's global accesses before and after it at GPU scope."""
    b.line('"llvm.inline_asm"() <{asm_string = "fence.acq_rel.gpu;", constraints = "", has_side_effects}> : '
           '() -> ()')


HANDLERS = {
    SplitKStoreOp.NAME: lower_split_k_store,
    SplitKArriveOp.NAME: lower_split_k_arrive,
    SplitKSumOp.NAME: lower_split_k_sum,
}
