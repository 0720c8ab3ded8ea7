"""assign_warp_groups: place the warp-group regions of a specialized kernel in the CTA and size the launch.

Takes: a partitioned kernel after `register-realloc` (one producer region, consumer regions with
`tawa.num_warp_groups`). Gives: the same kernel with
- `tawa.num_warps = 4 * (1 + consumer warp groups)` on the kernel (the launch size);
- `tawa.first_warp_group` on each region: the producer is warp group 0, consumers follow in order;
- `tawa.aref_load` (and `tawa.smem`) on every producer `tawa.load` whose tile only goes into `aref_put`s: the put
  issues its TMA copy into the ring slot, the load itself emits nothing;
- `tawa.pingpong` on a consumer region of two warp groups whose loop does math on a dot's result (attention's
  softmax), when `consumer_pingpong=True`, and by default where the loop is softmax-pipelined (below): the
  conversion then orders the groups' tensor-core phases with named barriers, so that one group's math runs while
  the other's wgmmas occupy the tensor cores (FlashAttention-3's ping-pong). Measured on attention it gains 1-5%
  at head dim 128 with the softmax pipeline, and cost 2-4% with the plain lookahead, where each group still
  waits for its P.V wgmma every iteration (docs/performance.md), so it stays off there. A GEMM main loop, whose
  dots only accumulate, gains nothing from it and never gets it;
- `tawa.lookahead` on a consumer loop whose first dot can be issued one iteration early, unless
  `consumer_lookahead=False`: its A operand is a shared tile from before the loop (loaded there, or a prologue
  ring's slot in a persistent kernel), its B operand an aref slot's tile
  (or its transpose), its accumulator zero, and the ring has at least two slots. The conversion then issues
  iteration j+1's dot before iteration j's math on the result of iteration j's (FlashAttention-3's
  intra-warpgroup overlap: attention's Q K^T for the next key block runs under the current block's softmax); when
  the loop's second dot qualifies (`pipelined_second_dot`: attention's P.V), the conversion's softmax-pipelined
  schedule runs it one iteration late instead, under the next block's softmax.
Why: these are the facts the NVVM conversion needs to lower regions and arefs (`tawa.lowering.to_nvvm.warp_groups`
and `.arefs`), decided at tile level where a dump shows them.
"""
from __future__ import annotations

from mlir import ir

from tawa import hopper
from tawa.errors import CompilationError
from tawa.ir import attrs
from tawa.ir.kernel_info import kernels
from tawa.ir.ops import (ArefCreateOp, ArefGetOp, BroadcastOp, DotOp, ExpandDimsOp, ForOp, LoadOp,
                         SplatOp, TransOp, is_zero_splat, warp_group_role, warp_groups)
from tawa.ir.traversal import defining_op, is_ancestor, ops_of, parent_op, users, walk
from tawa.lowering import ws_ir


def _does_math_on_dots(region) -> bool:
    """Whether a loop of the region uses a dot's result for anything but the loop-carried accumulator."""
    for op in walk(region):
        if op.name != DotOp.NAME or parent_op(op).name != ForOp.NAME:
            continue
        if any(u.name not in ("scf.yield", DotOp.NAME) for u in users(DotOp(op).result)):
            return True
    return False


def lookahead_dot(loop):
    """The first dot of a consumer loop if it can be issued one iteration ahead (see the module docstring)."""
    body = ForOp(loop).body
    gets = [op for op in ops_of(body) if op.name == ArefGetOp.NAME]
    dots = [op for op in ops_of(body) if op.name == DotOp.NAME]
    # Branches in the body may hold math (an elided mask), not dots or aref ops: those run in straight-line code.
    nested = [o for op in ops_of(body) if op.regions for o in walk(op) if o != op]
    if not gets or not dots or any(o.name in (DotOp.NAME,) or o.name.startswith("tawa.aref") for o in nested):
        return None
    dot = DotOp(dots[0])
    a = defining_op(dot.a)
    # A is in shared memory before the loop: loaded there, or taken from a prologue ring (a persistent kernel)
    if a is None or a.name not in (LoadOp.NAME, ArefGetOp.NAME) or is_ancestor(loop, a) or \
            any(u.name != DotOp.NAME for u in users(dot.a)):
        return None
    b = defining_op(dot.b)
    if b is not None and b.name == TransOp.NAME and b.block == body:
        b = defining_op(TransOp(b).src)
    # B comes from a ring of two slots or more (attention's K: a ring of its own, `aref_insertion.release_groups`).
    if b not in gets or not is_zero_splat(dot.acc) or ArefCreateOp(defining_op(ArefGetOp(b).aref)).depth < 2:
        return None
    if all(u.name in ("scf.yield", DotOp.NAME) for u in users(dot.result)):
        return None     # only accumulates: the GEMM schedule keeps such dots in flight instead
    return dots[0]


#: Ops that only reshape or replicate values (no arithmetic): the chain takes them along with it.
_SHAPE_OPS = (ExpandDimsOp.NAME, BroadcastOp.NAME, SplatOp.NAME)


def _owner(use):
    return use.owner.operation if hasattr(use.owner, "operation") else use.owner


