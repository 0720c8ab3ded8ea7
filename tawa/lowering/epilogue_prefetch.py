"""epilogue-prefetch: start a consumer's epilogue operand on its way to the SM before the main loop.

Takes: a partitioned kernel (`partition`): consumer regions whose main loop (a top-level `scf.for` taking aref
slots) is followed by an epilogue that loads a tile next to the accumulator and stores a tile, as the linear
layer's residual in `y = gelu(acc + bias) + load(R, (pid_m, pid_n), (BM, BN)); store(Y, ..., y)`.
Gives: the same kernel where the index math of each such load moves above the main loop, and right before the loop

    "tawa.prefetch"(%R, %row, %col) {shape = array<i64: BM, BN>}

(in a persistent kernel, inside the tile loop `persistent-tiles` then builds around the region's body).

Why: the operand is read only once the accumulator is complete. Loaded then, its DRAM latency is paid while the
tensor cores idle: the cooperative 128x256 linear layer ran 6% faster with its residual left out (H200, same
process), a gap the epilogue's arithmetic does not explain. With the prefetch, the backend copies the first boxes
of the operand into the TMA store's staging buffers while the main loop runs (a persistent kernel's staging is
otherwise idle then), or else brings the tile into L2 (`to_nvvm.staged_operand`).

Which loads: at the region's top level after its last main loop, feeding the value of a top-level store after it
(so that the store which takes the prefetched boxes runs whenever the prefetch did), with offsets computed by
scalar index math (`ws_ir.is_scalar_control`) from values defined before the loop, and either
- read through a store's staging boxes (`epilogue.read_through_staging`: a 2-D tile of a stored tile's shape and
  element size, from a tensor the kernel never writes), reaching the store element by element: one per store, the
  first such load, the one the backend stages; or
- a 1-D block of a 1-D tensor the kernel never writes (`epilogue.broadcast_row`: a bias, a column scale), which
  the backend loads spread over the threads before the loop and shares through shared memory at the load
  (`to_nvvm.broadcast_operand`): each thread otherwise loads every column its registers replicate, after the loop.
"""
from __future__ import annotations

from mlir import ir

from tawa.ir import attrs
from tawa.ir.kernel_info import kernels
from tawa.ir.ops import ArefGetOp, ForOp, LoadOp, StoreOp, create_prefetch, warp_group_role, warp_groups
from tawa.ir.traversal import as_op, backward_slice, defining_op, ops_of
from tawa.lowering import epilogue
from tawa.lowering.ws_ir import is_scalar_control


def run(module: ir.Module, options=None) -> ir.Module:
    for func in kernels(module):
        stored = epilogue.stored_tiles(func)
        for region in warp_groups(func):
            if warp_group_role(region) == attrs.CONSUMER:
                _prefetch_operands(region.regions[0].blocks[0], stored)
    return module


def _is_main_loop(op) -> bool:
    return op.name == ForOp.NAME and any(o.name == ArefGetOp.NAME for o in ops_of(ForOp(op).body))


def _prefetch_operands(block, stored: set) -> None:
    ops = ops_of(block)
    loops = [i for i, op in enumerate(ops) if _is_main_loop(op)]
    if not loops:
        return
    loop = ops[loops[-1]]
    after = ops[loops[-1] + 1:]
    chosen = []
    # (a store through a view that ends has no staging to read through: it writes from registers)
    for store in (op for op in after if op.name == StoreOp.NAME and not StoreOp(op).limits):
        feeding = backward_slice([StoreOp(store).value], block)
        loads = [op for op in after if op.name == LoadOp.NAME and op in feeding and op not in chosen]
        # the first tile read through the store's staging
        chosen += [op for op in loads if epilogue.read_through_staging(LoadOp(op), stored)
                   and _elementwise_until_stored(op, store)][:1]
        # every row of a tensor broadcast over the tile (a bias, a column scale)
        chosen += [op for op in loads if epilogue.broadcast_row(LoadOp(op))]
    for op in chosen:
        # what follows the loop now: the index math moved for an earlier load is above it already
        ops = ops_of(block)
        after = ops[ops.index(loop) + 1:]
        index_math = _index_math(LoadOp(op).offsets, block, set(after), loop)
        if index_math is not None:
            for m in sorted(index_math, key=after.index):
                m.move_before(loop)
            create_prefetch(LoadOp(op), ir.InsertionPoint(loop))


#: Ops through which a loaded tile reaches the store element by element (the backend can then compute the stored
#: value box by box while it stages it, reading the operand from the staging: `to_nvvm.staged_operand`).
_ELEMENTWISE = ("arith.", "math.", "tawa.broadcast", "tawa.expand_dims", "tawa.splat")


def _elementwise_until_stored(load, store) -> bool:
    """Whether every use of the load's tile, up to `store`, is elementwise: a reduction or a dot over it needs its
    registers before the store, and the tile is then loaded from global memory, not through the staging."""
    work, seen = [load], set()
    while work:
        op = work.pop()
        for user in (as_op(use.owner) for r in op.results for use in r.uses):
            if user == store or user in seen:
                continue
            if not user.name.startswith(_ELEMENTWISE):
                return False
            seen.add(user)
            work.append(user)
    return True


def _index_math(offsets, block, after: set, loop):
    """The ops after `loop` that compute `offsets`, when all are scalar index math over values defined before
    the loop (they may then move above it); None otherwise."""
    ops = backward_slice(offsets, block, admit=lambda op: op in after)
    if not all(is_scalar_control(op) for op in ops):
        return None
    used = list(offsets) + [v for op in ops for v in op.operands]
    if any(defining_op(v) == loop for v in used):     # a loop result
        return None
    return ops
