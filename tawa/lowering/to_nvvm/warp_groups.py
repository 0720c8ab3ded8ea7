"""Lowering of warp-group regions (`scf.execute_region {tawa.warp_group = ...}`) of a specialized kernel.

Each region becomes an `scf.if` on the warp-group index (`tid / 128` in [first, first + count)); inside,
`setmaxnreg` moves the group to its `tawa.max_registers`, then the body is lowered with a child context whose
thread index, warps and per-thread coordinates are relative to the region's first thread, and whose barrier is the
named barrier 1 + first warp group over the region's threads (the other regions never reach a CTA barrier).

The producer region (scalar control, `scf.for` without iter_args, deferred loads, puts) runs in its first warp
only: one elected lane issues the copies, so only that warp waits on barriers; the other producer warps only give
their registers back. Consumer regions go back to the conversion's own block lowering (`ctx.lower_block`).
"""
from __future__ import annotations

from tawa import hopper
from tawa.errors import CompilationError, InternalCompilerError
from tawa.ir import attrs
from tawa.ir.location import where
from tawa.ir.ops import (ArefPutOp, DimOp, ForOp, IfOp, LoadOp, LoadScalarOp, NextTileOp, TilePutOp,
                         warp_group_role)
from tawa.ir.traversal import ops_of

from . import arefs, dynamic_tiles, elementwise, memory, sync
from .arefs import DeferredLoad, lower_aref_put
from .builder import V
from .context import Ctx
from .program_ids import SREG_OPS, lower_program_index
from ..ws_ir import is_scalar_control


def region_context(ctx: Ctx, first_group: int, num_groups: int) -> Ctx:
    """A conversion context for code run by warp groups [first, first + num): thread index, warps and per-thread
    coordinates relative to the region; values, parameters, shared memory and barriers shared with `ctx`."""
    child = Ctx(ctx.b, ctx.params, ctx.smem, hopper.WARPS_PER_GROUP * num_groups, env=ctx.env,
                lowerer=ctx.lowerer)
    child.barriers = ctx.barriers
    child.pid_group = ctx.pid_group
    child.persistent = ctx.persistent
    child.tma = ctx.tma
    child.cluster = ctx.cluster
    child.register_overlap = ctx.register_overlap
    child.has_dots = ctx.has_dots
    child.overlaps = ctx.overlaps
    # Named barrier 0 is the CTA barrier; each region gets its own (ids 1..15), over its threads only.
    child.barrier_id = 1 + first_group
    tid = ctx.tid()
    child._tid = tid if first_group == 0 else ctx.b.op(
        f"arith.subi {tid}, {ctx.b.i32(hopper.THREADS_PER_WARP_GROUP * first_group)} : i32", "i32", prelude=True)
    return child


def lower_warp_group(ctx: Ctx, op) -> None:
    role = warp_group_role(op)
    if role is None:
        raise InternalCompilerError(f"scf.execute_region{where(op)} is not a warp group", op=op.name)
    first = attrs.FIRST_WARP_GROUP.get(op)
    if first is None:
        raise InternalCompilerError("assign-warp-groups must place warp groups before the conversion", op=op.name)
    b = ctx.b
    count = attrs.NUM_WARP_GROUPS.get(op)
    wg = b.shr(ctx.tid(), 7)
    cond = b.cmpi("eq", wg, first) if count == 1 else b.and_(b.cmpi("uge", wg, first),
                                                                b.cmpi("ult", wg, first + count))
    with b.if_(cond):
        budget = attrs.MAX_REGISTERS.get(op)
        if budget is not None:
            sync.setmaxnreg(b, budget, ctx.num_threads, ctx.ctas_per_sm)
        child = region_context(ctx, first, count)
        child.max_registers = budget
        share = attrs.TILE_SHARE.get(op)
        child.tile_share = tuple(share) if share else None
        block = op.regions[0].blocks[0]
        if role == attrs.PRODUCER:
            with b.if_(child.is_warp0()):
                lower_producer_block(child, block)
                for ring in [v for v in ctx.env.values() if isinstance(v, arefs.Ring) and v.multicast]:
                    arefs.drain(child, ring)
        else:
            child.lower_block(block)
            if child.main_loop_copies:
                # (an epilogue would wait forever on the mbarriers of copies never issued)
                raise InternalCompilerError("an epilogue operand's prefetch found no main loop to issue its "
                                            "copies in", op=op.name)
            if child.stores_in_flight:
                # Shared memory must outlive the TMA stores that read it: wait before the CTA may exit.
                memory.wait_stores_read(child)


