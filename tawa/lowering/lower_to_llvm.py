"""lower_to_llvm: the NVVM-level kernel module -> the LLVM dialect (upstream MLIR passes).

Takes: the module `convert-to-nvvm` gives (one `gpu.module` whose kernel is an `llvm.func` with a body in
arith/scf/llvm/nvvm). Gives: the same module with everything in the LLVM dialect, ready for the NVPTX backend
(`tawa.lowering.emit_ptx`). Why its own pass: it is the last IR a user can dump and read before PTX; the upstream
pipeline is `nvvm-attach-target{chip=sm_90a}`, then in the gpu.module `convert-scf-to-cf`,
`convert-nvvm-to-llvm` (inline PTX of ops such as mbarrier.try_wait), `convert-gpu-to-nvvm` (arith/math/cf to
LLVM), `canonicalize`, `cse`, `reconcile-unrealized-casts`.
"""
from __future__ import annotations

from mlir import ir

from tawa.lowering.emit_ptx import LLVM_PIPELINE, run_mlir_pipeline


def run(module: ir.Module, options=None) -> ir.Module:
    run_mlir_pipeline(module, LLVM_PIPELINE, "LLVM lowering")
    return module
