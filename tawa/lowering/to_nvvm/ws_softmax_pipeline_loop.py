"""The softmax-pipelined consumer loop: attention's loop with its P·V product in flight under the next softmax.

Applies to a lookahead loop (`ws_lookahead_loop`: the first dot S = A @ B(slot) has A loaded before the loop)
with a second dot D2 whose A operand is computed in registers (attention's P), whose B operand is a tile of the
same aref slot (V), and whose result only flows, as iteration argument `acc`, into the next iteration, where the
body reads acc solely to compute D2's accumulator input (attention's rescale `acc * alpha`: the "chain").

The loop is rotated by one iteration so that D2 of iteration k-1 runs under the math of iteration k:

    prologue (k = 0): wait full[0]; S_0 = A @ B(slot 0); wait; <the body's math on S_0>; pack P_0
    for k in 1..n-1:
        wait full[k]; issue S_k = A @ B(slot k)
        acc' = chain(acc, values of iteration k-1); issue D2_{k-1} = P_{k-1} @ V_{k-1} + acc'
        wgmma.wait_group 1                  -- S_k is done, D2_{k-1} still runs
        <the body's math on S_k>            -- the softmax, under D2_{k-1}
        wgmma.wait_group 0; release slot k-1; pack P_k
    epilogue: acc' = chain(...); D2_{n-1}; wait; release slot n-1

This is FlashAttention-3's intra-warpgroup overlap: S_k and D2_{k-1} reach the tensor cores back to back and
the warp group's exponentials run while the tensor cores work, instead of the warp group idling while its P·V
completes. No wgmma group is in flight across the loop's back edge (ptxas serializes every wgmma when a
register of a group that may still be in flight there is read, C7514), and every register an in-flight wgmma
reads or writes is left alone until a wait covers it. What D2_{k-1} needs in iteration k -- P_{k-1} packed into
wgmma A fragments, V_{k-1}'s shared address, and the values of iteration k-1 the chain reads (alpha) -- is
carried as loop arguments. With n = 0 the prologue computes on a slot nobody filled, and its results are
discarded (the loop's results are selected from the initial values). The consumer holds two slots at once
(k-1 under D2, k under S), which a ring of two or more slots allows; with two, the producer has no slot to fill
meanwhile, so `aref_insertion` then gives V a ring of its own: K's slot k is released once S_k is done (right
after S_k's place in the body), and V's slot k-1 is waited for just before D2_{k-1} is issued and released once it
completes, so each ring's producer runs a slot ahead (FlashAttention-3's separate K and V pipelines).

With the consumer ping-pong the two groups take turns issuing S_k and D2_{k-1} (FlashAttention-3's warp
scheduler barrier), so one group's softmax runs while the other's products occupy the tensor cores.
"""
from __future__ import annotations

from tawa.ir import attrs
from tawa.ir.ops import DotOp, ForOp, aref_of, untransposed
from tawa.ir.traversal import defining_op, ops_of
from tawa.ir.types import elem_bytes

from .. import layouts as L
from ..assign_warp_groups import pipelined_second_dot
from . import sync
from .arefs import barrier_ptr, release, stage_of
from .context import SmemTile, Tile
from .dot import a_fragments, check_operands, issue_register_a
from .loop_values import flatten, iter_layouts, unflatten
from .schedule import trip_count
from .ws_consumer_loop import pingpong_last_turn, pingpong_pass_turn, pingpong_take_turn
from .ws_lookahead_loop import LookaheadConsumerLoop


