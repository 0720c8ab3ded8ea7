"""The warp-specialized consumer loop: a loop schedule for a consumer warp group's loop over aref slots.

Applies to an `scf.for` (inside a consumer region) that takes slots of an aref directly in its body. The
iteration index `k = (iv - lb) / step` is computed once per iteration and gives every aref op its stage and phase.

When every tile taken from the ring only feeds dots whose result merely accumulates into the next iteration's dot
(a GEMM main loop), one wgmma group stays in flight across iterations (`deferred`): the dot waits with one group
pending and `aref_consumed` releases the *previous* iteration's slot, whose wgmmas are then complete; after the
loop all groups are awaited and the last slot is released. That needs a ring of at least 2 slots (the consumer
holds two at once). Otherwise every dot completes before its slot is released. After the loop the rings it
drained are dead shared memory, which the epilogue's TMA-store staging may reuse (not in a persistent kernel,
whose producer is already filling them with the next tile's operands).

Ping-pong (the region carries `tawa.pingpong`: two consumer warp groups whose loop does math on a dot's result,
as attention's softmax): the two groups take turns issuing the iteration's first dot, ordered by two named
barriers of 256 threads. Group g waits on barrier `PINGPONG_BARRIERS[g]` before issuing and, once the wgmmas are
committed, arrives on the other group's barrier (unconditionally: a branch while wgmmas are in flight would make
ptxas serialize them); group 0 skips its wait in iteration 0 and waits once more after the loop, so every arrive
meets exactly one wait. The groups then run a tensor-core phase apart: one
group's softmax executes while the other's wgmmas occupy the tensor cores.
"""
from __future__ import annotations

from tawa import hopper
from tawa.ir import attrs
from tawa.ir.ops import (ArefGetOp, ArefPutOp, DotOp, ForOp, aref_of, enclosing_warp_group,
                         readers_through_transposes)
from tawa.ir.traversal import enclosing, is_ancestor, ops_of, parent_op, users

from . import sync
from .arefs import release, stage_of
from .schedule import (LoopSchedule, dot_only_accumulates, register_math, scale_d_for, trip_count,
                       zero_started_accumulators)

#: The named barriers of the two consumer groups' ping-pong (the highest ids; region barriers use the lowest).
PINGPONG_BARRIERS = (hopper.NAMED_BARRIERS - 2, hopper.NAMED_BARRIERS - 1)
#: Threads meeting at a ping-pong barrier: both consumer warp groups.
PINGPONG_THREADS = 2 * hopper.THREADS_PER_WARP_GROUP


def pingpong_take_turn(ctx, k, first: int = 0) -> None:
    """`bar.sync` on this group's barrier before its tensor-core phase of iteration `k`, except group 0 at the
    loop's first iteration `first` (the rule `pingpong_waits` states)."""
    b = ctx.b
    group = ctx.warp_group()
    with b.if_(b.or_(b.cmpi("ne", group, 0), b.cmpi("sgt", k, first))):
        sync.named_barrier_sync(b, b.add(group, PINGPONG_BARRIERS[0]), PINGPONG_THREADS)


def pingpong_pass_turn(ctx) -> None:
    """`bar.arrive` on the other group's barrier once this group's wgmmas are committed (unconditionally: a branch
    while wgmmas are in flight would make ptxas serialize them)."""
    b = ctx.b
    sync.named_barrier_arrive(b, b.sub(b.i32(PINGPONG_BARRIERS[1]), ctx.warp_group()), PINGPONG_THREADS)


def pingpong_last_turn(ctx, turns_passed) -> None:
    """After the loop, group 0 takes group 1's last passing (when `turns_passed`, an i1), so that every arrive
    meets one wait and no arrival is left on the barrier."""
    b = ctx.b
    with b.if_(b.and_(b.cmpi("eq", ctx.warp_group(), 0), turns_passed)):
        sync.named_barrier_sync(b, b.i32(PINGPONG_BARRIERS[0]), PINGPONG_THREADS)


