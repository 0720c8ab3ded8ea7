"""The `convert-to-nvvm` pass: a tawa kernel (func.func, layouts assigned) -> gpu.module with an NVVM kernel.

Takes the module after assign-layouts and software-pipeline; gives a module holding one `gpu.module` with one
`llvm.func` kernel (`nvvm.kernel`; body in arith/scf/llvm/nvvm) and, as the module attribute
`tawa.kernel_info`, the JSON the runtime needs (name, params, grid, constants, the `AbiParam` list, threads,
dynamic shared bytes). The kernel is an `llvm.func` rather than a `gpu.func` because NVVM's `grid_constant`
argument attribute (tensor maps passed by value, `__grid_constant__`) is only accepted on NVVM kernels.

Fixes for the toolchain built in here: the dynamic shared segment is an *external* global aligned to 1024 bytes
(otherwise NVPTX aliases it with static shared variables; 1024 is also the 128-byte swizzle atom), mbarriers
are initialised by one thread followed by `fence.mbarrier_init` and a CTA barrier, and the kernel carries
`nvvm.minctasm` (1, or 2 with `ctas_per_sm=2`) and `nvvm.maxntid` (a fixed register budget at entry, which
`setmaxnreg` and ptxas's wgmma pipelining need).
"""
from __future__ import annotations

import json

from mlir import ir

from tawa import hopper
from tawa.errors import CompilationError, InternalCompilerError, SharedMemoryError, TawaError
from tawa.ir import attrs
from tawa.ir.kernel_info import body_block, kernel_function, kernel_name, kernel_num_warps, launch_info
from tawa.ir.location import source_location
from tawa.ir.ops import ArefCreateOp, warp_groups
from tawa.ir.traversal import ops_of, walk

from . import (arefs, control, dot, dynamic_tiles, elementwise, memory, reduce, shape, split_k, sync,
               warp_groups as warp_group_lowering)
from .builder import Builder
from .context import BARRIER_REGION, Ctx, Params, SharedAllocator
from .program_ids import PID_GROUP, SREG_OPS, lower_program_index

#: op name -> handler(ctx, op). Ops of the arith and math dialects go to `elementwise`.
HANDLERS = {
    "tawa.load": memory.lower_load,
    "tawa.store": memory.lower_store,
    "tawa.prefetch": memory.lower_prefetch,
    "tawa.dim": memory.lower_dim,
    "tawa.load_scalar": memory.lower_load_scalar,
    "tawa.dot": dot.lower_dot,
    "tawa.splat": shape.lower_splat,
    "tawa.arange": shape.lower_arange,
    "tawa.expand_dims": shape.lower_expand_dims,
    "tawa.broadcast": shape.lower_broadcast,
    "tawa.trans": shape.lower_trans,
    "tawa.reduce": reduce.lower_reduce,
    "scf.for": control.lower_for,
    "scf.if": control.lower_if,
    "arith.constant": elementwise.lower_constant,
    **{name: lower_program_index for name in SREG_OPS},
    # The warp-specialized schedule: warp-group regions and the aref rings between them.
    **warp_group_lowering.HANDLERS,
    **arefs.HANDLERS,
    # Split-K partial accumulators in the runtime's workspace.
    **split_k.HANDLERS,
    # Dynamic tiles: the consumers' tile loop and the tiles they take from the producer.
    **dynamic_tiles.HANDLERS,
}


def _lazy_capable(op) -> bool:
    """Ops that build on lazy tiles (`LazyTile`) instead of needing their registers: pure, register to register."""
    name = op.name
    if name.startswith(("arith.", "math.")) or name in LAZY_OPS:
        return True
    return name == "tawa.load" and not attrs.SMEM.get(op) and not attrs.AREF_LOAD.get(op)


def lower_block(ctx: Ctx, block) -> None:
    """Lower every op of `block` (a block, or a list of ops), except those the loop's schedule lowers itself
    later; an error without a location gets the op's source location. Lazy tiles are materialized before any
    other op (its own operands first, register by register; a store decides itself, `memory.lower_store`) and
    at the end of the block."""
    for op in block if isinstance(block, list) else ops_of(block):
        name = op.name
        if name in ("scf.yield", "func.return") or ctx.schedule.defers(op):
            continue
        if ctx.pending and not _lazy_capable(op) and name != "tawa.store":
            ctx.flush(first=op.operands)
        try:
            if name in HANDLERS:
                HANDLERS[name](ctx, op)
            elif name.startswith("arith.") or name.startswith("math."):
                elementwise.lower_elementwise(ctx, op)
            else:
                raise CompilationError(f"the GPU backend does not support `{name}` here",
                                       note="compile with target='cpu' to run it in the interpreter")
        except TawaError as e:
            _locate(e, op)
            raise
    ctx.flush()


#: Non-arith ops that build on lazy tiles (or, as a prefetch, need no tile at all).
LAZY_OPS = ("tawa.splat", "tawa.broadcast", "tawa.expand_dims", "tawa.prefetch")


def _locate(error: TawaError, op) -> None:
    """Attach the source location of the innermost op being lowered to an error raised without one."""
    if error.location is None:
        error.location = source_location(op)
    if isinstance(error, InternalCompilerError) and error.op is None:
        error.op = op.name


