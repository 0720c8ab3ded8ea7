"""aref_insertion: route the tile loads of each pipelined loop through an asynchronous reference.

Takes: a tile-level kernel (sequential, no arefs). Gives: for every `scf.for` whose body loads tiles that feed a
`tawa.dot` (see `ws_analysis`: a top-level loop, or one nested in loops and conditionals the program writes), one
`tawa.aref_create` before the loop (before the outermost of those loops and conditionals), with one slot holding all of
one iteration's heavy loads (two arefs where a shallow ring would stall attention's pipeline, `release_groups`:
then each has its own put, get and consumed), and a loop body that reads

    <index math of the loads> ; %a = tawa.load ... ; %b = tawa.load ...
    tawa.aref_put %r, %a, %b
    %a2, %b2 = tawa.aref_get %r
    ... every former use of %a/%b now uses %a2/%b2 ...
    tawa.aref_consumed %r          // right after the last op of the iteration that uses %a2/%b2

The program is still sequential and still computes the same result (a put is immediately taken by the get, so any
depth >= 1 works). Why: it makes the producer/consumer hand-off explicit before the kernel is split into warp
groups (`partition`), so the split itself only moves ops.

Whether a kernel is specialized is decided once, by the driver (`tawa.compiler.decide`), which only runs this pass
when the answer is yes; run by hand (`tawa.opt`) on a kernel that cannot be specialized, the pass rejects it with
the located reason.

Depth: `options.num_buffers`, else as many slots as fit in Hopper's shared memory per CTA (`tawa.hopper`) next to the
other tiles the kernel loads and its largest tile stored inside a loop (a store after the loops is staged in
the drained ring), between 2 and 6 (4 under the ping-pong schedule).

Prologue operands under the persistent schedule: a dot operand loaded once per program before its loop
(attention's Q block) also goes through an aref, of one slot or two (`prologue_depth`): put and get where it was
loaded, consumed after the last op of the program that reads it (the loop). A persistent CTA computes many
programs in turn, so the producer copies the next program's block while the consumers finish this one; one
program per CTA stages such a load itself (the conversion's one-shot copy), and then it keeps no aref.
"""
from __future__ import annotations

from mlir import ir

from tawa import hopper
from tawa.errors import CompilationError
from tawa.ir import attrs
from tawa.ir.kernel_info import body_block, kernels
from tawa.ir.location import source_location
from tawa.ir.ops import (ArefCreateOp, DotOp, ForOp, LoadOp, StoreOp, create_aref, create_consumed, create_get,
                         create_put, readers_through_transposes)
from tawa.ir.traversal import (ancestor_in_block, backward_slice, defining_op, enclosing, feeds_dots_only, ops_of,
                                parent_op, users, walk)
from tawa.ir.types import elem_bytes, elem_type, tile_bytes, tile_shape
from tawa.lowering import epilogue, ws_analysis
from tawa.options import PERSISTENT_SCHEDULES

#: Deepest ring chosen automatically (deeper rings stop paying once TMA latency is covered).
MAX_AUTO_DEPTH = 6
#: ... and under the ping-pong schedule, whose two consumer groups take turns on the ring: there 4 slots ran
#: 1-4% faster than the 5 or 6 that fit (H200, same process: the 128x128 GEMM and linear layer), and 3 far slower.
MAX_AUTO_DEPTH_PINGPONG = 4


#: Alignment of each tile the backend places in shared memory (the 128-byte swizzle repeats every 1024 bytes).
SMEM_TILE_ALIGN = 1024


