"""The GPU backend's last step: an LLVM-dialect kernel module -> PTX -> cubin -> a launchable `CompiledKernel`.

Takes the module after the pipeline's `lower-to-llvm` pass (see `PIPELINE` in tawa/compiler.py: the backend's
passes are `assign-layouts`, `software-pipeline`, `convert-to-nvvm`, `lower-to-llvm`, plus `register-realloc`
and `aref-lowering` for warp-specialized kernels). Gives the PTX from the NVPTX backend, the cubin and resource
report from ptxas when it is installed, and the launch metadata `convert-to-nvvm` recorded in `tawa.kernel_info`.
"""
from __future__ import annotations

import json

from mlir import ir

from tawa.abi import AbiParam, CompiledKernel

from . import emit_ptx

def build_kernel(module: ir.Module, ptxas: bool = True) -> CompiledKernel:
    """PTX (and a cubin when ptxas is installed) of a module that went through `lower-to-llvm`."""
    info = json.loads(module.operation.attributes["tawa.kernel_info"].value)
    ptx = emit_ptx.emit_ptx(module)
    cubin, notes = None, []
    if ptxas and emit_ptx.find_ptxas():
        cubin, rep = emit_ptx.assemble(ptx)
        notes.append(f"ptxas: {rep.registers} registers, {rep.spill_stores} bytes spill stores, "
                     f"{rep.spill_loads} bytes spill loads, {rep.stack_bytes} bytes stack")
        notes.extend(f"ptxas: {w}" for w in rep.warnings)
    return CompiledKernel(
        name=info["name"], target="cuda", params=info["params"], grid=info["grid"], constants=info["constants"],
        abi=[AbiParam(**p) for p in info["abi"]], num_threads=info["num_threads"],
        shared_bytes=info["shared_bytes"], ptx=ptx, cubin=cubin, ir=str(module), notes=notes)