def lower_producer_block(ctx: Ctx, block) -> None:
    """The producer's code (a block, or a list of ops): scalar control, loops without iter_args, deferred loads
    and puts; with dynamic tiles, its tile loop and the ops that fetch and hand over tiles."""
    for op in block if isinstance(block, list) else ops_of(block):
        name = op.name
        if name == "scf.yield":
            if len(op.operands):
                raise InternalCompilerError("the producer's loops carry no values", op=name)
            continue
        if name == LoadOp.NAME and attrs.AREF_LOAD.get(op):
            ctx.set(LoadOp(op).result, DeferredLoad(op))
        elif name == ArefPutOp.NAME:
            lower_aref_put(ctx, op)
        elif name in SREG_OPS:
            lower_program_index(ctx, op)
        elif name == DimOp.NAME:
            memory.lower_dim(ctx, op)
        elif name == LoadScalarOp.NAME:
            memory.lower_load_scalar(ctx, op)
        elif name == "arith.constant":
            elementwise.lower_constant(ctx, op)
        elif is_scalar_control(op):
            elementwise.lower_elementwise(ctx, op)
        elif name == ForOp.NAME and len(op.results) == 0:
            lower_producer_loop(ctx, op)
        elif name == IfOp.NAME and len(op.results) == 0:
            lower_producer_if(ctx, op)
        elif name == "scf.while":
            dynamic_tiles.lower_tile_loop(ctx, op, lower_producer_block)
        elif name == NextTileOp.NAME:
            dynamic_tiles.lower_next_tile(ctx, op)
        elif name == TilePutOp.NAME:
            dynamic_tiles.lower_tile_put(ctx, op)
        else:
            raise CompilationError(f"'{name}'{where(op)} cannot run in the producer warp group")


def lower_producer_loop(ctx: Ctx, op) -> None:
    """A producer loop: no iter_args of the program's, but the use counts of the rings its nested loops fill
    (a persistent kernel's tile loop) are carried from one iteration to the next."""
    b = ctx.b
    loop = ForOp(op)
    lb, ub, step = (ctx.get(v) for v in loop.bounds)
    direct, nested = arefs.rings_used(ctx, op)
    counts = arefs.ring_counts(ctx, nested)
    iv = b.fresh("piv")
    args = [V(b.fresh("it"), "i32") for _ in counts]
    res = b.fresh()
    head = f"scf.for {iv} = {lb} to {ub} step {step}"
    if counts:
        head = (f"{res}{':' + str(len(counts)) if len(counts) > 1 else ''} = {head} iter_args("
                + ", ".join(f"{a} = {c}" for a, c in zip(args, counts)) + ") -> ("
                + ", ".join("i32" for _ in counts) + ")")
    b.line(f"{head} : {lb.type} {{")
    with b.indented():
        ctx.set(loop.iv, V(iv, lb.type))
        arefs.set_ring_counts(ctx, nested, args)
        lower_producer_block(ctx, loop.body)
        if counts:
            out = arefs.ring_counts(ctx, nested)
            b.line(f"scf.yield {', '.join(o.name for o in out)} : {', '.join('i32' for _ in out)}")
    b.line("}")
    if counts:
        results = [V(res, "i32")] if len(counts) == 1 else [V(f"{res}#{i}", "i32") for i in range(len(counts))]
        arefs.set_ring_counts(ctx, nested, results)
    arefs.advance_rings(ctx, direct, lb, ub, step)


def lower_producer_if(ctx: Ctx, op) -> None:
    """A producer conditional around pipelined loops (a query block past its sequence's end skips its loop): the
    consumers take the same branch, and both carry the rings' use counts out of it."""
    def branch(region):
        def fn():
            if len(region.blocks):
                lower_producer_block(ctx, region.blocks[0])
            return []
        return fn
    arefs.branch_with_rings(ctx, arefs.rings_in(ctx, op), ctx.get(IfOp(op).condition), branch(op.regions[0]),
                            branch(op.regions[1]), [])


HANDLERS = {"scf.execute_region": lower_warp_group}
