"""The CPU interpreter: runs a kernel of the `tawa` IR (an `mlir.ir.Module`) on numpy arrays.

Takes the module after any pass (plain or warp-specialized), numpy arrays and scalars in parameter order, and a
grid; runs the kernel once per program id, writing the arrays in place. The kernel is first compiled into Python
closures (`interp.compiler`) so each program costs a few vectorised numpy calls per op. Warp-group regions run
as interleaved tasks chosen at random from `seed` (`interp.scheduler`), with exact aref ring semantics
(`interp.aref_ops`); a deadlock or protocol violation raises a `TawaError` naming the ops involved.

Entry points: `run_kernel`, `run_with_interleavings` (tests), `compile_kernel` (compile once, run many),
`kernel_function`, `attr_to_python`, and the launch helpers `bind_numpy_args` / `eval_grid` from `grid`.
"""
from __future__ import annotations

import random
from typing import Callable, Iterable, Optional

import numpy as np
from mlir import ir

from tawa.errors import LaunchError, TawaError
from tawa.ir import attrs, kernel_info
# The shared helpers, re-exported under the names the interpreter has always offered.
from tawa.ir.convert import to_python as attr_to_python
from tawa.ir.kernel_info import kernel_function
from tawa.ir.ops import warp_group_role, warp_groups
from tawa.runtime.grid import bind_numpy_args, eval_grid, persistent_launch
# Importing the op modules registers their handlers.
from tawa.runtime.interp import arith_ops, aref_ops, math_ops, scf_ops, tawa_ops, tile_ops  # noqa: F401
from tawa.runtime.interp.compiler import Compiler, Runtime
from tawa.runtime.interp.dtypes import make_scalar
from tawa.runtime.interp.errors import ArefProtocolError, InterpreterDeadlock, InterpreterError
from tawa.runtime.interp.scheduler import Task, run_tasks

__all__ = ["run_kernel", "run_with_interleavings", "compile_kernel", "CompiledProgram", "kernel_function",
           "attr_to_python", "bind_numpy_args", "eval_grid", "InterpreterError", "InterpreterDeadlock",
           "ArefProtocolError"]


#: Programs a persistent kernel runs as in the interpreter (fewer than most grids, so that each loops over several
#: tiles, and a count that divides few of them).
PERSISTENT_CTAS = 3


