"""persistent-tiles: turn a warp-specialized kernel into a persistent one (about one CTA per SM, looping over tiles).

Takes: a partitioned kernel (after `protocol-check`): a producer region and consumer regions, each computing one
program of the declared grid from `tawa.program_id`. Gives: every region's body wrapped in the same tile loop,

    %cta = tawa.program_id {axis = 0}                  the CTA (the runtime launches min(programs, SMs), 1-D)
    %ctas = tawa.num_programs {axis = 0}
    %gx, %gy, %gz = tawa.grid_extent {axis = 0, 1, 2}  the grid the kernel was written for
    scf.for %t = %cta to %gx * %gy * %gz step %ctas {
      %p0, %p1, %p2 = <program t in grouped order>
      <the region's body; its program_id(a) is now %pa and its num_programs(a) is grid_extent(a)>
    }

and `tawa.persistent` on the kernel.

Why: with one program per CTA, every output tile pays the CTA's start (barrier init, setmaxnreg, the ring's first
fill) and its end (the epilogue, during which the tensor cores idle), and the last wave of tiles leaves SMs empty.
In the loop, the producer runs ahead into the next tile's loads while the consumers finish the current one (the
ring is shared across tiles: the conversion counts each ring's uses across tile iterations, so stage and phase
continue where the previous tile left them), and the epilogue's TMA store of one tile drains while the next
tile's main loop runs. This is the persistent, cooperative schedule of CUTLASS's sm90 kernels.

Grouped order: the programs of grid axes 0 and 1 are visited in runs of G consecutive axis-0 programs for each
axis-1 program (`tawa.tile_group` = G on the kernel), so the CTAs resident at one time share rows of A and
columns of B in L2 (axis 2, a batch axis, is outermost). Programs are independent, so any order computes the same
result. G is chosen (`tile_group`) so that the T tiles resident at once, m along axis 0 and T / m along axis 1,
read the fewest operand bytes per k-step: m * a + (T / m) * b is least at m = sqrt(T * b / a), where a and b
are the bytes one tile loads along each axis (A's tile and B's tiles of a GEMM). Each k-step's operands then come
from DRAM about once per wave, and the fewest of them: a 128x256 tile (b = 2a) on 132 SMs takes m = 16, where a
fixed 8 left 16.5 tiles along N resident and read a quarter more. `group_m` overrides it.

Clusters (`cluster="2x1"` or `"1x2"`): CTAs run in pairs along grid axis a, and the tile loop walks pairs of
neighbouring tiles, the CTA of cluster rank r taking the r-th of each:

    %n = tawa.cluster_size                             2, or 1 where the runtime launched without clusters
    %r = cta % n, loop over cluster tiles from cta / n step ctas / n, the grid's axis a counted in pairs
    p_a = 2 * <pair index along a> + %r

so both CTAs of a cluster see the same program along the other axes. The tiles they share (a producer load whose
offsets do not depend on program_id(a): B for 2x1, A for 1x2) are marked `tawa.multicast`: the conversion gives
each CTA half of the tile to copy into both CTAs' ring slots at once (TMA multicast). The runtime launches with
clusters only when axis a of the grid divides into pairs; otherwise `%n` is 1, every tile its own pair, and each
CTA copies both halves for itself, so one kernel serves every grid.

Dynamic tiles (`tawa.dynamic_tiles`; the `dynamic_tiles` option, on by default where the loops' lengths depend
on the program, as causal attention's): fixed shares of unequal tiles leave some CTAs working long after the
others, so instead each CTA starts with tile %cta and then takes the next one from a counter in device memory:

    producer:                                         consumers:
    scf.while (%t = %cta) : %t < tiles {              scf.while (%t = %cta) : %t < tiles {
      <body of program(%t)>                             <body of program(%t)>
      %next = tawa.next_tile     (fetch-and-add)        %next = tawa.tile_get
      tawa.tile_put %next                               scf.yield %next
      scf.yield %next                                 }
    }

The producer fetches after the tile's last put and hands the index straight over: it claims its next tile only
when the consumers are a ring's depth of loads from the end of this one, so it runs ahead into the next tile as
in the static loop while the tile it takes is the one the CTA is about to free up for. (Fetched at the top of a
tile, the atomic's latency was hidden, but a CTA held its next tile through the whole current one: on a batched
GEMM of four batches of 64 tiles, K 8192 / 256 / 4096 / 1024, the long batch's CTAs claimed the third batch's
tiles at their start and ran them last; fetched late it ran 576 TFLOP/s against 440, causal attention at head
dim 128 1.03-1.05x and MoE tiles that skip their loop 1.02x, H200.) The tiles are
taken in the grouped order of the static loop (whole rows along axis 0, not snaked: attention's query blocks of
one head side by side, so the CTAs resident at one time share its keys and values in L2), which `launch-order`
made longest first within a row: the last tiles taken are short ones, as the hardware's own block scheduler
takes them, and each CTA's next tile is loaded while it finishes the current one. (Walking the longest blocks of
all heads first, in sections of heads whose keys and values fit in L2, ran 2-6% slower on H100: the CTAs resident
together then read more heads.) The counter leaves each launch at zero (`tawa.next_tile`'s lowering), so the
runtime zeroes it once, when it allocates it.

`can_persist(func, plans)` (asked by the driver before any pass runs, with the kernel's `ws_analysis.plan`) says
whether the kernel qualifies, and why not; `can_cluster(func, plans, ...)` the same for clusters.
"""
from __future__ import annotations

