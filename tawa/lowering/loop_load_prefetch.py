"""loop-load-prefetch: a consumer loop's register loads are issued one iteration ahead.

Takes: a partitioned kernel (`partition`): consumer regions whose loops load a tile into registers in their body
(a load that is not an aref's, whose tile feeds math rather than only dots), as attention with an additive bias
does,

    for j in range(lb, ub, step):
        s = dot(q, k.T) * scale + load(Bias, (row, j * BN))        -- %x = tawa.load(%Bias, %row, %off(j))

Gives: the same loop where the tile of iteration j + step is loaded at the top of iteration j and carried to the
next as a loop argument, the first one loaded before the loop:

    %x0 = tawa.load(%Bias, %row, %off(lb))
    scf.for %j = %lb to %ub step %step iter_args(..., %x = %x0) {
        %next = tawa.load(%Bias, %row, %off(%j + %step))
        ... uses of %x ...
        scf.yield ..., %next
    }

Why: a register load's latency (L2, or DRAM) otherwise sits on the iteration's critical path, between the dot
and the math that reads the tile: the bias kernel ran at 0.65x torch's attention with the same mask, its
scores' FFMA waiting on the bias loads issued just before it (ncu). Loaded an iteration ahead, the tile arrives
while the previous iteration's math and the next dot run. The loads past the loop's end are of blocks outside
the tensor (loads are bounds-checked element by element, reading nothing there) or of blocks the loop would have
read anyway; their values are never used.

Which loads: directly in the body of an `scf.for` with a positive constant step inside a consumer region, of a
tensor defined outside the loop and that the kernel does not store to, not feeding dots only (those are staged
in shared memory), at offsets that are loop-invariant or computed from the induction variable by scalar integer
arithmetic (add, subtract, multiply, min/max, casts and constants), and of at most `MAX_BYTES_PER_THREAD` per
consumer thread: the carried tile takes that many more registers across the loop. (A load that reaches a dot's
operand through math is not here: `aref-insertion` makes it the producer's, copied by TMA into the ring.)
"""
from __future__ import annotations

import math

from mlir import ir
from mlir.dialects import arith, scf

from tawa import hopper
from tawa.ir import attrs
from tawa.ir.kernel_info import kernels
from tawa.ir.ops import ForOp, LoadOp, warp_group_role, warp_groups
from tawa.ir.traversal import as_op, defining_op, feeds_dots_only, int_constant, is_ancestor, ops_of, walk
from tawa.ir.types import tile_bytes, tile_shape
from tawa.lowering.epilogue import stored_by_kernel

#: Bytes per consumer thread a prefetched tile may hold across the loop (16 registers). Carrying a block scale's
#: 128 columns (32 registers per thread, each thread holding its columns of every row) made ptxas spill.
MAX_BYTES_PER_THREAD = 64

#: Scalar index math that may be recomputed for the next iteration: total functions of their operands.
_INDEX_OPS = {"arith.addi", "arith.subi", "arith.muli", "arith.constant", "arith.minsi", "arith.maxsi",
              "arith.minui", "arith.maxui", "arith.index_cast", "arith.extsi", "arith.extui", "arith.trunci",
              "arith.shli"}


def run(module: ir.Module, options=None) -> ir.Module:
    if getattr(options, "schedule", None) == "streamk":
        # stream-K remaps the K loop's index afterwards (a share of it, walked backwards in a shared tile): a
        # tile prefetched at `lb` and `iv + step` would be another iteration's
        return module
    for func in kernels(module):
        for region in warp_groups(func):
            if warp_group_role(region) != attrs.CONSUMER:
                continue
            threads = (attrs.NUM_WARP_GROUPS.get(region) or 1) * hopper.THREADS_PER_WARP_GROUP
            for loop in [op for op in walk(region) if op.name == ForOp.NAME]:
                loads = [op for op in ops_of(ForOp(loop).body) if _prefetchable(op, loop, threads)]
                for load in loads:
                    loop = _prefetch(loop, load)
    return module


def _inside(value, loop) -> bool:
    """Whether `value` is defined in `loop`'s body (its induction variable and arguments included)."""
    owner = value.owner
    op = as_op(owner.owner) if isinstance(owner, ir.Block) else as_op(owner)
    return op == loop or is_ancestor(loop, op)


