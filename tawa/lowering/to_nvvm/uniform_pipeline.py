"""The uniform-warp software pipeline: a loop schedule in which every warp issues, waits and computes.

Applies to an `scf.for` marked by the `software-pipeline` pass (`tawa.num_stages = S`, its dot-operand loads
`tawa.pipelined`). Every pipelined load gets a ring of S shared-memory slots; each slot has one `full` mbarrier
(arrival count 1: the elected issuing thread's expect-tx).

    prologue: issue the loads of iterations 0 .. S-2 into ring slots 0 .. S-2
    iteration i (slot i % S, parity (i / S) & 1):
        wait on full[slot]; run the body (its dots stay asynchronous: wgmma.wait_group 1)
        issue the loads of iteration i + S - 1 into slot (i - 1) % S, which the previous iteration's
        (now finished) wgmma group was reading
    after the loop: wgmma.wait_group 0

With S = 1 the loads are issued at the top of each iteration and every dot waits for its own wgmma. The
iteration counter is a loop-carried i32 the schedule adds in front of the program's own iteration arguments.

A loop nested in another (a batch or a tile loop the program writes around its K loop) restarts its counter
at 0 each time it runs, so its barriers are initialised again before its prologue: once every thread is past the
previous run (whose every issued copy was waited for) and the epilogue's bulk stores have finished reading shared
memory that the ring may now overwrite.
"""
from __future__ import annotations

from tawa.errors import InternalCompilerError
from tawa.ir import attrs
from tawa.ir.ops import ForOp, LoadOp
from tawa.ir.traversal import defining_op, enclosing, ops_of
from tawa.ir.types import is_tile

from . import sync
from .context import Ctx, SmemTile
from .elementwise import _props, _scalar_op
from .memory import TmaLoad, issue_elected, restart_barriers
from .schedule import LoopSchedule, dot_only_accumulates, scale_d_for, zero_started_accumulators


