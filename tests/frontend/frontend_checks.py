"""Helpers for the frontend tests: FileCheck-like matching on printed IR and kernel attributes as Python."""
from __future__ import annotations

import pathlib
import re

from mlir import ir

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def check_order(text: str, patterns: list) -> None:
    """Each pattern (a regex) must match, in order, each after the previous match (like FileCheck CHECK:)."""
    pos = 0
    for p in patterns:
        m = re.compile(p).search(text, pos)
        assert m, f"pattern {p!r} not found after position {pos} in:\n{text}"
        pos = m.end()


def check_not(text: str, patterns: list) -> None:
    for p in patterns:
        assert not re.search(p, text), f"pattern {p!r} unexpectedly found in:\n{text}"


def kernel_op(module: ir.Module) -> ir.Operation:
    ops = [op.operation for op in module.body.operations if "tawa.kernel" in op.operation.attributes]
    assert len(ops) == 1
    return ops[0]


def to_python(attr):
    if isinstance(attr, ir.DictAttr):
        return {attr[i].name: to_python(attr[i].attr) for i in range(len(attr))}
    if isinstance(attr, ir.ArrayAttr):
        return [to_python(a) for a in attr]
    if isinstance(attr, ir.StringAttr):
        return attr.value
    if isinstance(attr, ir.BoolAttr):
        return bool(attr.value)
    if isinstance(attr, (ir.IntegerAttr, ir.FloatAttr)):
        return attr.value
    return str(attr)


def kernel_attrs(module: ir.Module) -> dict:
    op = kernel_op(module)
    return {k: to_python(op.attributes[k]) for k in ("tawa.params", "tawa.grid", "tawa.constants")}


def count(text: str, pattern: str) -> int:
    return len(re.findall(pattern, text))
