"""assign_warp_groups: place the warp-group regions of a specialized kernel in the CTA and size the launch.

Takes: a partitioned kernel after `register-realloc` (one producer region, consumer regions with
`tawa.num_warp_groups`). Gives: the same kernel with
- `tawa.num_warps = 4 * (1 + consumer warp groups)` on the kernel (the launch size);
- `tawa.first_warp_group` on each region: the producer is warp group 0, consumers follow in order;
- `tawa.aref_load` (and `tawa.smem`) on every producer `tawa.load` whose tile only goes into `aref_put`s: the put
  issues its TMA copy into the ring slot, the load itself emits nothing;
- `tawa.pingpong` on a consumer region of two warp groups whose loop does math on a dot's result (attention's
  softmax), unless `consumer_pingpong=False`: the conversion then orders the groups' tensor-core phases with named
  barriers, so that one group's math runs while the other's wgmmas occupy the tensor cores (FlashAttention-3's
  ping-pong). A GEMM main loop, whose dots only accumulate, gains nothing from it and is left alone.
Why: these are the facts the NVVM conversion needs to lower regions and arefs (`tawa.lowering.to_nvvm.warp_groups`
and `.arefs`), decided at tile level where a dump shows them.
"""
from __future__ import annotations

from mlir import ir

from tawa import hopper
from tawa.errors import CompilationError
from tawa.ir import attrs
from tawa.ir.kernel_info import kernels
from tawa.ir.ops import ArefPutOp, DotOp, ForOp, LoadOp, warp_group_role, warp_groups
from tawa.ir.traversal import parent_op, users, walk


def _does_math_on_dots(region) -> bool:
    """Whether a loop of the region uses a dot's result for anything but the loop-carried accumulator."""
    for op in walk(region):
        if op.name != DotOp.NAME or parent_op(op).name != ForOp.NAME:
            continue
        if any(u.name not in ("scf.yield", DotOp.NAME) for u in users(DotOp(op).result)):
            return True
    return False


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
    want = getattr(options, "consumer_pingpong", None)
    for g in groups:
        if warp_group_role(g) == attrs.CONSUMER and attrs.NUM_WARP_GROUPS.get(g) == 2 and want is not False \
                and (want or _does_math_on_dots(g)):
            attrs.PINGPONG.set(g)
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
