"""register_realloc: per-warp-group register budgets (`setmaxnreg`) of a warp-specialized kernel.

Takes: a partitioned kernel (warp-group regions, see docs/ir.md). Gives: the same kernel with
`tawa.max_registers = N : i32` on every warp-group region: `options.producer_registers` (default 40) on the
producer, `options.consumer_registers` (default 232) on consumers. The GPU lowering (`aref_lowering`) emits
`setmaxnreg.dec/inc` with these counts as the first instruction of each warp group.

Why: a TMA producer needs a few dozen registers while a consumer holding a 64xN wgmma accumulator per warp group
needs up to 240; without reallocation every thread gets the same share (65536 / threads) and wide tiles spill
(the register-pressure failures of BLOCK_N = 256 in peers). The budgets are checked here, where the error can
name the options, instead of failing in ptxas or at launch:
- each count is a multiple of 8 in [24, 256] (what `setmaxnreg` accepts);
- 128 * (producer + consumers * consumer) <= 65536 (the SM's register file: an increase that cannot be met
  blocks forever);
- `setmaxnreg` only takes effect when the kernel's register count at entry is fixed; the conversion must mark
  the kernel with `nvvm.minctasm = 1` and `nvvm.maxntid` (ptxas otherwise ignores it: note C7508).
"""
from __future__ import annotations

from mlir import ir

from tawa.errors import CompilationError
from tawa.lowering import ws_ir

MAX_REGISTERS_ATTR = "tawa.max_registers"
REGISTER_FILE = 65536
THREADS_PER_WARP_GROUP = 128


def _check_count(name: str, n: int) -> int:
    if not isinstance(n, int) or n % 8 or not 24 <= n <= 256:
        raise CompilationError(f"{name} must be a multiple of 8 between 24 and 256 (setmaxnreg), got {n}")
    return n


def budgets(options, num_consumer_groups: int) -> tuple:
    """(producer, consumer) register counts, validated against the register file."""
    p = _check_count("producer_registers", options.producer_registers)
    c = _check_count("consumer_registers", options.consumer_registers)
    total = THREADS_PER_WARP_GROUP * (p + num_consumer_groups * c)
    if total > REGISTER_FILE:
        best = (REGISTER_FILE // THREADS_PER_WARP_GROUP - p) // num_consumer_groups // 8 * 8
        raise CompilationError(
            f"register budgets exceed the register file: 128 x ({p} + {num_consumer_groups} x {c}) = {total} > "
            f"{REGISTER_FILE}; lower consumer_registers to at most {best}")
    return p, c


def entry_registers(num_threads: int) -> int:
    """Registers per thread at kernel entry with one CTA per SM (what `nvvm.minctasm = 1` fixes)."""
    return min(255, REGISTER_FILE // num_threads // 8 * 8)


def setmaxnreg_line(count: int, num_threads: int) -> str:
    """The NVVM op that moves this warp group to `count` registers from the entry count."""
    action = "increase" if count > entry_registers(num_threads) else "decrease"
    return f"nvvm.setmaxregister {action} {count}"


def run(module: ir.Module, options) -> ir.Module:
    with module.context:
        i32 = ir.IntegerType.get_signless(32)
        for func in ws_ir.kernels(module):
            groups = [op for op in ws_ir.ops_of(ws_ir.body_block(func)) if ws_ir.warp_group_role(op)]
            if not groups:
                continue
            consumers = sum(ir.IntegerAttr(g.attributes[ws_ir.NUM_WARP_GROUPS_ATTR]).value
                            if ws_ir.NUM_WARP_GROUPS_ATTR in g.attributes else 1
                            for g in groups if ws_ir.warp_group_role(g) == "consumer")
            p, c = budgets(options, consumers)
            for g in groups:
                n = p if ws_ir.warp_group_role(g) == "producer" else c
                g.attributes[MAX_REGISTERS_ATTR] = ir.IntegerAttr.get(i32, n)
    return module
