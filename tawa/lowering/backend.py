"""The GPU backend's entry points: its passes in order, and the final emission into a `CompiledKernel`.

`BACKEND_PASSES` (each `run(module, options) -> module`; the IR after each is printable):
  assign-layouts     tawa kernel -> same, with `tawa.layout` / `tawa.smem` on tile-producing ops
  software-pipeline  -> same, with `tawa.num_stages` on loops of dot-operand loads
  convert-to-nvvm    -> gpu.module with an NVVM kernel (arith/scf/llvm/nvvm) + `tawa.kernel_info`
  lower-to-llvm      -> the kernel in the LLVM dialect, ready for the NVPTX backend
`build_kernel(module, options)` runs whichever of these have not run yet, emits PTX, assembles it with ptxas
when available (cubin + resource report), and returns the `CompiledKernel`.
"""
from __future__ import annotations

import json

from mlir import ir

from tawa.errors import CompilationError
from tawa.runtime.abi import AbiParam, CompiledKernel

from . import assign_layouts, emit_ptx, software_pipeline, to_nvvm

BACKEND_PASSES = [
    (assign_layouts.NAME, assign_layouts.run),
    (software_pipeline.NAME, software_pipeline.run),
    (to_nvvm.NAME, to_nvvm.run),
    (emit_ptx.NAME, emit_ptx.lower_to_llvm),
]


def _stage(module: ir.Module) -> int:
    """How many backend passes the module has been through (0..4)."""
    attrs = module.operation.attributes
    if "tawa.kernel_info" not in attrs:
        for op in module.body.operations:
            if op.name == "func.func":
                for region in op.regions:
                    text = str(op)
                    if "tawa.num_stages" in text or "tawa.pipelined" in text:
                        return 2
                    if "tawa.layout" in text or "tawa.smem" in text:
                        return 1
        return 0
    return 4 if "llvm.func" in str(module) and "scf." not in str(module) else 3


def build_kernel(module: ir.Module, options=None, ptxas: bool = True) -> CompiledKernel:
    stage = _stage(module)
    for name, run in BACKEND_PASSES[stage:]:
        module = run(module, options)
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
