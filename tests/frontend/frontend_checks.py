"""Helpers for the frontend tests: kernel attributes as Python values. (Checks of the printed IR are FileCheck
tests: tests/passes/frontend/.)"""
from __future__ import annotations

import pathlib

from mlir import ir

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


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
