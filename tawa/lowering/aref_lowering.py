"""aref_lowering: warp-group regions and arefs -> Hopper warp specialization (mbarrier rings, TMA, setmaxnreg).

Two parts.

1. `run(module, options)`, a tile-level pass after `partition` / `protocol_check` / `register_realloc`: gives the
   kernel `tawa.num_warps = 4 * (1 + consumer warp groups)` (the launch size), each warp-group region
   `tawa.first_warp_group` (its first warp group in the CTA: the producer is warp group 0, consumers follow), and
   every `tawa.load` whose tile goes into an `aref_put` the unit attribute `tawa.aref_load` (with `tawa.smem`):
   the put issues its TMA copy, the load itself emits nothing.

2. `HANDLERS`, op name -> `handler(ctx, op)` for the NVVM conversion (`tawa.lowering.to_nvvm`), which calls
   them from its op dispatch:
   - `scf.execute_region` (a warp group): `scf.if` on the warp-group index; inside, `setmaxnreg` to the
     region's `tawa.max_registers`, then the region body lowered with a context whose thread index, warps and
     per-thread coordinates are relative to the region's first thread, and whose barrier is the named barrier
     1 + first warp group over the region's threads (the other regions never reach a CTA barrier). The producer
     region (scalar control, `scf.for` without iter_args, deferred loads, puts) runs in its first warp only:
     one elected lane issues the copies, so only that warp waits on barriers. Consumer regions go back to the
     conversion's own block lowering.
   - `tawa.aref_create` -> a ring of D slots in shared memory (each slot holds the TMA boxes of every value,
     1024-byte aligned) and two rings of D mbarriers: `full` (arrival count 1: the producer's expect-tx) and
     `empty` (arrival count = number of consumer warp groups).
   - stage and phase: the k-th put (get) of an aref uses slot `k % D` and parity `(k / D) & 1`: the stage starts
     at 0 and the phase flips each time the stage wraps. `k` is the iteration index `(iv - lb) / step` of the
     enclosing loop (the protocol check guarantees one put and one get per iteration in mirrored loops), so
     both sides derive it from their own loop and never exchange it.
   - `aref_put` -> wait `empty[stage]` with parity `phase ^ 1` (the first wait on a fresh barrier passes, so
     the producer may fill all D slots before any release), then one elected thread: `expect_tx(full[stage],
     bytes)` and the TMA copies of the put's loads into the slot.
   - `aref_get` -> wait `full[stage]` with parity `phase`; the values are the slot's shared tiles (wgmma
     operands).
   - `aref_consumed` -> `wgmma.wait_group 0` (the wgmmas reading the slot have finished), then one elected
     thread of each consumer warp group arrives on `empty[stage]`. In a GEMM-like consumer loop
     (`ConsumerLoop.deferred`: the slot's tiles only feed dots that accumulate into the next iteration's dot,
     ring depth >= 2) the dot instead leaves one wgmma group in flight and `aref_consumed` releases the
     previous iteration's slot; after the loop all groups are awaited and the last slot released. The drained
     ring is then dead shared memory, which the epilogue's TMA-store staging reuses.
   The TMA write completes the transaction on `full` (async proxy to async proxy, ordered by the mbarrier), so
   no proxy fence is needed for loads; an aref carrying register values written by threads would need
   `fence.proxy.async` before the arrive, and is rejected here since the passes never create one.
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from tawa.errors import CompilationError
from tawa.lowering import ws_ir
from tawa.lowering.register_realloc import MAX_REGISTERS_ATTR, setmaxnreg_line

FIRST_WG_ATTR = "tawa.first_warp_group"
AREF_LOAD_ATTR = "tawa.aref_load"

def _users(value):
    return [u.owner.operation if hasattr(u.owner, "operation") else u.owner for u in value.uses]
WARPS_PER_GROUP = 4
THREADS_PER_GROUP = 128


# ----------------------------------------------------------------------------------------------------------
# Part 2: NVVM lowering handlers
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

    @property
    def tx_bytes(self) -> int:
        return sum(self.value_bytes)


@dataclass
class DeferredLoad:
    """A load whose TMA copy the aref_put issues."""
    op: object


def _tile_bytes(t) -> tuple:
    from tawa.lowering.to_nvvm.context import SWIZZLE_BYTES, elem_bytes, elem_type, tile_shape
    shape = tile_shape(t)
    if len(shape) != 2:
        raise CompilationError(f"an aref slot holds 2-D tiles, got {t}")
    rows, cols = shape
    if (cols * elem_bytes(elem_type(t))) % SWIZZLE_BYTES:
        raise CompilationError(f"a tile carried by an aref needs rows of a multiple of {SWIZZLE_BYTES} bytes, "
                               f"got {t}")
    return rows, cols, elem_type(t), rows * cols * elem_bytes(elem_type(t))


def _consumer_groups(func) -> int:
    body = ws_ir.body_block(func)
    return sum(ir.IntegerAttr(g.attributes[ws_ir.NUM_WARP_GROUPS_ATTR]).value
               for g in ws_ir.ops_of(body) if ws_ir.warp_group_role(g) == "consumer")


def lower_aref_create(ctx, op) -> None:
    types, depth = ws_ir.aref_params(op.results[0].type)
    offsets, sizes, top = [], [], 0
    for t in types:
        *_, nbytes = _tile_bytes(t)
        offsets.append(top)
        sizes.append(nbytes)
        top += (nbytes + 1023) // 1024 * 1024
    base = ctx.smem.alloc(depth * top)
    func = op.parent.operation if hasattr(op.parent, "operation") else op.parent
    consumers = _consumer_groups(func)
    full = ctx.alloc_barriers(depth, 1)
    empty = ctx.alloc_barriers(depth, consumers)
    ctx.set(op.results[0], Ring(depth, base, top, offsets, sizes, full, empty))


def _iteration(ctx, op):
    """The index k of the current iteration of the loop around the put/get/consumed `op` (0 outside loops)."""
    b = ctx.b
    parent = ws_ir.parent_op(op)
    if parent is not None and parent.name == "scf.for":
        loop = getattr(ctx, "pipeline", None)
        if isinstance(loop, ConsumerLoop) and loop.for_op == parent:
            return loop.k
        iv = ctx.get(parent.regions[0].blocks[0].arguments[0])
        lb, step = ctx.get(parent.operands[0]), ctx.get(parent.operands[2])
        return b.binary("divsi", b.sub(iv, lb), step)
    if parent is not None and ws_ir.warp_group_role(parent):
        return b.i32(0)
    raise CompilationError(f"{op.name}{ws_ir.where(op)}: arefs are lowered only directly in a warp group or "
                           f"in a loop directly inside one")


def _stage_of(ctx, ring: Ring, k):
    b = ctx.b
    if ring.depth & (ring.depth - 1) == 0:
        shift = ring.depth.bit_length() - 1
        stage = b.and_(k, ring.depth - 1)
        phase = b.and_(b.shr(k, shift), 1) if shift else b.and_(k, 1)
    else:
        stage = b.remu(k, ring.depth)
        phase = b.and_(b.divu(k, ring.depth), 1)
    return stage, phase


def _stage_phase(ctx, op, ring: Ring):
    """(stage, phase) of the put/get/consumed `op`: from the enclosing loop's iteration index."""
    return _stage_of(ctx, ring, _iteration(ctx, op))


