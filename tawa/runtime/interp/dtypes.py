"""How interpreter values are represented, per MLIR type.

- integer and index scalars (`i32`, `i64`, `index`): Python `int` (wrapped to their width by each op);
- `i1` scalars: Python `bool`;
- float scalars: numpy scalars of the exact type (`np.float32`, `ml_dtypes.bfloat16`, ...);
- tiles (`tensor<...>`): numpy arrays of the element's dtype (`i1` -> `np.bool_`); never mutated in place, so
  closures may share them;
- global tensors (`memref<...>`): the caller's numpy arrays (stores write them in place);
- arefs: `aref_ops.Ring` objects.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import ml_dtypes
import numpy as np
from mlir import ir

F32 = np.dtype(np.float32)

_FLOATS = {
    "f32": F32, "f16": np.dtype(np.float16), "f64": np.dtype(np.float64),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f8E4M3FN": np.dtype(ml_dtypes.float8_e4m3fn), "f8E5M2": np.dtype(ml_dtypes.float8_e5m2),
}
_INTS = {1: np.dtype(np.bool_), 8: np.dtype(np.int8), 16: np.dtype(np.int16), 32: np.dtype(np.int32),
         64: np.dtype(np.int64)}


@dataclass(frozen=True)
class TypeInfo:
    """What the interpreter needs to know about one MLIR type."""
    text: str                      # the type as printed
    kind: str                      # "float" | "int" | "index" | "memref" | "aref" | "other"
    dtype: Optional[np.dtype]      # element dtype (floats and ints)
    bits: int = 0                  # integer width (index: 64)
    shape: Optional[tuple] = None  # tensor shape; None for scalars
    elem: str = ""                 # element type as printed

    @property
    def is_tensor(self) -> bool:
        return self.shape is not None

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind in ("int", "index")


def _scalar_info(t: ir.Type, shape: Optional[tuple], text: str) -> TypeInfo:
    name = str(t)
    if name in _FLOATS:
        return TypeInfo(text, "float", _FLOATS[name], 0, shape, name)
    if name == "index":
        return TypeInfo(text, "index", np.dtype(np.int64), 64, shape, name)
    if isinstance(t, ir.IntegerType):
        width = ir.IntegerType(t).width
        if width in _INTS:
            return TypeInfo(text, "int", _INTS[width], width, shape, name)
    return TypeInfo(text, "other", None, 0, shape, name)


def type_info(t: ir.Type) -> TypeInfo:
    text = str(t)
    if isinstance(t, ir.RankedTensorType):
        rt = ir.RankedTensorType(t)
        return _scalar_info(rt.element_type, tuple(rt.shape), text)
    if isinstance(t, ir.MemRefType):
        mt = ir.MemRefType(t)
        info = _scalar_info(mt.element_type, None, text)
        return TypeInfo(text, "memref", info.dtype, info.bits, None, info.elem)
    if text.startswith("!tawa.aref"):
        return TypeInfo(text, "aref", None)
    return _scalar_info(t, None, text)


def wrap_int(value: int, bits: int) -> int:
    """Two's-complement wrap of a Python int to `bits` (signed view)."""
    if bits == 1:
        return bool(value & 1)
    half = 1 << (bits - 1)
    return ((value + half) & ((1 << bits) - 1)) - half


def make_scalar(value, info: TypeInfo):
    """A Python/numpy value in the representation of scalar type `info` (rounding floats to the type)."""
    if info.kind == "float":
        return np.asarray(value, dtype=np.float64).astype(info.dtype)[()]
    if info.kind in ("int", "index"):
        if info.bits == 1:
            return bool(value)
        return wrap_int(int(value), info.bits)
    return value


def to_repr(value, info: TypeInfo):
    """Bring a numpy result (array or scalar) into the representation of `info`."""
    if info.is_tensor:
        return value
    if info.kind == "float":
        return value.astype(info.dtype)[()] if hasattr(value, "astype") else make_scalar(value, info)
    if info.kind in ("int", "index"):
        return bool(value) if info.bits == 1 else wrap_int(int(value), info.bits)
    return value
