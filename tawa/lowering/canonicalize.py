"""canonicalize: upstream canonicalization and CSE on the tile IR, plus folding additions into dot accumulators.

Takes: any tawa module. Gives: the same program with constants folded, dead scalar arithmetic removed, common
subexpressions merged, and every `x + dot(a, b)` (a dot into a zero accumulator whose only use is one f32 addition)
rewritten as `dot(a, b, x)`. Why: the frontend emits straightforward code (one `arith.constant` per literal,
repeated index math, `acc += dot(a, b)` as an addition after a dot); later passes and the generated code read
better without it, and a dot that accumulates in place is what the schedules pipeline (the wgmma adds into its
accumulator registers; a separate addition would keep a second accumulator live and, in a GEMM main loop, stop the
dot from staying in flight across iterations). Program ids, program counts and tensor extents move to the top of the
kernel, one op each: they are launch values, and a loop's tile coordinates must be loop-invariant values plus the
loop index for the pipelines to issue them ahead. IRDL ops declare no side-effect information, so MLIR treats tawa ops
as having effects and never deletes or merges them: the pure ones whose results nobody uses (a tile of row indices
that only a causal mask, compiled out, would read) are erased here, so that no later pass lays out or lowers them.
"""
from __future__ import annotations

from mlir import passmanager

from mlir import ir

from tawa.ir.kernel_info import body_block, kernels
from tawa.ir.ops import (ArangeOp, BroadcastOp, DimOp, DotOp, ExpandDimsOp, NumProgramsOp, ProgramIdOp, ReduceOp,
                         SplatOp, TransOp, is_zero_splat)
from tawa.ir.traversal import defining_op, walk


def fold_dot_additions(func) -> int:
    """`x + dot(a, b, 0)` (either operand order) -> `dot(a, b, x)`; returns how many were folded."""
    folded = 0
    for op in list(walk(func)):
        if op.name != "arith.addf" or len(op.results) != 1:
            continue
        for i in (0, 1):
            dot = defining_op(op.operands[i])
            other = op.operands[1 - i]
            if dot is None or dot.name != DotOp.NAME or dot.block != op.block or other.type != op.results[0].type:
                continue
            if len(list(dot.results[0].uses)) != 1 or not is_zero_splat(DotOp(dot).acc):
                continue
            other_def = defining_op(other)
            if other_def is not None and other_def.block == op.block and not other_def.is_before_in_block(dot):
                continue      # the addend is computed after the dot: moving it into the dot would reorder
            dot.operands[DotOp.ACC] = other
            op.results[0].replace_all_uses_with(dot.results[0])
            op.erase()
            folded += 1
            break
    return folded


#: Tawa ops without side effects: erased when their results are unused.
PURE_OPS = frozenset(op.NAME for op in (ArangeOp, BroadcastOp, DimOp, ExpandDimsOp, ProgramIdOp, ReduceOp, SplatOp,
                                        TransOp))


def erase_dead_pure_ops(func) -> int:
    """Erase pure tawa ops whose results have no uses (repeatedly, so chains go); returns how many."""
    erased = 0
    while True:
        dead = [op for op in walk(func) if op.name in PURE_OPS and all(not list(r.uses) for r in op.results)]
        if not dead:
            return erased
        for op in dead:
            op.erase()
        erased += len(dead)


#: Ops whose value is the launch's (which program, how many, a tensor argument's extent): the same wherever in
#: the kernel they are written.
LAUNCH_VALUE_OPS = frozenset((ProgramIdOp.NAME, NumProgramsOp.NAME, DimOp.NAME))


def hoist_launch_values(func) -> int:
    """Move `program_id(...)`, `num_programs(...)` and extents of tensor arguments to the top of the kernel, one op
    for each value; returns how many moved or merged. A user writes `load(B, (k, program_id(1)), ...)` in the loop
    as readily as before it; hoisted, the tile coordinates are loop-invariant values plus the loop index, which is
    what the uniform-warp pipeline re-evaluates for a later iteration. (CSE leaves them: tawa ops declare no
    side-effect information, so MLIR merges none of them.)"""
    body = body_block(func)
    # after the constants, which canonicalization keeps at the top
    first = next((op for op in body.operations if op.operation.name != "arith.constant"), None)
    if first is None:
        return 0
    first = first.operation
    seen = {}
    changed = 0
    last = None
    for op in list(walk(func)):
        if op.name not in LAUNCH_VALUE_OPS or \
                not all(isinstance(v, ir.BlockArgument) and v.owner == body for v in op.operands):
            continue
        attributes = sorted((op.attributes[i].name, str(op.attributes[i].attr)) for i in range(len(op.attributes)))
        key = (op.name, tuple(attributes), tuple(v.arg_number for v in op.operands))
        if key in seen:
            op.results[0].replace_all_uses_with(seen[key].results[0])
            op.erase()
            changed += 1
            continue
        seen[key] = op
        changed += op.block != body
        # (in program order)
        if last is not None:
            op.move_after(last)
        elif op != first:
            op.move_before(first)
        last = op
    return changed


def run(module, options):
    with module.context:
        passmanager.PassManager.parse("builtin.module(canonicalize, cse)").run(module.operation)
        changed = sum(hoist_launch_values(func) for func in kernels(module))
        changed += sum(erase_dead_pure_ops(func) for func in kernels(module))
        changed += sum(fold_dot_additions(func) for func in kernels(module))
        if changed:
            passmanager.PassManager.parse("builtin.module(canonicalize, cse)").run(module.operation)
    return module
