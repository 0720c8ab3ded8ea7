"""The register-A consumer loop: a warp-specialized consumer loop whose dot takes an A computed in registers from
its slot (`dot(a * s[:, None], b)`: a scaled or converted A) computes the next iteration's A while the tensor
cores run this iteration's dot.

wgmma reads a register A operand while its group runs, so the registers may not be rewritten until a wait
completes the group: such a dot waits for completion every iteration, and the loads from shared memory, the math
and the packing of the next A then run with the tensor cores idle (a row-scaled A ran at 0.63x the plain GEMM).
Here, with the A chain (the ops of the body between the slot's tile and the dot's A operand) lowered by the
schedule instead of in program order, iteration k runs

    <slot k's tile waited for by the body's aref_get, as usual>
    issue acc += A_k @ B_k with the fragments carried in          -- one wgmma group in flight
    wait full[k+1] (if k+1 < n); A_{k+1} = the A chain on slot k+1's tile, packed into fragments
    wait for the group; keep A_k's registers alive up to here; release slot k

with A_0 computed before the loop and A_{k+1} carried to the next iteration as loop arguments. The group is
issued and completed in the same iteration, so the fragments it reads are live (to ptxas) from the loop's top to
the wait: A_{k+1} is computed into other registers. ptxas does not know that wgmma reads its register operands
asynchronously, so their lives are extended by a real instruction after the wait (`sync.keep_alive`). At the last
iteration the next A is computed from the slot after the last, which no one fills: its values are never used.

Applies to a consumer loop with one dot, which accumulates into the next iteration's (`result_only_accumulates`)
and whose A is computed in registers by pure ops (elementwise, broadcasts, conversions) from the tile of one aref
get of the loop and values defined before it (not the loop's index or carried values, which differ an iteration
ahead); the loop's other ops are aref gets and releases; and where the accumulators, two sets of fragments and
the next A's elements fit the thread's registers (`fits`).
"""
from __future__ import annotations

from mlir import ir

from tawa.ir import attrs
from tawa.ir.ops import ArefConsumedOp, ArefGetOp, DotOp, ForOp, aref_of
from tawa.ir.traversal import defining_op, is_ancestor, ops_of, parent_op

from . import sync
from .arefs import barrier_ptr, slot_tile, stage_of
from .context import SmemTile
from .shape import layout_of, read_smem
from .schedule import a_from_shared, register_math, result_only_accumulates, trip_count
from .ws_consumer_loop import WarpSpecializedConsumerLoop

def a_chain(for_op):
    """(the dot, the aref get whose tile its A is computed from, the chain's ops in program order), or None when
    the loop is not of the form this schedule lowers (module docstring)."""
    body = ForOp(for_op).body
    ops = ops_of(body)
    dots = [o for o in ops if o.name == DotOp.NAME]
    if len(dots) != 1 or a_from_shared(dots[0]) or not result_only_accumulates(for_op, dots[0]):
        return None
    dot = dots[0]
    chain, gets, stack = set(), set(), [DotOp(dot).a]
    while stack:
        v = stack.pop()
        op = defining_op(v)
        if op is None:
            owner = v.owner.owner if isinstance(v, ir.BlockArgument) else None
            if owner is not None and (owner == for_op or is_ancestor(for_op, owner)):
                return None             # the loop's index or a carried value: not known an iteration ahead
            continue                    # a kernel argument
        if parent_op(op) != for_op:
            if is_ancestor(for_op, op):
                return None             # computed in a region of the body
            continue                    # a value from before the loop
        if op.name == ArefGetOp.NAME:
            gets.add(op)
            continue
        if not register_math(op):
            return None
        if op in chain:
            continue
        chain.add(op)
        stack.extend(op.operands)
    if len(gets) != 1 or not chain:
        return None
    # the chain's results feed the chain or the dot's A only; the body holds nothing else
    for op in chain:
        for r in op.results:
            for use in r.uses:
                owner = use.owner.operation if hasattr(use.owner, "operation") else use.owner
                if not (owner in chain or (owner == dot and use.operand_number == DotOp.A)):
                    return None
    allowed = (ArefGetOp.NAME, ArefConsumedOp.NAME, DotOp.NAME, "scf.yield")
    if any(o not in chain and o.name not in allowed for o in ops):
        return None
    return dot, next(iter(gets)), [o for o in ops if o in chain]


#: Registers a thread needs beside the accumulators and three sets of A fragments (the carried ones, the next
#: ones, and the A elements they are packed from): addresses, the slot's index, predicates.
OTHER_REGISTERS = 48


