"""The lookahead consumer loop: a warp-specialized consumer loop that issues the next iteration's first dot early.

Applies to a consumer `scf.for` marked `tawa.lookahead` by assign-warp-groups: its first dot reads a tile loaded
before the loop (A) and an aref slot's tile or its transpose (B) into a zero accumulator, and the iteration does
math on the result (attention: S = Q K^T, then the softmax). Iteration j then runs

    wait full[j+1] (if j+1 < n); issue S_{j+1} = A @ B(slot j+1)      -- a wgmma group left in flight
    <the body, with S_j for the first dot and slot j already acquired>   -- the softmax runs under S_{j+1}
    ...the other dots wait for completion as usual (which also completes S_{j+1})

with S_0 issued (and completed) before the loop, and the S registers carried to the next iteration as loop
arguments. S_j is complete at the top of iteration j because a wait of iteration j-1 completed every group: the
other dots' (attention's P V), or, in a loop with no other dot, the wait of the ring's release. This is
FlashAttention-3's intra-warpgroup overlap: the tensor cores compute the next block's scores while the warp group
does the exponentials of the current one. At j = n - 1 the early issue reads a slot nobody fills any more and its
result is discarded; the loop waits for it before its registers can be reused. With the consumer ping-pong, the
early issue is the tensor-core phase the two warp groups take turns on (see `ws_consumer_loop`).
"""
from __future__ import annotations

from tawa.errors import InternalCompilerError
from tawa.ir import attrs
from tawa.ir.ops import ArefGetOp, DotOp, ForOp, aref_of, readers_through_transposes, untransposed
from tawa.ir.traversal import defining_op, ops_of

from .. import layouts as L
from . import sync
from .arefs import barrier_ptr, release, slot_tile, stage_of
from .context import SmemTile, Tile
from .dot import issue_shared
from .schedule import trip_count
from .ws_consumer_loop import (WarpSpecializedConsumerLoop, pingpong_last_turn, pingpong_pass_turn,
                               pingpong_take_turn)


class LookaheadConsumerLoop(WarpSpecializedConsumerLoop):

    @classmethod
    def applies(cls, ctx, for_op) -> bool:
        return attrs.LOOKAHEAD.get(for_op) and super().applies(ctx, for_op)

    def __init__(self, ctx, for_op):
        super().__init__(ctx, for_op)
        body = ForOp(for_op).body
        self.dot = next(o for o in ops_of(body) if o.name == DotOp.NAME)
        dot = DotOp(self.dot)
        src, self.transposed = untransposed(dot.b)
        self.get = defining_op(src)
        values = ArefGetOp(self.get).values
        self.index = next(i for i, v in enumerate(values) if v == src)
        self.b_type = values[self.index].type
        self.ring = ctx.get(aref_of(self.get))
        # The ring holds nothing but what the early dot reads (attention's K in a ring of its own,
        # `aref_insertion.release_groups`), and a later dot of the body completes every wgmma group before the
        # next iteration: then S_j is complete at the top of iteration j and its slot is released right after
        # S_j's place, without a wait (S_{j+1} is in flight by then). A loop with no later dot keeps the ring's
        # usual release, whose wait is also the one that completes S_{j+1} before the back edge.
        dots = [o for o in ops_of(body) if o.name == DotOp.NAME]
        self.own_ring = len(dots) > 1 and all(u == self.dot for v in values
                                              for u in readers_through_transposes(v))
        self.a = ctx.get(dot.a)
        if not isinstance(self.a, SmemTile):
            raise InternalCompilerError("the lookahead dot's A operand is not in shared memory", op=dot.op.name)
        self.layout = L.parse(attrs.LAYOUT.get(self.dot))
        # The ping-pong orders the early issue here; the body's dot is never issued, so the base hooks stay idle.
        self.pingpong = self.pingpong_dot is not None
        self.pingpong_dot = None
        self.trips = self.s_cur = self.s_next = None

    # ---- the early issue ------------------------------------------------------------------------------------
    def _issue(self, ctx, stage) -> list:
        b = ctx.b
        rows, cols, elem, _ = slot_tile(self.b_type)
        offset = b.add(b.mul(stage, self.ring.slot_bytes), self.ring.base)
        if self.ring.value_offsets[self.index]:
            offset = b.add(offset, self.ring.value_offsets[self.index])
        bt = SmemTile(offset, rows, cols, elem, self.transposed)
        # The wgmma overwrites its accumulator (scale-d 0): its inputs are undefined rather than zeros, so that
        # no instruction writes or reads them while another wgmma group is in flight (ptxas would serialize
        # every wgmma, C7514).
        undef = b.op("llvm.mlir.undef : f32", "f32")
        return issue_shared(ctx, self.a, bt, [undef] * len(self.layout.regs), b.i32(0))

    def _wait_full(self, ctx, k) -> None:
        b = ctx.b
        stage, phase = stage_of(ctx, self.ring, k)
        with b.if_(b.cmpi("slt", k, self.trips)):
            sync.mbarrier_wait(b, barrier_ptr(ctx, self.ring.full, stage), phase)
        return stage

    # ---- hooks --------------------------------------------------------------------------------------------
    def before_loop(self, ctx, lb, ub, step) -> None:
        b = ctx.b
        self.trips = trip_count(b, lb, ub, step)
        stage = self._wait_full(ctx, b.i32(0))
        # S_0 completes before the loop: a wgmma in flight across the branch that skips an empty loop would make
        # ptxas serialize every wgmma (C7518). Later S_j are complete at the top of iteration j: the other dots
        # of iteration j-1 waited for every group.
        self.s_next = sync.fence_registers(b, self._issue(ctx, stage))
        sync.wgmma_wait(b, 0)

    def extra_iter_args(self, ctx) -> list:
        return [(r, "f32") for r in self.s_next]

    def begin_iteration(self, ctx, iv, extra: list) -> None:
        super().begin_iteration(ctx, iv, [])
        b = ctx.b
        stage = self._wait_full(ctx, b.add(self.k, 1))
        if self.pingpong:
            pingpong_take_turn(ctx, self.k)
        self.s_cur = sync.fence_registers(b, list(extra))
        self.s_next = self._issue(ctx, stage)
        if self.pingpong:
            pingpong_pass_turn(ctx)

    def end_iteration(self, ctx, iv, lb, ub, step) -> list:
        return list(self.s_next)

    def after_loop(self, ctx, results: list) -> list:
        b = ctx.b
        sync.wgmma_wait(b, 0)      # the last early issue (discarded) must not write registers reused later
        if self.pingpong:
            pingpong_last_turn(ctx, b.cmpi("sgt", self.trips, 0))
        return super().after_loop(ctx, results)

    # ---- queries ------------------------------------------------------------------------------------------
    def precomputed_dot(self, ctx, op):
        return Tile(self.s_cur, self.layout, "f32") if op == self.dot else None

    def slot_acquired(self, get_op) -> bool:
        return get_op == self.get

    def release_slot(self, ctx, consumed_op, ring) -> bool:
        """Slot j of a ring of the early dot's own is released where the iteration is done with it, right after
        S_j's place in the body: S_j is complete since the top of iteration j (the other dots of iteration j-1
        waited for every wgmma group), so no wait is needed, and none may be (S_{j+1} is in flight)."""
        if not (self.own_ring and ring is self.ring):
            return super().release_slot(ctx, consumed_op, ring)
        release(ctx, ring, stage_of(ctx, ring, self.k)[0])
        return True