class UniformPipeline(LoopSchedule):
    installs = True

    @classmethod
    def applies(cls, ctx, for_op) -> bool:
        return attrs.NUM_STAGES.get(for_op) > 0

    def __init__(self, ctx: Ctx, for_op):
        super().__init__(ctx, for_op)
        self.stages = attrs.NUM_STAGES.get(for_op)
        loop = ForOp(for_op)
        self.iv = loop.iv
        self.loads = []
        self.inside = set()
        self._collect(loop.body)
        ctx.smem.push()            # the rings are freed after the loop
        self.tma = {op: TmaLoad(ctx, op) for op in self.loads}
        self.ring = {op: ctx.smem.alloc(self.stages * self.tma[op].bytes) for op in self.loads}
        self.bytes = sum(t.bytes for t in self.tma.values())
        self.full = ctx.alloc_barriers(self.stages, 1)
        self.nested = enclosing(for_op, ("scf.for", "scf.while")) is not None
        self.counter = None
        self.slot_offsets = {}
        self._zero_acc = zero_started_accumulators(for_op)

    def _collect(self, block):
        for op in ops_of(block):
            for r in op.results:
                self.inside.add(r)
            if op.name == LoadOp.NAME and attrs.PIPELINED.get(op):
                self.loads.append(op)
            for region in op.regions:
                for blk in region.blocks:
                    self._collect(blk)

    # ---- hooks --------------------------------------------------------------------------------------------
    def before_loop(self, ctx: Ctx, lb, ub, step) -> None:
        b = ctx.b
        if self.nested:
            self._restart_barriers(ctx)
        for s in range(self.stages - 1):
            iv_s = b.add(lb, b.mul(step, s)) if s else lb
            self.issue(ctx, iv_s, b.i32(s), b.cmpi("slt", iv_s, ub))

    def _restart_barriers(self, ctx: Ctx) -> None:
        sync.bulk_wait_read(ctx.b, 0)   # (the issuing thread's epilogue stores of the previous outer iteration)
        restart_barriers(ctx, [ctx.smem_ptr(self.full + 8 * s) for s in range(self.stages)])

    @property
    def opaque_inits(self) -> bool:
        # Accumulators stay in flight across iterations: opaque initial values keep LLVM from rematerialising
        # constants into them while a wgmma group may be in flight (ptxas then serializes every wgmma, C7515).
        return self.stages > 1

    def extra_iter_args(self, ctx: Ctx) -> list:
        return [(ctx.b.i32(0), "i32")]

    def begin_iteration(self, ctx: Ctx, iv, extra: list) -> None:
        b = ctx.b
        self.counter = counter = extra[0]
        slot = b.remu(counter, self.stages)
        phase = b.and_(b.divu(counter, self.stages), 1)
        if self.stages == 1:
            self.issue(ctx, iv, slot, None)
        sync.mbarrier_wait(b, ctx.smem_ptr(b.add(b.mul(slot, 8), self.full)), phase)
        self.slot_offsets = {k: b.add(b.mul(slot, self.tma[k].bytes), self.ring[k]) for k in self.tma}

    def end_iteration(self, ctx: Ctx, iv, lb, ub, step) -> list:
        b = ctx.b
        if self.stages > 1:
            if ctx.num_warps > 4:
                # Every warp group's wgmma of the previous iteration must be done with the slot we refill.
                ctx.sync_threads()
            iv_n = b.add(iv, b.mul(step, self.stages - 1))
            slot_n = b.remu(b.add(self.counter, self.stages - 1), self.stages)
            self.issue(ctx, iv_n, slot_n, b.cmpi("slt", iv_n, ub))
        return [b.add(self.counter, 1)]

    def after_loop(self, ctx: Ctx, results: list) -> list:
        if self.stages > 1:
            sync.wgmma_wait(ctx.b, 0)
            results = sync.fence_registers(ctx.b, results)
        ctx.smem.pop()
        return results

    # ---- queries ------------------------------------------------------------------------------------------
    def owns(self, op) -> bool:
        return op in self.tma

    def current_tile(self, op) -> SmemTile:
        t = self.tma[op]
        return SmemTile(self.slot_offsets[op], t.rows, t.cols, t.elem)

    def keeps_dot_async(self, op) -> bool:
        return self.stages >= 2 and dot_only_accumulates(self.for_op, op)

    def scale_d(self, ctx: Ctx, op):
        return scale_d_for(ctx, self.for_op, op, self._zero_acc, self.counter)

    # ---- emission -----------------------------------------------------------------------------------------
    def offsets_at(self, ctx: Ctx, load_op, iv) -> list:
        """The load's offsets evaluated for induction value `iv` (re-emitting the scalar slice of the body)."""
        memo = {}

        def ev(value):
            if value == self.iv:
                return iv
            if value not in self.inside:
                return ctx.get(value)
            if value in memo:
                return memo[value]
            owner = defining_op(value)
            if owner is None or not owner.name.startswith(("arith.", "math.")) or is_tile(value.type):
                raise InternalCompilerError("a pipelined load's offset is not scalar arithmetic", op=load_op.name)
            if owner.name == "arith.constant":
                r = ctx.b.op(f"arith.constant {owner.attributes['value']}", str(value.type))
            else:
                r = _scalar_op(ctx.b, owner.name, _props(owner), [ev(o) for o in owner.operands], str(value.type))
            memo[value] = r
            return r
        return [ev(v) for v in LoadOp(load_op).offsets]

    def issue(self, ctx: Ctx, iv, slot, pred) -> None:
        b = ctx.b

        def body():
            bar = ctx.smem_ptr(b.add(b.mul(slot, 8), self.full))
            sync.mbarrier_expect_tx(b, bar, self.bytes)
            for op in self.loads:
                t = self.tma[op]
                dst = b.add(b.mul(slot, t.bytes), self.ring[op])
                t.issue(ctx, self.offsets_at(ctx, op, iv), dst, bar)
        issue_elected(ctx, pred, body)
