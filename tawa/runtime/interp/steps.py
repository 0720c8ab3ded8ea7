"""What the compiler and the scheduler both need, so that neither imports the other back: the step type, the
generator view of a step, and the readers of an op's own (non-`tawa.*`) attributes.

A step is `(fn, is_gen)`: `fn(env)` runs an op (or a block) on a register file; when `is_gen`, `fn` is a
generator function that yields to the scheduler at each point where another warp group could run first.
"""
from __future__ import annotations

from typing import Callable

from mlir import ir

Step = tuple  # (fn, is_gen)


def as_generator(fn: Callable, is_gen: bool) -> Callable:
    """A generator-function view of a step (a plain step runs atomically between two preemption points)."""
    if is_gen:
        return fn

    def gen(env):
        fn(env)
        return
        yield  # pragma: no cover - makes this a generator function
    return gen


def int_attr(op, name: str) -> int:
    return ir.IntegerAttr(op.attributes[name]).value


def str_attr(op, name: str) -> str:
    return ir.StringAttr(op.attributes[name]).value
