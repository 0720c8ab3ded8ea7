"""Lowering of the aref ops to Hopper mbarrier rings: `tawa.aref_create/put/get/consumed`.

- `aref_create` -> a ring of D slots in shared memory (each slot holds the TMA boxes of every payload value,
  1024-byte aligned) and two rings of D mbarriers: `full` (arrival count 1: the producer's expect-tx) and
  `empty` (arrival count = number of consumer warp groups).
- stage and phase: the k-th put (get) of an aref uses slot `k % D` and parity `(k / D) & 1`: the stage starts at 0
  and the phase flips each time the stage wraps. `k` is the ring's uses before the enclosing loop started plus
  the loop's iteration index `(iv - lb) / step` (the protocol check guarantees one put and one get per iteration
  in mirrored loops), so both sides derive it from their own control flow and never exchange it. A loop
  schedule that already computes the iteration index provides it. The uses before the loop are 0 unless the
  loop is nested in another (a persistent kernel's tile loop): that loop carries each ring's use count from one
  of its iterations to the next (`ring_counts_*`), and a loop that uses a ring advances its count by its trip
  count when it ends (`advance_rings`).
- `aref_put` -> wait `empty[stage]` with parity `phase ^ 1` (the first wait on a fresh barrier passes, so the
  producer may fill all D slots before any release), then one elected thread: `expect_tx(full[stage], bytes)`
  and the TMA copies of the put's loads into the slot.
- `aref_get` -> wait `full[stage]` with parity `phase`; the values are the slot's shared tiles (wgmma operands).
- `aref_consumed` -> `wgmma.wait_group 0` (the wgmmas reading the slot have finished), then one elected thread
  of each consumer warp group arrives on `empty[stage]` -- unless the loop's schedule takes the release over
  (the warp-specialized consumer loop releases one iteration late, see `ws_consumer_loop`).
The TMA write completes the transaction on `full` (async proxy to async proxy, ordered by the mbarrier), so no
proxy fence is needed for loads; an aref carrying register values written by threads would need
`fence.proxy.async` before the arrive, and is rejected here since the passes never create one.
"""
from __future__ import annotations

from dataclasses import dataclass

from tawa import hopper
from tawa.errors import CompilationError, InternalCompilerError
from tawa.ir.location import where
from tawa.ir import attrs
from tawa.ir.ops import (AREF_USE_OPS, aref_of, ArefCreateOp, ArefGetOp, ArefPutOp, ForOp, LoadOp,
                         consumer_warp_groups, warp_group_role, warp_groups)
from tawa.ir.traversal import ops_of, parent_op, users, walk
from tawa.ir.types import elem_bytes, elem_type, tile_shape

from ..assign_layouts import smem_swizzle
from . import sync
from .context import SmemTile
from .memory import TmaLoad, issue_elected
from .schedule import trip_count


@dataclass
class Ring:
    """The shared-memory ring and barriers of one aref."""
    depth: int
    base: int              # byte offset of slot 0 in the dynamic shared segment
    slot_bytes: int        # slot stride (1024-aligned)
    value_offsets: list    # byte offset of each value within a slot
    value_bytes: list      # TMA bytes of each value
    full: int              # byte offset of full[0] (mbarriers are 8 bytes apart)
    empty: int             # byte offset of empty[0]
    #: Whether the CTAs of a cluster copy into each other's slots (a value is `tawa.multicast`): its consumers
    #: then release a slot in every CTA of the cluster, and its producer drains the ring before the CTA exits.
    multicast: bool = False

    @property
    def tx_bytes(self) -> int:
        return sum(self.value_bytes)


@dataclass
class DeferredLoad:
    """A load whose TMA copy the aref_put issues (the producer's loads marked `tawa.aref_load`)."""
    op: object


