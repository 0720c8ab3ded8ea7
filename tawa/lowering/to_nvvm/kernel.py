"""The `convert-to-nvvm` pass: a tawa kernel (func.func, layouts assigned) -> gpu.module with an NVVM kernel.

Takes the module after assign-layouts and software-pipeline; gives a module holding one `gpu.module` with one
`llvm.func` kernel (`nvvm.kernel`; body in arith/scf/llvm/nvvm) and, as the module attribute
`tawa.kernel_info`, the JSON the runtime needs (name, params, grid, constants, the `AbiParam` list, threads,
dynamic shared bytes). The kernel is an `llvm.func` rather than a `gpu.func` because NVVM's `grid_constant`
argument attribute (tensor maps passed by value, `__grid_constant__`) is only accepted on NVVM kernels.

Fixes for the toolchain built in here: the dynamic shared segment is an *external* global aligned to 1024 bytes
(otherwise NVPTX aliases it with static shared variables; 1024 is also the 128-byte swizzle atom), mbarriers
are initialised by one thread followed by `fence.mbarrier_init` and a CTA barrier, and the kernel carries
`nvvm.minctasm = 1` and `nvvm.maxntid` (a fixed register budget at entry, which `setmaxnreg` and ptxas's
wgmma pipelining need).
"""
from __future__ import annotations

import json

from mlir import ir

from tawa.errors import CompilationError
from tawa.ir.dialect import KERNEL_ATTR

from . import control, dot, elementwise, memory, reduce, shape, sync
from .builder import Builder, V
from .context import BARRIER_REGION, Ctx, Params, SharedAllocator, ops_of

HANDLERS = {
    "tawa.load": memory.lower_load,
    "tawa.store": memory.lower_store,
    "tawa.dim": memory.lower_dim,
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
}

# Warp-group regions (`scf.execute_region`) and `tawa.aref_*`: the warp-specialized schedule.
from tawa.lowering.aref_lowering import HANDLERS as _WS_HANDLERS  # noqa: E402

HANDLERS.update(_WS_HANDLERS)

_SREG = {"tawa.program_id": "ctaid", "tawa.num_programs": "nctaid"}

#: Programs along grid axis 0 that run next to each other in grouped launch order (warp-specialized kernels).
PID_GROUP = 8


def _sreg(ctx: Ctx, op) -> None:
    ctx.set(op.results[0], program_index(ctx, op.name, ir.IntegerAttr(op.attributes["axis"]).value))


def program_index(ctx: Ctx, name: str, axis: int) -> V:
    """`tawa.program_id` / `tawa.num_programs` along `axis`; program ids in grouped order when `ctx.pid_group`."""
    kind = _SREG[name]
    if kind == "ctaid" and ctx.pid_group and axis < 2:
        return _grouped_ids(ctx)[axis]
    return ctx.b.op(f'"nvvm.read.ptx.sreg.{kind}.{"xyz"[axis]}"() : () -> i32', "i32", prelude=True)


def _grouped_ids(ctx: Ctx) -> tuple:
    """Launch order -> program ids such that each run of `G * ny` consecutive CTAs covers G consecutive axis-0
    ids for every axis-1 id (Triton's grouped ordering). For a GEMM grid (M tiles, N tiles) the CTAs resident
    at once then share A row panels and B column panels in L2 instead of streaming all of A per N column.
    Programs are independent, so any bijection of the grid computes the same result."""
    key = "grouped_pids"
    if key in ctx._bases:
        return ctx._bases[key]
    b, g = ctx.b, ctx.pid_group

    def op(text):
        return b.op(text, "i32", prelude=True)
    x, y, nx, ny = (op(f'"nvvm.read.ptx.sreg.{k}"() : () -> i32') for k in ("ctaid.x", "ctaid.y", "nctaid.x",
                                                                           "nctaid.y"))
    lin = op(f"arith.addi {x}, {op(f'arith.muli {y}, {nx} : i32')} : i32")
    size = op(f"arith.muli {ny}, {b.i32(g)} : i32")
    gid = op(f"arith.divui {lin}, {size} : i32")
    first = op(f"arith.muli {gid}, {b.i32(g)} : i32")
    width = op(f"arith.minui {op(f'arith.subi {nx}, {first} : i32')}, {b.i32(g)} : i32")
    rest = op(f"arith.subi {lin}, {op(f'arith.muli {gid}, {size} : i32')} : i32")
    px = op(f"arith.addi {first}, {op(f'arith.remui {rest}, {width} : i32')} : i32")
    py = op(f"arith.divui {rest}, {width} : i32")
    ctx._bases[key] = (px, py)
    return px, py


