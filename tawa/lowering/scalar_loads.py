"""scalar-loads: a block of one element reduced to a scalar becomes one scalar read of memory.

Takes: a tile-level kernel. Gives: every `tawa.reduce` of a one-element `tawa.load` (`sum(load(CU, b, 1))`, the
way a program reads one element; `max` and `min` alike) replaced by `tawa.load_scalar` of that element, when the
tensor is one the kernel never stores to and its elements are i32 or f32; the load goes when nothing else reads it.

Why: a sequence start of variable-length attention (`cu_seqlens[b]`), an MoE tile's expert id or a paged cache's
block number is scalar control: loop bounds and tile coordinates are computed from it. As a tile op it belongs to
the consumer warp groups alone, and a kernel whose loads or loop bounds depend on it could not be warp-specialized
(the producer must compute the coordinates of the tiles it loads on its own). A read of a tensor nobody writes
gives every warp group the same value whenever it is made, so the producer reads it for itself, as it recomputes
program ids; the GPU reads it with one load every thread of a warp issues to the same address.
"""
from __future__ import annotations

from mlir import ir

from tawa.ir.kernel_info import kernels
from tawa.ir.ops import LoadOp, LoadScalarOp, ReduceOp
from tawa.ir.traversal import defining_op, walk
from tawa.lowering.epilogue import stored_by_kernel

#: Element types read as scalars (those of scalar control: indices and scales).
SCALAR_ELEMENTS = ("i32", "f32")


def _one_element_load(reduce_op):
    """The `tawa.load` of a one-element block that `reduce_op` reduces to a scalar of its element type, or None."""
    if isinstance(reduce_op.results[0].type, ir.RankedTensorType):
        return None
    load = defining_op(ReduceOp(reduce_op).src)
    if load is None or load.name != LoadOp.NAME:
        return None
    tile = ir.RankedTensorType(LoadOp(load).result.type)
    if any(extent != 1 for extent in tile.shape) or str(tile.element_type) not in SCALAR_ELEMENTS:
        return None
    if str(reduce_op.results[0].type) != str(tile.element_type) or stored_by_kernel(LoadOp(load).src):
        return None
    return load


def rewrite(func) -> int:
    """Replace the reductions of one-element loads in `func`; returns how many."""
    count = 0
    for op in list(walk(func)):
        if op.name != ReduceOp.NAME:
            continue
        load = _one_element_load(op)
        if load is None:
            continue
        lo = LoadOp(load)
        scalar = ir.Operation.create(LoadScalarOp.NAME, results=[op.results[0].type], operands=[lo.src, *lo.offsets],
                                     loc=op.location, ip=ir.InsertionPoint(op))
        op.results[0].replace_all_uses_with(scalar.results[0])
        op.erase()
        if not list(lo.result.uses):
            load.erase()
        count += 1
    return count


def run(module: ir.Module, options=None) -> ir.Module:
    with module.context:
        for func in kernels(module):
            rewrite(func.operation)
    return module