def slot_tile(t, op=None) -> tuple:
    """(rows, cols, element, bytes) of a 2-D tile carried in an aref slot."""
    shape = tile_shape(t)
    if len(shape) != 2:
        raise CompilationError(f"an aref slot holds 2-D tiles, got {t}", note="load 2-D tiles for dot operands")
    rows, cols = shape
    elem = elem_type(t)
    if smem_swizzle(cols, elem) is None:       # check_dot_tile refused such tiles at their load, with a location
        raise CompilationError(
            f"a tile carried by an aref needs rows of a multiple of 32 bytes, got {t}",
            note=f"make the tile's last dimension a multiple of {32 // elem_bytes(elem)} elements")
    return rows, cols, elem, rows * cols * elem_bytes(elem)


def lower_aref_create(ctx, op) -> None:
    create = ArefCreateOp(op)
    offsets, sizes, top = [], [], 0
    for t in create.payload:
        *_, nbytes = slot_tile(t, op)
        offsets.append(top)
        sizes.append(nbytes)
        top += (nbytes + 1023) // 1024 * 1024
    base = ctx.smem.alloc(create.depth * top)
    # Every warp group of the consumer region that reads a slot releases it (ping-pong regions read theirs alone).
    consumers = max((attrs.NUM_WARP_GROUPS.get(g) for g in warp_groups(parent_op(op))
                     if warp_group_role(g) == attrs.CONSUMER), default=consumer_warp_groups(parent_op(op)))
    puts = [u for u in users(create.result) if u.name == ArefPutOp.NAME]
    multicast = bool(ctx.cluster) and any(attrs.MULTICAST.get(v.owner) for put in puts for v in ArefPutOp(put).values)
    full = ctx.alloc_barriers(create.depth, 1)
    empty = ctx.alloc_barriers(create.depth, consumers, per_cluster_cta=multicast)
    ctx.set(create.result, Ring(create.depth, base, top, offsets, sizes, full, empty, multicast))


def iteration(ctx, op):
    """The index k of the current iteration of the loop around the put/get/consumed `op` (0 outside loops)."""
    b = ctx.b
    parent = parent_op(op)
    if parent is not None and parent.name == ForOp.NAME:
        k = ctx.schedule.iteration_index(ctx, parent)
        if k is not None:
            return k
        loop = ForOp(parent)
        iv = ctx.get(loop.iv)
        lb, step = ctx.get(loop.lower), ctx.get(loop.step)
        return b.binary("divsi", b.sub(iv, lb), step)
    if parent is not None and parent.name == "scf.while" and parent.results[0] in ctx.tile_iterations:
        return ctx.tile_iterations[parent.results[0]]
    if parent is not None and warp_group_role(parent):
        return b.i32(0)
    raise CompilationError(f"{op.name}{where(op)}: arefs are lowered only directly in a warp group or in a loop "
                           f"directly inside one")


# ---- use counts of rings across loops ---------------------------------------------------------------------------
def rings_used(ctx, for_op) -> tuple:
    """(rings used by aref ops directly in the loop's body, rings used only in loops nested in it); the loop is an
    `scf.for` or a dynamic tile loop's `scf.while` (its body is its second region)."""
    body = for_op.regions[1].blocks[0] if for_op.name == "scf.while" else ForOp(for_op).body
    direct, nested = [], []
    for op in ops_of(body):
        if op.name in AREF_USE_OPS:
            ring = ctx.get(aref_of(op))
            if all(r is not ring for r in direct):
                direct.append(ring)
    for op in walk(for_op):
        if op.name in AREF_USE_OPS and parent_op(op) != for_op:
            ring = ctx.get(aref_of(op))
            if any(r is ring for r in direct):
                raise InternalCompilerError(f"{op.name}{where(op)}: a ring used both in a loop and in a loop "
                                            f"nested in it")
            if all(r is not ring for r in nested):
                nested.append(ring)
    return direct, nested


def rings_in(ctx, op) -> list:
    """The rings that aref ops anywhere inside `op` (a conditional around pipelined loops) use."""
    rings = []
    for inner in walk(op):
        if inner.name in AREF_USE_OPS:
            ring = ctx.get(aref_of(inner))
            if all(r is not ring for r in rings):
                rings.append(ring)
    return rings


