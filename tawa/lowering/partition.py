"""partition: split a kernel with arefs into a producer warp group and a consumer warp group.

Takes: a kernel after `aref_insertion` (sequential; pipelined loops hold `load...; aref_put; aref_get; ...;
aref_consumed`). Gives: the kernel body

    %r = tawa.aref_create ...                      (arefs stay shared, outside the regions)
    scf.execute_region {tawa.warp_group = "producer"} {
      <replicated scalar control: program ids, dims, offsets, loop bounds>
      scf.for %k = ... {                           (same bounds, no iter_args)
        <index math> ; %a = tawa.load ... ; tawa.aref_put %r, %a, ...
      }
    }
    scf.execute_region {tawa.warp_group = "consumer", tawa.num_warp_groups = n} {
      <everything else: scalar control, the loop with aref_get / dot / math / aref_consumed and its
       iter_args, the epilogue and stores>
    }

A put directly in the kernel's body (a prologue operand of a persistent kernel, `aref_insertion`) moves to the
producer the same way, with its load and index math, in program order among the loops. Loops the program writes
around a pipelined loop (a batch loop, a hand-written tile loop) are replicated in the producer too, with their
bounds and none of their iteration arguments, the pipelined loop's copy inside; so are conditionals around one (a
query block past its sequence's end skips its loop), with their condition and none of their results.

Why: the two regions run concurrently on different warp groups and meet only at the arefs, so TMA loads for
later iterations overlap the tensor-core work of the current one. Scalar control is replicated rather than
shared so each warp group computes what it needs from program ids and kernel arguments without any
synchronisation. `n` (consumer warp groups executing the consumer region collectively, splitting the output
tile along M) is `options.num_consumer_groups`, else 3 when the accumulator has 192 rows (three 64-row slabs), 2
when it has at least 128 rows, else 1.

Under the ping-pong schedule (`schedule="pingpong"`) the consumer region is instead repeated, once per consumer
warp group (`num_consumer_groups`, default 2), each of one warp group and tagged `tawa.tile_share = [c, n]`:
`persistent-tiles` then gives region c every n-th tile of its CTA, so each group computes whole tiles and one
group's epilogue overlaps the other's main loop.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import scf

from tawa.ir.kernel_info import body_block, kernels
from tawa.ir.location import where
from tawa.errors import CompilationError, InternalCompilerError
from tawa.ir.location import source_location
from tawa.ir import attrs
from tawa.ir.ops import (WARP_GROUP_REGION, ArefCreateOp, ArefPutOp, DotOp, ForOp, IfOp, LoadOp, create_put,
                         warp_group_role)
from tawa.ir.traversal import backward_slice, defining_op, ops_of, walk
from tawa.lowering import ws_ir
from tawa.lowering.layouts import takes_three_groups


def _loop_has_put(op) -> bool:
    return op.name == ForOp.NAME and any(o.name == ArefPutOp.NAME for o in ops_of(ForOp(op).body))


def _acc_rows(loops) -> int:
    rows = 0
    for lp in loops:
        for op in walk(lp):
            if op.name == DotOp.NAME:
                shape = ir.RankedTensorType(DotOp(op).result.type).shape
                rows = max(rows, shape[0] if len(shape) >= 2 else 1)
    return rows


def _first_dot(loops):
    return next((op for lp in loops for op in walk(lp) if op.name == DotOp.NAME), None)


def num_consumer_groups(loops, options) -> int:
    rows = _acc_rows(loops)
    if options.num_consumer_groups is not None:     # validated with the other options
        if options.num_consumer_groups == 3 and not takes_three_groups(rows):
            raise CompilationError(f"num_consumer_groups=3 needs dots of 192 rows (a 64-row slab per warp group), "
                                   f"this kernel's have {rows}", source_location(_first_dot(loops)),
                                   note="set BLOCK_M = 192, or use 1 or 2 consumer warp groups")
        return options.num_consumer_groups
    if takes_three_groups(rows):
        return 3            # 192 rows (or 384): a 64-row slab per warp group, as many per group
    return 2 if rows >= 128 else 1


def _new_region(role: str, before: ir.Operation) -> tuple:
    op = ir.Operation.create(WARP_GROUP_REGION, results=[], regions=1, loc=before.location)
    attrs.WARP_GROUP.set(op, role)
    ir.InsertionPoint(before).insert(op)
    block = op.regions[0].blocks.append()
    with ir.InsertionPoint(block):
        term = scf.YieldOp([])
    return op, block, term.operation


def _producer_slice(loop):
    """Ops of the loop body the producer needs: the loads that are put, and their index math, in body order."""
    block = ForOp(loop).body
    puts = [op for op in ops_of(block) if op.name == ArefPutOp.NAME]

    def admit(op):
        if op.name != LoadOp.NAME and not ws_ir.is_scalar_control(op):
            raise InternalCompilerError(f"'{op.name}' feeds an aref_put{where(op)}", op=op.name)
        return True
    needed = backward_slice([v for p in puts for v in ArefPutOp(p).values], block, admit)
    return [op for op in ops_of(block) if op in needed], puts


def _build_producer_loop(loop, ip_top: ir.InsertionPoint, mapping: dict):
    block = ForOp(loop).body
    iv = ForOp(loop).iv
    body_ops, puts = _producer_slice(loop)
    outside = ForOp(loop).bounds
    for op in body_ops:
        for v in op.operands:
            d = defining_op(v)
            if v != iv and (d is None or d.block != block):
                outside.append(v)
    ws_ir.clone_slice(outside, ip_top, mapping)
    lb, ub, step = (mapping.get(v, v) for v in ForOp(loop).bounds)
    new_loop = scf.ForOp(lb, ub, step, [], loc=loop.location, ip=ip_top)
    local = dict(mapping)
    local[iv] = new_loop.induction_variable
    with ir.InsertionPoint(new_loop.body):
        ip_in = ir.InsertionPoint.current
        for op in body_ops:
            new = op.clone(ip=ip_in)
            for i, v in enumerate(op.operands):
                if v in local:
                    new.operands[i] = local[v]
            for old_r, new_r in zip(op.results, new.results):
                local[old_r] = new_r
        for p in puts:
            put = ArefPutOp(p)
            create_put(put.aref, [local.get(v, v) for v in put.values], loc=p.location, ip=ip_in)
        scf.YieldOp([])
    return body_ops, puts


def _has_nested_put_loop(op) -> bool:
    return op.name == ForOp.NAME and not _loop_has_put(op) and any(_loop_has_put(o) for o in walk(op))


def _build_producer_nest(loop, ip: ir.InsertionPoint, mapping: dict) -> list:
    """The producer's copy of a loop the program writes around pipelined loops (a batch loop, a hand-written tile
    loop): same bounds, no iteration arguments, and inside it the producer's copies of the pipelined loops (or of
    further loops around them); returns the (body ops, puts) of each pipelined loop. The rings run on across its
    iterations: the conversion carries their use counts through it."""
    fl = ForOp(loop)
    lb, ub, step = ws_ir.clone_slice(fl.bounds, ip, mapping)
    new_loop = scf.ForOp(lb, ub, step, [], loc=loop.location, ip=ip)
    local = dict(mapping)       # (values cloned inside this loop stay inside it)
    local[fl.iv] = new_loop.induction_variable
    built = []
    with ir.InsertionPoint(new_loop.body):
        ip_in = ir.InsertionPoint.current
        for op in ops_of(fl.body):
            built.extend(_build_producer(op, ip_in, local))
        scf.YieldOp([])
    return built


def _build_producer_branch(if_op, ip: ir.InsertionPoint, mapping: dict) -> list:
    """The producer's copy of a conditional the program writes around pipelined loops (a block past a sequence's
    end, a tile past an expert's rows skip the loop): the same condition, no results, and in each branch the
    producer's copies of the loops (or nests) in it; returns the (body ops, puts) of each pipelined loop."""
    (cond,) = ws_ir.clone_slice([IfOp(if_op).condition], ip, mapping)
    branches = [r.blocks[0] for r in if_op.regions if len(r.blocks)]
    has_else = len(branches) > 1 and any(_has_put_loop(o) for o in ops_of(branches[1]))
    new_if = scf.IfOp(cond, [], has_else=has_else, loc=if_op.location, ip=ip)
    built = []
    for src, dst in zip(branches, [new_if.then_block] + ([new_if.else_block] if has_else else [])):
        local = dict(mapping)   # (values cloned inside a branch stay inside it)
        with ir.InsertionPoint(dst):
            ip_in = ir.InsertionPoint.current
            for op in ops_of(src):
                built.extend(_build_producer(op, ip_in, local))
            scf.YieldOp([])
    return built