import math

from mlir import ir
from mlir.dialects import arith, scf

from tawa import hopper
from tawa.ir import attrs
from tawa.ir.kernel_info import body_block, kernels
from tawa.ir.location import source_location, where
from tawa.ir.ops import (ClusterSizeOp, GridExtentOp, LoadOp, NextTileOp, NumProgramsOp, ProgramIdOp, TileGetOp,
                         TilePutOp, warp_group_role, warp_groups)
from tawa.ir.traversal import ops_of, parent_op, walk
from tawa.ir.types import elem_type, tile_bytes, tile_shape
from tawa.lowering import aref_insertion, ws_analysis, ws_ir
from tawa.lowering.assign_layouts import smem_swizzle
from tawa.lowering.layouts import takes_three_groups
from tawa.options import cluster_axis
from tawa.tile_plan import PINGPONG_ACC_REGISTERS

#: The group when the kernel's operands do not split into row and column tiles (Triton's usual GROUP_SIZE_M).
DEFAULT_GROUP = 8
#: The group that walks all of grid axis 0 before the next program along axis 1.
WHOLE_AXIS = 0
#: WHOLE_AXIS with every other row along axis 0 walked backwards: where loop lengths grow along axis 0, a CTA that
#: takes every S-th tile (S CTAs, a multiple of the row) alternates long and short ones instead of always the same.
SNAKE = -1


def can_persist(func_op, plans: list, options=None) -> tuple:
    """(True, "") if the tile loop keeps the kernel correct and useful, else (False, why not). `plans`: the
    kernel's `ws_analysis.plan`.

    A dot operand loaded directly in the kernel's body, outside the pipelined loops (attention's Q block), gets a
    ring of its own that repeats per tile (`aref_insertion.prologue_loads`); one loaded under other control flow
    is staged by the consumers once per program and cannot repeat. The ring must also leave room for the
    epilogue's staging, which in a persistent kernel cannot reuse the drained ring."""
    body = body_block(func_op)
    for p in plans:
        if p.loop.block != body and not _under_top_level_conditionals(p.loop, body):
            # (a loop the program writes around its K loop, a hand-written tile loop, is its own schedule; a
            # conditional around it may skip it for some tiles)
            kind = "a conditional" if parent_op(p.loop).name == "scf.if" else "a loop"
            return False, f"its pipelined loop{where(p.loop)} is nested in {kind} the program writes"
    heavy = {ld for p in plans for ld in p.loads}
    prologue = set(aref_insertion.prologue_loads(func_op, heavy))
    for op in walk(func_op.operation):
        # (a 1-D block reaches a dot only through math on a tile, in the consumers' registers: it is loaded again
        # for each tile, as the kernel's body reads it; so is a 2-D tile that TMA could not copy for a dot, such as
        # a column of per-query segment ids that masks the scores)
        if op.name == LoadOp.NAME and op not in heavy and op not in prologue and ws_analysis.feeds_dot(op) \
                and len(tile_shape(LoadOp(op).result.type)) != 1 \
                and aref_insertion.copyable(LoadOp(op).result.type):
            return False, (f"the dot operand loaded{where(op)} outside the pipelined loop is staged once per "
                           f"program (a ring of its own per tile needs a 2-D tile loaded in the kernel's body at "
                           f"offsets the producer can compute)")
    if prologue and getattr(options, "split_k", 1) > 1:
        op = next(iter(prologue))
        return False, f"split-K and the dot operand loaded{where(op)} before the loop, once per tile, do not combine"
    return aref_insertion.smallest_ring_fits(func_op, heavy, options, persistent=True)