def branch_with_rings(ctx, rings: list, cond, then_fn, else_fn, types: list) -> list:
    """A conditional around loops that use `rings` (their use counts grow by the loops' trip counts where the
    branch is taken): `then_fn` / `else_fn` lower a branch and return its values of `types` to yield; each starts
    from the rings' counts before the conditional, which then yields each ring's count after it too (both warp
    groups take the same branch, so they agree). Returns the values of `types`."""
    before = ring_counts(ctx, rings)
    saved = dict(ctx.ring_uses)

    def branch(fn):
        def emit():
            ctx.ring_uses = dict(saved)
            set_ring_counts(ctx, rings, before)
            vals = fn()
            return ring_counts(ctx, rings) + vals
        return emit
    out = ctx.b.if_else_values(cond, branch(then_fn), branch(else_fn), ["i32"] * len(rings) + list(types))
    ctx.ring_uses = saved
    set_ring_counts(ctx, rings, out[:len(rings)])
    return out[len(rings):]


def ring_counts(ctx, rings: list) -> list:
    """The uses of each ring so far, as i32 values (for a loop to carry)."""
    return [ctx.ring_uses.get(id(r)) or ctx.b.i32(0) for r in rings]


def set_ring_counts(ctx, rings: list, counts: list) -> None:
    for r, c in zip(rings, counts):
        ctx.ring_uses[id(r)] = c


def advance_rings(ctx, rings: list, lb, ub, step) -> None:
    """After a loop that uses each of `rings` once per iteration: their counts grow by its trip count."""
    if not rings:
        return
    b = ctx.b
    trips = trip_count(b, lb, ub, step)
    trips = b.binary("maxsi", trips, b.i32(0))
    for r in rings:
        base = ctx.ring_uses.get(id(r))
        ctx.ring_uses[id(r)] = trips if base is None else b.add(base, trips)


def skip_tiles(ctx, rings: list, lb, ub, step, groups: int) -> None:
    """A ping-pong consumer passes over `groups` other groups' tiles in each of `rings`: each took as many slots as
    this loop's trip count (the protocol check proved it the same for every tile)."""
    if not rings or groups <= 0:
        return
    b = ctx.b
    trips = b.binary("maxsi", trip_count(b, lb, ub, step), b.i32(0))
    skipped = trips if groups == 1 else b.mul(trips, groups)
    for r in rings:
        base = ctx.ring_uses.get(id(r))
        ctx.ring_uses[id(r)] = skipped if base is None else b.add(base, skipped)


def stage_of(ctx, ring: Ring, k) -> tuple:
    """(slot, parity) of the k-th use of a ring in the current loop (after the uses before it)."""
    b = ctx.b
    base = ctx.ring_uses.get(id(ring))
    if base is not None:
        k = b.add(base, k)
    if ring.depth & (ring.depth - 1) == 0:
        shift = ring.depth.bit_length() - 1
        stage = b.and_(k, ring.depth - 1)
        phase = b.and_(b.shr(k, shift), 1) if shift else b.and_(k, 1)
    else:
        stage = b.remu(k, ring.depth)
        phase = b.and_(b.divu(k, ring.depth), 1)
    return stage, phase


def _stage_phase(ctx, op, ring: Ring):
    return stage_of(ctx, ring, iteration(ctx, op))


def barrier_ptr(ctx, base: int, stage):
    b = ctx.b
    return ctx.smem_ptr(b.add(b.mul(stage, 8), base))


def lower_aref_put(ctx, op) -> None:
    b = ctx.b
    put = ArefPutOp(op)
    ring = ctx.get(put.aref)
    loads = []
    for v in put.values:
        d = ctx.get(v)
        if not isinstance(d, DeferredLoad):
            raise CompilationError(f"aref_put{where(op)}: only tiles loaded from global memory (TMA) can be put "
                                   f"into an aref on the GPU")
        loads.append(d.op)
    stage, phase = _stage_phase(ctx, op, ring)
    sync.mbarrier_wait(b, barrier_ptr(ctx, ring.empty, stage), b.xor(phase, 1))

    def issue():
        full = barrier_ptr(ctx, ring.full, stage)
        sync.mbarrier_expect_tx(b, full, ring.tx_bytes)
        slot = b.add(b.mul(stage, ring.slot_bytes), ring.base)
        for load, off in zip(loads, ring.value_offsets):
            offsets = [ctx.get(v) for v in LoadOp(load).offsets]
            dst = b.add(slot, off) if off else slot
            if attrs.MULTICAST.get(load):
                issue_shared(ctx, load, offsets, dst, full)
            else:
                TmaLoad(ctx, load).issue(ctx, offsets, dst, full)
    issue_elected(ctx, None, issue)