def _barrier(ctx, base: int, stage):
    b = ctx.b
    return ctx.smem_ptr(b.add(b.mul(stage, 8), base))


def lower_aref_put(ctx, op) -> None:
    from tawa.lowering.to_nvvm import sync
    from tawa.lowering.to_nvvm.memory import TmaLoad, issue_elected
    b = ctx.b
    ring = ctx.get(op.operands[0])
    loads = []
    for v in list(op.operands)[1:]:
        d = ctx.get(v)
        if not isinstance(d, DeferredLoad):
            raise CompilationError(f"aref_put{ws_ir.where(op)}: only tiles loaded from global memory (TMA) can be "
                                   f"put into an aref on the GPU")
        loads.append(d.op)
    stage, phase = _stage_phase(ctx, op, ring)
    sync.mbarrier_wait(b, _barrier(ctx, ring.empty, stage), b.xor(phase, 1))

    def issue():
        full = _barrier(ctx, ring.full, stage)
        sync.mbarrier_expect_tx(b, full, ring.tx_bytes)
        slot = b.add(b.mul(stage, ring.slot_bytes), ring.base)
        for load, off in zip(loads, ring.value_offsets):
            tma = TmaLoad(ctx, load)
            offsets = [ctx.get(v) for v in list(load.operands)[1:]]
            tma.issue(ctx, offsets, b.add(slot, off) if off else slot, full)
    issue_elected(ctx, None, issue)


