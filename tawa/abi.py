"""The contract between the GPU backend and the runtime: what a compiled kernel's parameter list holds.

The backend emits a kernel whose PTX parameters are, in order, the entries of `CompiledKernel.abi` (a list of
`AbiParam`). The runtime packs each launch from this list alone, so a cached kernel launches without MLIR.

Kinds of entry (`arg` is the index of the user-facing kernel argument it derives from):
- `tensormap`: a 128-byte `CUtensorMap` for tensor argument `arg`, encoded at launch with
  `cuTensorMapEncodeTiled` from the argument's pointer, sizes and strides, with box `box` (innermost dimension
  last, in elements), `swizzle` in bytes (0, 32, 64, 128) and element type of the argument. `by_value` true:
  passed in the parameter space (`.param .align 64 .b8 [128]`, a `__grid_constant__`); false: the runtime copies
  it to device memory and passes a pointer.
- `ptr`: the argument's device address (u64).
- `dim`: extent of dimension `axis` of argument `arg` (i32).
- `stride`: stride of dimension `axis` of argument `arg`, in elements (i64).
- `scalar`: the scalar argument `arg`, with `dtype` (`i32` or `f32`).
- `grid`: extent `axis` of the grid a persistent kernel (`CompiledKernel.persistent`) was written for (i32; `arg`
  is -1, no user argument): the runtime launches min(programs, SMs) CTAs on a 1-D grid, and the kernel loops
  over the programs of this grid.
- `workspace`: the device address (u64; `arg` is -1) of a split-K kernel's workspace (`CompiledKernel.split_k` >
  1): `workspace_per_tile` bytes for each program of the grid the kernel is launched with, zeroed when the runtime
  allocates it (the kernel leaves it zeroed where it matters: each tile's counter). A stream-K kernel's
  (`CompiledKernel.stream_k`) has `workspace_per_tile` bytes for each CTA it is launched as; a kernel with dynamic
  tiles (`CompiledKernel.dynamic_tiles`) has `TILE_COUNTER_BYTES`, its tile counter, which it leaves at zero.
"""
from __future__ import annotations

from dataclasses import dataclass, field, asdict
from typing import Optional

#: The magnitudes a scalar argument assumed positive may take (`CompiledKernel.positive_params`): within them, the
#: products the compiler forms from such arguments and constants stay normal floats (`scale-after-max`).
POSITIVE_ARG_RANGE = (2.0 ** -60, 2.0 ** 60)

#: Workspace bytes of a kernel with dynamic tiles: one counter, padded to a 128-byte line.
TILE_COUNTER_BYTES = 128


@dataclass
class AbiParam:
    kind: str                       # "tensormap" | "ptr" | "dim" | "stride" | "scalar" | "grid" | "workspace"
    arg: int
    axis: Optional[int] = None
    box: Optional[list] = None      # tensormap: box extents, outermost first (as the tensor's dims)
    swizzle: int = 0                # tensormap: 0, 32, 64 or 128
    by_value: bool = True           # tensormap: grid-constant parameter or pointer to global memory
    dtype: Optional[str] = None     # scalar: "i32" | "f32"


@dataclass
class CompiledKernel:
    """Everything needed to launch a compiled kernel: JSON-serialisable, no MLIR objects."""
    name: str                       # kernel entry name in the PTX/cubin
    target: str                     # "cuda" or "cpu"
    params: list                    # tawa.params (see docs/ir.md)
    grid: list                      # grid expressions (strings)
    constants: dict
    abi: list = field(default_factory=list)          # list[AbiParam] (cuda)
    #: The kernel's `@requires` launch conditions over its shapes ({"condition", "source", "line"}), checked at
    #: every launch (`runtime.grid.check_requires`).
    requires: list = field(default_factory=list)
    num_threads: int = 128
    shared_bytes: int = 0           # dynamic shared memory
    #: A persistent kernel: launched as min(programs, SMs) CTAs on a 1-D grid, each looping over the programs of
    #: the grid it was written for, which it receives in its "grid" parameters.
    persistent: bool = False
    #: A split-K kernel: launched with `split_k` times the grid's axis 2, the programs of one output tile meeting
    #: in a workspace of `workspace_per_tile` bytes per program of the grid it is launched with.
    split_k: int = 1
    #: A stream-K kernel (persistent): the two CTAs that share a tile meet in the workspace, whose records
    #: (`workspace_per_tile` bytes each) are one per CTA launched instead of one per program.
    stream_k: bool = False
    workspace_per_tile: int = 0
    #: A persistent kernel whose CTAs take tiles from a counter in the workspace (`TILE_COUNTER_BYTES`).
    dynamic_tiles: bool = False
    #: A clustered persistent kernel: [CTAs along grid axis 0, along axis 1] of its thread-block clusters, which
    #: the runtime launches where the grid divides into them (`runtime.grid.cluster_size_for`); None: no clusters.
    cluster: Optional[list] = None
    #: CTAs the kernel keeps resident per SM (a specialized kernel's registers and shared memory sized for that many;
    #: a uniform-warp kernel's as ptxas left them, `uniform_by_choice`); a persistent kernel is launched with this
    #: many CTAs per SM.
    ctas_per_sm: int = 1
    #: The programs' loops with dots run different numbers of iterations (their bounds depend on the program id:
    #: causal attention); the launch defaults weigh tiles by it (`tawa.autotune.launch_defaults`).
    uneven_programs: bool = False
    #: A loop with dots sits under a conditional that some programs skip (MoE tiles past an expert's rows): the
    #: launch defaults keep such kernels on one program per CTA (`launch_defaults._balanced`).
    skipping_programs: bool = False
    #: A loop's dot takes, as its A operand, math on another dot's result of the same iteration (attention's P V
    #: on the softmax of Q K^T); the launch defaults' attention rule applies only to such kernels.
    chained_dots: bool = False
    #: The compiler ran the kernel on the uniform-warp path by its own rule, where warp specialization applied
    #: (`occupancy.uniform_is_faster`: attention at a head dim its exponentials bound), with two CTAs resident per
    #: SM (`ctas_per_sm` 2, checked against ptxas's registers; False where ptxas did not run); the launch rules
    #: then keep its key block at head dim 64.
    uniform_by_choice: bool = False
    #: Indices of the scalar arguments the code assumes positive (compile option `positive_scales`): the launcher
    #: checks each lies within POSITIVE_ARG_RANGE at every launch (`PositiveScaleError` otherwise).
    positive_params: list = field(default_factory=list)
    #: Bytes of registers ptxas spilled (stores + loads), from its report; None where ptxas did not run (no ptxas
    #: where the kernel was compiled, or the CPU target).
    spill_bytes: Optional[int] = None
    #: Registers per thread ptxas allocated, from its report; None where ptxas did not run.
    registers: Optional[int] = None
    ptx: Optional[str] = None
    cubin: Optional[bytes] = None
    ir: Optional[str] = None        # the final MLIR text (cpu target: what the interpreter runs)
    notes: list = field(default_factory=list)        # diagnostics (e.g. why warp specialization did not apply)

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("cubin")
        d["abi"] = [asdict(p) if isinstance(p, AbiParam) else p for p in self.abi]
        return d

    @classmethod
    def from_json(cls, d: dict, cubin: Optional[bytes] = None) -> "CompiledKernel":
        d = dict(d)
        d["abi"] = [AbiParam(**p) for p in d.get("abi", [])]
        return cls(cubin=cubin, **d)
