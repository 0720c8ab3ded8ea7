"""assign_warp_groups: place the warp-group regions of a specialized kernel in the CTA and size the launch.

Takes: a partitioned kernel after `register-realloc` (one producer region, consumer regions with
`tawa.num_warp_groups`). Gives: the same kernel with
- `tawa.num_warps = 4 * (1 + consumer warp groups)` on the kernel (the launch size);
- `tawa.first_warp_group` on each region: the producer is warp group 0, consumers follow in order;
- `tawa.aref_load` (and `tawa.smem`) on every producer `tawa.load` whose tile only goes into `aref_put`s: the put
  issues its TMA copy into the ring slot, the load itself emits nothing;
- `tawa.pingpong` on a consumer region of two warp groups whose loop does math on a dot's result (attention's
  softmax), when `consumer_pingpong=True`: the conversion then orders the groups' tensor-core phases with named
  barriers, so that one group's math runs while the other's wgmmas occupy the tensor cores (FlashAttention-3's
  ping-pong). It is off by default: measured on attention with the lookahead below, it costs 2-4% as long as
  each group still waits for its P.V wgmma every iteration (docs/performance.md). A GEMM main loop, whose dots
  only accumulate, gains nothing from it and never gets it;
- `tawa.lookahead` on a consumer loop whose first dot can be issued one iteration early, unless
  `consumer_lookahead=False`: its A operand is a tile loaded before the loop, its B operand an aref slot's tile
  (or its transpose), its accumulator zero, and the ring has at least two slots. The conversion then issues
  iteration j+1's dot before iteration j's math on the result of iteration j's (FlashAttention-3's
  intra-warpgroup overlap: attention's Q K^T for the next key block runs under the current block's softmax).
Why: these are the facts the NVVM conversion needs to lower regions and arefs (`tawa.lowering.to_nvvm.warp_groups`
and `.arefs`), decided at tile level where a dump shows them.
"""
from __future__ import annotations

from mlir import ir

from tawa import hopper
from tawa.errors import CompilationError
from tawa.ir import attrs
from tawa.ir.kernel_info import kernels
from tawa.ir.ops import (ArefCreateOp, ArefGetOp, ArefPutOp, DotOp, ForOp, LoadOp, TransOp, is_zero_splat,
                         warp_group_role, warp_groups)
from tawa.ir.traversal import defining_op, is_ancestor, ops_of, parent_op, users, walk


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
    if len(gets) != 1 or not dots or any(o.name in (DotOp.NAME,) or o.name.startswith("tawa.aref") for o in nested):
        return None
    get, dot = gets[0], DotOp(dots[0])
    if ArefCreateOp(defining_op(ArefGetOp(get).aref)).depth < 2:
        return None
    a = defining_op(dot.a)
    if a is None or a.name != LoadOp.NAME or is_ancestor(loop, a) or \
            any(u.name != DotOp.NAME for u in users(LoadOp(a).result)):
        return None
    b = defining_op(dot.b)
    if b is not None and b.name == TransOp.NAME and b.block == body:
        b = defining_op(TransOp(b).src)
    if b != get or not is_zero_splat(dot.acc):
        return None
    if all(u.name in ("scf.yield", DotOp.NAME) for u in users(dot.result)):
        return None     # only accumulates: the GEMM schedule keeps such dots in flight instead
    return dots[0]


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
    if getattr(options, "consumer_pingpong", None):
        for g in groups:
            if warp_group_role(g) == attrs.CONSUMER and attrs.NUM_WARP_GROUPS.get(g) == 2 and _does_math_on_dots(g):
                attrs.PINGPONG.set(g)
    if getattr(options, "consumer_lookahead", None) is not False:
        for g in groups:
            if warp_group_role(g) != attrs.CONSUMER:
                continue
            for loop in ops_of(g.regions[0].blocks[0]):
                if loop.name == ForOp.NAME and lookahead_dot(loop) is not None:
                    attrs.LOOKAHEAD.set(loop)
    for op in walk(producers[0]):
        if op.name == LoadOp.NAME:
            used_by = users(LoadOp(op).result)
            if used_by and all(u.name == ArefPutOp.NAME for u in used_by):
                attrs.AREF_LOAD.set(op)
                attrs.SMEM.set(op)


def run(module: ir.Module, options=None) -> ir.Module:
    with module.context:
        for func in kernels(module):
            annotate_kernel(func, options)
    return module
