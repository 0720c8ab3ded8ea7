"""split-k: split a GEMM-like kernel's K loop over `split_k` programs per output tile.

Takes: a tile-level kernel (after `mask-elision`, before warp specialization) whose body has one top-level loop
with dots, carrying only dot accumulators that start from zero:

    %acc = scf.for %k = %lb to %ub step %c iter_args(%a = <zeros>) { ...; %d = tawa.dot %x, %y, %a; scf.yield %d }
    <epilogue on %acc: math, stores>

Gives: the grid's axis 2 multiplied by S = `split_k` (the runtime launches it so; `tawa.split_k = S` on the
kernel), each program running its share of the iterations and only the last to finish running the epilogue:

    %z = program_id(2) / S      (replaces the kernel's own program_id(2); num_programs(2) becomes it / S)
    %split = program_id(2) % S
    %tile = (%z * num_programs(1) + program_id(1)) * num_programs(0) + program_id(0)
    %acc = scf.for %k = %lb + i0 * %c to min(%ub, %lb + i1 * %c) ...    iterations [i0, i1) = [s T / S, (s+1) T / S)
    tawa.split_k_store %acc, %tile, %split {slot = 0}
    %last = tawa.split_k_arrive %tile {splits = S}
    scf.if %last {
      %sum = tawa.split_k_sum %acc, %tile, %split {slot = 0, splits = S}
      <epilogue on %sum>
    }

Why: a GEMM with few output tiles (M <= 64 decode shapes: 8 x 4096 x 4096 has 32 tiles of 64 x 128) leaves most
SMs idle and each busy one streaming a whole K panel; splitting K gives S times the programs, each streaming 1/S
of it. The partials go through a global workspace (the runtime's, zeroed once; the last program resets the tile's
counter) rather than atomics into the output, so the epilogue (bias, activation, a bf16 store) runs once on the
full sum, and the sum is deterministic: it adds the partials in split order whichever program finishes last
(two splits: its own partial and the other's, a + b being b + a).
Sums of zero-started accumulators are the full accumulator because a dot only adds products to its accumulator;
the checks below make sure nothing else is carried or stored before the sum.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, scf

from tawa.errors import CompilationError
from tawa.ir import attrs
from tawa.ir.kernel_info import body_block, kernel_name, kernels
from tawa.ir.location import source_location
from tawa.ir.ops import (DotOp, ForOp, NumProgramsOp, ProgramIdOp, StoreOp, create_split_k_arrive,
                         create_split_k_store, create_split_k_sum, is_zero_splat)
from tawa.ir.traversal import defining_op, ops_of, walk
from tawa.lowering.ws_ir import i32, program_query, redirect_uses, trip_count


def reduction_loop(func) -> tuple:
    """(the loop split-K splits, None) or (None, (why not, the op to point at))."""
    body = ops_of(body_block(func))
    loops = [op for op in body if op.name == ForOp.NAME and any(o.name == DotOp.NAME for o in walk(op))]
    if not loops:
        nested = next((op for op in walk(func)
                       if op.name == ForOp.NAME and any(o.name == DotOp.NAME for o in walk(op))), None)
        if nested is not None:      # (under a conditional or in a loop the program writes)
            return None, ("its loop with a dot is not at the top level of the kernel (the K loop split must be "
                          "one that every program runs, once)", nested)
        return None, ("it has no loop with a dot to split", func)
    if len(loops) > 1:
        return None, ("it has more than one loop with a dot (split-K splits one K loop)", loops[1])
    loop = loops[0]
    for op in body[:body.index(loop)] + [loop]:
        for inner in [op, *walk(op)]:
            if inner.name == StoreOp.NAME:
                return None, ("it stores before its K loop has finished (every split would store)", inner)
    step = defining_op(ForOp(loop).step)
    if step is None or step.name != "arith.constant" or ir.IntegerAttr(step.attributes["value"]).value <= 0:
        return None, ("its K loop's step is not a positive constant", loop)
    fl = ForOp(loop)
    if not fl.results:
        return None, ("its K loop carries no accumulator", loop)
    for i, (init, arg, res) in enumerate(zip(fl.inits, fl.iter_args, fl.results)):
        if not isinstance(res.type, ir.RankedTensorType) or str(res.type.element_type) != "f32":
            return None, (f"its K loop carries value #{i} of type {res.type}, not an f32 dot accumulator", loop)
        if not _accumulates(arg, fl.yield_op.operands[i]):
            return None, (f"value #{i} carried by its K loop is not a dot accumulator (only dots may update "
                          f"it, for the splits' values to add up)", loop)
        if not is_zero_splat(init):
            return None, (f"accumulator #{i} of its K loop does not start from zeros (each split would add it)",
                          loop)
    return loop, None


def _accumulates(arg, yielded) -> bool:
    """Whether `yielded` is `arg` with dot products added (a chain of dots through their accumulators), and
    nothing else reads the chain."""
    value = yielded
    while value != arg:
        op = defining_op(value)
        if op is None or op.name != DotOp.NAME or len(list(value.uses)) != 1:
            return False
        value = DotOp(op).acc
    return len(list(arg.uses)) == 1


def check(func, splits: int) -> None:
    """Raise a located CompilationError when the kernel cannot be split `splits` ways."""
    if splits <= 1:
        return
    loop, why = reduction_loop(func)
    if loop is None:
        reason, op = why
        raise CompilationError(f"cannot split the K loop of kernel '{kernel_name(func)}' (split_k={splits}): "
                               f"{reason}", source_location(op) or source_location(func),
                               note="compile with split_k=1")


def split_kernel(func, splits: int) -> None:
    block = body_block(func)
    loop, _ = reduction_loop(func)
    fl = ForOp(loop)
    # The kernel's own axis-2 queries now name the tile's axis-2 program: read them before adding ours.
    own_ids = [op for op in walk(func.operation) if op.name == ProgramIdOp.NAME and ProgramIdOp(op).axis == 2]
    own_counts = [op for op in walk(func.operation) if op.name == NumProgramsOp.NAME and NumProgramsOp(op).axis == 2]
    with ir.InsertionPoint.at_block_begin(block), loop.location:
        s = i32(splits)
        pid2 = program_query(ProgramIdOp.NAME, 2)
        z = arith.DivUIOp(pid2, s).result
        split = arith.RemUIOp(pid2, s).result
        z_count = arith.DivUIOp(program_query(NumProgramsOp.NAME, 2), s).result
        # The output tile's linear index over axes (z, 1, 0), the same in every split of it.
        row = arith.AddIOp(arith.MulIOp(z, program_query(NumProgramsOp.NAME, 1)).result,
                           program_query(ProgramIdOp.NAME, 1)).result
        tile = arith.AddIOp(arith.MulIOp(row, program_query(NumProgramsOp.NAME, 0)).result,
                            program_query(ProgramIdOp.NAME, 0)).result
    for op in own_ids:
        op.results[0].replace_all_uses_with(z)
        op.erase()
    for op in own_counts:
        op.results[0].replace_all_uses_with(z_count)
        op.erase()
    lb, ub, step = fl.bounds
    with ir.InsertionPoint(loop), loop.location:
        # Trip count T, then this split's iterations [s T / S, (s + 1) T / S): shares differ by at most one.
        trips = trip_count(lb, ub, step)
        first = arith.DivUIOp(arith.MulIOp(split, trips).result, s).result
        end = arith.DivUIOp(arith.MulIOp(arith.AddIOp(split, i32(1)).result, trips).result, s).result
        new_lb = arith.AddIOp(lb, arith.MulIOp(first, step).result).result
        new_ub = arith.MinSIOp(ub, arith.AddIOp(lb, arith.MulIOp(end, step).result).result).result
    loop.operands[0] = new_lb
    loop.operands[1] = new_ub
    # After the loop: keep the partials, count the arrival, and run the rest only in the last program.
    rest = ops_of(block)[ops_of(block).index(loop) + 1:-1]
    with ir.InsertionPoint(ops_of(block)[-1]), loop.location:
        for slot, acc in enumerate(fl.results):
            create_split_k_store(acc, tile, split, slot)
        branch = scf.IfOp(create_split_k_arrive(tile, splits))
        with ir.InsertionPoint(branch.then_block):
            sums = [create_split_k_sum(acc, tile, split, slot, splits) for slot, acc in enumerate(fl.results)]
            tail = scf.YieldOp([])
    for op in rest:
        op.move_before(tail)
    redirect_uses(rest, fl.results, sums)
    attrs.SPLIT_K.set(func, splits)


def run(module: ir.Module, options=None) -> ir.Module:
    splits = getattr(options, "split_k", 1) or 1
    if splits <= 1:
        return module
    with module.context, ir.Location.unknown(module.context):
        for func in kernels(module):
            if attrs.SPLIT_K.get(func) > 1:
                continue
            check(func, splits)
            split_kernel(func, splits)
    return module
