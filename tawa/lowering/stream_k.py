"""stream-k: the CTAs of a persistent kernel share its last waves of tiles by K iterations (Stream-K).

Takes: a persistent cooperative kernel (after `persistent-tiles`, without clusters) whose every warp-group region
is one tile loop around one K loop, the consumers' loop carrying f32 dot accumulators from zeros (checked on the
tile program by `can_stream_k`):

    scf.for %t = %cta to %tiles step %ctas {  <program of %t>; scf.for %k = %lb to %ub step %s {...}; <epilogue>  }

Gives: each region's tile loop walking this CTA's work items, and the epilogue run once per tile, on the whole
sum (`tawa.stream_k` on the kernel):

    <the K loop's bounds, moved before the tile loop: they are the same for every tile>
    %items, ... = <this CTA's plan, below>
    scf.for %i = 0 to %items step 1 {
      %t, %k0, %k1 = <item i: its tile, and the K iterations [k0, k1) of it this CTA runs>
      <program of %t>; scf.for %j = %lb to %lb + (%k1 - %k0) * %s step %s {
        %k = %j for a whole tile, %lb + (%k1 - 1) * %s - (%j - %lb) in the shared tail; ...}   (last to first)
      %shared = %k0 != 0 or %k1 != <the tile's iterations>         (consumers only, from here on)
      %go, %acc' = scf.if %shared {
        tawa.split_k_store %acc, %boundary, %half {slot}           %boundary: the CTA whose range ends in the tile
        %last = tawa.split_k_arrive %boundary {splits = 2}         %half: 0 for the first iterations, 1 for the rest
        yield %last, (%last ? tawa.split_k_sum %acc, %boundary, %half : %acc)
      } else { yield true, %acc }
      scf.if %go { <epilogue on %acc'> }
    }

The plan: with T tiles, P CTAs and W = ceil(T / P) waves, the tail is worth sharing where more than an eighth
of the W * P slots would be idle (T = 1.03 P: half of them; 3.64 waves: 9%, not shared). Then the first
(W - 2) P tiles run whole, P at a time as before, and the remaining T - (W - 2) P tiles (more than P, at most
2P) are cut by K iterations into P equal ranges, CTA c taking iterations [c I / P, (c + 1) I / P) of them in
order. Each range holds at least one tile's worth of iterations, so a tile is shared by at most two CTAs: the
one whose range ends inside it (it runs the tile's first iterations, last in its own range) and the next (the
rest, first in its range). Both keep their partial in the workspace record of the boundary between
them, and whichever arrives second adds the two and runs the epilogue; nobody waits for anybody, so the
persistent CTAs need not even be resident together. Otherwise (T <= P, few idle slots, or one K iteration per
tile) every tile runs whole, as in the persistent kernel (but for its K iterations, run backwards: the sums are
rounded differently, not worse).

Why: a persistent kernel whose tiles make 1.03 waves runs the whole second wave for 3% of the work; at 3.6
waves it leaves a third of the GPU idle for a tenth of the time. Sharing the tail by K iterations (Stream-K,
Osama et al. 2023; CUTLASS's stream-K tile scheduler) makes every CTA's work equal to within one K iteration,
at the price of one partial tile stored and one loaded per CTA boundary in the shared tail.

Every range of the shared tail is run from its last K iteration to its first; the whole tiles before it run
forwards, as the persistent kernel's do. Ranges that start at staggered K offsets would have
the CTAs streaming the same operand panels at different K, each slice fetched from DRAM again once the L2 no
longer holds it (doubling the DRAM traffic of a GEMM whose operands do not fit). Backwards, every CTA starts its
first shared range at the tile's last K iteration and ends its last range at iteration 0 together with the
others, so at any moment the CTAs are at one of two K offsets. (Any order is valid: only dots update the
accumulators, which is what makes the sum of two ranges the whole sum in the first place.)

Measured on an H200 (docs/performance.md), the trade pays with one to three waves and not beyond: a sparse last
wave of many costs little at the power limit (the idle SMs let the others clock higher), while the fix-up's
stores, loads and barriers sit on the critical path.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, scf

from tawa.errors import InternalCompilerError
from tawa.ir import attrs
from tawa.ir.kernel_info import kernels
from tawa.ir.location import where
from tawa.ir.ops import (ArefGetOp, ArefPutOp, DotOp, ForOp, LoadOp, create_split_k_arrive, create_split_k_store,
                         create_split_k_sum, warp_group_role, warp_groups)
from tawa.ir.traversal import backward_slice, ops_of, walk
from tawa.lowering import split_k, ws_analysis, ws_ir
from tawa.lowering.ws_ir import cdiv, i32, redirect_uses, trip_count
from tawa.tile_plan import IDLE_SHARE

#: CTAs that meet over one tile of the shared tail: its workspace record holds this many partials.
SHARERS = 2


def can_stream_k(func_op, options=None) -> tuple:
    """(True, "") if the tail of the kernel's persistent tile loop can be shared by K iterations, else (False, why
    not). Asked by the driver on the tile program, after `persistent_tiles.can_persist`."""
    if getattr(options, "split_k", 1) > 1:
        return False, "split-K already divides every tile's K loop (compile with split_k=1)"
    if getattr(options, "cluster", None) not in (None, "1x1"):
        return False, "the CTAs of a cluster walk pairs of tiles together"
    loop, why = split_k.reduction_loop(func_op)
    if loop is None:
        return False, why[0] + where(why[1])
    if ws_ir.computed_from_program(ForOp(loop).bounds):
        return False, f"the trip count of the K loop{where(loop)} depends on the program"
    body = ops_of(loop.block)
    for op in body[:body.index(loop)]:
        if op.name == LoadOp.NAME and ws_analysis.feeds_dot(op):
            return False, f"a dot operand is loaded{where(op)} before the K loop, once per tile"
    for op in body[body.index(loop) + 1:]:
        for inner in [op, *walk(op)]:
            if inner.name == LoadOp.NAME:
                return False, ("its epilogue loads a tensor after the K loop (a CTA that hands its share of a "
                               "tile on skips the epilogue, and with it the staging of that operand)")
    return True, ""


def _tile_loop(region) -> ir.Operation:
    loops = [op for op in ops_of(region.regions[0].blocks[0]) if op.name == ForOp.NAME]
    if len(loops) != 1:
        raise InternalCompilerError(f"stream-k expects one tile loop per warp-group region, found {len(loops)}")
    return loops[0]


def _k_loop(tile_loop) -> ir.Operation:
    found = [op for op in ops_of(ForOp(tile_loop).body) if op.name == ForOp.NAME and any(
        o.name in (ArefGetOp.NAME, ArefPutOp.NAME, DotOp.NAME) for o in walk(op))]
    if len(found) != 1:
        raise InternalCompilerError(f"stream-k expects one K loop per tile loop, found {len(found)}")
    return found[0]


def _hoist_bounds(k_loop, tile_loop) -> None:
    """Move the computation of the K loop's bounds before the tile loop (it does not depend on the tile)."""
    body = ForOp(tile_loop).body
    needed = backward_slice(ForOp(k_loop).bounds, body)
    for op in needed:
        if not ws_ir.is_scalar_control(op) or op.name in ws_ir.PROGRAM_QUERIES or any(
                v == ForOp(tile_loop).iv for v in op.operands):
            raise InternalCompilerError(f"stream-k: the K loop's bounds depend on the tile ({op.name})")
    for op in [o for o in ops_of(body) if o in needed]:
        op.move_before(tile_loop)


