"""Turns a kernel function into a tree of Python closures, once, so running a program is cheap.

Every SSA value gets a slot in a register file (a Python list, one per program). Each op becomes a closure
`fn(env)` that reads its operands' slots and writes its results' slots. Ops that may block (aref ops) and region
ops containing them become generator functions instead (`is_gen`): they `yield` a `Wait` (or `None`, a mere
preemption point) to the scheduler, which resumes them once the wait is ready. A block is a list of such steps;
its terminator's operands are recorded as slots so the region's owner can read the yielded values.

Handlers register per op name with `@handler("arith.addf", ...)`; a handler receives the `Compiler` and the op and
returns `(fn, is_gen)`. The per-run state that closures need (program id, grid, scheduler, current task) lives in
one `Runtime` object captured at compile time.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from mlir import ir

from tawa.errors import TawaError
from tawa.runtime.interp.dtypes import TypeInfo, type_info
from tawa.runtime.interp.errors import InterpreterError, op_location
from tawa.runtime.interp.scheduler import compile_warp_groups, is_warp_group
# Shared with the scheduler (which must not import this module back); re-exported for the op handlers.
from tawa.runtime.interp.steps import Step, as_generator, int_attr, str_attr  # noqa: F401

_HANDLERS: dict = {}


def handler(*names: str):
    """Register a compile function for the ops `names`."""
    def register(fn):
        for name in names:
            _HANDLERS[name] = fn
        return fn
    return register


@dataclass
class Runtime:
    """Mutable per-run state shared by all closures of one compiled kernel."""
    pid: tuple = (0, 0, 0)
    grid: tuple = (1, 1, 1)
    #: A persistent kernel's `tawa.grid_extent`: the grid it was written for (`grid` is then the CTAs launched).
    tile_grid: tuple = (1, 1, 1)
    #: `tawa.cluster_size`: the CTAs of each cluster of the launch (1: no clusters).
    cluster_size: int = 1
    rng: object = None
    task: object = None            # the scheduler task running now (None outside warp groups)
    rings: list = field(default_factory=list)   # arefs created by the current program
    trace: Optional[list] = None    # when a list: names of the tasks in the order they were resumed
    #: Split-K workspace of one launch: (tile, slot) -> {split: partial}, and tile -> programs arrived.
    partials: dict = field(default_factory=dict)
    arrived: dict = field(default_factory=dict)
    #: Ping-pong: the tile (in the CTA's order) whose main loop may run now, and each group's main loops so far.
    turn: int = 0
    main_loops: dict = field(default_factory=dict)
    #: Dynamic tiles: the launch's tile counter and the current CTA's channel (`tile_ops`).
    tile_counter: int = 0
    channel: object = None


@dataclass
class Block:
    """A compiled block: `fn(env)` (a generator function when `is_gen`), its argument and terminator slots."""
    fn: Callable
    is_gen: bool
    args: list
    yields: list


class Compiler:
    def __init__(self, runtime: Runtime):
        self.rt = runtime
        self.slots: dict = {}
        self._types: dict = {}
        #: True while compiling a warp-group region: memory ops there become preemption points.
        self.in_task = False

    # -- registers -------------------------------------------------------------------------------------------
    def slot(self, value: ir.Value) -> int:
        """The register of an SSA value (allocated on first sight)."""
        index = self.slots.get(value)
        if index is None:
            index = self.slots[value] = len(self.slots)
        return index

    def num_slots(self) -> int:
        return len(self.slots)

    def info(self, t: ir.Type) -> TypeInfo:
        key = str(t)
        if key not in self._types:
            self._types[key] = type_info(t)
        return self._types[key]

    def operands(self, op) -> list:
        return [self.slot(v) for v in op.operands]

    def results(self, op) -> list:
        return [self.slot(v) for v in op.results]

    # -- ops and blocks ----------------------------------------------------------------------------------------
    def error(self, op, message: str) -> InterpreterError:
        return InterpreterError(message, op_location(op))

    def compile_op(self, op) -> Step:
        op = op.operation
        fn = _HANDLERS.get(op.name)
        if fn is None:
            raise self.error(op, f"the CPU interpreter does not support the op '{op.name}'")
        step_fn, is_gen = fn(self, op)
        step_fn._tawa_op = op  # lets a failing step name its op
        return step_fn, is_gen

    def compile_block(self, block: ir.Block, terminators: tuple = ("scf.yield",)) -> Block:
        ops = list(block.operations)
        args = [self.slot(a) for a in block.arguments]
        yields: list = []
        if ops and ops[-1].operation.name in terminators:
            yields = self.operands(ops[-1].operation)
            ops = ops[:-1]
        steps = self.compile_ops(ops)
        fn, is_gen = sequence(steps)
        return Block(fn, is_gen, args, yields)

    def compile_ops(self, ops: list) -> list:
        """Compile a list of ops; consecutive warp-group regions become one concurrent step."""
        steps, i = [], 0
        while i < len(ops):
            op = ops[i].operation
            if is_warp_group(op):
                j = i
                while j < len(ops) and is_warp_group(ops[j].operation):
                    j += 1
                steps.append(compile_warp_groups(self, [o.operation for o in ops[i:j]]))
                i = j
            else:
                steps.append(self.compile_op(op))
                i += 1
        return steps

    def compile_region(self, region: ir.Region, owner, terminators: tuple = ("scf.yield",)) -> Block:
        blocks = list(region.blocks)
        if len(blocks) != 1:
            raise self.error(owner, f"the CPU interpreter supports only single-block regions in '{owner.name}'")
        return self.compile_block(blocks[0], terminators)


def _fail(step, exc: Exception):
    """Re-raise a Python error from a step as an InterpreterError naming the op."""
    op = getattr(step, "_tawa_op", None)
    if op is None or isinstance(exc, TawaError):
        raise exc
    raise InterpreterError(f"'{op.name}' failed at run time: {type(exc).__name__}: {exc}",
                           op_location(op)) from exc


def sequence(steps: list) -> Step:
    """One step running `steps` in order."""
    fns = [f for f, _ in steps]
    if not any(g for _, g in steps):
        def run(env):
            f = None
            try:
                for f in fns:
                    f(env)
            except Exception as exc:  # noqa: BLE001 - attach the op's location, then re-raise
                _fail(f, exc)
        return run, False

    def run_gen(env):
        for f, g in steps:
            if g:
                yield from f(env)
            else:
                try:
                    f(env)
                except Exception as exc:  # noqa: BLE001
                    _fail(f, exc)
    return run_gen, True
