"""Walking the ops of a module: the one set of traversal helpers the passes share."""
from __future__ import annotations


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