def _under_top_level_conditionals(loop, body) -> bool:
    """Whether `loop` sits in the kernel's body under conditionals only (`if pid_m * BLOCK_M < count:`), no loop."""
    op = parent_op(loop)
    while op is not None and op.name == "scf.if":
        if op.block == body:
            return True
        op = parent_op(op)
    return False


def prologue_operand(func_op, plans: list):
    """The first dot operand the kernel loads directly in its body, outside its pipelined loops (attention's Q
    block: a persistent kernel routes it through a ring of its own), or None."""
    heavy = {ld for p in plans for ld in p.loads}
    return next(iter(aref_insertion.prologue_loads(func_op, heavy)), None)


def can_pingpong(func_op, plans: list, options=None) -> tuple:
    """(True, "") if each consumer warp group can compute whole tiles on its own, else (False, why not). Asked
    after `can_persist`, with the same `plans`.

    Each group skips the other's tiles in the shared ring by their trip count, so every tile's K loop must have
    the same trip count (bounds that do not depend on the program: not so under split-K); each group holds the
    whole tile's accumulators; and both groups stage their epilogues side by side next to the ring."""
    if getattr(options, "split_k", 1) > 1:
        return False, "split-K gives the programs of a tile K loops of different lengths"
    if getattr(options, "num_consumer_groups", None) == 1:
        return False, "it has one consumer warp group (num_consumer_groups=1)"
    if getattr(options, "num_consumer_groups", None) == 3:
        return False, "ping-pong takes turns between two consumer warp groups (num_consumer_groups=3)"
    prologue = prologue_operand(func_op, plans)
    if prologue is not None:
        return False, (f"the dot operand loaded{where(prologue)} before the loop is shared by the tile's consumer "
                       f"groups")
    for p in plans:
        if ws_ir.computed_from_program(p.loop.operands[:3]):
            return False, f"the trip count of the loop{where(p.loop)} depends on the program"
        if parent_op(p.loop).name == "scf.if":
            # (a group passes over the other's tiles by their trip count, and cannot tell which of them ran it;
            # the groups' turns are taken around a loop directly in the tile loop)
            return False, f"the loop{where(p.loop)} is nested in a conditional, which some tiles may skip"
    rows = carried_rows(func_op)
    if takes_three_groups(rows):
        return False, f"its {rows}-row tiles take three consumer warp groups together (64 rows each)"
    acc = _accumulator_registers(func_op)
    if acc > PINGPONG_ACC_REGISTERS:
        return False, (f"one consumer warp group would hold {acc} accumulator registers per thread (at most "
                       f"{PINGPONG_ACC_REGISTERS}; use a narrower tile)")
    heavy = {ld for p in plans for ld in p.loads}
    return aref_insertion.smallest_ring_fits(func_op, heavy, options, persistent=True, stagings=2)


#: Bytes at which a swizzled shared tile may be cut into separately copied parts (the 128-byte swizzle repeats
#: every 8 rows of 128 bytes; the narrower swizzles more often).
SWIZZLE_ATOM_BYTES = 1024


