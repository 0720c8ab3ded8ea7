"""Lowering of `scf.for` / `scf.if`: tiles carried through loops and branches are flattened to register lists.

`lower_for` emits the loop skeleton and leaves everything schedule-specific to the loop's `LoopSchedule`
(`schedule.py`): the first entry of `LOOP_SCHEDULES` whose `applies` accepts the loop lowers it, else the plain
schedule (program order, every dot completes). Adding a schedule means adding its module and one entry here.
"""
from __future__ import annotations

from tawa.ir.ops import ForOp, IfOp
from tawa.ir.traversal import ops_of

from . import arefs, sync
from .builder import V
from .context import Ctx
from .loop_values import flat_types, flatten, iter_layouts, unflatten
from .schedule import LoopSchedule, trip_count
from .tile_turns import pass_main_loop_turn, take_main_loop_turn
from .uniform_pipeline import UniformPipeline
from .ws_consumer_loop import WarpSpecializedConsumerLoop
from .ws_lookahead_loop import LookaheadConsumerLoop
from .ws_register_a_loop import RegisterAConsumerLoop
from .ws_softmax_pipeline_loop import SoftmaxPipelineLoop

#: Loop schedules in priority order (see schedule.py).
LOOP_SCHEDULES = [UniformPipeline, SoftmaxPipelineLoop, LookaheadConsumerLoop, RegisterAConsumerLoop,
                  WarpSpecializedConsumerLoop]


def select_schedule(ctx: Ctx, for_op) -> LoopSchedule:
    for cls in LOOP_SCHEDULES:
        if cls.applies(ctx, for_op):
            return cls(ctx, for_op)
    return LoopSchedule(ctx, for_op)


def _results(b, base: str, types: list) -> list:
    if len(types) == 1:
        return [V(base, types[0])]
    return [V(f"{base}#{i}", t) for i, t in enumerate(types)]


