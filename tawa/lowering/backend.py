"""The GPU backend's last step: an LLVM-dialect kernel module -> PTX -> cubin -> a launchable `CompiledKernel`.

Takes the module after the pipeline's `lower-to-llvm` pass (see `PIPELINE` in tawa/compiler.py: the backend's
passes are `assign-layouts`, `software-pipeline`, `convert-to-nvvm`, `lower-to-llvm`, plus `register-realloc`
and `aref-lowering` for warp-specialized kernels). Gives the PTX from the NVPTX backend, the cubin and resource
report from ptxas when it is installed, and the launch metadata `convert-to-nvvm` recorded in `tawa.kernel_info`.
"""
from __future__ import annotations

import json

from mlir import ir

from tawa import hopper
from tawa.abi import AbiParam, CompiledKernel
from tawa.errors import CompilationError, InternalCompilerError, TawaError

from . import emit_ptx

#: The name this step goes by in internal errors (it runs after the pipeline, outside `compiler.run_pass`).
NAME = "build-kernel"


def build_kernel(module: ir.Module, ptxas: bool = True) -> CompiledKernel:
    """PTX (and a cubin when ptxas is installed) of a module that went through `lower-to-llvm`.

    Like a pass run by `compiler.run_pass`: errors the user can act on pass through, anything else becomes an
    InternalCompilerError naming the step."""
    try:
        return _build_kernel(module, ptxas)
    except TawaError:
        raise
    except Exception as e:  # a bug: say where, keep the traceback chained for developers
        raise InternalCompilerError(f"{type(e).__name__}: {e}", NAME) from e


def _build_kernel(module: ir.Module, ptxas: bool) -> CompiledKernel:
    attr = module.operation.attributes
    if "tawa.kernel_info" not in attr:
        raise InternalCompilerError("the module has no tawa.kernel_info: it did not go through convert-to-nvvm",
                                    NAME)
    info = json.loads(attr["tawa.kernel_info"].value)
    if info["shared_bytes"] > hopper.SMEM_PER_BLOCK:
        # A safety net: convert-to-nvvm refuses such a kernel, located at the loop (or `def`) that needs the memory.
        raise CompilationError(
            f"the kernel needs {info['shared_bytes']} bytes of shared memory, more than the "
            f"{hopper.SMEM_PER_BLOCK} bytes ({hopper.SMEM_PER_BLOCK // 1024} KiB) a Hopper block can use",
            note="use smaller tiles (BLOCK_M, BLOCK_N, BLOCK_K) or fewer pipeline stages (num_stages, "
                 "num_buffers)")
    text = str(module)
    ptx = emit_ptx.emit_ptx(module, text)
    cubin, notes, spills, registers = None, [], None, None
    if ptxas and emit_ptx.find_ptxas():
        cubin, rep = emit_ptx.assemble(ptx)
        spills, registers = rep.spill_stores + rep.spill_loads, rep.registers
        notes.append(f"ptxas: {rep.registers} registers, {rep.spill_stores} bytes spill stores, "
                     f"{rep.spill_loads} bytes spill loads, {rep.stack_bytes} bytes stack")
        notes.extend(f"ptxas: {w}" for w in rep.warnings)
    return CompiledKernel(
        name=info["name"], target="cuda", params=info["params"], grid=info["grid"], constants=info["constants"],
        requires=info.get("requires", []),
        abi=[AbiParam(**p) for p in info["abi"]], num_threads=info["num_threads"],
        shared_bytes=info["shared_bytes"], persistent=info.get("persistent", False),
        split_k=info.get("split_k", 1), stream_k=info.get("stream_k", False),
        workspace_per_tile=info.get("workspace_per_tile", 0), dynamic_tiles=info.get("dynamic_tiles", False),
        cluster=info.get("cluster"), ctas_per_sm=info.get("ctas_per_sm", 1), spill_bytes=spills, registers=registers,
        ptx=ptx, positive_params=info.get("positive_params", []),
        cubin=cubin,
        ir=text, notes=notes)