def convert_kernel(module: ir.Module, options) -> ir.Module:
    func = kernel_function(module)
    name = kernel_name(func)
    num_warps = kernel_num_warps(func, options)
    block = body_block(func)
    b = Builder()
    ctx = Ctx(b, Params(block.arguments), SharedAllocator(BARRIER_REGION), num_warps, lowerer=lower_block)
    for i, arg in enumerate(block.arguments):
        t = str(arg.type)
        if t in ("i32", "f32"):
            ctx.set(arg, ctx.params.scalar(i, t))
        elif not isinstance(arg.type, ir.MemRefType):
            raise CompilationError(f"kernel parameter {i} has unsupported type {t}", source_location(func),
                                   note="kernel parameters are tensors, i32 or f32 scalars")
    ctx.persistent = bool(attrs.PERSISTENT.get(func))
    ctx.tma = getattr(options, "tma", None) is not False
    ctx.cluster = attrs.CLUSTER.get(func)
    ctx.ctas_per_sm = getattr(options, "ctas_per_sm", None) or 1
    ctx.register_overlap = getattr(options, "register_overlap", None) is not False
    ctx.has_dots = any(op.name == "tawa.dot" for op in walk(func.operation))
    if warp_groups(func) and len(attrs.GRID.get(func)) == 2 and not ctx.persistent:
        # (A persistent kernel visits its tiles in grouped order already: persistent-tiles wrote it in the IR.)
        ctx.pid_group = PID_GROUP
    dynamic = bool(attrs.DYNAMIC_TILES.get(func))
    if dynamic:
        dynamic_tiles.open_channel(ctx, num_warps * hopper.THREADS_PER_WARP)
    ctx.lower_block(block)

    start: list = []
    if ctx.barriers:
        with b.redirect(start):
            with b.if_(b.cmpi("eq", ctx.tid(), 0)):
                for off, count, per_cta in ctx.barriers:
                    if count:               # (count 0: a plain shared word, `Ctx.alloc_word`)
                        arrivals = b.mul(ctx.cluster_size(), count) if per_cta else b.i32(count)
                        sync.mbarrier_init(b, ctx.smem_ptr(off), arrivals)
            sync.fence_mbarrier_init(b)
            if ctx.cluster:
                # The other CTAs of the cluster copy into this one's slots and arrive on its barriers.
                sync.cluster_barrier(b)
            else:
                sync.barrier(b)
    shared_bytes = ctx.smem.peak if ctx.smem.peak > BARRIER_REGION or ctx.barriers else 0
    smem_limit = hopper.smem_per_block(ctx.ctas_per_sm)
    if shared_bytes > smem_limit:
        # Located at the deepest aref ring (the loop it feeds) when there is one, else at the kernel's `def`.
        rings = [op for op in walk(func.operation) if op.name == ArefCreateOp.NAME]
        ring = max(rings, key=lambda op: ArefCreateOp(op).depth, default=None)
        where = (source_location(ring) if ring is not None else None) or source_location(func)
        tip = (f"fewer buffers (num_buffers below {ArefCreateOp(ring).depth}, or unset to fit them "
               f"automatically)" if ring is not None else "fewer pipeline stages (num_stages)")
        raise SharedMemoryError(
            f"the kernel needs {shared_bytes} bytes ({-(-shared_bytes // 1024)} KiB) of shared memory, more "
            f"than the {smem_limit} bytes ({smem_limit // 1024} KiB) a Hopper block can use" +
            (f" with {ctx.ctas_per_sm} blocks per SM (ctas_per_sm)" if ctx.ctas_per_sm > 1 else ""), where,
            note=f"use {tip} or smaller tiles (BLOCK_M, BLOCK_N, BLOCK_K)" +
                 (", or ctas_per_sm=1" if ctx.ctas_per_sm > 1 else ""),
            ring_depth=ArefCreateOp(ring).depth if ring is not None else 0)
    threads = num_warps * hopper.THREADS_PER_WARP
    text = "\n".join([
        "module attributes {gpu.container_module} {",
        "  gpu.module @tawa_kernels {",
        "    llvm.mlir.global external @tawa_smem() {addr_space = 3 : i32, alignment = 1024 : i64} "
        ": !llvm.array<0 x i8>",
        f"    llvm.func @{name}({', '.join(ctx.params.decls)}) attributes {{nvvm.kernel, "
        f"nvvm.maxntid = array<i32: {threads}, 1, 1>, nvvm.minctasm = {ctx.ctas_per_sm} : i32}} {{",
        *b.prelude, *start, *b.lines,
        "      llvm.return",
        "    }",
        "  }",
        "}",
    ])
    info = {
        **launch_info(func),
        "abi": [p.__dict__ for p in ctx.params.abi],
        "num_threads": threads,
        "shared_bytes": shared_bytes,
        "persistent": ctx.persistent,
        "split_k": attrs.SPLIT_K.get(func),
        "stream_k": bool(attrs.STREAM_K.get(func)),
        "cluster": list(ctx.cluster) if ctx.cluster else None,
        "ctas_per_sm": ctx.ctas_per_sm,
        "workspace_per_tile": ctx.params.workspace_per_tile,
        "dynamic_tiles": dynamic,
        "register_overlaps": sorted(ctx.overlaps),
        # (a consumer loop given the lookahead: `compiler._without_lookahead` may build the kernel again without it)
        "lookahead": any(attrs.LOOKAHEAD.get(op) for op in walk(func) if op.name == "scf.for"),
        "positive_params": list(attrs.POSITIVE_PARAMS.get(func)),
        "one_slot_ring": attrs.ONE_SLOT_RING.get(func),
    }
    try:
        out = ir.Module.parse(text, module.context)
    except ir.MLIRError as e:  # keep the text for debugging
        raise InternalCompilerError(f"the NVVM kernel does not verify: {e}\n{_numbered(text)}") from None
    attrs.KERNEL_INFO.set(out.operation, json.dumps(info))
    return out


def _numbered(text: str) -> str:
    return "\n".join(f"{i + 1:5d} {line}" for i, line in enumerate(text.splitlines()))