def issue_shared(ctx, load, offsets: list, dst, full) -> None:
    """A tile every CTA of the cluster loads: CTA r copies row block r into all of them. Launched without
    clusters (the runtime's choice where the grid does not divide into them), a CTA copies every block for
    itself alone."""
    b = ctx.b
    parts = max(ctx.cluster)
    tma = TmaLoad(ctx, load, parts)
    size, rank = ctx.cluster_size(), ctx.cluster_rank()
    alone = b.cmpi("eq", size, 1)
    mask = b.op(f"arith.trunci {b.sub(b.shl(b.i32(1), size), 1)} : i32 to i16", "i16")
    for part in range(parts):
        with b.if_(b.or_(alone, b.cmpi("eq", rank, part))):
            tma.issue(ctx, offsets, dst, full, part, mask)


def lower_aref_get(ctx, op) -> None:
    b = ctx.b
    get = ArefGetOp(op)
    ring = ctx.get(get.aref)
    stage, phase = _stage_phase(ctx, op, ring)
    if not ctx.schedule.slot_acquired(op):
        sync.mbarrier_wait(b, barrier_ptr(ctx, ring.full, stage), phase)
    slot = b.add(b.mul(stage, ring.slot_bytes), ring.base)
    for r, off in zip(get.values, ring.value_offsets):
        rows, cols, elem, _ = slot_tile(r.type, op)
        ctx.set(r, SmemTile(b.add(slot, off) if off else slot, rows, cols, elem))


def lower_aref_consumed(ctx, op) -> None:
    ring = ctx.get(aref_of(op))
    if ctx.schedule.release_slot(ctx, op, ring):
        return
    stage, _ = _stage_phase(ctx, op, ring)
    # Every wgmma that read the slot must be complete before the producer may overwrite it.
    sync.wgmma_wait(ctx.b, 0)
    release(ctx, ring, stage)


def release(ctx, ring: Ring, stage) -> None:
    """One elected thread of each warp group arrives on `empty[stage]` (its arrival count is the number of
    consumer warp groups)."""
    b = ctx.b
    first_warp = b.cmpi("eq", b.and_(ctx.warp(), hopper.WARPS_PER_GROUP - 1), 0)
    with b.if_(first_warp):
        elected = sync.elect_sync(b)
        with b.if_(elected):
            empty = barrier_ptr(ctx, ring.empty, stage)
            if not ring.multicast:
                sync.mbarrier_arrive(b, empty)
                return
            # The slot was filled by every CTA of the cluster: each of their producers waits for this release.
            sync.mbarrier_arrive_in_cta(b, empty, b.i32(0))
            for rank in range(1, max(ctx.cluster)):
                with b.if_(b.cmpi("ult", b.i32(rank), ctx.cluster_size())):
                    sync.mbarrier_arrive_in_cta(b, empty, b.i32(rank))


def drain(ctx, ring: Ring) -> None:
    """The producer's last wait: every slot it filled released by every consumer that reads it (in a cluster, the
    other CTAs' consumers arrive on this CTA's barriers, so the CTA must not exit before they have)."""
    b = ctx.b
    for j in range(ring.depth):
        stage, phase = stage_of(ctx, ring, b.i32(j))
        sync.mbarrier_wait(b, barrier_ptr(ctx, ring.empty, stage), b.xor(phase, 1))


HANDLERS = {
    "tawa.aref_create": lower_aref_create,
    "tawa.aref_put": lower_aref_put,
    "tawa.aref_get": lower_aref_get,
    "tawa.aref_consumed": lower_aref_consumed,
}