class _Plan:
    """This CTA's share of the tiles, computed before its tile loop (every region computes the same); whether
    the tail is shared is `tawa.tile_plan.shares_tail`, in IR."""

    def __init__(self, cta, ctas, tiles, trips):
        i64 = ir.IntegerType.get_signless(64)
        zero, one, two = i32(0), i32(1), i32(2)
        waves = cdiv(tiles, ctas)
        slots = arith.MulIOp(waves, ctas).result
        idle = arith.SubIOp(slots, tiles).result
        sparse = arith.CmpIOp(arith.CmpIPredicate.ugt, arith.MulIOp(idle, i32(IDLE_SHARE)).result, slots).result
        several = arith.CmpIOp(arith.CmpIPredicate.ugt, tiles, ctas).result
        divisible = arith.CmpIOp(arith.CmpIPredicate.sgt, trips, one).result
        self.shared = arith.AndIOp(arith.AndIOp(sparse, several).result, divisible).result
        # whole tiles: the first (waves - 2) * ctas (all of them when the tail is not shared)
        self.whole = arith.SelectOp(self.shared, arith.MulIOp(arith.SubIOp(waves, two).result, ctas).result,
                                    tiles).result
        mine = arith.MaxSIOp(arith.SubIOp(self.whole, cta).result, zero).result
        self.own_whole = cdiv(mine, ctas)
        # the shared tail: iterations [start, end) of its (tiles - whole) * trips, in 64 bits (c * I overflows)
        wide = lambda v: arith.ExtUIOp(i64, v).result
        narrow = lambda v: arith.TruncIOp(ir.IntegerType.get_signless(32), v).result
        per = arith.MaxSIOp(trips, one).result
        total = arith.MulIOp(wide(arith.SubIOp(tiles, self.whole).result), wide(per)).result
        self.start = narrow(arith.DivUIOp(arith.MulIOp(wide(cta), total).result, wide(ctas)).result)
        self.end = narrow(arith.DivUIOp(arith.MulIOp(wide(arith.AddIOp(cta, one).result), total).result,
                                        wide(ctas)).result)
        self.first = arith.DivUIOp(self.start, per).result
        last = arith.DivUIOp(arith.SubIOp(arith.MaxUIOp(self.end, one).result, one).result, per).result
        tail = arith.SelectOp(self.shared, arith.AddIOp(arith.SubIOp(last, self.first).result, one).result,
                              zero).result
        self.items = arith.AddIOp(self.own_whole, tail).result
        self.cta, self.ctas, self.trips, self.per = cta, ctas, trips, per

    def item(self, i) -> tuple:
        """(tile, k0, k1, whole) of work item `i`: iterations [k0, k1) of output tile `tile` (in grouped order),
        and whether it is one of the tiles before the shared tail (run whole, forwards)."""
        whole = arith.CmpIOp(arith.CmpIPredicate.ult, i, self.own_whole).result
        tile_whole = arith.AddIOp(self.cta, arith.MulIOp(i, self.ctas).result).result
        shared = arith.AddIOp(self.first, arith.SubIOp(i, self.own_whole).result).result
        tile = arith.SelectOp(whole, tile_whole, arith.AddIOp(self.whole, shared).result).result
        base = arith.MulIOp(shared, self.per).result
        k0 = arith.MaxSIOp(arith.SubIOp(self.start, base).result, i32(0)).result
        k1 = arith.MinSIOp(arith.SubIOp(self.end, base).result, self.per).result
        k0 = arith.SelectOp(whole, i32(0), k0).result
        k1 = arith.SelectOp(whole, self.trips, k1).result
        return tile, k0, k1, whole


