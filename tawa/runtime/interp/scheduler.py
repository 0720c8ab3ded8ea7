"""Runs warp-group regions as concurrent tasks with a seeded random interleaving, and detects deadlocks.

After warp specialization a kernel body holds consecutive `scf.execute_region`s tagged `tawa.warp_group`; they
run concurrently and talk only through arefs. Each region body is compiled as a generator function; a task is
one running generator. The generator yields at every point where another warp group could run first (aref ops,
loads, stores): `None` (it may continue at once) or a `Wait` (it may continue once the aref is ready). The
scheduler repeatedly picks a runnable task at random (from the seed, so a run is reproducible and different
seeds explore different interleavings) and resumes it. When every unfinished task waits on something no task
can provide, it raises `InterpreterDeadlock` naming what each task waits on. A task that finishes while still
borrowing aref slots violates the protocol.
"""
from __future__ import annotations

from tawa.ir.ops import warp_group_role
from tawa.runtime.interp.errors import ArefProtocolError, InterpreterDeadlock, op_location
from tawa.runtime.interp.steps import as_generator


class Task:
    __slots__ = ("name", "gen", "wait", "op")

    def __init__(self, name: str, gen, op=None):
        self.name, self.gen, self.op = name, gen, op
        self.wait = None


def is_warp_group(op) -> bool:
    return warp_group_role(op) is not None


def run_tasks(rt, tasks: list) -> None:
    """Run `tasks` to completion, interleaved at random from `rt.rng`."""
    saved = rt.task
    pending = list(tasks)
    rng, trace = rt.rng, rt.trace
    try:
        while pending:
            runnable = [t for t in pending if t.wait is None or t.wait.ready()]
            if not runnable:
                raise _deadlock(pending)
            task = runnable[rng.randrange(len(runnable))] if len(runnable) > 1 else runnable[0]
            rt.task = task
            if trace is not None:
                trace.append(task.name)
            try:
                task.wait = next(task.gen)
            except StopIteration:
                pending.remove(task)
                _check_released(rt, task)
    finally:
        rt.task = saved
        for task in pending:
            task.gen.close()


def _deadlock(pending: list) -> InterpreterDeadlock:
    lines = [f"  {t.name} {t.wait.describe()}" for t in pending]
    first = pending[0].wait.op if pending else None
    return InterpreterDeadlock("deadlock: every unfinished warp group is blocked\n" + "\n".join(lines),
                               op_location(first) if first is not None else None)


def _check_released(rt, task: Task) -> None:
    for ring in rt.rings:
        held = ring.held_by(task)
        if held:
            raise ArefProtocolError(f"{task.name} finished while still borrowing {held} slot(s) of "
                                    f"{ring.describe()} (aref_get without aref_consumed)",
                                    op_location(task.op) if task.op is not None else None)


def compile_warp_groups(c, ops: list):
    """One step that runs the warp-group regions `ops` concurrently and waits for all of them. `c` is the
    `interp.compiler.Compiler` compiling the enclosing block (this module never imports it: the compiler calls
    here)."""
    if c.in_task:
        raise c.error(ops[0], "warp-group regions cannot be nested inside another warp group")
    c.in_task = True
    try:
        groups = []
        counts: dict = {}
        for op in ops:
            role = warp_group_role(op)
            index = counts[role] = counts.get(role, -1) + 1
            loc = op_location(op)
            name = f"{role} #{index}" + (f" ({loc})" if loc else "")
            body = c.compile_region(op.regions[0], op)
            groups.append((name, as_generator(body.fn, body.is_gen), body.yields, c.results(op), op))
    finally:
        c.in_task = False
    rt = c.rt

    def run(env):
        run_tasks(rt, [Task(name, fn(env), op) for name, fn, _, _, op in groups])
        for _, _, yields, results, _ in groups:
            for s, y in zip(results, yields):
                env[s] = env[y]
    return run, False


__all__ = ["Task", "run_tasks", "is_warp_group", "compile_warp_groups"]