def _has_put_loop(op) -> bool:
    return _loop_has_put(op) or any(_loop_has_put(o) for o in walk(op))


def _build_producer(op, ip: ir.InsertionPoint, mapping: dict) -> list:
    """The producer's copy of `op` if it is a pipelined loop, or a loop or conditional around one; the (body ops,
    puts) of each pipelined loop copied."""
    if _loop_has_put(op):
        return [_build_producer_loop(op, ip, mapping)]
    if _has_nested_put_loop(op):
        return _build_producer_nest(op, ip, mapping)
    if op.name == IfOp.NAME and _has_put_loop(op):
        return _build_producer_branch(op, ip, mapping)
    return []


def _build_producer_put(put_op, ip_top: ir.InsertionPoint, mapping: dict) -> None:
    """The producer's copy of a put in the kernel's body: its load and the load's index math, then the put."""
    put = ArefPutOp(put_op)
    values = ws_ir.clone_slice(list(put.values), ip_top, mapping,
                               can_clone=lambda op: op.name == LoadOp.NAME or ws_ir.is_scalar_control(op))
    create_put(put.aref, values, loc=put_op.location, ip=ip_top)


def _erase_dead(ops):
    """Erase scalar-control ops (and the moved loads) whose results are no longer used, latest first."""
    changed = True
    alive = list(ops)
    while changed:
        changed = False
        for op in reversed(alive):
            if (op.name == LoadOp.NAME or ws_ir.is_scalar_control(op)) and all(
                    next(iter(r.uses), None) is None for r in op.results):
                alive.remove(op)
                op.erase()
                changed = True


