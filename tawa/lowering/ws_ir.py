"""IR helpers of the warp-specialization passes that are about warp specialization itself.

Takes and gives MLIR objects of a `tawa` module; holds no state. Why a module of its own: aref insertion,
partition, the protocol check and the producer's lowering must agree on what "scalar control the producer can
replicate" means, and on when two loop bounds are "the same value" (clones of one computation). Everything
generic (walking, kernels, op accessors, locations) lives in `tawa.ir`.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith

from tawa.ir.ops import ArefPutOp, ClusterSizeOp, DimOp, GridExtentOp, LoadScalarOp, NumProgramsOp, ProgramIdOp
from tawa.ir.traversal import defining_op, parent_op, users, walk
from tawa.ir.types import is_tile

#: Ops without regions that compute scalar control and index math: safe to replicate into every warp group.
#: The ops that tell a program where it is in the grid (they differ between programs, unlike tensor extents).
PROGRAM_QUERIES = {ProgramIdOp.NAME, NumProgramsOp.NAME, GridExtentOp.NAME, ClusterSizeOp.NAME}
#: (`tawa.load_scalar` reads a tensor the kernel never writes: the same value in every warp group.)
SCALAR_OPS = PROGRAM_QUERIES | {DimOp.NAME, LoadScalarOp.NAME}
SCALAR_DIALECTS = ("arith.", "math.", "index.")


def is_scalar_control(op: ir.Operation) -> bool:
    """Region-free op with only scalar results, no tile operands, and no side effects we know of."""
    if len(op.regions) != 0 or len(op.results) == 0:
        return False
    if op.name not in SCALAR_OPS and not op.name.startswith(SCALAR_DIALECTS):
        return False
    return all(not is_tile(r.type) for r in op.results) and all(not is_tile(v.type) for v in op.operands)


def feeds_puts(load_op) -> bool:
    """Whether a load's tile goes into aref puts only (the producer's loads whose copies the puts issue)."""
    used_by = users(load_op.results[0])
    return bool(used_by) and all(u.name == ArefPutOp.NAME for u in used_by)


def computed_from_program(values) -> bool:
    """Whether any of `values` is computed (transitively) from a program id, program count or grid extent:
    whether a loop with these bounds may run a different number of iterations in different programs."""
    return computed_from(values, lambda op: op.name in PROGRAM_QUERIES)


def _dot_loops(func_op):
    """The `scf.for` loops under `func_op` that hold a dot."""
    return (op for op in walk(func_op) if op.name == "scf.for" and any(inner.name == "tawa.dot" for inner in walk(op)))


def uneven_dot_loops(func_op) -> bool:
    """Whether some loop with a dot runs a number of iterations that depends on the program (causal attention's
    key loop): the kernel's programs then differ in length."""
    return any(computed_from_program(op.operands[:3]) for op in _dot_loops(func_op))


def skipped_dot_loops(func_op) -> bool:
    """Whether some loop with a dot sits under a conditional that some programs skip (an MoE tile past its expert's
    rows): their programs differ in length too, but in kind: a skipped tile is only its epilogue."""
    return any(skipped_by_program(op) for op in _dot_loops(func_op))


def enclosing_conditions(op) -> list:
    """The conditions of the `scf.if`s around `op`, innermost first, through the loops between them."""
    conditions, outer = [], parent_op(op)
    while outer is not None and outer.name in ("scf.if", "scf.for", "scf.while"):
        if outer.name == "scf.if":
            conditions.append(outer.operands[0])
        outer = parent_op(outer)
    return conditions


def skipped_by_program(loop) -> bool:
    """Whether `loop` sits under a conditional whose condition depends on the program (directly, or through a
    scalar read at an offset that does)."""
    return computed_from_program(enclosing_conditions(loop))


def i32(value: int) -> ir.Value:
    """An i32 constant, at the current insertion point."""
    return arith.ConstantOp(ir.IntegerType.get_signless(32), value).result


