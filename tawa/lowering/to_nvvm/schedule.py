"""The loop-schedule interface of the NVVM conversion: how one `scf.for` is lowered.

`control.lower_for` emits the loop skeleton (iteration arguments flattened to registers, the `scf.for`, the yield)
and asks the loop's schedule for everything that differs between schedules. While the body is lowered the
schedule is `ctx.schedule`, which the op lowerings query (a dot asks whether it may stay in flight; a load asks
whether the schedule already issued it; an aref op asks for the iteration index).

A schedule is one module holding one `LoopSchedule` subclass; `LOOP_SCHEDULES` in `control` lists them in
priority order and the first whose `applies` accepts the loop lowers it (else this plain `LoopSchedule`). Adding a schedule (ping-pong consumers, persistent tile
loops, attention pipelines) means adding a module and one entry to that list.

The hooks, in the order `lower_for` calls them (each may emit code at that point):

    sched = Schedule(ctx, for_op)             construction: analysis and resource allocation, emits nothing
    sched.before_loop(ctx, lb, ub, step)       prologue before the loop (e.g. the first loads in flight)
    sched.opaque_inits                         whether the carried accumulators get opaque initial values
    sched.prologue(ctx, lb, ub, step)          peeled iterations; may move the lower bound and the initial values
    sched.extra_iter_args(ctx)                 schedule-owned loop-carried values (e.g. an iteration counter)
      scf.for ... {
    sched.begin_iteration(ctx, iv, extra)      top of the body (e.g. wait for this iteration's slot)
      <body>
    sched.end_iteration(ctx, iv, lb, ub, step) bottom of the body; returns the next values of extra iter args
      }
    sched.after_loop(ctx, results)             epilogue; returns the loop's results without the extra ones
                                               (which it finds in `sched.extra_results`)
"""
from __future__ import annotations

from tawa.ir import attrs
from tawa.ir.ops import ArefGetOp, DotOp, ForOp, is_zero_splat
from tawa.ir.traversal import defining_op


class LoopSchedule:
    """A plain loop: every op runs in program order, every dot completes before its result is used. It does not
    replace `ctx.schedule` (an inner plain loop stays under its enclosing loop's schedule)."""

    #: Whether `ctx.schedule` is this object while the body is lowered.
    installs = False

    def __init__(self, ctx, for_op):
        self.for_op = for_op

    @classmethod
    def applies(cls, ctx, for_op) -> bool:
        return True

    # ---- hooks --------------------------------------------------------------------------------------------
    def before_loop(self, ctx, lb, ub, step) -> None:
        pass

    @property
    def opaque_inits(self) -> bool:
        return False

    def prologue(self, ctx, lb, ub, step):
        """Emit iterations peeled before the loop: returns (the loop's new lower bound, the lowered initial values
        of the program's iteration arguments), or None to keep both."""
        return None

    def extra_iter_args(self, ctx) -> list:
        """[(initial value, type)] of loop-carried values the schedule adds before the program's own."""
        return []

    def begin_iteration(self, ctx, iv, extra: list) -> None:
        pass

    def end_iteration(self, ctx, iv, lb, ub, step) -> list:
        return []

    def after_loop(self, ctx, results: list) -> list:
        return results

    # ---- queries of the op lowerings ----------------------------------------------------------------------
    def owns(self, load_op) -> bool:
        """Whether the schedule issues this load itself (the load lowering then only takes its shared tile)."""
        return False

    def current_tile(self, load_op):
        raise NotImplementedError

    def keeps_dot_async(self, dot_op) -> bool:
        """Whether the dot may leave its wgmma group in flight past the end of its lowering."""
        return False

    def scale_d(self, ctx, dot_op):
        """The wgmma accumulate flag of the dot's first k-step (0: overwrite a zero-started accumulator)."""
        return ctx.b.i32(1)

    def precomputed_dot(self, ctx, dot_op):
        """The dot's result as a register tile if the schedule already issued it (and waited for it), else None."""
        return None

    def slot_acquired(self, get_op) -> bool:
        """Whether the schedule already waited for the slot this `aref_get` takes."""
        return False

    def defers(self, op) -> bool:
        """Whether the schedule lowers this op of the loop body itself, later than its place in program order
        (the body's lowering then skips it)."""
        return False

    def before_dot(self, ctx, dot_op) -> None:
        """Called when the dot's lowering begins, before its operands are taken (a schedule may issue other work
        or lower the ops it deferred here)."""

    def before_dot_issue(self, ctx, dot_op) -> None:
        """Called right before the dot's wgmmas are issued (after its operands are ready)."""

    def after_dot_issue(self, ctx, dot_op) -> None:
        """Called after the dot's wgmma group is committed, before any wait for it."""

    def iteration_index(self, ctx, for_op):
        """The 0-based iteration index of `for_op` if this schedule computes it, else None."""
        return None

    def release_slot(self, ctx, consumed_op, ring) -> bool:
        """Take over the release of an aref slot (`aref_consumed`); False: release it now, as written."""
        return False

    def staging_parity(self, ctx, dot_op):
        """Which of two staging buffers a dot whose B is computed in registers writes this iteration (an i32 0 or
        1) when the dot stays in flight, or None: one buffer, and the dot waits for its wgmmas."""
        return None

    def a_fragments(self, ctx, dot_op):
        """The packed wgmma A fragments (i32 registers) of a dot whose A the schedule computed itself, or None."""
        return None

    def after_dot_wait(self, ctx, dot_op) -> None:
        """Called after the wait that follows the dot's issue (with whatever groups it leaves pending)."""


