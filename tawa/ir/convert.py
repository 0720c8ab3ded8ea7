"""Conversion of MLIR attributes to plain Python values (kernel metadata that must outlive MLIR): the one
attribute→Python converter of the package."""
from __future__ import annotations

from mlir import ir


def to_python(attr):
    """ArrayAttr → list, DictAttr → dict, StringAttr → str, IntegerAttr → int, FloatAttr → float,
    BoolAttr → bool, UnitAttr → True, TypeAttr → its text."""
    for cls, conv in ((ir.BoolAttr, lambda a: a.value), (ir.IntegerAttr, lambda a: a.value),
                      (ir.FloatAttr, lambda a: a.value), (ir.StringAttr, lambda a: a.value),
                      (ir.TypeAttr, lambda a: str(a.value)), (ir.UnitAttr, lambda a: True)):
        if isinstance(attr, cls):
            return conv(attr)
    if isinstance(attr, ir.ArrayAttr):
        return [to_python(a) for a in attr]
    if isinstance(attr, ir.DictAttr):
        return {attr[i].name: to_python(attr[i].attr) for i in range(len(attr))}
    try:
        return to_python(ir.ArrayAttr(attr))
    except Exception:
        pass
    try:
        d = ir.DictAttr(attr)
        return {d[i].name: to_python(d[i].attr) for i in range(len(d))}
    except Exception:
        pass
    for cls in (ir.BoolAttr, ir.IntegerAttr, ir.FloatAttr, ir.StringAttr):
        try:
            return to_python(cls(attr))
        except Exception:
            pass
    return str(attr)
