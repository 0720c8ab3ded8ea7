"""Errors the interpreter raises, and the source location of an op.

Every error is a `TawaError` carrying the `.tawa` location recorded on the offending op (MLIR `loc(...)`), so a
protocol violation or a deadlock points at the user's source line.
"""
from __future__ import annotations

import os
import re
from typing import Optional

from mlir import ir

from tawa.errors import SourceLocation, TawaError, location_of


class InterpreterError(TawaError):
    """The interpreter cannot run this IR (unsupported op) or the kernel misbehaved at run time."""


class ArefProtocolError(InterpreterError):
    """An aref was used against its protocol (consumed without get, values left behind, ...)."""


class InterpreterDeadlock(InterpreterError):
    """Every unfinished warp group waits on an aref that no other group can make ready."""


_LOC = re.compile(r'"([^"]+)":(\d+):(\d+)')
_SOURCES: dict = {}


def _source_of(filename: str) -> str:
    if filename not in _SOURCES:
        text = ""
        if os.path.isfile(filename):
            try:
                with open(filename, encoding="utf-8") as fh:
                    text = fh.read()
            except OSError:
                pass
        _SOURCES[filename] = text
    return _SOURCES[filename]


def op_location(op: ir.Operation) -> Optional[SourceLocation]:
    """The first file:line:column in the op's MLIR location, or None (unknown or the parser's "-")."""
    match = _LOC.search(str(op.location))
    if not match or match.group(1) == "-":
        return None
    filename, line, column = match.group(1), int(match.group(2)), int(match.group(3))
    return location_of(filename, _source_of(filename), line, column)


def op_text(op: ir.Operation, limit: int = 160) -> str:
    """The op printed on one line (for messages), shortened."""
    text = " ".join(str(op).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