def pingpong_waits(group: int, k: int) -> bool:
    """Whether consumer group `group` waits for its turn before the first dot of iteration `k` (the rule the
    emitted `bar.sync` condition implements)."""
    return group != 0 or k > 0


def pingpong_arrives(group: int, k: int, trips: int) -> bool:
    """Whether group `group` hands the turn to the other group after issuing iteration `k`'s first dot."""
    return True


def pingpong_final_wait(group: int, trips: int) -> bool:
    """Whether group `group` waits on its barrier once more after the loop (taking the other's last arrive)."""
    return group == 0 and trips > 0


#: The least `setmaxnreg` budget of a consumer group that double-buffers a B computed in registers (converting the
#: next B while its dot is in flight): with two groups' 232 a W8A16 GEMM ran 1.2-1.6x the waiting dot (H200),
#: with three groups' 160 it spilled 144-256 bytes more and ran 0.77-0.98x.
STAGED_B_MIN_REGISTERS = 200


class WarpSpecializedConsumerLoop(LoopSchedule):
    installs = True

    @classmethod
    def applies(cls, ctx, for_op) -> bool:
        return any(o.name == ArefGetOp.NAME for o in ops_of(ForOp(for_op).body))

    def __init__(self, ctx, for_op):
        super().__init__(ctx, for_op)
        loop = ForOp(for_op)
        self.k = None
        self._zero_acc = zero_started_accumulators(for_op)
        ops = ops_of(loop.body)
        gets = [o for o in ops if o.name == ArefGetOp.NAME]
        self.async_dots = {o for o in ops if o.name == DotOp.NAME and dot_only_accumulates(for_op, o)}
        # (a B computed in registers leaves its dot in flight only as a register overlap, and where the group's
        # budget leaves room for the next B beside the accumulators in flight: `_reaches_staged_b`)
        self.overlap = ctx.register_overlap and ctx.register_budget() >= STAGED_B_MIN_REGISTERS
        self.stages_b = False
        self.deferred = bool(self.async_dots) and all(
            ctx.get(aref_of(g)).depth >= 2 and all(self._feeds_async_dots(r) for r in ArefGetOp(g).values)
            for g in gets)
        if self.deferred and self.stages_b:
            ctx.overlaps.add("B double-buffered")
        self.released: list = []
        region = enclosing_warp_group(for_op)
        dots = [o for o in ops if o.name == DotOp.NAME]
        self.pingpong_dot = dots[0] if dots and region is not None and attrs.PINGPONG.get(region) \
            and ctx.num_warps == 2 * hopper.WARPS_PER_GROUP and not self.deferred else None
        self.trips = None

    def _feeds_async_dots(self, value) -> bool:
        """Whether a slot's tile is read by dots that stay in flight only: directly, or through math in registers
        whose results reach only their B operand (a weight converted after its load: the dot stages that B in
        shared memory of its own, `dot.stage_b`, double-buffered here, `staging_parity`)."""
        for u in readers_through_transposes(value):
            if u.name == DotOp.NAME:
                if u not in self.async_dots:
                    return False
            elif not self._reaches_staged_b(u):
                return False
            else:
                self.stages_b = True
        return True

    def _reaches_staged_b(self, op) -> bool:
        if not (self.overlap and op.results and parent_op(op) == self.for_op and register_math(op)):
            return False
        for r in op.results:
            for use in r.uses:
                user = use.owner.operation if hasattr(use.owner, "operation") else use.owner
                if user.name == DotOp.NAME:
                    if not (user in self.async_dots and use.operand_number == DotOp.B):
                        return False
                elif not self._reaches_staged_b(user):
                    return False
        return True

    # ---- hooks --------------------------------------------------------------------------------------------
    @property
    def opaque_inits(self) -> bool:
        return True

    def before_loop(self, ctx, lb, ub, step) -> None:
        if self.pingpong_dot is not None:
            b = ctx.b
            self.trips = trip_count(b, lb, ub, step)

    def begin_iteration(self, ctx, iv, extra: list) -> None:
        loop = ForOp(self.for_op)
        b = ctx.b
        lb, step = ctx.get(loop.lower), ctx.get(loop.step)
        self.k = b.binary("divsi", b.sub(iv, lb), step)

    def after_loop(self, ctx, results: list) -> list:
        """Wait for the dots still in flight and release the slot of the last iteration; then the rings this loop
        drained are dead (every put has a matching get in this loop)."""
        b = ctx.b
        loop = ForOp(self.for_op)
        if self.deferred:
            sync.wgmma_wait(b, 0)
            lb, ub, step = (ctx.get(v) for v in loop.bounds)
            trips = trip_count(b, lb, ub, step)
            with b.if_(b.cmpi("sgt", trips, 0)):
                for ring in self.released:
                    stage, _ = stage_of(ctx, ring, b.sub(trips, 1))
                    release(ctx, ring, stage)
        self.mark_drained_rings(ctx)
        if self.deferred:
            results = sync.fence_registers(b, results)
        if self.pingpong_dot is not None:
            pingpong_last_turn(ctx, b.cmpi("sgt", self.trips, 0))
        return results

    def mark_drained_rings(self, ctx) -> None:
        """After the loop, rings whose every get is in this loop are dead shared memory (not in a persistent
        kernel, whose producer is already filling them for the next tile, nor in a loop the program writes around
        this one, whose next iteration the producer is filling them for)."""
        nested = enclosing(self.for_op, ("scf.for", "scf.while")) is not None
        for op in ops_of(ForOp(self.for_op).body) if not (ctx.persistent or nested) else ():
            if op.name == ArefGetOp.NAME:
                aref = aref_of(op)
                ring = ctx.get(aref)
                if all(u.name == ArefPutOp.NAME or is_ancestor(self.for_op, u) for u in users(aref)):
                    ctx.dead_smem.append((ring.base, ring.depth * ring.slot_bytes))

    # ---- queries ------------------------------------------------------------------------------------------
    def keeps_dot_async(self, op) -> bool:
        return self.deferred and op in self.async_dots

    def staging_parity(self, ctx, op):
        """A dot left in flight with a B computed in registers writes it into one of two buffers in turn: the
        one its group of two iterations ago read, complete since the last iteration's wait (`dot.stage_b`)."""
        return ctx.b.and_(self.k, 1) if self.keeps_dot_async(op) else None

    def scale_d(self, ctx, op):
        return scale_d_for(ctx, self.for_op, op, self._zero_acc, self.k)

    def before_dot_issue(self, ctx, op) -> None:
        """`bar.sync` on the group's own barrier when `pingpong_waits(group, k)`."""
        if self.pingpong_dot is not None and op == self.pingpong_dot:
            pingpong_take_turn(ctx, self.k)

    def after_dot_issue(self, ctx, op) -> None:
        """`bar.arrive` on the other group's barrier when `pingpong_arrives(group, k, trips)`."""
        if self.pingpong_dot is not None and op == self.pingpong_dot:
            pingpong_pass_turn(ctx)

    def iteration_index(self, ctx, for_op):
        return self.k if for_op == self.for_op else None

    def release_slot(self, ctx, consumed_op, ring) -> bool:
        if not (self.deferred and parent_op(consumed_op) == self.for_op):
            return False
        # The dots of this iteration stay in flight; the previous iteration's group is complete (the dot waited
        # with one group pending), so its slot is the one released.
        b = ctx.b
        with b.if_(b.cmpi("sgt", self.k, 0)):
            stage, _ = stage_of(ctx, ring, b.sub(self.k, 1))
            release(ctx, ring, stage)
        self.released.append(ring)
        return True
