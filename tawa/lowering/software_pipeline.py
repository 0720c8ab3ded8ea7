"""The `software-pipeline` pass: schedule the loads feeding dots in a loop `num_stages` iterations ahead.

Takes a kernel after assign-layouts; gives the same kernel with `tawa.num_stages = S : i32` on every `scf.for`
whose body loads dot operands (`tawa.load` marked `tawa.smem`), and `tawa.pipelined` on those loads.

Why: on the uniform-warp path every warp both waits for data and computes, so the only way to overlap the copy
engine with the tensor cores is to keep S-1 loads in flight while the current slot is consumed, and to keep the
last wgmma group asynchronous across iterations. The conversion (to_nvvm/control.py) materialises the ring of
S shared-memory slots with one mbarrier each; this pass decides where that applies and how deep the ring can
be within shared memory:
- a pipelined load's offsets must be scalar arithmetic of the induction variable and loop invariants (they are
  re-evaluated for iteration i + S - 1); a loop whose loads read their coordinates from memory (a paged KV
  cache's block table) is left unpipelined: each iteration copies its tiles and waits; a load under an `scf.if`
  in the body is issued for every iteration;
- S is `options.num_stages`, reduced until the rings fit the shared memory of one SM (227 KiB);
- a loop nested in another loop (a batch or tile loop around a K loop) is pipelined too: the conversion
  initialises its ring's barriers again each time it starts (uniform_pipeline.py).
Warp-specialized kernels are left alone: their aref rings are the pipeline.
"""
from __future__ import annotations

from mlir import ir

from tawa import hopper
from tawa.ir import attrs
from tawa.ir.kernel_info import body_block, kernel_function
from tawa.ir.ops import LoadOp, warp_groups
from tawa.ir.traversal import defining_op, enclosing, ops_of, walk_block
from tawa.ir.types import tile_bytes

#: Shared memory kept free of the rings for the epilogue's staging tile.
EPILOGUE_RESERVE = 64 * 1024
#: What the rings of one loop may take.
RING_BUDGET = hopper.SMEM_FOR_TILES - EPILOGUE_RESERVE


def _offsets_ok(load, body_results, iv) -> bool:
    def ok(v, depth=0):
        if v == iv:
            return True
        if v not in body_results:
            return True
        owner = defining_op(v)
        if owner is None or depth > 32:
            return False
        if not (owner.name.startswith("arith.") or owner.name.startswith("math.")):
            return False
        if isinstance(v.type, ir.RankedTensorType):
            return False
        return all(ok(o, depth + 1) for o in owner.operands)
    return all(ok(v) for v in LoadOp(load).offsets)


def _loops(block, depth, out):
    for op in ops_of(block):
        if op.name == "scf.for":
            out.append((op, depth))
        for region in op.regions:
            for blk in region.blocks:
                _loops(blk, depth + (op.name == "scf.for"), out)


def run(module: ir.Module, options=None) -> ir.Module:
    func = kernel_function(module)
    if warp_groups(func):
        return module   # warp specialized: the aref rings are the pipeline
    if getattr(options, "tma", None) is False:
        return module   # the threads copy each tile when it is used (memory.lower_thread_copy)
    stages_wanted = max(int(getattr(options, "num_stages", 3) or 1), 1)
    loops = []
    _loops(body_block(func), 0, loops)
    for loop, _ in loops:
        body = loop.regions[0].blocks[0]
        ops = walk_block(body)
        loads = [op for op in ops if op.name == LoadOp.NAME and attrs.SMEM.get(op)]
        if not loads:
            continue
        # only loads of this loop itself, directly in its body or under an `scf.if` there (a nested loop pipelines
        # its own). A load under a condition is issued for every iteration, ahead, like the others: a TMA copy
        # never faults (a box outside the tensor reads zeros), and a ring whose every slot is waited for at the top
        # of each iteration stays in phase whether or not the body then reads it.
        if any(enclosing(op, ("scf.for", "scf.while")) != loop for op in loads):
            continue
        results = set()
        for op in ops:
            for r in op.results:
                results.add(r)
        iv = body.arguments[0]
        if not all(_offsets_ok(load, results, iv) for load in loads):
            # (coordinates read from memory in the loop: a paged KV cache's block table) not issued ahead: each
            # iteration copies its tiles and waits for them (`memory.lower_load`)
            continue
        per_stage = sum(tile_bytes(ld.results[0].type) for ld in loads)
        stages = stages_wanted
        while stages > 1 and stages * per_stage > RING_BUDGET:
            stages -= 1
        attrs.NUM_STAGES.set(loop, stages)
        for load in loads:
            attrs.PIPELINED.set(load)
    return module