class SoftmaxPipelineLoop(LookaheadConsumerLoop):

    @classmethod
    def applies(cls, ctx, for_op) -> bool:
        if not super().applies(ctx, for_op):
            return False
        first = next(o for o in ops_of(ForOp(for_op).body) if o.name == DotOp.NAME)
        return pipelined_second_dot(for_op, first) is not None

    def __init__(self, ctx, for_op):
        super().__init__(ctx, for_op)
        second, self.acc_index, self.chain = pipelined_second_dot(for_op, self.dot)
        self.d2 = DotOp(second)
        body = ForOp(for_op).body
        inside = set(ops_of(body))
        # Values of iteration k-1 that the chain reads (defined in the body, outside the chain).
        self.carried = []
        for op in self.chain:
            for v in op.operands:
                src = defining_op(v)
                if src in inside and src not in self.chain and v not in self.carried:
                    self.carried.append(v)
        self.d2_layout = L.parse(attrs.LAYOUT.get(second))
        # V's ring: the early dot's own (one slot per iteration for K and V), or a ring of its own
        # (`aref_insertion.release_groups`), whose slot k-1 is waited for only where D2_{k-1} is issued.
        self.v_get = defining_op(untransposed(self.d2.b)[0])
        self.v_ring = ctx.get(aref_of(self.v_get))
        self.split = self.v_ring is not self.ring
        self.prologue_done = False
        self.pending = None     # (P's packed fragments, V's shared offset, carried values) of the D2 to issue

    # ---- the rotation ---------------------------------------------------------------------------------------
    def before_loop(self, ctx, lb, ub, step) -> None:
        b = ctx.b
        self.trips = trip_count(b, lb, ub, step)
        self.k = b.i32(0)
        stage = self._wait_full(ctx, self.k)
        self.s_cur = sync.fence_registers(b, self._issue(ctx, stage))
        sync.wgmma_wait(b, 0)

    def prologue(self, ctx, lb, ub, step):
        """Lower the body once for iteration 0 (its D2 left pending); the loop then starts at lb + step."""
        loop = ForOp(self.for_op)
        ctx.set(loop.iv, lb)
        for arg, init in zip(loop.iter_args, loop.inits):
            ctx.set(arg, ctx.get(init))
        saved, ctx.schedule = ctx.schedule, self
        ctx.lower_block(loop.body)
        ctx.schedule = saved
        self.prologue_done = True
        inits = [ctx.get(v) for v in loop.yield_op.operands]
        self.initial = [ctx.get(v) for v in loop.inits]
        return ctx.b.add(lb, step), inits

    def extra_iter_args(self, ctx) -> list:
        frags, v_offset, carried = self.pending
        out = [(r, "i32") for r in frags] + [(v_offset, "i32")]
        for val in carried:
            regs = val.regs if isinstance(val, Tile) else [val]
            out.extend((r, r.type) for r in regs)
        return out

    def _unpack(self, extra: list) -> tuple:
        frags, v_offset, carried = self.pending
        pos = len(frags)
        new_frags, v_offset = extra[:pos], extra[pos]
        pos += 1
        vals = []
        for val in carried:
            if isinstance(val, Tile):
                n = len(val.regs)
                vals.append(Tile(extra[pos:pos + n], val.layout, val.elem))
                pos += n
            else:
                vals.append(extra[pos])
                pos += 1
        return new_frags, v_offset, vals

    def _issue_pending(self, ctx, frags, v_offset, carried) -> list:
        """acc' = chain(acc, carried values); issue D2 with the pending P fragments on V at `v_offset`."""
        for v, val in zip(self.carried, carried):
            ctx.set(v, val)
        ctx.lower_ops(self.chain)
        acc = self._convert(ctx, ctx.get(self.d2.acc))
        bt = self._v_tile(ctx, v_offset)
        m, kdim = self.d2_a_shape
        return issue_register_a(ctx, self._frag_dict(frags), bt, list(acc.regs), ctx.b.i32(1), m, kdim,
                                 bt.shape[1], bt.elem)

    def begin_iteration(self, ctx, iv, extra: list) -> None:
        super(LookaheadConsumerLoop, self).begin_iteration(ctx, iv, [])    # self.k
        b = ctx.b
        frags, v_offset, carried = self._unpack(extra)
        stage = self._wait_full(ctx, self.k)
        if self.split:
            self._wait_v(ctx, b.sub(self.k, 1))
        if self.pingpong:
            pingpong_take_turn(ctx, self.k, first=1)     # the loop starts at k = 1 (iteration 0 is peeled)
        s_regs = self._issue(ctx, stage)
        self.d2_regs = self._issue_pending(ctx, frags, v_offset, carried)
        if self.pingpong:
            pingpong_pass_turn(ctx)
        sync.wgmma_wait(b, 1)
        self.s_cur = sync.fence_registers(b, s_regs)

    def end_iteration(self, ctx, iv, lb, ub, step) -> list:
        return [v for v, _ in self.extra_iter_args(ctx)]

    def after_loop(self, ctx, results: list) -> list:
        """Issue the last D2 and wait for it, release the last slot; with no iteration at all, the results are the
        initial values (the prologue computed on a slot nobody filled)."""
        b = ctx.b
        loop = ForOp(self.for_op)
        layouts = iter_layouts(self.for_op)
        values = unflatten(results, list(self.for_op.results), layouts)
        ctx.set(loop.iter_args[self.acc_index], values[self.acc_index])
        ran = b.cmpi("sgt", self.trips, 0)
        if self.split:
            with b.if_(ran):
                self._wait_v(ctx, b.sub(self.trips, 1))
        regs = self._issue_pending(ctx, *self._unpack(self.extra_results))
        sync.wgmma_wait(b, 0)
        values[self.acc_index] = Tile(sync.fence_registers(b, regs), self.d2_layout, "f32")
        with b.if_(ran):
            stage, _ = stage_of(ctx, self.v_ring, b.sub(self.trips, 1))
            release(ctx, self.v_ring, stage)
        if self.pingpong:
            pingpong_last_turn(ctx, b.cmpi("sgt", self.trips, 1))
        self.mark_drained_rings(ctx)
        out = []
        for val, init, lay in zip(values, self.initial, layouts):
            new, old = flatten(ctx, val, lay), flatten(ctx, init, lay)
            out.extend(b.select(ran, x, y) for x, y in zip(new, old))
        return out

    # ---- queries ------------------------------------------------------------------------------------------
    def defers(self, op) -> bool:
        return op in self.chain

    def precomputed_dot(self, ctx, op):
        if op == self.dot:
            return Tile(self.s_cur, self.layout, "f32")
        if op != self.d2.op:
            return None
        # D2's place in program order, after the math: D2_{k-1} completes; P_k, V_k and the chain's inputs are
        # kept for the next issue. The result stands for acc up to iteration k-1.
        b = ctx.b
        a, bt = ctx.get(self.d2.a), ctx.get(self.d2.b)
        if not self.prologue_done:
            check_operands(op, a, bt)
            self.d2_a_shape = a.shape
            self.v_shape = (bt.rows, bt.cols, bt.elem, bt.transposed)
            acc = self._convert(ctx, ctx.get(ForOp(self.for_op).iter_args[self.acc_index]))
        else:
            sync.wgmma_wait(b, 0)
            acc = Tile(sync.fence_registers(b, self.d2_regs), self.d2_layout, "f32")
        # P_k replaces P_{k-1}, which D2_{k-1} read until the wait above. fp8 bytes are packed by permutes that LLVM
        # may compute into P_{k-1}'s registers before the wait (C7513); a 16-bit P is packed by one conversion
        # per register, which stays after it.
        frags = a_fragments(ctx, a, copied=self.prologue_done and elem_bytes(a.elem) == 1)
        self.frag_keys = list(frags)
        flat = [r for key in self.frag_keys for r in frags[key]]
        self.pending = (flat, bt.offset, [ctx.get(v) for v in self.carried])
        return acc

    def release_slot(self, ctx, consumed_op, ring) -> bool:
        b = ctx.b
        if self.split and ring is self.ring:
            # K_k is done with once S_k is: it was waited for before the softmax (wait_group 1 in the loop, 0 in
            # the prologue, which may have run on a slot nobody filled).
            if self.prologue_done:
                release(ctx, ring, stage_of(ctx, ring, self.k)[0])
            else:
                with b.if_(b.cmpi("sgt", self.trips, 0)):
                    release(ctx, ring, stage_of(ctx, ring, self.k)[0])
            return True
        if not self.prologue_done:
            return True        # slot 0 is released once D2_0 completes, in iteration 1
        stage, _ = stage_of(ctx, ring, b.sub(self.k, 1))
        release(ctx, ring, stage)
        return True

    def slot_acquired(self, get_op) -> bool:
        # V's slot of a ring of its own is waited for where its product is issued, an iteration later.
        return super().slot_acquired(get_op) or (self.split and get_op == self.v_get)

    def keeps_dot_async(self, op) -> bool:
        return False

    # ---- helpers ------------------------------------------------------------------------------------------
    def _wait_v(self, ctx, k) -> None:
        """Wait until V's slot of iteration `k` is full (a ring of its own)."""
        stage, phase = stage_of(ctx, self.v_ring, k)
        sync.mbarrier_wait(ctx.b, barrier_ptr(ctx, self.v_ring.full, stage), phase)

    def _convert(self, ctx, acc):
        from .shape import convert
        return convert(ctx, acc, self.d2_layout)

    def _frag_dict(self, flat: list) -> dict:
        return {key: flat[4 * i: 4 * i + 4] for i, key in enumerate(self.frag_keys)}

    def _v_tile(self, ctx, offset) -> SmemTile:
        rows, cols, elem, transposed = self.v_shape
        return SmemTile(offset, rows, cols, elem, transposed)