def rewrite_region(region) -> None:
    tile_loop = _tile_loop(region)
    k_loop = _k_loop(tile_loop)
    _hoist_bounds(k_loop, tile_loop)
    tl, kl = ForOp(tile_loop), ForOp(k_loop)
    cta, tiles, ctas = tl.bounds
    lb, ub, step = kl.bounds
    with ir.InsertionPoint(tile_loop), tile_loop.location:
        plan = _Plan(cta, ctas, tiles, trip_count(lb, ub, step))
        loop = scf.ForOp(i32(0), plan.items, i32(1), [])
        with ir.InsertionPoint(loop.body):
            tile, k0, k1, whole = plan.item(loop.induction_variable)
            tail = scf.YieldOp([])
    for op in ops_of(tl.body)[:-1]:
        op.move_before(tail)
    tl.iv.replace_all_uses_with(tile)
    tile_loop.erase()
    # The loop keeps its lower bound, so that its first iteration is still the one at %lb (where the conversion
    # starts a zero accumulator by overwriting it), and runs k1 - k0 iterations; its body sees them in order for
    # a whole tile and from the last, k1 - 1, down to k0 for a range of the shared tail (see the docstring).
    with ir.InsertionPoint(k_loop), k_loop.location:
        k_loop.operands[1] = arith.AddIOp(lb, arith.MulIOp(arith.SubIOp(k1, k0).result, step).result).result
        # at %j the body sees origin + sign * (j - lb): lb + (j - lb), or lb + (k1 - 1) * step - (j - lb)
        last = arith.AddIOp(lb, arith.MulIOp(arith.SubIOp(k1, i32(1)).result, step).result).result
        origin = arith.SelectOp(whole, lb, last).result
        sign = arith.SelectOp(whole, i32(1), i32(-1)).result
    with ir.InsertionPoint.at_block_begin(kl.body), k_loop.location:
        offset = arith.SubIOp(kl.iv, lb)
        seen = arith.AddIOp(origin, arith.MulIOp(sign, offset.result).result)
    kl.iv.replace_all_uses_except(seen.result, offset.operation)
    if warp_group_role(region) == attrs.CONSUMER:
        _fix_up(loop, k_loop, plan, k0, k1)


