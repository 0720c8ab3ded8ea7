"""Walking the ops of a module: the one set of traversal helpers the passes share."""
from __future__ import annotations

from mlir import ir


def ops_of(block) -> list:
    """The block's ops as `ir.Operation`s (OpView subclasses such as FuncOp shadow `.name`)."""
    return [op.operation for op in block.operations]


def walk(op):
    """All ops nested in `op` (pre-order, `op` excluded)."""
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                yield child.operation
                yield from walk(child.operation)


def walk_block(block) -> list:
    """The block's ops and every op nested in them, in pre-order."""
    out = []
    for op in ops_of(block):
        out.append(op)
        out.extend(walk(op))
    return out


def as_op(op):
    """An `ir.Operation` from an op, an OpView or a use's owner."""
    return op.operation if hasattr(op, "operation") else op


def defining_op(value):
    """The op that defines `value`, or None for a block argument."""
    owner = value.owner
    if isinstance(owner, ir.Block):
        return None
    return as_op(owner)


def int_constant(value):
    """The integer an `arith.constant` defining `value` holds, or None."""
    from mlir import ir
    op = defining_op(value)
    if op is not None and op.name == "arith.constant" and isinstance(op.attributes["value"], ir.IntegerAttr):
        return ir.IntegerAttr(op.attributes["value"]).value
    return None


def users(value) -> list:
    """The ops that use `value` (one entry per use)."""
    return [as_op(u.owner) for u in value.uses]


def feeds_dots_only(value) -> bool:
    """Whether every use of `value` is a dot's A or B operand, directly or through `tawa.trans`: a tile the
    backend keeps in shared memory for wgmma rather than in registers."""
    uses = list(value.uses)
    if not uses:
        return False
    for use in uses:
        owner = as_op(use.owner)
        if owner.name == "tawa.dot" and use.operand_number in (0, 1):
            continue
        if owner.name == "tawa.trans" and feeds_dots_only(owner.results[0]):
            continue
        return False
    return True


def parent_op(op):
    """The op whose region holds `op` (None at module level)."""
    parent = as_op(op).parent
    return as_op(parent) if parent is not None else None


def ancestor_in_block(op, block):
    """The ancestor of `op` (or `op` itself) that lies directly in `block`, or None."""
    cur = as_op(op)
    while cur is not None:
        if cur.block == block:
            return cur
        cur = parent_op(cur)
    return None


def is_ancestor(anc, op) -> bool:
    cur = parent_op(op)
    while cur is not None:
        if cur == anc:
            return True
        cur = parent_op(cur)
    return False


def enclosing(op, names: tuple, stop: str = "func.func"):
    """The nearest ancestor of `op` whose name is in `names` (None past `stop`)."""
    cur = parent_op(op)
    while cur is not None and cur.name != stop:
        if cur.name in names:
            return cur
        cur = parent_op(cur)
    return None


def backward_slice(values, block, admit=lambda op: True) -> set:
    """Ops directly in `block` that (transitively) compute `values`, stopping at ops `admit` refuses (they are
    neither included nor followed) and at values defined outside `block`."""
    needed, work = set(), list(values)
    while work:
        op = defining_op(work.pop())
        if op is None or op.block != block or op in needed or not admit(op):
            continue
        needed.add(op)
        work.extend(op.operands)
    return needed
