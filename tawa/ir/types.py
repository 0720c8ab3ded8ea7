"""Types of the `tawa` IR as Python facts: element names and sizes, tile shapes and bytes, and the aref type.

The one element-size table of the compiler lives here; an element type it does not know is an error, never a
silent 4 bytes.
"""
from __future__ import annotations

from mlir import ir

from tawa.errors import InternalCompilerError

#: Bytes per element, by the MLIR spelling of the element type.
from tawa.elements import ELEMENT_BYTES  # the one table (tawa/elements.py), shared with the runtime


def elem_type(t: ir.Type) -> str:
    """The element type's spelling of a tensor or memref type; a scalar type's own spelling."""
    if isinstance(t, (ir.RankedTensorType, ir.MemRefType)):
        return str(t.element_type)
    return str(t)


def elem_bytes(elem) -> int:
    name = elem if isinstance(elem, str) else elem_type(elem)
    try:
        return ELEMENT_BYTES[name]
    except KeyError:
        raise InternalCompilerError(f"no size known for element type '{name}'") from None


def is_tile(t: ir.Type) -> bool:
    return isinstance(t, ir.RankedTensorType)


def tile_shape(t: ir.Type) -> tuple:
    return tuple(ir.RankedTensorType(t).shape)


def tile_bytes(t: ir.Type) -> int:
    n = 1
    for d in tile_shape(t):
        n *= d
    return n * elem_bytes(t)


# ---- the aref type ---------------------------------------------------------------------------------------
_AREF_PREFIX = "!tawa.aref<"


def aref_type(payload, depth: int) -> ir.Type:
    """`!tawa.aref<[T0, T1, ...], D : i32>`: a ring of D slots, each holding one value of every payload type."""
    return ir.Type.parse(f"{_AREF_PREFIX}[{', '.join(str(t) for t in payload)}], {int(depth)} : i32>")


def is_aref(t: ir.Type) -> bool:
    return str(t).startswith(_AREF_PREFIX)


def aref_params(t: ir.Type) -> tuple[list, int]:
    """(payload types, depth) of an aref type. The IRDL type's parameters are attributes; the Python bindings
    expose no accessor for them, so MLIR's own attribute parser reads them back."""
    text = str(t)
    if not is_aref(t) or not text.endswith(">"):
        raise InternalCompilerError(f"not an aref type: {text}")
    params = ir.ArrayAttr(ir.Attribute.parse("[" + text[len(_AREF_PREFIX):-1] + "]", t.context))
    payload = [ir.TypeAttr(a).value for a in ir.ArrayAttr(params[0])]
    return payload, ir.IntegerAttr(params[1]).value
