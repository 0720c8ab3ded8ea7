"""Source locations of ops: the `file:line:col` the frontend put on them, as the `SourceLocation` errors carry."""
from __future__ import annotations

import functools
import os

from mlir import ir

from tawa.errors import SourceLocation


def _file_loc(loc: ir.Location):
    """The first FileLineColLoc inside `loc` (through name, call-site and fused locations)."""
    if loc.is_a_file():
        return loc.filename, loc.start_line, loc.start_col
    children = []
    if loc.is_a_name():
        children = [loc.child_loc]
    elif loc.is_a_callsite():
        children = [loc.callee, loc.caller]
    elif loc.is_a_fused():
        children = list(loc.locations)
    for child in children:
        found = _file_loc(child)
        if found:
            return found
    return None


@functools.lru_cache(maxsize=64)
def _lines(filename: str) -> tuple:
    try:
        if os.path.isfile(filename):
            with open(filename, encoding="utf-8", errors="replace") as f:
                return tuple(f.read().splitlines())
    except OSError:
        pass
    return ()


def source_location(op) -> SourceLocation | None:
    """Where in the user's source `op` (an op or a location) comes from, with the source line when the file can
    be read; None for ops the compiler made up without a location."""
    loc = op if isinstance(op, ir.Location) else (op.operation if hasattr(op, "operation") else op).location
    found = _file_loc(loc)
    if not found:
        return None
    filename, line, col = found
    if filename in ("", "-"):
        return None
    lines = _lines(filename)
    return SourceLocation(filename, line, col, lines[line - 1] if 0 < line <= len(lines) else "")


def where(op) -> str:
    """' at file:line:col' for messages, or '' when the op has no source location."""
    loc = source_location(op)
    return f" at {loc}" if loc else ""