def lower_for(ctx: Ctx, op) -> None:
    b = ctx.b
    loop = ForOp(op)
    lb, ub, step = (ctx.get(v) for v in loop.bounds)
    layouts = iter_layouts(op)
    # Rings used in loops nested in this one: their use counts are carried from one iteration to the next.
    direct_rings, nested_rings = arefs.rings_used(ctx, op)
    shared = bool(ctx.tile_share and direct_rings)
    if shared:                          # ping-pong: the tiles of the groups before this one
        arefs.skip_tiles(ctx, direct_rings, lb, ub, step, ctx.tile_share[0])
        take_main_loop_turn(ctx, op)
    # An epilogue operand's copies started for this main loop (`staged_operand.lower_prefetch`)
    copies, ctx.main_loop_copies = (ctx.main_loop_copies, []) if direct_rings else ([], ctx.main_loop_copies)
    sched = select_schedule(ctx, op)
    sched.before_loop(ctx, lb, ub, step)
    peeled = sched.prologue(ctx, lb, ub, step)
    loop_lb, inits = peeled if peeled is not None else (lb, [ctx.get(v) for v in loop.inits])
    # at the body's second iteration (its first if the schedule peeled iterations before it: the first slot has
    # arrived then); before the loop if the body runs no more often than that
    first = 0 if peeled is not None else 1
    if copies:
        _issue(ctx, copies, b.cmpi("sle", trip_count(b, loop_lb, ub, step), b.const(first, lb.type)))
    flat_init = []
    for val, lay in zip(inits, layouts):
        flat_init.extend(flatten(ctx, val, lay))
    types = flat_types(op.results, layouts)
    if sched.opaque_inits:
        # Accumulators stay in flight across iterations: give them opaque initial values, so that LLVM neither
        # rematerialises constants into them on some path while a wgmma group may be in flight (ptxas then
        # serializes every wgmma, C7515) nor peels the first iteration around them.
        flat_init = sync.fence_registers(b, flat_init)
    extra = [(c, "i32") for c in arefs.ring_counts(ctx, nested_rings)] + sched.extra_iter_args(ctx)
    n_counts = len(nested_rings)
    flat_init = [v for v, _ in extra] + flat_init
    types = [t for _, t in extra] + types
    iv = V(b.fresh("iv"), lb.type)
    args = [V(b.fresh("it"), t) for t in types]
    base = b.fresh()
    res = f"{base}:{len(types)} = " if len(types) > 1 else (f"{base} = " if types else "")
    iter_text = ""
    if types:
        iter_text = " iter_args(" + ", ".join(f"{a} = {i}" for a, i in zip(args, flat_init)) + ") -> (" + \
                    ", ".join(types) + ")"
    b.line(f"{res}scf.for {iv} = {loop_lb} to {ub} step {step}{iter_text} : {lb.type} {{")
    saved = ctx.schedule
    ctx.loop_depth += 1
    with b.indented():
        ctx.set(loop.iv, iv)
        for barg, val in zip(loop.iter_args, unflatten(args[len(extra):], loop.iter_args, layouts)):
            ctx.set(barg, val)
        if sched.installs:
            ctx.schedule = sched
        arefs.set_ring_counts(ctx, nested_rings, args[:n_counts])
        sched.begin_iteration(ctx, iv, args[n_counts:len(extra)])
        if copies:
            _issue(ctx, copies, b.cmpi("eq", iv, b.add(loop_lb, b.mul(step, first))))
        ctx.lower_block(loop.body)
        out = []
        for v, lay in zip(loop.yield_op.operands, layouts):
            out.extend(flatten(ctx, ctx.get(v), lay))
        out = arefs.ring_counts(ctx, nested_rings) + sched.end_iteration(ctx, iv, lb, ub, step) + out
        if out:
            b.line(f"scf.yield {', '.join(o.name for o in out)} : {', '.join(o.type for o in out)}")
    b.line("}")
    ctx.loop_depth -= 1
    ctx.schedule = saved
    results = _results(b, base, types) if types else []
    arefs.set_ring_counts(ctx, nested_rings, results[:n_counts])
    sched.extra_results = results[n_counts:len(extra)]
    results = sched.after_loop(ctx, results[len(extra):])
    arefs.advance_rings(ctx, direct_rings, lb, ub, step)
    if shared:                          # ... and of the groups after it
        arefs.skip_tiles(ctx, direct_rings, lb, ub, step, ctx.tile_share[1] - 1 - ctx.tile_share[0])
        pass_main_loop_turn(ctx)
    for r, val in zip(op.results, unflatten(results, list(op.results), layouts)):
        ctx.set(r, val)


def _issue(ctx: Ctx, copies: list, when: V) -> None:
    with ctx.b.if_(when):
        for emit in copies:
            emit()


def lower_if(ctx: Ctx, op) -> None:
    b = ctx.b
    cond = ctx.get(IfOp(op).condition)
    layouts = iter_layouts(op)
    types = flat_types(op.results, layouts)

    def branch(region):
        def fn():
            if not len(region.blocks):
                return []
            blk = region.blocks[0]
            ctx.lower_block(blk)
            y = ops_of(blk)[-1]
            out = []
            for v, lay in zip(y.operands, layouts):
                out.extend(flatten(ctx, ctx.get(v), lay))
            # Tiles leave each branch through an opaque pin, so that LLVM keeps the branch rather than computing
            # both sides and selecting (which would undo an elided mask: see mask_elision).
            return sync.fence_registers(ctx.b, out) if any(lay is not None for lay in layouts) else out
        return fn

    # A conditional around pipelined loops (warp-specialized): it yields their rings' use counts.
    rings = arefs.rings_in(ctx, op)
    if rings:
        vals = arefs.branch_with_rings(ctx, rings, cond, branch(op.regions[0]), branch(op.regions[1]), types)
    elif not types:
        b.line(f"scf.if {cond} {{")
        with b.indented():
            ctx.lower_block(op.regions[0].blocks[0])
        if len(op.regions) > 1 and len(op.regions[1].blocks):
            b.line("} else {")
            with b.indented():
                ctx.lower_block(op.regions[1].blocks[0])
        b.line("}")
        return
    else:
        vals = b.if_else_values(cond, branch(op.regions[0]), branch(op.regions[1]), types)
    for r, val in zip(op.results, unflatten(vals, list(op.results), layouts)):
        ctx.set(r, val)