def can_cluster(func_op, plans: list, options, schedule: str) -> tuple:
    """(True, what is shared) if the kernel can run in the clusters `options.cluster` asks for, else (False, why
    not). Asked before any pass runs, with the schedule the driver chose (`plans`: the kernel's
    `ws_analysis.plan` where it is specialized)."""
    if schedule not in ("persistent", "pingpong"):
        return False, "clusters need a persistent schedule (a warp-specialized kernel with schedule 'persistent' " \
                      "or 'pingpong')"
    if getattr(options, "split_k", 1) > 1:
        return False, "split-K programs of one tile would have to meet across clusters"
    prologue = prologue_operand(func_op, plans)
    if prologue is not None:
        return False, (f"the dot operand loaded{where(prologue)} before the loop comes through a ring of its own, "
                       f"which clusters do not pair yet")
    axis, size = cluster_axis(options.cluster_dims())
    for p in plans:
        # the CTAs of a pair fill and release each other's ring slots in step: their loops must run alike
        if _depends_on_program(p.loop.operands[:3], axis):
            line = source_location(p.loop)
            return False, (f"the trip count of its loop{f' on line {line.line}' if line else ''} depends on "
                           f"program_id({axis}), so the CTAs of a cluster along it would run different numbers of "
                           f"iterations")
        if _depends_on_program(ws_ir.enclosing_conditions(p.loop), axis):
            return False, (f"the condition around its loop{where(p.loop)} depends on program_id({axis}), so "
                           f"one CTA of a cluster along it could run the loop and the other skip it")
    loads = [ld for p in plans for ld in p.loads]
    shared = [ld for ld in loads if multicast_parts(ld, axis, size)]
    if not shared:
        same = [ld for ld in loads if not _depends_on_program(LoadOp(ld).offsets, axis)]
        if same:
            return False, (f"the tile loaded{where(same[0])} is the same for the CTAs of a cluster but does not cut "
                           f"into {size} row blocks of whole {SWIZZLE_ATOM_BYTES}-byte swizzle atoms")
        return False, (f"every operand tile of the pipelined loops depends on program_id({axis}), so the CTAs of "
                       f"a cluster would share none")
    names = ", ".join(f"the load{where(ld)}" for ld in shared)
    return True, (f"the pairs of CTAs along grid axis {axis} share {names}: each CTA copies half of it into both "
                  f"(TMA multicast)")