def lower_aref_get(ctx, op) -> None:
    from tawa.lowering.to_nvvm import sync
    from tawa.lowering.to_nvvm.context import SmemTile
    b = ctx.b
    ring = ctx.get(op.operands[0])
    stage, phase = _stage_phase(ctx, op, ring)
    sync.mbarrier_wait(b, _barrier(ctx, ring.full, stage), phase)
    slot = b.add(b.mul(stage, ring.slot_bytes), ring.base)
    for r, off in zip(op.results, ring.value_offsets):
        rows, cols, elem, _ = _tile_bytes(r.type)
        ctx.set(r, SmemTile(b.add(slot, off) if off else slot, rows, cols, elem))


def lower_aref_consumed(ctx, op) -> None:
    from tawa.lowering.to_nvvm import sync
    b = ctx.b
    ring = ctx.get(op.operands[0])
    loop = ctx.pipeline
    if isinstance(loop, ConsumerLoop) and loop.deferred and ws_ir.parent_op(op) == loop.for_op:
        # The dots of this iteration stay in flight; the previous iteration's group is complete (the dot waited
        # with one group pending), so its slot is the one released.
        with b.if_(b.cmpi("sgt", loop.k, 0)):
            stage, _ = _stage_of(ctx, ring, b.sub(loop.k, 1))
            _release(ctx, ring, stage)
        loop.released.append(ring)
        return
    stage, _ = _stage_phase(ctx, op, ring)
    # Every wgmma that read the slot must be complete before the producer may overwrite it.
    sync.wgmma_wait(b, 0)
    _release(ctx, ring, stage)


def _release(ctx, ring: Ring, stage) -> None:
    """One elected thread of each warp group arrives on `empty[stage]` (its arrival count is the number of
    consumer warp groups)."""
    from tawa.lowering.to_nvvm import sync
    b = ctx.b
    first_warp = b.cmpi("eq", b.and_(ctx.warp(), WARPS_PER_GROUP - 1), 0)
    with b.if_(first_warp):
        elected = sync.elect_sync(b)
        with b.if_(elected):
            sync.mbarrier_arrive(b, _barrier(ctx, ring.empty, stage))


