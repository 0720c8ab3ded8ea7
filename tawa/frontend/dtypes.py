"""The language's dtypes and their MLIR element types.

`DType` values are what a dtype name (`bf16`, `f32`, ...) evaluates to in a kernel; they are compile-time
values, so a `const` may hold one (`DTYPE: const = bf16`).
"""
from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from tawa.elements import IR_NAMES


@dataclass(frozen=True)
class DType:
    name: str          # the language's spelling

    def __str__(self) -> str:
        return self.name

    def mlir(self) -> ir.Type:
        return _MLIR[self.name]()

    @property
    def is_float(self) -> bool:
        return self.name not in ("i32", "bool")

    @property
    def ir_name(self) -> str:
        """The spelling of docs/ir.md (`tawa.params` dtypes): the MLIR element type's name."""
        return _IR_NAMES.get(self.name, self.name)

    @property
    def bits(self) -> int:
        return _BITS[self.name]


_MLIR = {
    "f32": ir.F32Type.get,
    "f16": ir.F16Type.get,
    "bf16": ir.BF16Type.get,
    "f8e4m3": ir.Float8E4M3FNType.get,
    "f8e5m2": ir.Float8E5M2Type.get,
    "i32": lambda: ir.IntegerType.get_signless(32),
    "bool": lambda: ir.IntegerType.get_signless(1),
}
_BITS = {"f32": 32, "f16": 16, "bf16": 16, "f8e4m3": 8, "f8e5m2": 8, "i32": 32, "bool": 1}

_IR_NAMES = IR_NAMES     # (the one table, tawa/elements.py: the runtime reads it without MLIR)

DTYPES = {name: DType(name) for name in _MLIR}
#: IR spellings accepted where a dtype name is given from Python (`constants={"DTYPE": "f8E4M3FN"}`).
DTYPE_ALIASES = {ir_name: DTYPES[name] for name, ir_name in _IR_NAMES.items()}
#: dtypes a tensor parameter may have (the runtime moves these through memory).
TENSOR_DTYPES = ("f32", "f16", "bf16", "f8e4m3", "f8e5m2", "i32")
#: dtypes a scalar parameter may have (what the kernel ABI passes).
SCALAR_DTYPES = ("f32", "i32")


def dtype_of(t: ir.Type) -> DType:
    """The language dtype of an MLIR element type."""
    if isinstance(t, ir.F32Type):
        return DTYPES["f32"]
    if isinstance(t, ir.F16Type):
        return DTYPES["f16"]
    if isinstance(t, ir.BF16Type):
        return DTYPES["bf16"]
    if isinstance(t, ir.Float8E4M3FNType):
        return DTYPES["f8e4m3"]
    if isinstance(t, ir.Float8E5M2Type):
        return DTYPES["f8e5m2"]
    if isinstance(t, ir.IntegerType):
        return DTYPES["bool"] if t.width == 1 else DTYPES["i32"]
    raise ValueError(f"no tawa dtype for {t}")