def multicast_parts(load_op, axis: int, size: int) -> bool:
    """Whether the CTAs of a cluster along `axis` all load the same tile here (its offsets do not depend on
    program_id(axis)) and the tile cuts along its rows into `size` parts of whole swizzle atoms."""
    if _depends_on_program(LoadOp(load_op).offsets, axis):
        return False
    t = LoadOp(load_op).result.type
    shape = tile_shape(t)
    width = smem_swizzle(shape[-1], elem_type(t)) if len(shape) == 2 else None
    if width is None or shape[0] % size:
        return False
    return (shape[0] // size) * width % SWIZZLE_ATOM_BYTES == 0


def _depends_on_program(values, axis: int) -> bool:
    return ws_ir.computed_from(values, lambda op: op.name == ProgramIdOp.NAME and ProgramIdOp(op).axis == axis)


def carried_rows(func_op) -> int:
    """The rows of the 2-D tiles the kernel's loops with dots carry (their accumulators; 0 if none)."""
    return max((t.shape[0] for t in _carried_tiles(func_op) if len(t.shape) == 2), default=0)


def _carried_tiles(func_op) -> list:
    """The tile types carried by the kernel's loops with dots (their accumulators)."""
    return [ir.RankedTensorType(r.type) for op in walk(func_op.operation)
            if op.name == "scf.for" and any(o.name == "tawa.dot" for o in walk(op))
            for r in op.results if isinstance(r.type, ir.RankedTensorType)]


def _accumulator_registers(func_op) -> int:
    """f32 registers per thread of the tiles carried by the kernel's loops with dots, for one warp group."""
    total = 0
    for t in _carried_tiles(func_op):
        n = 1
        for d in t.shape:
            n *= d
        total += n // hopper.THREADS_PER_WARP_GROUP
    return total


def tile_group(loads: list, options=None, tiles_per_cta: int = 1, dynamic: bool = False) -> tuple:
    """(G, why) for the grouped order of a persistent kernel whose producer copies `loads` each k-step, with
    `tiles_per_cta` tiles resident per CTA (2 for ping-pong): G counts the loop's units along grid axis 0
    (clusters along it, with 2x1 clusters), per the module's docstring. With `dynamic` tiles, rows are never
    snaked: taken as CTAs free up, the tiles run in the order given, each row longest first (`launch-order`)."""
    if options is not None and getattr(options, "group_m", None):
        return options.group_m, f"group_m={options.group_m}"
    row, col = _bytes_along(loads, 0), _bytes_along(loads, 1)
    if col and not any(_depends_on_program(LoadOp(ld).offsets, 0) for ld in loads):
        if any(_depends_on_program(parent_op(ld).operands[:3], 0) for ld in loads):
            if dynamic:
                return WHOLE_AXIS, ("the tiles along axis 0 load the same operands and, taken as CTAs free up, run "
                                    "longest first where their loops' lengths grow along axis 0 (causal "
                                    "attention's query blocks)")
            return SNAKE, ("the tiles along axis 0 load the same operands and their loops' lengths depend on "
                           "their program along axis 0 (causal attention's query blocks): they run side by side, "
                           "every other row of them backwards")
        return WHOLE_AXIS, ("the tiles along axis 0 load the same operands (attention's query blocks of one head): "
                            "they run side by side")
    if not row or not col:
        return DEFAULT_GROUP, "its operand tiles do not split into ones along M and ones along N"
    resident = hopper.TYPICAL_SMS * tiles_per_cta
    tiles = math.sqrt(resident * col / row)
    cluster = _cluster_of(options)
    along = cluster[1] if cluster and cluster[0] == 0 else 1
    group = max(1, 2 ** round(math.log2(max(tiles / along, 1))))
    return group, (f"sqrt({resident} resident tiles x {col} / {row} operand bytes per k-step along N / M) = "
                   f"{tiles:.1f} tiles" + (f", {along} per cluster" if along > 1 else ""))


def _bytes_along(loads: list, axis: int) -> int:
    """Bytes of the tiles in `loads` that change with program_id(axis) only (A's along M, B's along N)."""
    offsets = [(ld, LoadOp(ld).offsets) for ld in loads]
    return sum(tile_bytes(LoadOp(ld).result.type) for ld, o in offsets
               if _depends_on_program(o, axis) and not _depends_on_program(o, 1 - axis))


def _cluster_of(options):
    """(grid axis, CTAs) of the clusters `options` asks for, or None."""
    dims = options.cluster_dims() if options is not None and getattr(options, "cluster", None) else (1, 1)
    return cluster_axis(dims) if dims != (1, 1) else None


def _grouped_program(t, gx, gy, group: int) -> tuple:
    """(p0, p1, p2) of linear tile index `t` in grouped order over a gx x gy x gz grid (`group`: a constant or
    a value)."""
    per_z = arith.MulIOp(gx, gy).result
    p2 = arith.DivUIOp(t, per_z).result
    r = arith.RemUIOp(t, per_z).result
    if group in (WHOLE_AXIS, SNAKE):
        p0, p1 = arith.RemUIOp(r, gx).result, arith.DivUIOp(r, gx).result
        if group == SNAKE:
            odd = arith.CmpIOp(arith.CmpIPredicate.ne, arith.AndIOp(p1, ws_ir.i32(1)).result, ws_ir.i32(0)).result
            p0 = arith.SelectOp(odd, arith.SubIOp(arith.SubIOp(gx, ws_ir.i32(1)).result, p0).result, p0).result
        return p0, p1, p2
    group = group if isinstance(group, ir.Value) else ws_ir.i32(group)
    size = arith.MulIOp(gy, group).result
    gid = arith.DivUIOp(r, size).result
    first = arith.MulIOp(gid, group).result
    width = arith.MinUIOp(arith.SubIOp(gx, first).result, group).result
    rest = arith.SubIOp(r, arith.MulIOp(gid, size).result).result
    p0 = arith.AddIOp(first, arith.RemUIOp(rest, width).result).result
    p1 = arith.DivUIOp(rest, width).result
    return p0, p1, p2


def _region_queries(region):
    """The body of a warp-group region (without its terminator), its terminator, and the program queries the body
    makes (taken before the tile loop's own are created)."""
    block = region.regions[0].blocks[0]
    pids = [op for op in walk(region) if op.name == ProgramIdOp.NAME]
    counts = [op for op in walk(region) if op.name == NumProgramsOp.NAME]
    return ops_of(block)[:-1], ops_of(block)[-1], pids, counts


def _into_loop(body, before, program, extents, pids, counts) -> None:
    """Move `body` into the tile loop (before its op `before`), reading program `program` of a grid of
    `extents`."""
    for op in body:
        op.move_before(before)
    for op in pids:
        op.results[0].replace_all_uses_with(program[ProgramIdOp(op).axis])
        op.erase()
    for op in counts:
        op.results[0].replace_all_uses_with(extents[NumProgramsOp(op).axis])
        op.erase()


def wrap_region(region, cluster=None, group: int = DEFAULT_GROUP) -> None:
    """Move the region's body into a loop over the tiles this CTA owns (a ping-pong consumer region: the c-th of
    every n consecutive ones, for its `tawa.tile_share` [c, n]); with `cluster` (grid axis, CTAs), over the tiles
    of its cluster's pairs."""
    body, term, pids, counts = _region_queries(region)
    with ir.InsertionPoint(term), region.location:
        cta = ws_ir.program_query(ProgramIdOp.NAME, 0)
        ctas = ws_ir.program_query(NumProgramsOp.NAME, 0)
        extents = [ws_ir.program_query(GridExtentOp.NAME, a) for a in range(3)]
        walked = list(extents)
        if cluster:
            axis = cluster[0]
            t32 = ir.IntegerType.get_signless(32)
            size = ir.Operation.create(ClusterSizeOp.NAME, results=[t32]).results[0]
            rank = arith.RemUIOp(cta, size).result
            cta = arith.DivUIOp(cta, size).result
            ctas = arith.DivUIOp(ctas, size).result
            walked[axis] = arith.DivUIOp(arith.SubIOp(arith.AddIOp(extents[axis], size).result, ws_ir.i32(1)).result,
                                         size).result
        tiles = arith.MulIOp(arith.MulIOp(walked[0], walked[1]).result, walked[2]).result
        share = attrs.TILE_SHARE.get(region)
        if share:
            index, count = share
            cta = arith.AddIOp(cta, arith.MulIOp(ctas, ws_ir.i32(index)).result).result
            ctas = arith.MulIOp(ctas, ws_ir.i32(count)).result
        loop = scf.ForOp(cta, tiles, ctas, [])
        with ir.InsertionPoint(loop.body):
            program = list(_grouped_program(loop.induction_variable, walked[0], walked[1], group))
            if cluster:
                program[axis] = arith.AddIOp(arith.MulIOp(program[axis], size).result, rank).result
            tail = scf.YieldOp([])
    _into_loop(body, tail, program, extents, pids, counts)


def wrap_region_dynamic(region, program_of) -> None:
    """Move the region's body into a loop over the tiles its CTA takes from the launch's tile counter (the module's
    docstring, "Dynamic tiles"): the producer fetches and puts each next index, the consumers get it.
    `program_of(t, extents)` gives the program of linear tile index t."""
    body, term, pids, counts = _region_queries(region)
    producer = warp_group_role(region) == attrs.PRODUCER
    t32 = ir.IntegerType.get_signless(32)
    with ir.InsertionPoint(term), region.location:
        cta = ws_ir.program_query(ProgramIdOp.NAME, 0)
        extents = [ws_ir.program_query(GridExtentOp.NAME, a) for a in range(3)]
        tiles = arith.MulIOp(arith.MulIOp(extents[0], extents[1]).result, extents[2]).result
        loop = scf.WhileOp([t32], [cta])
        before = loop.before.blocks.append(t32)
        after = loop.after.blocks.append(t32)
        with ir.InsertionPoint(before):
            more = arith.CmpIOp(arith.CmpIPredicate.ult, before.arguments[0], tiles).result
            scf.ConditionOp(more, [before.arguments[0]])
        with ir.InsertionPoint(after):
            program = list(program_of(after.arguments[0], extents))
            if producer:
                # (the fetch after the tile's loads, not before them: a CTA that claimed its next tile while its
                # current one had just begun held it for that whole tile, and a long tile's next waited behind it)
                tail = ir.Operation.create(NextTileOp.NAME, results=[t32])
                following = tail.results[0]
                ir.Operation.create(TilePutOp.NAME, operands=[following])
            else:
                tail = ir.Operation.create(TileGetOp.NAME, results=[t32])
                following = tail.results[0]
            scf.YieldOp([following])
    _into_loop(body, tail, program, extents, pids, counts)


def run(module: ir.Module, options=None) -> ir.Module:
    with module.context, ir.Location.unknown(module.context):
        for func in kernels(module):
            groups = warp_groups(func)
            if not groups or attrs.PERSISTENT.get(func):
                continue
            # the loads of the pipelined loops (a prologue operand's is once per tile, at the loops' top level)
            loads = [op for region in groups if warp_group_role(region) == attrs.PRODUCER for op in walk(region)
                     if op.name == LoadOp.NAME and ws_ir.feeds_puts(op) and parent_op(op).name == "scf.for"]
            cluster = _cluster_of(options)
            share = max((attrs.TILE_SHARE.get(r) or [0, 1])[1] for r in groups)
            dynamic, _ = dynamic_tiles(func, options, share)
            group, _ = tile_group(loads, options, share, dynamic)
            if dynamic:
                order = lambda t, extents: _grouped_program(t, extents[0], extents[1], group)  # noqa: E731
                for region in groups:
                    wrap_region_dynamic(region, order)
                attrs.DYNAMIC_TILES.set(func)
            else:
                if cluster:
                    attrs.CLUSTER.set(func, list(options.cluster_dims()))
                    for op in loads:
                        if multicast_parts(op, *cluster):
                            attrs.MULTICAST.set(op)
                for region in groups:
                    wrap_region(region, cluster, group)
            attrs.PERSISTENT.set(func)
            attrs.TILE_GROUP.set(func, group)
    return module


def dynamic_tiles(func, options, share: int) -> tuple:
    """(True, why) if a persistent kernel takes its tiles from a counter (the module's docstring, "Dynamic
    tiles"): where `dynamic_tiles=True`, else where the lengths of its loops with dots depend on the program;
    (False, "") otherwise, and always with clusters, ping-pong (`share` > 1 consumer regions per tile loop),
    stream-K or split-K, whose tiles go to fixed CTAs or consumer groups (`CompileOptions.validate` refuses
    `dynamic_tiles=True` with those options, and the driver does not pick ping-pong then). The driver asks it for
    the kernel's notes, this pass to build the loop."""
    asked = getattr(options, "dynamic_tiles", None)
    if asked is False or share > 1 or _cluster_of(options) or getattr(options, "schedule", None) == "streamk" \
            or getattr(options, "split_k", 1) > 1:
        return False, ""
    if asked:
        return True, "dynamic_tiles=True"
    if ws_ir.uneven_dot_loops(func.operation):
        return True, "its loops' lengths depend on the program"
    if ws_ir.skipped_dot_loops(func.operation):
        # (measured, H200, MoE in the capacity layout at 128x256: 576-585 TFLOP/s against 524-527 for fixed shares)
        return True, "some programs skip its loop with a dot"
    return False, ""
