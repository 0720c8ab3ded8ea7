"""register_realloc: per-warp-group register budgets (`setmaxnreg`) of a warp-specialized kernel.

Takes: a partitioned kernel (warp-group regions, see docs/ir.md). Gives: the same kernel with
`tawa.max_registers = N : i32` on every warp-group region: `options.producer_registers` on the producer,
`options.consumer_registers` on consumers; where not given, 40 and 232, and with three consumer warp groups 24 and
160 (what 512 threads start with). The NVVM conversion emits `setmaxnreg.dec/inc`
with these counts as the first instruction of each warp group.

Why: a TMA producer needs a few dozen registers while a consumer holding a 64xN wgmma accumulator per warp group
needs up to 240; without reallocation every thread gets the same share (65536 / threads) and wide tiles spill
(the register-pressure failures of BLOCK_N = 256 in peers). Each count is validated with the other options
(a multiple of 8 in [24, 256], what `setmaxnreg` accepts); here, where the number of consumer warp groups is
known, the total is checked against the registers the block starts with (`hopper.register_pool`: 168 for each of
384 threads, 64512): 128 * (producer + consumers * consumer) must fit, since `setmaxnreg` only moves those
between warp groups and an increase that cannot be met blocks forever (producer 32 + 2 x 240 = 65536 fits the
register file and hung the GPU). `setmaxnreg` only takes effect when the kernel's register count at
entry is fixed; the conversion marks the kernel with `nvvm.minctasm = 1` and `nvvm.maxntid` (ptxas otherwise
ignores it: note C7508).
"""
from __future__ import annotations

from mlir import ir

from tawa import hopper
from tawa.errors import CompilationError
from tawa.ir import attrs
from tawa.ir.kernel_info import kernels
from tawa.ir.location import source_location
from tawa.ir.ops import consumer_warp_groups, warp_group_role, warp_groups


def budgets(options, num_consumer_groups: int, func=None) -> tuple:
    """(producer, consumer) register counts, checked against the registers the block starts with. Budgets not
    given are chosen: the producer 40, or with three consumer groups (512 threads, 128 registers each at entry)
    the least it may keep, 24; each consumer an equal share of what the producer leaves, at most 232 (2 x 232
    beside 40, 3 x 160 beside 24). At two CTAs per SM
    (`ctas_per_sm`) the CTA holds half the register file from its start: the producer gets the least setmaxnreg
    allows and the consumers share what is left, at most `consumer_registers` each."""
    ctas = getattr(options, "ctas_per_sm", None) or 1
    p = options.producer_registers
    if p is None or ctas > 1:
        p = hopper.producer_registers(num_consumer_groups, ctas) if p is None else min(p, hopper.SETMAXNREG_MIN)
    c = options.consumer_registers
    if c is None:
        c = min(hopper.CONSUMER_REGISTERS, hopper.consumer_register_limit(p, num_consumer_groups, ctas)[1])
    if ctas > 1:
        return p, min(c, hopper.consumer_register_limit(p, num_consumer_groups, ctas)[1])
    per_group = hopper.THREADS_PER_WARP_GROUP
    threads = per_group * (1 + num_consumer_groups)
    pool, best = hopper.consumer_register_limit(p, num_consumer_groups)
    total = per_group * (p + num_consumer_groups * c)
    if c > best:
        raise CompilationError(
            f"register budgets exceed the registers the block starts with: {per_group} x ({p} + "
            f"{num_consumer_groups} x {c}) = {total} > {pool} ({threads} threads x {pool // threads}), and "
            f"setmaxnreg only moves registers between its warps",
            source_location(func) if func is not None else None,
            note=f"lower consumer_registers to at most {best}, or use fewer consumer warp groups")
    return p, c


def run(module: ir.Module, options) -> ir.Module:
    with module.context:
        for func in kernels(module):
            groups = warp_groups(func)
            if not groups:
                continue
            p, c = budgets(options, consumer_warp_groups(func), func)
            for g in groups:
                attrs.MAX_REGISTERS.set(g, p if warp_group_role(g) == attrs.PRODUCER else c)
    return module