class CompiledProgram:
    """A kernel compiled to closures; `run` executes it over a grid."""

    def __init__(self, module: ir.Module, kernel_name: Optional[str] = None):
        func = kernel_function(module, kernel_name)
        self.module = module  # keeps the IR (named in messages) alive
        self.name = kernel_info.kernel_name(func)
        # A kernel written by hand may lack the launch metadata: no parameter checks and no declared grid then.
        self.params = attrs.PARAMS.get(func) if attrs.PARAMS.has(func) else None
        self.grid_exprs = attrs.GRID.get(func) if attrs.GRID.has(func) else None
        self.constants = attrs.CONSTANTS.get(func) if attrs.CONSTANTS.has(func) else {}
        self.persistent = bool(attrs.PERSISTENT.get(func))
        #: A split-K kernel runs `split_k` programs per program of the grid it is launched with (along axis 2).
        self.split_k = attrs.SPLIT_K.get(func)
        #: A clustered persistent kernel: [CTAs along axis 0, along axis 1] of its clusters (see `run`).
        self.cluster = attrs.CLUSTER.get(func)
        #: Dynamic tiles: the consumer regions that take each tile index the producer puts (`interp.tile_ops`).
        self.tile_readers = (sum(1 for r in warp_groups(func) if warp_group_role(r) == attrs.CONSUMER)
                             if attrs.DYNAMIC_TILES.get(func) else 0)
        self.rt = Runtime()
        compiler = Compiler(self.rt)
        blocks = list(func.regions[0].blocks)
        if len(blocks) != 1:
            raise InterpreterError(f"kernel '{self.name}': the CPU interpreter needs a single-block body")
        block = blocks[0]
        self.arg_slots = [compiler.slot(a) for a in block.arguments]
        self.arg_infos = [compiler.info(a.type) for a in block.arguments]
        self.body = compiler.compile_block(block, terminators=("func.return",))
        self.num_slots = compiler.num_slots()

    def _prepare(self, args: list) -> list:
        if len(args) != len(self.arg_infos):
            raise LaunchError(f"kernel '{self.name}' takes {len(self.arg_infos)} arguments, got {len(args)}")
        if self.params is not None:
            bind_numpy_args(self.params, list(args))
        values = []
        for i, (arg, info) in enumerate(zip(args, self.arg_infos)):
            label = self.params[i]["name"] if self.params else f"#{i}"
            if info.kind == "memref":
                if not isinstance(arg, np.ndarray) or arg.dtype != info.dtype:
                    got = arg.dtype if isinstance(arg, np.ndarray) else type(arg).__name__
                    raise LaunchError(f"argument '{label}' must be a numpy array of {info.elem}, got {got}")
                values.append(arg)
            elif isinstance(arg, np.ndarray) and arg.ndim > 0:
                raise LaunchError(f"argument '{label}' must be a scalar of type {info.text}")
            else:
                values.append(make_scalar(arg, info))
        return values

    def run(self, args: list, grid, *, seed: Optional[int] = None, trace: Optional[list] = None,
            ctas: int = PERSISTENT_CTAS) -> None:
        """Run every program of `grid`; a persistent kernel runs as min(programs, `ctas`) programs that loop over
        the programs of `grid`."""
        values = self._prepare(args)
        grid = tuple(int(g) for g in (grid if isinstance(grid, (tuple, list)) else (grid,)))
        if not 1 <= len(grid) <= 3 or any(g < 0 for g in grid):
            raise LaunchError(f"a grid is 1 to 3 non-negative extents, got {grid}")
        grid3 = grid + (1,) * (3 - len(grid))
        grid3 = grid3[:2] + (grid3[2] * self.split_k,)
        rt, body, slots = self.rt, self.body, self.arg_slots
        rt.tile_grid = grid3
        rt.partials, rt.arrived = {}, {}
        rt.tile_counter = 0
        rt.cluster_size = 1
        if self.persistent:
            # As the GPU runtime launches it: in clusters where the grid divides into them, a whole number of them.
            grid3, rt.cluster_size = persistent_launch(self.cluster, grid3, ctas)
        rt.grid, rt.rng, rt.trace = grid3, random.Random(0 if seed is None else seed), trace
        with np.errstate(all="ignore"):
            for z, y, x in _grid_points(grid3):
                env = [None] * self.num_slots
                for s, v in zip(slots, values):
                    env[s] = v
                rt.pid, rt.rings, rt.task = (x, y, z), [], None
                rt.turn, rt.main_loops = 0, {}
                rt.channel = tile_ops.TileChannel(self.tile_readers) if self.tile_readers else None
                if body.is_gen:
                    run_tasks(rt, [Task("kernel body", body.fn(env))])
                else:
                    body.fn(env)
                aref_ops.check_drained(rt.rings)
                tile_ops.check_taken(rt.channel)
            if self.tile_readers and 0 not in grid3:
                tile_ops.check_tiles_done(rt)


def compile_kernel(module: ir.Module, kernel_name: Optional[str] = None) -> CompiledProgram:
    """Compile the kernel once; call `.run(args, grid, seed=...)` as often as needed."""
    return CompiledProgram(module, kernel_name)


def run_kernel(module: ir.Module, args: list, grid: tuple, *, kernel_name: Optional[str] = None,
               seed: Optional[int] = None, trace: Optional[list] = None) -> None:
    """Execute the kernel function (the func.func with attribute tawa.kernel) once per program id in `grid`.

    args: numpy arrays (for memref params; written in place by stores) and Python/numpy scalars, in param
    order. seed picks the interleaving of warp-group regions. trace, when a list, receives the name of each
    task in the order the scheduler resumed them.
    """
    compile_kernel(module, kernel_name).run(args, grid, seed=seed, trace=trace)


def run_with_interleavings(module: ir.Module, make_args: Callable[[], list], grid: tuple,
                           seeds: Iterable[int] = range(20), *, kernel_name: Optional[str] = None,
                           check: Optional[Callable[[list], None]] = None) -> list:
    """Run the kernel once per seed on fresh arguments from `make_args()`; return each run's arguments.

    `check(args)`, when given, is called after each run. An error names the seed that produced it.
    """
    program = compile_kernel(module, kernel_name)
    runs = []
    for seed in seeds:
        args = make_args()
        try:
            program.run(args, grid, seed=seed)
            if check is not None:
                check(args)
        except TawaError as error:
            error.note = (error.note + "; " if error.note else "") + f"interleaving seed {seed}"
            raise
        except AssertionError as error:
            raise AssertionError(f"interleaving seed {seed}: {error}") from error
        runs.append(args)
    return runs


def _grid_points(grid3):
    """(z, y, x) of every program, x fastest, one at a time (`itertools.product` would build the ranges as tuples
    first: a grid of 2**40 programs ran out of memory before the first one ran)."""
    for z in range(grid3[2]):
        for y in range(grid3[1]):
            for x in range(grid3[0]):
                yield z, y, x