def fits(ctx, dot) -> bool:
    """Whether the accumulators, the two fragment sets and the next A's elements fit the thread's register budget
    with room to spare; otherwise the dot waits for its wgmmas every iteration, as before (a 256x128 tile, 128
    accumulators and 32 fragment registers a thread, spilled 524 bytes; a 192-row tile's three groups, 160
    registers each, 440)."""
    from .dot import fragment_registers
    from tawa.ir.types import elem_type, tile_shape
    from .. import layouts as L
    a = DotOp(dot).a
    frags = fragment_registers(*tile_shape(a.type), elem_type(a.type), ctx.num_warps)
    accumulators = len(L.parse(attrs.LAYOUT.get(dot)).regs)
    return accumulators + 3 * frags + OTHER_REGISTERS < ctx.register_budget()


class RegisterAConsumerLoop(WarpSpecializedConsumerLoop):

    @classmethod
    def applies(cls, ctx, for_op) -> bool:
        if not ctx.register_overlap or not super().applies(ctx, for_op) or a_chain(for_op) is None:
            return False
        dot, get, _ = a_chain(for_op)
        return ctx.get(aref_of(get)).depth >= 2 and fits(ctx, dot)

    def __init__(self, ctx, for_op):
        super().__init__(ctx, for_op)
        self.dot, self.get, self.chain = a_chain(for_op)
        self.ring = ctx.get(aref_of(self.get))
        self.chain_ops = set(self.chain)
        self.sink = self.trips = None
        self.frags_cur = self.frags_next = None
        ctx.overlaps.add("A computed under the wgmmas")

    # ---- the next iteration's A -----------------------------------------------------------------------------
    def _fragments(self, ctx, k) -> list:
        """Wait for slot k's tile (where k < n) and lower the A chain on it: the packed fragments (i32)."""
        from .dot import a_fragments
        b = ctx.b
        stage, phase = stage_of(ctx, self.ring, k)
        with b.if_(b.cmpi("slt", k, self.trips)):
            sync.mbarrier_wait(b, barrier_ptr(ctx, self.ring.full, stage), phase)
        slot = b.add(b.mul(stage, self.ring.slot_bytes), self.ring.base)
        values = ArefGetOp(self.get).values
        saved = {v: ctx.env.get(v) for v in values}
        for r, off in zip(values, self.ring.value_offsets):
            rows, cols, elem, _ = slot_tile(r.type, self.get)
            tile = SmemTile(b.add(slot, off) if off else slot, rows, cols, elem)
            # read here in the layout of the op that reads it, with no barrier after: the slot is released only
            # after the next iteration's wgmma (a warp-group-wide instruction, issued after every thread of the
            # group has read its A) has completed; a barrier per iteration also held both groups in lockstep
            users = [op for op in self.chain if r in list(op.operands)]
            lowered = tile
            if users and attrs.LAYOUT.get(users[0]) is not None:
                lowered = read_smem(ctx, tile, layout_of(users[0]), sync_after=False)
            ctx.set(r, lowered)
        ctx.lower_ops(self.chain)
        frags = a_fragments(ctx, ctx.get(DotOp(self.dot).a))
        for v, lowered in saved.items():
            if lowered is not None:
                ctx.env[v] = lowered
        for op in self.chain:
            for r in op.results:
                ctx.env.pop(r, None)
        return [r for key in frags for r in frags[key]]

    # ---- hooks --------------------------------------------------------------------------------------------
    def before_loop(self, ctx, lb, ub, step) -> None:
        super().before_loop(ctx, lb, ub, step)
        b = ctx.b
        self.trips = trip_count(b, lb, ub, step)
        self.sink = ctx.smem_addr(b.i32(ctx.alloc_word()))
        self.frags_next = self._fragments(ctx, b.i32(0))

    def extra_iter_args(self, ctx) -> list:
        return [(r, "i32") for r in self.frags_next]

    def begin_iteration(self, ctx, iv, extra: list) -> None:
        super().begin_iteration(ctx, iv, [])
        self.frags_cur = list(extra)

    def end_iteration(self, ctx, iv, lb, ub, step) -> list:
        return list(self.frags_next)

    # ---- queries ------------------------------------------------------------------------------------------
    def defers(self, op) -> bool:
        return op in self.chain_ops

    def a_fragments(self, ctx, op):
        return self.frags_cur if op == self.dot else None

    def after_dot_issue(self, ctx, op) -> None:
        super().after_dot_issue(ctx, op)
        if op == self.dot:
            self.frags_next = self._fragments(ctx, ctx.b.add(self.k, 1))

    def after_dot_wait(self, ctx, op) -> None:
        if op == self.dot:
            sync.keep_alive(ctx.b, self.frags_cur, self.sink)