# ---- helpers and analyses the schedules share -----------------------------------------------------------------
#: Non-arith ops that compute a tile from tiles in registers alone (no memory access, no control flow).
REGISTER_OPS = ("tawa.splat", "tawa.broadcast", "tawa.expand_dims", "tawa.convert")


def register_math(op) -> bool:
    """Whether `op` is pure math in registers (elementwise, broadcasts, conversions): a schedule may move it."""
    return op.name.startswith(("arith.", "math.")) or op.name in REGISTER_OPS


def trip_count(b, lb, ub, step):
    """Iterations of `scf.for lb to ub step step` (non-positive when the loop does not run), as an i32 value."""
    return b.binary("divsi", b.add(b.sub(ub, lb), b.sub(step, 1)), step)


def zero_started_accumulators(for_op) -> set:
    """Iter-arg indices whose initial value is a zero splat (their first dot may overwrite instead of add)."""
    return {i for i, init in enumerate(ForOp(for_op).inits) if is_zero_splat(init)}


def scale_d_for(ctx, for_op, dot_op, zero_started: set, iteration):
    """0 on the first iteration for a dot accumulating into a zero-started iter arg, else 1."""
    loop = ForOp(for_op)
    for i in zero_started:
        if loop.iter_args[i] == DotOp(dot_op).acc:
            return ctx.b.cast("extui", ctx.b.cmpi("ne", iteration, 0), "i32")
    return ctx.b.i32(1)


def a_from_shared(dot_op) -> bool:
    """Whether the dot's A operand is a shared-memory tile (a TMA-loaded tile, possibly transposed, or an aref
    slot), as opposed to registers computed by the program."""
    owner = defining_op(DotOp(dot_op).a)
    return owner is not None and (attrs.SMEM.get(owner) or owner.name == ArefGetOp.NAME)


def dot_only_accumulates(for_op, op) -> bool:
    """A dot may stay in flight across the iteration only if its A operand is in shared memory (wgmma reads
    register operands asynchronously: registers the next iteration rewrites would race it) and its result just
    flows, through the loop's yield, into the accumulator of a dot of the next iteration (reading it earlier would
    race)."""
    return a_from_shared(op) and result_only_accumulates(for_op, op)


def result_only_accumulates(for_op, op) -> bool:
    """Whether the dot's result only flows, through the loop's yield, into the accumulator of a dot of the next
    iteration."""
    loop = ForOp(for_op)
    yield_op = loop.yield_op
    for use in DotOp(op).result.uses:
        owner = use.owner.operation if hasattr(use.owner, "operation") else use.owner
        if owner != yield_op:
            return False
        for u2 in loop.iter_args[use.operand_number].uses:
            o2 = u2.owner.operation if hasattr(u2.owner, "operation") else u2.owner
            if not (o2.name == DotOp.NAME and u2.operand_number == DotOp.ACC):
                return False
    return True
