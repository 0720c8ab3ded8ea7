"""launch-order: launch the programs with the most work first.

Takes: tile IR after `canonicalize`. Gives: the same IR where, for every grid axis whose `tawa.program_id` makes
some loop run longer the larger it is (and no loop shorter), each `program_id(axis)` is replaced by

    %n = tawa.num_programs {axis}
    %reversed = (%n - 1) - program_id(axis)

Why: the GPU starts CTAs in increasing block index. In causal attention the query block i reads about i + 1 key
blocks, so in index order the longest programs start last and the kernel ends with a few of them running alone on
an otherwise idle GPU. Starting the longest first lets the short ones fill the last wave, which is how
FlashAttention schedules causal attention by hand (longest-processing-time-first). The rewrite is a permutation of
the programs, and programs never observe each other's order (the language has no atomics or inter-program
waits; split-K's own counters are added later and do not depend on the order), so results do not change.

The direction comes from a small monotonicity analysis of the scalar code that computes each loop's trip count
from the program ids: constants, kernel arguments, tensor extents and `num_programs` are fixed for a launch; `+`,
`min`, `max`, casts, and `*` or `/` by a positive constant keep a direction, `-` flips the subtrahend's. Anything
else that depends on a program id makes the direction unknown, and an axis with an unknown or falling trip count
keeps its order: a program written to walk its blocks in reverse already has the order this pass would give it.
"""
from __future__ import annotations

from mlir import ir, passmanager
from mlir.dialects import arith

from tawa.ir.kernel_info import kernels
from tawa.ir.ops import DimOp, ForOp, NumProgramsOp, ProgramIdOp
from tawa.ir.traversal import defining_op, int_constant, walk
from tawa.lowering.ws_ir import i32, program_query

# Directions of a scalar as a function of one program id: +1 non-decreasing, -1 non-increasing, 0 independent of
# it, None unknown. The analysis guides speed only: any direction it reports leaves a permutation of the programs,
# so a wrong one (an index that wraps, say) costs time, never results.
_KEEPS = ("arith.index_cast", "arith.index_castui", "arith.extsi", "arith.extui", "arith.trunci")
_COMBINES = ("arith.addi", "arith.minsi", "arith.maxsi", "arith.minui", "arith.maxui")
_BY_POSITIVE = ("arith.divsi", "arith.divui", "arith.ceildivsi", "arith.ceildivui", "arith.floordivsi")
_FIXED = (NumProgramsOp.NAME, DimOp.NAME, "arith.constant")


def _combine(a, b):
    if a is None or b is None:
        return None
    if a == 0 or a == b:
        return b
    return a if b == 0 else None


class _Direction:
    """How scalars move with `program_id(axis)`."""

    def __init__(self, axis: int):
        self.axis = axis
        self.memo = {}

    def of(self, value):
        op = defining_op(value)
        if op is None:
            # Kernel arguments are fixed for a launch; a loop's induction variable or a region's argument is not
            # followed.
            return 0 if value.owner.owner.operation.name == "func.func" else None
        key = op
        if key not in self.memo:
            self.memo[key] = self._of_op(op)
        return self.memo[key]

    def _of_op(self, op):
        name = op.name
        if name == ProgramIdOp.NAME:
            return 1 if ProgramIdOp(op).axis == self.axis else 0
        if name in _FIXED:
            return 0
        if len(op.results) != 1:
            return None
        operands = list(op.operands)
        if name in _KEEPS:
            return self.of(operands[0])
        if name in _COMBINES:
            return _combine(self.of(operands[0]), self.of(operands[1]))
        if name == "arith.subi":
            b = self.of(operands[1])
            return _combine(self.of(operands[0]), None if b is None else -b)
        if name == "arith.muli":
            for x, y in ((operands[0], operands[1]), (operands[1], operands[0])):
                c = int_constant(y)
                if c is not None:
                    d = self.of(x)
                    if d is None or c == 0:
                        return None if c else 0
                    return d if c > 0 else -d
        if name in _BY_POSITIVE:
            c = int_constant(operands[1])
            if c is not None and c > 0:
                return self.of(operands[0])
        # Any other op: fixed when all its operands are, unknown otherwise.
        return 0 if all(self.of(v) == 0 for v in operands) else None


def trip_count_direction(func, axis: int):
    """+1 if the kernel's loops run longer (and none shorter) as program_id(axis) grows, -1 the reverse, 0 if no
    trip count depends on it, None if some dependence is unknown or mixed."""
    direction = _Direction(axis)
    result = 0
    for op in walk(func):
        if op.name != ForOp.NAME:
            continue
        lower, upper, step = (direction.of(v) for v in list(op.operands)[:3])
        if step != 0:
            return None
        lower = None if lower is None else -lower
        result = _combine(result, _combine(lower, upper))
        if result is None:
            return None
    return result


def reverse_axis(func, axis: int) -> int:
    """Replace every use of program_id(axis) by num_programs(axis) - 1 - program_id(axis); the ids rewritten."""
    pids = [op for op in walk(func) if op.name == ProgramIdOp.NAME and ProgramIdOp(op).axis == axis]
    for op in pids:
        pid = op.results[0]
        uses = [(u.owner, u.operand_number) for u in pid.uses]
        with ir.InsertionPoint.after(op), op.location:
            last = arith.SubIOp(program_query(NumProgramsOp.NAME, axis), i32(1)).result
            reversed_pid = arith.SubIOp(last, pid).result
        for owner, index in uses:
            owner.operands[index] = reversed_pid
    return len(pids)


def run(module, options):
    with module.context:
        changed = 0
        for func in kernels(module):
            for axis in range(3):
                if trip_count_direction(func, axis) == 1:
                    changed += reverse_axis(func, axis)
        if changed:       # one constant 1 for the rewritten ids
            passmanager.PassManager.parse("builtin.module(canonicalize, cse)").run(module.operation)
    return module