def _index_chain(value, loop) -> bool:
    """Whether `value` is loop-invariant or scalar index math on `loop`'s induction variable alone."""
    if not _inside(value, loop):
        return True
    if value == ForOp(loop).iv:
        return True
    op = defining_op(value)
    if op is None or op.name not in _INDEX_OPS or op.block != ForOp(loop).body:
        return False
    return all(_index_chain(v, loop) for v in op.operands)


def _prefetchable(op, loop, threads: int) -> bool:
    if op.name != LoadOp.NAME or attrs.AREF_LOAD.get(op) or feeds_dots_only(op.results[0]):
        return False
    step = int_constant(ForOp(loop).step)
    if step is None or step <= 0:
        return False
    load = LoadOp(op)
    if _inside(load.src, loop) or stored_by_kernel(load.src):
        return False
    if _bytes_per_thread(load.result.type, threads) > MAX_BYTES_PER_THREAD:
        return False
    return all(_index_chain(v, loop) for v in load.offsets)


def _bytes_per_thread(tile_type, threads: int) -> int:
    """About the bytes of the tile each consumer thread holds in the accumulator's layout: a row broadcast over
    the tile ([1, N]) is held whole by every thread in columns (a quarter of them: 2 of every 8), a column
    ([M, 1]) by rows (4 threads per row), anything else spread evenly."""
    shape = tile_shape(tile_type)
    per_elem = tile_bytes(tile_type) // max(1, math.prod(shape))
    if len(shape) == 2 and shape[0] == 1:
        return per_elem * -(-shape[1] // 4)
    if len(shape) == 2 and shape[1] == 1:
        return per_elem * -(-shape[0] * 4 // threads)
    if len(shape) == 1:     # expanded later as a row or a column: counted as a row, the larger
        return per_elem * -(-shape[0] // 4)
    return -(-tile_bytes(tile_type) // threads)


def _clone_chain(value, loop, iv, ip, memo: dict):
    """`value` recomputed at `ip` with the induction variable replaced by `iv`."""
    if not _inside(value, loop):
        return value
    if value == ForOp(loop).iv:
        return iv
    if value in memo:
        return memo[value]
    op = defining_op(value)
    operands = [_clone_chain(operand, loop, iv, ip, memo) for operand in op.operands]
    clone = op.clone(ip=ip)
    for i, operand in enumerate(operands):
        clone.operands[i] = operand
    memo[value] = clone.results[0]
    return clone.results[0]


def _load_at(load, loop, iv, ip):
    """`load` recomputed at `ip` (its index math first) with the induction variable replaced by `iv`."""
    memo: dict = {}
    operands = [_clone_chain(operand, loop, iv, ip, memo) for operand in load.operands]
    clone = load.clone(ip=ip)
    for i, operand in enumerate(operands):
        clone.operands[i] = operand
    return clone.results[0]


def _prefetch(loop, load):
    """Rebuild `loop` with `load`'s tile carried one iteration ahead; returns the new loop."""
    old = ForOp(loop)
    with loop.location:
        first = _load_at(load, loop, old.lower, ir.InsertionPoint(loop))
        new_op = scf.ForOp(old.lower, old.upper, old.step, old.inits + [first], ip=ir.InsertionPoint(loop))
        for named in loop.attributes:
            new_op.operation.attributes[named.name] = named.attr
        new = ForOp(new_op.operation)
        body_ops = ops_of(old.body)
        old_yield = body_ops[-1]
        top = ir.InsertionPoint(new.body)
        next_iv = arith.AddIOp(new.iv, old.step, ip=top).result
        # the chain is cloned with the new loop's induction variable, then the old one is replaced below
        nxt = _load_at(load, loop, next_iv, top)
        terminator = scf.YieldOp(list(old_yield.operands) + [nxt], ip=top)
        for op in body_ops[:-1]:
            op.move_before(terminator.operation)
        old_yield.erase()
        old.iv.replace_all_uses_with(new.iv)
        for a, b in zip(old.iter_args, new.iter_args):
            a.replace_all_uses_with(b)
        load.results[0].replace_all_uses_with(new.iter_args[-1])
        for a, b in zip(old.results, new.results):
            a.replace_all_uses_with(b)
        load.erase()
        loop.erase()
    return new_op.operation