class ConsumerLoop:
    """A consumer warp group's loop over aref slots, as `ctx.pipeline` while its body is lowered.

    When every tile taken from the ring only feeds dots whose result merely accumulates into the next
    iteration's dot (a GEMM main loop), one wgmma group stays in flight across iterations (`deferred`): the dot
    waits with one group pending and `aref_consumed` releases the previous iteration's slot; after the loop
    all groups are awaited and the last slot is released. That needs a ring of at least 2 slots (the consumer
    holds two at once). Otherwise every dot completes before its slot is released.
    """

    def __init__(self, ctx, for_op):
        from tawa.lowering.to_nvvm.control import Pipeline, dot_only_accumulates
        b = ctx.b
        self.for_op = for_op
        body = for_op.regions[0].blocks[0]
        lb, step = ctx.get(for_op.operands[0]), ctx.get(for_op.operands[2])
        self.k = b.binary("divsi", b.sub(ctx.get(body.arguments[0]), lb), step)
        self.counter = self.k
        self._zero_acc = Pipeline._zero_started_accumulators(for_op)
        ops = list(ws_ir.ops_of(body))
        gets = [o for o in ops if o.name == "tawa.aref_get"]
        self.async_dots = {o for o in ops if o.name == "tawa.dot" and dot_only_accumulates(for_op, o)}
        self.deferred = bool(self.async_dots) and all(
            ctx.get(g.operands[0]).depth >= 2 and all(self._feeds_async_dots(r) for r in g.results) for g in gets)
        self.released: list = []

    def _feeds_async_dots(self, value) -> bool:
        for u in _users(value):
            if u.name == "tawa.trans":
                if not self._feeds_async_dots(u.results[0]):
                    return False
            elif u.name != "tawa.dot" or u not in self.async_dots:
                return False
        return True

    # the interface of the software pipeline that the dot lowering queries
    def owns(self, op) -> bool:
        return False

    def keeps_dot_async(self, op) -> bool:
        return self.deferred and op in self.async_dots

    def scale_d(self, ctx, op):
        body = self.for_op.regions[0].blocks[0]
        for i in self._zero_acc:
            if body.arguments[i + 1] == op.operands[2]:
                return ctx.b.cast("extui", ctx.b.cmpi("ne", self.k, 0), "i32")
        return ctx.b.i32(1)

    def finish(self, ctx) -> None:
        """After the loop: wait for the dots still in flight and release the slot of the last iteration; then
        the rings this loop drained are dead (every put has a matching get in this loop)."""
        from tawa.lowering.to_nvvm import sync
        b = ctx.b
        if self.deferred:
            sync.wgmma_wait(b, 0)
            lb, ub, step = (ctx.get(v) for v in list(self.for_op.operands)[:3])
            trips = b.binary("divsi", b.add(b.sub(ub, lb), b.sub(step, 1)), step)
            with b.if_(b.cmpi("sgt", trips, 0)):
                for ring in self.released:
                    stage, _ = _stage_of(ctx, ring, b.sub(trips, 1))
                    _release(ctx, ring, stage)
        for op in ws_ir.ops_of(self.for_op.regions[0].blocks[0]):
            if op.name == "tawa.aref_get":
                ring = ctx.get(op.operands[0])
                if all(u.name == "tawa.aref_put" or _inside(u, self.for_op) for u in _users(op.operands[0])):
                    ctx.dead_smem.append((ring.base, ring.depth * ring.slot_bytes))


def _inside(op, ancestor) -> bool:
    cur = ws_ir.parent_op(op)
    while cur is not None:
        if cur == ancestor:
            return True
        cur = ws_ir.parent_op(cur)
    return False


def consumer_loop(ctx, for_op):
    """A `ConsumerLoop` when `for_op` takes slots of an aref directly in its body, else None."""
    if any(o.name == "tawa.aref_get" for o in ws_ir.ops_of(for_op.regions[0].blocks[0])):
        return ConsumerLoop(ctx, for_op)
    return None


# ---- warp groups -------------------------------------------------------------------------------------------
def region_context(ctx, first_group: int, num_groups: int):
    """A conversion context for code run by warp groups [first, first + num): thread index, warps and per-thread
    coordinates relative to the region; values, parameters, shared memory and barriers shared with `ctx`."""
    from tawa.lowering.to_nvvm.context import Ctx
    child = Ctx(ctx.b, ctx.params, ctx.smem, WARPS_PER_GROUP * num_groups, env=ctx.env)
    child.barriers = ctx.barriers
    child.pid_group = ctx.pid_group
    # Named barrier 0 is the CTA barrier; each region gets its own (ids 1..15), over its threads only.
    child.barrier_id = 1 + first_group
    tid = ctx.tid()
    child._tid = tid if first_group == 0 else ctx.b.op(
        f"arith.subi {tid}, {ctx.b.i32(THREADS_PER_GROUP * first_group)} : i32", "i32", prelude=True)
    return child


