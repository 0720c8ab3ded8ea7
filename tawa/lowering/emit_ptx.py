"""Final emission: the LLVM-dialect kernel module -> PTX (NVPTX backend) -> cubin (ptxas, when present).

Not a pass: it runs after the pipeline (`lower-to-llvm` is the last pass). `emit_ptx` runs `gpu-module-to-binary{format=isa}` and returns the PTX text; `assemble` runs
`ptxas -arch=sm_90a -v` and parses its resource report (registers, spills, shared memory).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field

from mlir import ir, passmanager
from mlir.dialects import gpu

from tawa import hopper
from tawa.errors import CompilationError, InternalCompilerError

CHIP = hopper.ARCH

LLVM_PIPELINE = (
    f"builtin.module(nvvm-attach-target{{chip={CHIP} features=+ptx80 O=3}}, "
    "gpu.module(convert-scf-to-cf, convert-nvvm-to-llvm, convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=true}, "
    "canonicalize, cse, reconcile-unrealized-casts))"
)


#: The names the two steps after the pipeline go by in internal errors (they run outside `compiler.run_pass`).
EMIT_PTX = "emit-ptx"
PTXAS = "ptxas"


def run_mlir_pipeline(module: ir.Module, pipeline: str, what: str, pass_name: str | None = None) -> None:
    """Run an upstream pass pipeline; a failure there is the compiler's fault (it built the IR). `pass_name`:
    for a caller outside `compiler.run_pass` (which names the pass itself)."""
    with module.context:
        pm = passmanager.PassManager.parse(pipeline)
        try:
            pm.run(module.operation)
        except ir.MLIRError as e:
            raise InternalCompilerError(f"{what} failed: {e}", pass_name) from None


def emit_ptx(module: ir.Module, text: str | None = None) -> str:
    """PTX of the (LLVM-dialect) kernel module. Works on a clone, parsed from `text` (the module as printed, when
    the caller has it already: printing a large kernel takes tens of milliseconds), so that the module itself
    stays printable."""
    clone = ir.Module.parse(text if text is not None else str(module), module.context)
    run_mlir_pipeline(clone, "builtin.module(gpu-module-to-binary{format=isa})", "NVPTX code generation", EMIT_PTX)
    for op in clone.body.operations:
        if op.name == "gpu.binary":
            obj = gpu.ObjectAttr(op.attributes["objects"][0]).object
            return obj.decode() if isinstance(obj, (bytes, bytearray)) else str(obj)
    raise InternalCompilerError("NVPTX produced no gpu.binary", EMIT_PTX)


def find_ptxas() -> str | None:
    env = os.environ.get("TAWA_PTXAS")
    if env and os.path.exists(env):
        return env
    try:
        import nvidia  # noqa: F401  (namespace package of the CUDA wheels)
        for root in list(nvidia.__path__):
            for sub in ("cu13", "cuda_nvcc", "cu12"):
                cand = os.path.join(root, sub, "bin", "ptxas")
                if os.path.exists(cand):
                    return cand
    except ImportError:
        pass
    return shutil.which("ptxas")


@dataclass
class PtxasReport:
    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack_bytes: int = 0
    smem_bytes: int = 0
    warnings: list = field(default_factory=list)


def parse_ptxas_report(text: str) -> PtxasReport:
    rep = PtxasReport()
    m = re.search(r"Used (\d+) registers", text)
    if m:
        rep.registers = int(m.group(1))
    m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", text)
    if m:
        rep.spill_stores, rep.spill_loads = int(m.group(1)), int(m.group(2))
    m = re.search(r"(\d+) bytes stack frame", text)
    if m:
        rep.stack_bytes = int(m.group(1))
    m = re.search(r"(\d+) bytes smem", text)
    if m:
        rep.smem_bytes = int(m.group(1))
    # Warnings, and the performance notes ptxas gives as info (wgmma serialized, setmaxnreg ignored: C75xx).
    rep.warnings = [l.strip() for l in text.splitlines()
                    if "warning" in l.lower() or "Performance Loss" in l or re.search(r"\(C75\d\d\)", l)]
    return rep


def assemble(ptx: str, ptxas: str | None = None) -> tuple[bytes, PtxasReport]:
    """ptxas the PTX for sm_90a; returns (cubin, report). Raises CompilationError when ptxas cannot be run,
    InternalCompilerError when it rejects the PTX (the compiler generated it)."""
    ptxas = ptxas or find_ptxas()
    if ptxas is None:
        raise CompilationError("ptxas was not found",
                               note="install the CUDA compiler wheel (pip install nvidia-cuda-nvcc-cu12) or set "
                                    "TAWA_PTXAS to the ptxas binary")
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.ptx")
        out = os.path.join(d, "k.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        try:
            proc = subprocess.run([ptxas, f"-arch={CHIP}", "-v", "-o", out, src], capture_output=True, text=True)
        except OSError as e:
            raise CompilationError(f"could not run ptxas ({ptxas}): {e.strerror or e}",
                                   note="set TAWA_PTXAS to a working ptxas binary") from None
        if proc.returncode != 0:
            m = re.search(r"Insufficient registers \((\d+)\)", proc.stderr)
            if m:   # the register count the kernel starts with (its threads and CTAs per SM) is too small
                raise CompilationError(
                    f"ptxas cannot fit the kernel's instructions in the {m.group(1)} registers per thread its launch "
                    f"size allows", note="use ctas_per_sm=1 (two CTAs per SM halve every thread's registers), "
                                         "fewer warps, or smaller tiles (BLOCK_M, BLOCK_N)")
            raise InternalCompilerError(f"ptxas rejected the generated PTX:\n{proc.stderr.strip()}", PTXAS)
        with open(out, "rb") as f:
            return f.read(), parse_ptxas_report(proc.stderr + proc.stdout)