def lower_block(ctx: Ctx, block) -> None:
    for op in ops_of(block):
        name = op.name
        if name in ("scf.yield", "func.return"):
            continue
        if name in _SREG:
            _sreg(ctx, op)
        elif name in HANDLERS:
            HANDLERS[name](ctx, op)
        elif name.startswith("arith.") or name.startswith("math."):
            elementwise.lower_elementwise(ctx, op)
        else:
            raise CompilationError(f"the GPU backend does not support `{name}` here")


def attr_to_py(attr):
    for cls in (ir.StringAttr, ir.BoolAttr, ir.IntegerAttr, ir.FloatAttr):
        if isinstance(attr, cls):
            return attr.value
    if isinstance(attr, ir.ArrayAttr):
        return [attr_to_py(a) for a in attr]
    if isinstance(attr, ir.DictAttr):
        return {attr[i].name: attr_to_py(attr[i].attr) for i in range(len(attr))}
    if isinstance(attr, ir.UnitAttr):
        return True
    return str(attr)


def find_kernel(module: ir.Module):
    kernels = [op for op in ops_of(module.body) if op.name == "func.func" and KERNEL_ATTR in op.attributes]
    if len(kernels) != 1:
        raise CompilationError(f"expected exactly one kernel function, found {len(kernels)}")
    return kernels[0]


def kernel_num_warps(func, options) -> int:
    if "tawa.num_warps" in func.attributes:
        return func.attributes["tawa.num_warps"].value
    if options is not None and getattr(options, "num_warps", None):
        return options.num_warps
    return 4


def convert_kernel(module: ir.Module, options) -> ir.Module:
    func = find_kernel(module)
    name = func.attributes["sym_name"].value
    num_warps = kernel_num_warps(func, options)
    block = func.regions[0].blocks[0]
    b = Builder()
    ctx = Ctx(b, Params(block.arguments), SharedAllocator(BARRIER_REGION), num_warps)
    for i, arg in enumerate(block.arguments):
        t = str(arg.type)
        if t in ("i32", "f32"):
            ctx.set(arg, ctx.params.scalar(i, t))
        elif not isinstance(arg.type, ir.MemRefType):
            raise CompilationError(f"kernel parameter {i} has unsupported type {t}")
    if any(op.name == "scf.execute_region" for op in ops_of(block)) and \
            len(attr_to_py(func.attributes["tawa.grid"]) if "tawa.grid" in func.attributes else []) == 2:
        ctx.pid_group = PID_GROUP
    lower_block(ctx, block)

    start: list = []
    if ctx.barriers:
        with b.redirect(start):
            with b.if_(b.cmpi("eq", ctx.tid(), 0)):
                for off, count in ctx.barriers:
                    sync.mbarrier_init(b, ctx.smem_ptr(off), count)
            sync.fence_mbarrier_init(b)
            sync.barrier(b)
    shared_bytes = ctx.smem.peak if ctx.smem.peak > BARRIER_REGION or ctx.barriers else 0
    threads = num_warps * 32
    text = "\n".join([
        "module attributes {gpu.container_module} {",
        "  gpu.module @tawa_kernels {",
        "    llvm.mlir.global external @tawa_smem() {addr_space = 3 : i32, alignment = 1024 : i64} "
        ": !llvm.array<0 x i8>",
        f"    llvm.func @{name}({', '.join(ctx.params.decls)}) attributes {{nvvm.kernel, "
        f"nvvm.maxntid = array<i32: {threads}, 1, 1>, nvvm.minctasm = 1 : i32}} {{",
        *b.prelude, *start, *b.lines,
        "      llvm.return",
        "    }",
        "  }",
        "}",
    ])
    info = {
        "name": name,
        "params": attr_to_py(func.attributes["tawa.params"]) if "tawa.params" in func.attributes else [],
        "grid": attr_to_py(func.attributes["tawa.grid"]) if "tawa.grid" in func.attributes else ["1"],
        "constants": attr_to_py(func.attributes["tawa.constants"]) if "tawa.constants" in func.attributes else {},
        "abi": [p.__dict__ for p in ctx.params.abi],
        "num_threads": threads,
        "shared_bytes": shared_bytes,
    }
    try:
        out = ir.Module.parse(text, module.context)
    except ir.MLIRError as e:  # an internal error: keep the text for debugging
        raise CompilationError(f"internal: the NVVM kernel does not verify: {e}\n{_numbered(text)}") from None
    out.operation.attributes["tawa.kernel_info"] = ir.StringAttr.get(json.dumps(info), module.context)
    return out


def _numbered(text: str) -> str:
    return "\n".join(f"{i + 1:5d} {line}" for i, line in enumerate(text.splitlines()))