def pipelined_second_dot(for_op, first_dot):
    """(D2, index of its accumulating iteration argument, chain ops in program order) when the loop's second dot
    can run one iteration late in the softmax-pipelined schedule (`to_nvvm/ws_softmax_pipeline_loop.py`): its A
    is computed in registers (attention's P), its B is a tile of an aref slot (V: the first dot's ring or one of
    its own), its result only
    flows into the next iteration as iteration argument `acc`, which the body reads only to compute D2's
    accumulator input (the chain: attention's `acc * alpha`); else None."""
    loop = ForOp(for_op)
    body = loop.body
    ops = ops_of(body)
    dots = [o for o in ops if o.name == DotOp.NAME]
    gets = [o for o in ops if o.name == ArefGetOp.NAME]
    if len(dots) != 2 or dots[0] != first_dot or not gets:
        return None
    d2 = DotOp(dots[1])
    a_def = defining_op(d2.a)
    if a_def is None or a_def.block != body or a_def.name in (ArefGetOp.NAME, LoadOp.NAME, TransOp.NAME):
        return None
    b = defining_op(d2.b)
    if b is not None and b.name == TransOp.NAME:
        b = defining_op(TransOp(b).src)
    if b not in gets:
        return None
    uses = list(d2.result.uses)
    if len(uses) != 1 or _owner(uses[0]) != loop.yield_op:
        return None
    index = uses[0].operand_number
    acc = loop.iter_args[index]
    # Forward from acc: every op reading it (transitively) must lead only to D2's accumulator operand.
    chain, frontier = [], [acc]
    while frontier:
        for use in frontier.pop().uses:
            owner = _owner(use)
            if owner == d2.op:
                if use.operand_number != DotOp.ACC:
                    return None
                continue
            if owner.block != body or owner.regions or len(owner.results) != 1:
                return None
            if owner not in chain:
                chain.append(owner)
                frontier.append(owner.results[0])
    if not chain and d2.acc != acc:
        return None
    # Backward: reshapes feeding the chain and used by nothing else go with it (alpha is carried, not alpha[:, None]).
    grew = True
    while grew:
        grew = False
        for op in list(chain):
            for v in op.operands:
                src = defining_op(v)
                if src is not None and src.block == body and src.name in _SHAPE_OPS and src not in chain and \
                        all(u in chain for u in users(src.results[0])):
                    chain.append(src)
                    grew = True
    for op in chain:
        if any(u not in chain and u != d2.op for u in users(op.results[0])):
            return None
        # The chain runs one iteration late: it may read acc, values computed in the body (carried to the next
        # iteration) and loop invariants, but no other iteration argument (nor the induction variable).
        if any(_is_block_arg(v, body) and v != acc for v in op.operands):
            return None
    return d2.op, index, sorted(chain, key=ops.index)


def _is_block_arg(value, block) -> bool:
    return defining_op(value) is None and value.owner == block


def consumer_loops(region) -> list:
    """The loops of a consumer region that may take its schedules: those directly in it, and those in the loops and
    conditionals around them (a persistent kernel's tile loop, which the pass sees after `persistent-tiles`: with
    dynamic tiles an `scf.while`, its body the second region; a batch loop; `if pid_m * BLOCK_M < n:` around a
    variable-length attention's key loop)."""
    loops, blocks = [], [region.regions[0].blocks[0]]
    while blocks:
        for op in ops_of(blocks.pop(0)):
            if op.name == ForOp.NAME:
                loops.append(op)
            if op.name in (ForOp.NAME, "scf.if", "scf.while"):
                regions = op.regions[1:] if op.name == "scf.while" else op.regions
                blocks.extend(r.blocks[0] for r in regions if len(r.blocks))
    return loops


def _softmax_pipelined(region) -> bool:
    """Whether a consumer region's loop gets the softmax-pipelined schedule (where ping-pong is on by default)."""
    return any(attrs.LOOKAHEAD.get(loop) and pipelined_second_dot(loop, lookahead_dot(loop)) is not None
               for loop in consumer_loops(region))


def annotate_kernel(func, options=None) -> None:
    groups = warp_groups(func)
    if not groups:
        return
    producers = [g for g in groups if warp_group_role(g) == attrs.PRODUCER]
    if len(producers) != 1:
        raise CompilationError(f"a warp-specialized kernel needs exactly one producer warp group, "
                               f"found {len(producers)}")
    first = 0
    for g in producers + [g for g in groups if g not in producers]:
        attrs.FIRST_WARP_GROUP.set(g, first)
        first += attrs.NUM_WARP_GROUPS.get(g)
    attrs.NUM_WARPS.set(func, hopper.WARPS_PER_GROUP * first)
    if getattr(options, "consumer_lookahead", None) is not False:
        for g in groups:
            if warp_group_role(g) != attrs.CONSUMER:
                continue
            for loop in consumer_loops(g):
                if lookahead_dot(loop) is not None:
                    attrs.LOOKAHEAD.set(loop)
    pingpong = getattr(options, "consumer_pingpong", None)
    for g in groups:
        if warp_group_role(g) == attrs.CONSUMER and attrs.NUM_WARP_GROUPS.get(g) == 2 and _does_math_on_dots(g) \
                and (pingpong or (pingpong is None and _softmax_pipelined(g))):
            attrs.PINGPONG.set(g)
    for op in walk(producers[0]):
        if op.name == LoadOp.NAME and ws_ir.feeds_puts(op):
            attrs.AREF_LOAD.set(op)
            attrs.SMEM.set(op)


def run(module: ir.Module, options=None) -> ir.Module:
    with module.context:
        for func in kernels(module):
            annotate_kernel(func, options)
    return module