def _fix_up(loop, k_loop, plan: _Plan, k0, k1) -> None:
    """Around the epilogue: a tile shared with another CTA goes through the workspace, and only the second of
    the two to arrive runs the epilogue, on the sum."""
    accs = ForOp(k_loop).results
    body = ops_of(loop.body)
    epilogue = body[body.index(k_loop) + 1:-1]
    t32, i1 = ir.IntegerType.get_signless(32), ir.IntegerType.get_signless(1)
    with ir.InsertionPoint(body[-1]), k_loop.location:
        later = arith.CmpIOp(arith.CmpIPredicate.ne, k0, i32(0)).result
        cut = arith.CmpIOp(arith.CmpIPredicate.ne, k1, plan.trips).result
        shared = arith.OrIOp(later, cut).result
        # the record of the boundary inside this tile: this CTA's own when its range ends in it, else the one
        # before (its range ends where this one begins)
        boundary = arith.SelectOp(later, arith.SubIOp(plan.cta, i32(1)).result, plan.cta).result
        half = arith.ExtUIOp(t32, later).result
        meet = scf.IfOp(shared, [i1] + [a.type for a in accs], has_else=True)
        with ir.InsertionPoint(meet.then_block):
            for slot, acc in enumerate(accs):
                create_split_k_store(acc, boundary, half, slot)
            last = create_split_k_arrive(boundary, SHARERS)
            sums = scf.IfOp(last, [a.type for a in accs], has_else=True)
            with ir.InsertionPoint(sums.then_block):
                scf.YieldOp([create_split_k_sum(acc, boundary, half, slot, SHARERS) for slot, acc in enumerate(accs)])
            with ir.InsertionPoint(sums.else_block):
                scf.YieldOp(accs)
            scf.YieldOp([last] + list(sums.results))
        with ir.InsertionPoint(meet.else_block):
            scf.YieldOp([arith.ConstantOp(i1, 1).result] + accs)
        go = scf.IfOp(meet.results[0])
        with ir.InsertionPoint(go.then_block):
            end = scf.YieldOp([])
    for op in epilogue:
        op.move_before(end)
    redirect_uses(epilogue, accs, list(meet.results)[1:])


def run(module: ir.Module, options=None) -> ir.Module:
    with module.context, ir.Location.unknown(module.context):
        for func in kernels(module):
            groups = warp_groups(func)
            if not groups or not attrs.PERSISTENT.get(func) or attrs.STREAM_K.get(func):
                continue
            for region in groups:
                rewrite_region(region)
            attrs.STREAM_K.set(func)
    return module
