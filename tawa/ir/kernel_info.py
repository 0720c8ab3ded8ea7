"""The kernel function of a module and its launch metadata as plain Python: the one kernel finder."""
from __future__ import annotations

from mlir import ir

from tawa.errors import CompilationError
from tawa.ir import attrs


def kernels(module: ir.Module) -> list:
    """The kernel functions (`func.func` marked `tawa.kernel`) of a module, as `ir.Operation`s."""
    return [op.operation for op in module.body.operations
            if op.operation.name == "func.func" and attrs.KERNEL.has(op)]


def kernel_function(module: ir.Module, name: str | None = None) -> ir.Operation:
    """The module's one kernel (or the one called `name`)."""
    found = kernels(module)
    if name is not None:
        found = [k for k in found if kernel_name(k) == name]
    if not found:
        raise CompilationError("the module holds no kernel function" + (f" named '{name}'" if name else ""))
    if len(found) > 1:
        raise CompilationError(f"the module holds {len(found)} kernel functions; name the one to use")
    return found[0]


def kernel_name(func) -> str:
    return ir.StringAttr(func.operation.attributes["sym_name"]).value


def body_block(func) -> ir.Block:
    return func.operation.regions[0].blocks[0]


def launch_info(func) -> dict:
    """Name, parameters, grid expressions, constants and launch conditions the frontend recorded on the kernel."""
    return {"name": kernel_name(func), "params": attrs.PARAMS.get(func), "grid": attrs.GRID.get(func),
            "constants": attrs.CONSTANTS.get(func), "requires": attrs.REQUIRES.get(func)}


def kernel_num_warps(func, options=None) -> int:
    """Warps per program: the kernel's `tawa.num_warps` (from `@num_warps`, or assign-warp-groups for a
    specialized kernel), else `options.num_warps`, else one warp group."""
    n = attrs.NUM_WARPS.get(func)
    if n is not None:
        return n
    if options is not None and getattr(options, "num_warps", None):
        return options.num_warps
    return 4