def partition_kernel(func_op, options):
    body = body_block(func_op)
    ops = ops_of(body)
    ret = ops[-1]
    ops = ops[:-1]
    arefs = [op for op in ops if op.name == ArefCreateOp.NAME]
    if not arefs or any(warp_group_role(op) for op in ops):
        return
    loops = [op for top in ops for op in [top, *walk(top)] if _loop_has_put(op)]
    pingpong = getattr(options, "schedule", None) == "pingpong"
    n = 1 if pingpong else num_consumer_groups(loops, options)

    first = ops[0]
    for a in arefs:
        a.move_before(first)
    producer, _, prod_yield = _new_region(attrs.PRODUCER, ret)
    consumer, _, cons_yield = _new_region(attrs.CONSUMER, ret)
    attrs.NUM_WARP_GROUPS.set(consumer, n)

    for op in ops:
        if op.name != ArefCreateOp.NAME:
            op.move_before(cons_yield)

    mapping: dict = {}
    ip_top = ir.InsertionPoint(prod_yield)
    for op in ops:
        if op.name == ArefPutOp.NAME:
            _build_producer_put(op, ip_top, mapping)
            op.erase()
        else:
            for body_ops, puts in _build_producer(op, ip_top, mapping):
                for p in puts:
                    p.erase()
                _erase_dead(body_ops)
    _erase_dead([op for op in ops_of(consumer.regions[0].blocks[0]) if op != cons_yield])
    if pingpong:
        # One consumer region per warp group, each computing whole tiles (persistent-tiles gives each its share).
        count = options.num_consumer_groups or 2
        attrs.TILE_SHARE.set(consumer, [0, count])
        for c in range(1, count):
            attrs.TILE_SHARE.set(consumer.clone(ip=ir.InsertionPoint(ret)), [c, count])


def run(module: ir.Module, options) -> ir.Module:
    with module.context, ir.Location.unknown(module.context):
        for func in kernels(module):
            partition_kernel(func, options)
    return module