def other_smem_bytes(func_op, heavy, persistent: bool = False, stagings: int = 1) -> int:
    """Shared memory the rest of the kernel may need next to the ring: tiles loaded outside the ring (a backend
    stages TMA loads and broadcast epilogue operands through shared memory) and the stored tiles' staging for
    their TMA stores (`epilogue.staging_area`: the largest, or in a persistent kernel one area per geometry), once
    per consumer warp group that stages on its own (`stagings`).

    An epilogue operand with the shape and element size of a stored tile (a residual added before the store) is
    not counted: the backend reads it through the store's own staging boxes, or else straight into registers
    (`to_nvvm.staged_operand`). Counting it cost the cooperative 128x256 linear layer half its ring (two slots
    instead of four, next to a 64 KiB residual that never occupied shared memory of its own)."""
    stored = epilogue.stored_tiles(func_op)
    loads, vectors, areas, conversions = 0, 0, {}, 0
    prologue = set(prologue_loads(func_op, heavy)) if persistent else set()
    for op in walk(func_op.operation):
        if op.name == LoadOp.NAME and op not in heavy and (
                op in prologue or not epilogue.read_through_staging(LoadOp(op), stored)):
            t = LoadOp(op).result.type
            if op not in prologue and len(tile_shape(t)) != 1 and not feeds_dots_only(op.results[0]):
                # a 2-D tile read by other math is loaded into registers (an epilogue's i32 mask, an attention
                # bias): counting it cost a GEMM with a 64 KiB mask one of its four ring slots
                continue
            if len(tile_shape(t)) == 1:
                # a vector broadcast over the tile (a bias, a scale) is staged by each group that stages its own
                # epilogue, 1024-aligned: an FP8 GEMM's two scales take 4 KiB under ping-pong, and counted as
                # 1.25 KiB they let the ring take a slot that did not fit
                vectors += -(-tile_bytes(t) // SMEM_TILE_ALIGN) * SMEM_TILE_ALIGN
            else:
                loads += tile_bytes(t)
        elif op.name == "tawa.trans" and not _in_shared_memory(op.operands[0], heavy):
            # a register tile transposed is redistributed through scratch above everything else (`shape.convert`,
            # one at a time): uncounted, a transposed f32 residual's 64 KiB made the default ring overflow
            conversions = max(conversions, tile_bytes(op.operands[0].type))
        elif op.name == StoreOp.NAME and (persistent or _in_loop(op)):
            # A store after the loops is staged in the drained ring (the backend reuses it), except in a persistent
            # kernel, whose ring is never drained: the next tile's loads are already in it.
            t = StoreOp(op).value.type
            shape = tile_shape(t)
            key, staged = epilogue.staging_area(shape[0], shape[1], elem_bytes(elem_type(t)), persistent) \
                if len(shape) == 2 else (("whole", tile_bytes(t)), tile_bytes(t))
            areas[key] = staged
    # a persistent kernel's stores of different geometries each keep an area; otherwise the largest is reused
    store = sum(areas.values()) if persistent else max(areas.values(), default=0)
    return loads + stagings * (vectors + store + computed_b_bytes(func_op)) + conversions


def _in_shared_memory(value, heavy) -> bool:
    """Whether a tile is in shared memory where it is used, so that transposing it relabels it (`SmemTile`): a
    ring slot (a heavy load, an aref slot: a weight converted after `.T` reads it from there), or a load feeding
    dots only; through transposes."""
    src = defining_op(value)
    while src is not None and src.name == "tawa.trans":
        src = defining_op(src.operands[0])
    if src is None:
        return False
    return src in heavy or src.name == "tawa.aref_get" or (src.name == LoadOp.NAME and feeds_dots_only(value))


def computed_b_bytes(func_op) -> int:
    """Shared memory of the dots' B operands computed in registers (a weight converted after its load), which the
    backend writes into a buffer of their own (`to_nvvm.dot.stage_b`): two in a loop, whose dot stays in flight
    while the next iteration writes the other."""
    total = 0
    for op in walk(func_op.operation):
        if op.name == DotOp.NAME:
            b = DotOp(op).b
            src = defining_op(b)
            if src is not None and src.name == "tawa.trans":
                src = defining_op(src.operands[0])
            if src is None or src.name not in (LoadOp.NAME, "tawa.aref_get"):
                total += _aligned(tile_bytes(b.type)) * (2 if _in_loop(op) else 1)
    return total


def _in_loop(op) -> bool:
    return enclosing(op, (ForOp.NAME,)) is not None


def slot_bytes(heavy) -> int:
    """Bytes of one ring slot of every ring together: one iteration's heavy loads of each pipelined loop (all
    rings are created up front and live at once, so they share the budget), each tile 1024-aligned in its slot
    as the backend places it (`to_nvvm.arefs`)."""
    return sum(_aligned(tile_bytes(LoadOp(ld).result.type)) for ld in heavy)


def _aligned(nbytes: int) -> int:
    return -(-nbytes // SMEM_TILE_ALIGN) * SMEM_TILE_ALIGN


def smallest_ring_fits(func_op, heavy, options, persistent: bool = False, stagings: int = 1,
                       ctas_per_sm: int = 1) -> tuple:
    """(True, "") when the smallest ring worth having, `options.num_buffers` slots or else two (double
    buffering), fits in a block's shared memory at `ctas_per_sm` blocks per SM next to what `other_smem_bytes`
    sets aside (`stagings`: 1, or 2 for ping-pong); else (False, what does not fit).

    Why: the schedule decisions that change that budget (persistent tiles, ping-pong, two CTAs per SM) are taken
    before the pipeline runs, so they ask here whether the ring they would leave is still a ring."""
    slot = slot_bytes(heavy)
    depth = getattr(options, "num_buffers", None) or 2
    other = other_smem_bytes(func_op, heavy, persistent, stagings)
    if depth * slot + other <= hopper.smem_for_tiles(ctas_per_sm):
        return True, ""
    staging = f"{other // 1024} KiB of other tiles and epilogue staging" if stagings == 1 else \
        f"two epilogue stagings and other tiles of {other // 1024} KiB"
    return False, f"{depth} ring slots of {slot // 1024} KiB and {staging} do not fit in shared memory together"


def ring_budget(func_op, options, heavy=(), prologue_slots: int = 0) -> int:
    """Shared memory left to the pipelined loops' rings: a block's share (half the SM's at two CTAs per SM) less
    the other tiles and the epilogue staging (`other_smem_bytes`; each consumer group's own under ping-pong) and
    the prologue operands' rings of `prologue_slots` slots (their first slot is among the other tiles)."""
    schedule = getattr(options, "schedule", None)
    persistent = schedule in PERSISTENT_SCHEDULES
    stagings = 2 if schedule == "pingpong" else 1
    tiles = hopper.smem_for_tiles(getattr(options, "ctas_per_sm", None) or 1)
    budget = tiles - other_smem_bytes(func_op, set(heavy), persistent, stagings)
    if prologue_slots > 1:
        budget -= (prologue_slots - 1) * prologue_bytes(func_op, heavy)
    return budget


def choose_depth(slot_bytes: int, func_op, options, heavy=(), prologue_slots: int = 0) -> int:
    """Slots of the pipelined loops' rings, beside prologue rings of `prologue_slots` slots (`ring_budget`)."""
    if options.num_buffers is not None:     # validated with the other options
        return options.num_buffers
    schedule = getattr(options, "schedule", None)
    tiles = hopper.smem_for_tiles(getattr(options, "ctas_per_sm", None) or 1)
    budget = ring_budget(func_op, options, heavy, prologue_slots)
    deepest = MAX_AUTO_DEPTH_PINGPONG if schedule == "pingpong" else MAX_AUTO_DEPTH
    depth = min(deepest, budget // max(slot_bytes, 1))
    if depth >= 2:
        return depth
    # Even two slots do not fit next to the rest: one, where that fits (attention's head dim 192: Q's 48 KiB beside
    # one slot of K and V), else two where they fit alone (the backend then reports what does not fit).
    if budget >= slot_bytes:
        return 1
    return 2 if 2 * slot_bytes <= tiles else 1


def _load_names(loads):
    names = []
    for ld in loads:
        loc = ld.location
        try:
            if loc.is_a_name():
                names.append(loc.name_str)
                continue
        except Exception:
            pass
        return None
    return ", ".join(names)


def _last_user(values, block, after):
    """The last op directly in `block` (at or after `after`) that reads one of `values`, itself or nested, or
    through a transpose (a view of the same shared tile)."""
    last = after
    for user in (u for v in values for u in readers_through_transposes(v)):
        top = ancestor_in_block(user, block)
        if top is not None and last.is_before_in_block(top):
            last = top
    return last


def _feeds_math(dot) -> bool:
    """Whether a dot's result is used for more than accumulating (attention's scores go into a softmax)."""
    return dot.name == DotOp.NAME and any(u.name not in ("scf.yield", DotOp.NAME) for u in users(dot.results[0]))


#: Rings this deep or deeper are never split by `release_groups`: one ring then costs fewer barriers per iteration.
SPLIT_BELOW_DEPTH = 3


def release_groups(loop, loads, depth: int, lookahead: bool = True) -> list:
    """The loop's heavy loads, in one group per ring. A ring of two slots (fewer than `SPLIT_BELOW_DEPTH`, enough
    for the lookahead) in a loop the consumer may run ahead in (`lookahead`: unless `consumer_lookahead=False`) is
    split where some loads are released long before the others: the tiles whose last reader is a dot feeding math
    (attention's K, read by Q K^T before the softmax) get a ring of their own, the rest (V, read by P V after it)
    another.

    Why: one slot per iteration for all of them holds K_j until P_j V_j is done, and the softmax-pipelined consumer
    holds two slots at once (j under Q K_j^T, j-1 under its P V), so with two slots (176-key blocks at head dim
    128, where a third does not fit) the producer has nothing to fill while the consumer computes: 441 against
    597 TFLOP/s split (H200, 4x16x4096x128). In rings of their own, K_j is released as soon as its scores are
    computed and V_j is waited for only where its product is issued, FlashAttention-3's separate K and V
    pipelines. Deeper rings stay whole: split, the 128-key blocks (three slots) ran 1-4% slower (twice the
    barriers per iteration). Loads released at the same op (a GEMM's A and B, SwiGLU's operands: their dots only
    accumulate) always share a ring, and so do all loads of a consumer that completes each iteration before the
    next (no lookahead, or a one-slot ring): it holds one slot at a time, so splitting would only add barriers."""
    if depth >= SPLIT_BELOW_DEPTH or depth < 2 or not lookahead:
        return [list(loads)]
    block = loop.regions[0].blocks[0]
    last = {ld: _last_user([LoadOp(ld).result], block, ld) for ld in loads}
    position = {op: i for i, op in enumerate(ops_of(block))}
    groups, current = [], []
    for ld in sorted(loads, key=lambda op: position[last[op]]):
        if current and last[current[-1]] != last[ld] and _feeds_math(last[current[-1]]):
            groups.append(current)
            current = []
        current.append(ld)
    groups.append(current)
    # Within a ring, the loads keep their program order.
    return [sorted(g, key=loads.index) for g in groups]


def insert_for_loop(p: ws_analysis.LoopPlan, depth: int, lookahead: bool = True) -> list:
    """Rewrite one loop; returns the new aref_create ops (one per ring, see `release_groups`)."""
    loop, loads = p.loop, p.loads
    block = loop.regions[0].blocks[0]
    groups = release_groups(loop, loads, depth, lookahead)

    # Hoist the loads and their index math to the top of the body, so that each put can hand over its whole slot
    # before any use of any of the loaded tiles.
    moved = backward_slice([v for ld in loads for v in ld.operands], block) | set(loads)
    body_ops = ops_of(block)
    anchor = next(op for op in body_ops if op not in moved)
    for op in body_ops:
        if op in moved:
            op.move_before(anchor)

    creates = []
    for group in groups:
        types = [LoadOp(ld).result.type for ld in group]
        create = create_aref(types, depth, loc=loop.location, name=_load_names(group))
        # before the loop, or before the loops and conditionals the program writes around it: one ring for all
        # their iterations, created where every warp group sees it
        top = loop
        while parent_op(top) is not None and parent_op(top).name in ("scf.for", "scf.if"):
            top = parent_op(top)
        ir.InsertionPoint(top).insert(create)
        aref = ArefCreateOp(create).result
        last_load = group[-1]
        for ld in group:
            if last_load.is_before_in_block(ld):
                last_load = ld
        put = create_put(aref, [LoadOp(ld).result for ld in group], loc=last_load.location)
        get = create_get(aref, loc=last_load.location)
        ip = ir.InsertionPoint(anchor)
        ip.insert(put)
        ip.insert(get)
        for ld, val in zip(group, get.results):
            LoadOp(ld).result.replace_all_uses_except(val, put)
        # Release the slot right after the last op of this iteration that reads a borrowed tile.
        last_user = _last_user(get.results, block, get)
        consumed = create_consumed(aref, loc=last_user.location)
        ir.InsertionPoint.at_block_terminator(block).insert(consumed)
        consumed.move_after(last_user)
        creates.append(create)
    return creates


def prologue_loads(func_op, heavy) -> list:
    """Dot operands loaded directly in the kernel's body, outside the pipelined loops (attention's Q block), that
    a producer can copy into a ring: 2-D tiles whose offsets it can recompute (scalar control of program ids,
    arguments and constants) and that TMA can write as a dot's operand tiles are written. Others, such as a
    column of per-query segment ids read only by a mask on the scores, stay the consumers' loads."""
    return [op for op in ops_of(body_block(func_op)) if op.name == LoadOp.NAME and op not in heavy
            and ws_analysis.feeds_dot(op) and len(tile_shape(LoadOp(op).result.type)) == 2
            and copyable(LoadOp(op).result.type) and ws_analysis.replicable(op)]


def copyable(t) -> bool:
    """Whether TMA can copy a tile of type `t` into a ring slot (`assign_layouts.check_dot_tile` accepts it)."""
    from tawa.lowering.assign_layouts import check_dot_tile
    try:
        check_dot_tile(t, None)
    except CompilationError:
        return False
    return True


def prologue_bytes(func_op, heavy) -> int:
    """Bytes of one slot of every prologue operand's ring (each 1024-aligned)."""
    return sum(_aligned(tile_bytes(LoadOp(ld).result.type)) for ld in prologue_loads(func_op, heavy))


def prologue_depth(func_op, heavy, options) -> int:
    """Slots of the prologue operands' rings: two (the producer then copies the next program's block as soon as
    this one's arrives, and its first K/V blocks with it) where the pipelined loops' ring keeps at least two slots
    beside them, else one (the next block is copied once the consumers are done with this one)."""
    heavy = list(heavy)
    # (the loops' ring as asked, or at least two slots of it)
    ring = (options.num_buffers or 2) * slot_bytes(heavy)
    return 2 if ring <= ring_budget(func_op, options, heavy, prologue_slots=2) else 1


def insert_prologue_load(func_op, load, depth: int) -> None:
    """Route one prologue operand through an aref of `depth` slots (see the module docstring)."""
    block = body_block(func_op)
    value = LoadOp(load).result
    ops = ops_of(block)
    create = create_aref([value.type], depth, loc=load.location, name=_load_names([load]))
    ir.InsertionPoint(ops[0]).insert(create)
    aref = ArefCreateOp(create).result
    after = ir.InsertionPoint(ops[ops.index(load) + 1])      # (a load is never the block's terminator)
    put = create_put(aref, [value], loc=load.location, ip=after)
    get = create_get(aref, loc=load.location, ip=after)
    value.replace_all_uses_except(get.results[0], put)
    consumed = create_consumed(aref, loc=load.location)
    ir.InsertionPoint.at_block_terminator(block).insert(consumed)
    consumed.move_after(_last_user([get.results[0]], block, get))


def check_depth(depth: int, slot_bytes: int, options, loop) -> None:
    """Refuse, at the loop, an explicit `num_buffers` whose rings alone cannot fit in a block's shared memory
    (the backend refuses, at the same loop, a ring that only overflows next to the kernel's other tiles)."""
    if options.num_buffers is None or depth * slot_bytes <= hopper.SMEM_FOR_TILES:
        return
    fits = hopper.SMEM_FOR_TILES // max(slot_bytes, 1)
    raise CompilationError(
        f"num_buffers={depth} ring slots of {slot_bytes // 1024} KiB each take {depth * slot_bytes // 1024} KiB "
        f"of shared memory, more than the {hopper.SMEM_FOR_TILES // 1024} KiB a block can use",
        source_location(loop),
        note=(f"use fewer buffers (num_buffers={fits} or less, or leave num_buffers unset to fit them "
              f"automatically) or smaller tiles (BLOCK_M, BLOCK_N, BLOCK_K)" if fits >= 1 else
              "use smaller tiles (BLOCK_M, BLOCK_N, BLOCK_K): not even one slot fits"))


def run(module: ir.Module, options) -> ir.Module:
    with module.context, ir.Location.unknown(module.context):
        for func in kernels(module):
            # Whether to specialize was decided once, by the driver (`tawa.compiler.decide`); this pass only
            # runs when the answer was yes, and here computes how.
            plans = ws_analysis.required_plan(func)
            heavy = [ld for p in plans for ld in p.loads]
            slot = slot_bytes(heavy)
            prologue = prologue_loads(func, heavy) if getattr(options, "schedule", None) == "persistent" else []
            q_depth = prologue_depth(func, heavy, options) if prologue else 0
            depth = choose_depth(slot, func, options, heavy, q_depth)
            if plans:
                check_depth(depth, slot, options, plans[0].loop)
                if depth == 1 and options.num_buffers is None:
                    attrs.ONE_SLOT_RING.set(func, slot)
            lookahead = getattr(options, "consumer_lookahead", None) is not False
            for p in plans:
                insert_for_loop(p, depth, lookahead)
            for load in prologue:
                insert_prologue_load(func, load, q_depth)
    return module
