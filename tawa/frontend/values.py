"""What an expression evaluates to while lowering, and how to describe it in error messages.

- compile-time values: Python `int`, `float`, `bool`, `DType`, `None`, and tuples of values;
- run-time scalars: an `ir.Value` of type i32 / f32 / i1 (or another builtin scalar);
- tiles: an `ir.Value` of a ranked tensor type;
- tensor parameters: `TensorArg` (optionally with leading element indices, `Q[z, h]`, and views of the block dims
  after them, `Q[h, start:end]`);
- builtin functions: `Builtin`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from mlir import ir

from .dtypes import DType, dtype_of


@dataclass
class TensorArg:
    name: str
    value: ir.Value                 # the memref function argument
    dtype: DType
    shape: list                     # symbol names or ints
    indices: list = field(default_factory=list)   # leading element indices (ir.Value i32)
    # A view of the block dims (`Q[h, start:end]`), one entry per block dim from the first, or empty: the element
    # where block coordinates count from (`start`, an i32 value or int; None: 0), and the element index where the
    # view ends (`end`; None: the tensor's end).
    origins: list = field(default_factory=list)
    ends: list = field(default_factory=list)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def block_rank(self) -> int:
        return self.rank - len(self.indices)

    @property
    def viewed(self) -> bool:
        return bool(self.origins)

    @property
    def ends_early(self) -> bool:
        """Whether the view ends before the tensor does along some dim (`Q[h, start:end]`)."""
        return any(e is not None for e in self.ends)


@dataclass
class Builtin:
    name: str
    fn: Callable                    # fn(lowerer, node, args, kwargs) -> value


@dataclass
class Method:
    """A bound method of a tile, such as `x.to`."""
    name: str
    target: object


@dataclass
class Unavailable:
    """A name that exists but may not be read here (defined only inside a loop or in one branch of an `if`)."""
    name: str
    why: str


def is_static(v) -> bool:
    return isinstance(v, (bool, int, float)) and not isinstance(v, DType)


def is_value(v) -> bool:
    return isinstance(v, ir.Value)


def is_tile(v) -> bool:
    return isinstance(v, ir.Value) and isinstance(v.type, ir.RankedTensorType)


def is_scalar(v) -> bool:
    """A run-time scalar (not a compile-time one)."""
    return isinstance(v, ir.Value) and not isinstance(v.type, ir.RankedTensorType)


def shape_of(v) -> list:
    return list(ir.RankedTensorType(v.type).shape)


def elem_type(v) -> ir.Type:
    t = v.type
    return t.element_type if isinstance(t, ir.RankedTensorType) else t


def dtype_of_value(v) -> DType:
    return dtype_of(elem_type(v))


def static_dtype(v) -> str:
    if isinstance(v, bool):
        return "bool"
    return "int" if isinstance(v, int) else "float"


def describe(v) -> str:
    """How an error message names the type of a value."""
    if is_tile(v):
        return f"{dtype_of_value(v)}[{', '.join(str(d) for d in shape_of(v))}]"
    if is_scalar(v):
        return f"{dtype_of_value(v)} scalar"
    if isinstance(v, TensorArg):
        return f"tensor {v.name}"
    if isinstance(v, DType):
        return "dtype"
    if isinstance(v, tuple):
        return "tuple"
    if v is None:
        return "None"
    if isinstance(v, (Builtin, Method)):
        return "function"
    if is_static(v):
        return f"{static_dtype(v)} constant"
    return type(v).__name__


def is_pow2(n: int) -> bool:
    return isinstance(n, int) and n > 0 and n & (n - 1) == 0


#: Tile extents that are not powers of two must be multiples of this: a wgmma's K step of 16-bit operands and a
#: multiple of its N granularity (8). (A tile's last dimension must also be a multiple of 32 bytes to be swizzled
#: for a dot, which the backend checks; 16 bf16 elements are.)
TILE_EXTENT_MULTIPLE = 16


def is_tile_extent(n: int) -> bool:
    """Whether `n` may be a tile dimension: a power of two (any tile), or a multiple of 16 such as 96, 176 or 192,
    which the GPU backend takes for tiles in shared memory and dot accumulators (FlashAttention-3's 176-key blocks,
    192-wide GEMM tiles); a register tile of another kind is refused there, at its op."""
    return is_pow2(n) or (isinstance(n, int) and n > 0 and n % TILE_EXTENT_MULTIPLE == 0)