def trip_count(lb: ir.Value, ub: ir.Value, step: ir.Value) -> ir.Value:
    """The iterations of `scf.for %i = lb to ub step step` (step > 0), at the current insertion point."""
    return cdiv(arith.MaxSIOp(arith.SubIOp(ub, lb).result, i32(0)).result, step)


def cdiv(a: ir.Value, b: ir.Value) -> ir.Value:
    """ceil(a / b) for unsigned i32 `a` and `b` > 0, at the current insertion point."""
    return arith.DivUIOp(arith.AddIOp(a, arith.SubIOp(b, i32(1)).result).result, b).result


def redirect_uses(ops, old: list, new: list) -> None:
    """In `ops` and the ops nested in them, read new[i] wherever old[i] was read."""
    for op in ops:
        for inner in [op, *walk(op)]:
            for i, v in enumerate(inner.operands):
                if v in old:
                    inner.operands[i] = new[old.index(v)]


def program_query(name: str, axis: int) -> ir.Value:
    """A `tawa.program_id` / `tawa.num_programs` / `tawa.grid_extent` (`name`) of grid axis `axis`."""
    t = ir.IntegerType.get_signless(32)
    return ir.Operation.create(name, results=[t], attributes={"axis": ir.IntegerAttr.get(t, axis)}).results[0]


def computed_from(values, source) -> bool:
    """Whether any of `values` is computed (transitively, through operands) from an op for which `source(op)`."""
    stack, seen = list(values), set()
    while stack:
        op = defining_op(stack.pop())
        if op is None or op in seen:
            continue
        seen.add(op)
        if source(op):
            return True
        stack.extend(op.operands)
    return False


# ----------------------------------------------------------------------------------------------------------
# Cloning scalar control
def clone_slice(values, ip: ir.InsertionPoint, mapping: dict, can_clone=is_scalar_control):
    """Clone into `ip` the region-free ops that define `values` (transitively), remapping operands through
    `mapping` (old Value → new Value, filled in as ops are cloned). Values already in `mapping` or defined by
    ops for which `can_clone` is false are left as they are. Returns the mapped values."""
    order, seen = [], set()

    def visit(v):
        if v in mapping:
            return
        op = defining_op(v)
        if op is None or not can_clone(op) or op in seen:
            return
        seen.add(op)
        for operand in op.operands:
            visit(operand)
        order.append(op)

    for v in values:
        visit(v)
    for op in order:
        new = op.clone(ip=ip)
        for i, operand in enumerate(op.operands):
            mapped = mapping.get(operand)
            if mapped is not None:
                new.operands[i] = mapped
        for old_r, new_r in zip(op.results, new.results):
            mapping[old_r] = new_r
    return [mapping.get(v, v) for v in values]


def values_equivalent(a: ir.Value, b: ir.Value, depth: int = 0, pairs=()) -> bool:
    """True when `a` and `b` are the same value or clones of one computation (same op name, attributes and
    equivalent operands, region-free scalar control). `pairs`: (x, y) values taken as equivalent, the induction
    variables of two loops already known to mirror each other."""
    if a == b or (a, b) in pairs:
        return True
    if depth > 64 or a.type != b.type:
        return False
    oa, ob = defining_op(a), defining_op(b)
    if oa is None or ob is None:
        return False
    if oa.name != ob.name or not is_scalar_control(oa) or not is_scalar_control(ob):
        return False
    if len(oa.operands) != len(ob.operands) or len(oa.results) != len(ob.results):
        return False
    if _result_index(oa, a) != _result_index(ob, b):
        return False
    if _attrs(oa) != _attrs(ob):
        return False
    return all(values_equivalent(x, y, depth + 1, pairs) for x, y in zip(oa.operands, ob.operands))


def _result_index(op, v):
    for i, r in enumerate(op.results):
        if r == v:
            return i
    return -1


def _attrs(op):
    attrs = op.attributes
    return sorted((name, str(attrs[name])) for name in attrs)
