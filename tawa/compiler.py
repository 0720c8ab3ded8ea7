"""The compiler driver: the one ordered list of passes, and the function that runs it.

Source → frontend (Lark parse, lowering to the `tawa` dialect) → the passes below, in this order → a
`CompiledKernel`. Every pass is a module in `tawa/lowering/` with a `run(module, options)` function and a docstring
saying what it takes and gives. `--dump-ir-after-all` (or `CompileOptions.dump_ir_after_all`) prints the IR after
each pass that ran.

Which passes run depends on the target and on whether the kernel is warp specialized:
- WS: the kernel is split into a producer and consumer warp groups connected by arefs;
- UNIFORM: all warps run the same code, loads software-pipelined `num_stages` deep;
- CPU: the interpreter runs the tile IR as it stands after the tawa-level passes.
"""
from __future__ import annotations

import importlib
import sys
import time
from dataclasses import dataclass
from typing import Callable

from tawa.errors import CompilationError
from tawa.options import CompileOptions


#: Whether the GPU backend lowers warp-specialized kernels (arefs, warp groups) in this build.
GPU_WARP_SPECIALIZATION = True


@dataclass
class Plan:
    """Decisions taken before the pipeline runs: read by each pass's `when`."""
    target: str
    warp_specialize: bool


def _always(plan: Plan) -> bool: return True
def _ws(plan: Plan) -> bool: return plan.warp_specialize
def _gpu(plan: Plan) -> bool: return plan.target == "cuda"
def _gpu_ws(plan: Plan) -> bool: return plan.target == "cuda" and plan.warp_specialize
def _gpu_uniform(plan: Plan) -> bool: return plan.target == "cuda" and not plan.warp_specialize


@dataclass
class Pass:
    name: str
    module: str                      # the module in tawa.lowering that implements it
    when: Callable[[Plan], bool] = _always
    entry: str = "run"               # the function in that module

    def run(self, module, options):
        return getattr(importlib.import_module(f"tawa.lowering.{self.module}"), self.entry)(module, options)


# The pipeline. Read top to bottom: this is everything the compiler does after the frontend.
PIPELINE = [
    # Tile level, target independent.
    Pass("canonicalize", "canonicalize"),
    # Warp specialization (tile level): loads feeding dots become aref puts in a producer warp group.
    Pass("aref-insertion", "aref_insertion", when=_ws),
    Pass("partition", "partition", when=_ws),
    Pass("protocol-check", "protocol_check", when=_ws),
    # Warp specialization on the GPU: setmaxnreg budgets, then warp-group indices, launch size and TMA-issued
    # loads (the NVVM conversion lowers the regions and arefs to mbarrier rings).
    Pass("register-realloc", "register_realloc", when=_gpu_ws),
    Pass("aref-lowering", "aref_lowering", when=_gpu_ws),
    # GPU backend: distributed layouts, the uniform-warp software pipeline, then NVVM and LLVM.
    Pass("assign-layouts", "assign_layouts", when=_gpu),
    Pass("software-pipeline", "software_pipeline", when=_gpu_uniform),
    Pass("convert-to-nvvm", "to_nvvm", when=_gpu),
    Pass("lower-to-llvm", "emit_ptx", when=_gpu, entry="lower_to_llvm"),
    # Then `tawa.lowering.backend.build_kernel`: NVPTX → PTX, ptxas → cubin, launch metadata.
]


def plan_for(module, options: CompileOptions) -> tuple[Plan, list[str]]:
    """Decide target and schedule; returns the plan and diagnostics for the user."""
    notes: list[str] = []
    if options.target not in ("cuda", "cpu"):
        raise CompilationError(f"unknown target '{options.target}' (expected 'cuda' or 'cpu')")
    want = options.warp_specialize
    if want is None and options.target == "cpu":
        return Plan(options.target, False), notes
    from tawa.lowering.ws_analysis import decide
    specialize, note = decide(kernel_function(module), options)   # raises when forced on but impossible
    if note:
        notes.append(note)
    if specialize and options.target == "cuda" and not _gpu_ws_lowering_available():
        if options.warp_specialize:
            raise CompilationError("warp-specialized kernels cannot be lowered to the GPU yet")
        notes.append("warp specialization is not lowered to the GPU yet; using the uniform-warp pipelined path")
        specialize = False
    return Plan(options.target, bool(specialize)), notes


def _gpu_ws_lowering_available() -> bool:
    return GPU_WARP_SPECIALIZATION


def kernel_function(module):
    for op in module.body.operations:
        if op.operation.name == "func.func" and "tawa.kernel" in op.attributes:
            return op
    raise CompilationError("the module holds no kernel function")


def is_tile_level(p: Pass) -> bool:
    """Tile-level passes keep the program in the `tawa` dialect and run for every target."""
    return p.when in (_always, _ws)


def run_pipeline(module, options: CompileOptions, plan: Plan, stop_after: str | None = None,
                 timings: dict | None = None, tile_level_only: bool = False):
    """Run the passes the plan selects, in PIPELINE order, optionally stopping after the pass named."""
    for p in PIPELINE:
        if not p.when(plan) or (tile_level_only and not is_tile_level(p)):
            continue
        t0 = time.perf_counter()
        module = p.run(module, options)
        if timings is not None:
            timings[p.name] = time.perf_counter() - t0
        if options.dump_ir_after_all:
            print(f"// -----// IR Dump After {p.name} //----- //", file=sys.stderr)
            print(module, file=sys.stderr)
        if p.name == stop_after:
            break
    return module


def compile_source(source: str, filename: str, options: CompileOptions, emit: str = "kernel"):
    """Compile a kernel source. `emit`: "tawa" (frontend output), "mlir" (after the tile-level passes),
    or "kernel" (a CompiledKernel for options.target)."""
    from tawa.frontend import parse_and_lower

    module = parse_and_lower(source, filename, options.constants)
    if options.dump_ir_after_all:
        print("// -----// IR Dump After frontend //----- //", file=sys.stderr)
        print(module, file=sys.stderr)
    if emit == "tawa":
        return module
    return compile_module(module, options, tile_level_only=(emit == "mlir"))


def compile_module(module, options: CompileOptions, tile_level_only: bool = False, stop_after: str | None = None):
    """Run the pipeline on a tile-level module (from the frontend, or parsed from MLIR text).

    Returns the module when `tile_level_only` or `stop_after` is given, else the `CompiledKernel`."""
    from tawa.runtime.abi import CompiledKernel

    plan, notes = plan_for(module, options)
    module = run_pipeline(module, options, plan, stop_after=stop_after, tile_level_only=tile_level_only)
    if tile_level_only or stop_after:
        return module
    if plan.target == "cpu":
        attrs = _kernel_attrs(kernel_function(module))
        return CompiledKernel(name=attrs["name"], target="cpu", params=attrs["params"], grid=attrs["grid"],
                              constants=attrs["constants"], ir=str(module), notes=notes)
    from tawa.lowering.backend import build_kernel
    kernel = build_kernel(module)
    kernel.notes = notes + list(kernel.notes)
    return kernel


def _kernel_attrs(func) -> dict:
    """The launch metadata the frontend put on the kernel function, as plain Python values."""
    from tawa.ir.attributes import to_python
    return {"name": to_python(func.attributes["sym_name"]),
            "params": to_python(func.attributes["tawa.params"]),
            "grid": to_python(func.attributes["tawa.grid"]),
            "constants": to_python(func.attributes["tawa.constants"])}
