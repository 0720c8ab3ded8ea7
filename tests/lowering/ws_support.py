"""Shared helpers of the warp-specialization tests: compile an example through the WS passes and access the
warp-group regions. Checks of the printed IR are FileCheck tests in tests/passes/."""
from __future__ import annotations

import pathlib
import re

from mlir import ir

from tawa.ir.kernel_info import body_block, kernels
from tawa.ir.ops import warp_group_role
from tawa.ir.traversal import ops_of, walk
from tawa.frontend import parse_and_lower
from tawa.lowering import aref_insertion, partition, protocol_check
from tawa.options import CompileOptions

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
WS_PASSES = (aref_insertion, partition, protocol_check)
#: ptxas's warnings that it serialized a function's wgmmas (C75xx), which costs them most of their speed.
SERIALIZED = re.compile(r"C75\d\d|serializ", re.IGNORECASE)


def example_module(name: str, constants: dict | None = None) -> ir.Module:
    path = EXAMPLES / f"{name}.tawa"
    return parse_and_lower(path.read_text(), str(path), constants or {})


def source_module(source: str, constants: dict | None = None, filename: str = "kernel.tawa") -> ir.Module:
    return parse_and_lower(source, filename, constants or {})


def run_passes(module: ir.Module, passes=WS_PASSES, **options) -> ir.Module:
    opts = CompileOptions(**options).validate()
    for p in passes:
        module = p.run(module, opts)
    module.operation.verify()
    return module


def kernel(module: ir.Module):
    return kernels(module)[0]


def region(module: ir.Module, role: str) -> ir.Operation:
    regions = [op for op in ops_of(body_block(kernel(module))) if warp_group_role(op) == role]
    assert len(regions) == 1, f"expected one {role} region, found {len(regions)}"
    return regions[0]


def ops_named(op: ir.Operation, name: str) -> list:
    return [o for o in walk(op) if o.name == name]


def compile_example(name: str, **kw):
    """An example compiled for sm_90a through `tawa.compile` (no cache), assembled by ptxas into a cubin."""
    import tawa
    kernel = tawa.compile(str(EXAMPLES / f"{name}.tawa"), cache=False, **kw)
    assert kernel.cubin and kernel.cubin[:4] == b"\x7fELF"
    return kernel


def spill_bytes(kernel) -> int:
    """The bytes of spill stores plus spill loads ptxas reported for the kernel (which it must have assembled)."""
    report = " ".join(n for n in kernel.compiled.notes if n.startswith("ptxas:"))
    found = re.findall(r"(\d+) bytes spill (?:stores|loads)", report)
    assert found, f"no ptxas report in {kernel.compiled.notes}"
    return sum(int(x) for x in found)