def lower_warp_group(ctx, op) -> None:
    role = ws_ir.warp_group_role(op)
    if role is None:
        raise CompilationError(f"scf.execute_region{ws_ir.where(op)} is not a warp group")
    if FIRST_WG_ATTR not in op.attributes:
        raise CompilationError("internal: aref_lowering.run must annotate warp groups before the conversion")
    b = ctx.b
    first = ir.IntegerAttr(op.attributes[FIRST_WG_ATTR]).value
    count = ir.IntegerAttr(op.attributes[ws_ir.NUM_WARP_GROUPS_ATTR]).value \
        if ws_ir.NUM_WARP_GROUPS_ATTR in op.attributes else 1
    wg = b.shr(ctx.tid(), 7)
    cond = b.cmpi("eq", wg, first) if count == 1 else b.and_(b.cmpi("uge", wg, first),
                                                                b.cmpi("ult", wg, first + count))
    with b.if_(cond):
        if MAX_REGISTERS_ATTR in op.attributes:
            b.line(setmaxnreg_line(ir.IntegerAttr(op.attributes[MAX_REGISTERS_ATTR]).value, ctx.num_threads))
        child = region_context(ctx, first, count)
        block = op.regions[0].blocks[0]
        if role == "producer":
            # The producer's work is one thread's (an elected lane issues the copies): only its first warp runs
            # the loop and waits on the barriers; the other warps only give their registers back.
            with b.if_(child.is_warp0()):
                lower_producer_block(child, block)
        else:
            from tawa.lowering.to_nvvm.kernel import lower_block
            lower_block(child, block)


_SREG = {"tawa.program_id": "ctaid", "tawa.num_programs": "nctaid"}


def lower_producer_block(ctx, block) -> None:
    """The producer's code: scalar control, loops without iter_args, deferred loads and puts."""
    from tawa.lowering.to_nvvm import elementwise, memory
    b = ctx.b
    for op in ws_ir.ops_of(block):
        name = op.name
        if name == "scf.yield":
            if len(op.operands):
                raise CompilationError("internal: the producer's loops carry no values")
            continue
        if name == "tawa.load" and AREF_LOAD_ATTR in op.attributes:
            ctx.set(op.results[0], DeferredLoad(op))
        elif name == "tawa.aref_put":
            lower_aref_put(ctx, op)
        elif name in _SREG:
            from tawa.lowering.to_nvvm.kernel import program_index
            ctx.set(op.results[0], program_index(ctx, name, ir.IntegerAttr(op.attributes["axis"]).value))
        elif name == "tawa.dim":
            memory.lower_dim(ctx, op)
        elif name == "arith.constant":
            elementwise.lower_constant(ctx, op)
        elif ws_ir.is_scalar_control(op):
            elementwise.lower_elementwise(ctx, op)
        elif name == "scf.for" and len(op.results) == 0:
            lb, ub, step = (ctx.get(v) for v in list(op.operands)[:3])
            body = op.regions[0].blocks[0]
            iv = ctx.b.fresh("piv")
            from tawa.lowering.to_nvvm.builder import V
            b.line(f"scf.for {iv} = {lb} to {ub} step {step} : {lb.type} {{")
            with b.indented():
                ctx.set(body.arguments[0], V(iv, lb.type))
                lower_producer_block(ctx, body)
            b.line("}")
        else:
            raise CompilationError(f"'{name}'{ws_ir.where(op)} cannot run in the producer warp group")


HANDLERS = {
    "scf.execute_region": lower_warp_group,
    "tawa.aref_create": lower_aref_create,
    "tawa.aref_put": lower_aref_put,
    "tawa.aref_get": lower_aref_get,
    "tawa.aref_consumed": lower_aref_consumed,
}
