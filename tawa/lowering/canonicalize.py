"""canonicalize: upstream canonicalization and CSE on the tile IR.

Takes: any tawa module. Gives: the same program with constants folded, dead scalar arithmetic removed and common
subexpressions merged (tawa ops are left in place: IRDL ops declare no side-effect information, so MLIR treats
them as having effects and never deletes or merges them). Why: the frontend emits straightforward code (one
`arith.constant` per literal, repeated index math); later passes and the generated code read better without it.
"""
from __future__ import annotations

from mlir import passmanager


def run(module, options):
    with module.context:
        passmanager.PassManager.parse("builtin.module(canonicalize, cse)").run(module.operation)
    return module
