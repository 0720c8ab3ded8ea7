"""Errors the interpreter raises, and the source location of an op.

Every error is a `TawaError` carrying the `.tawa` location recorded on the offending op (MLIR `loc(...)`), so a
protocol violation or a deadlock points at the user's source line.
"""
from __future__ import annotations

from typing import Optional

from mlir import ir

from tawa.errors import SourceLocation, TawaError
from tawa.ir.location import source_location


class InterpreterError(TawaError):
    """The interpreter cannot run this IR (unsupported op) or the kernel misbehaved at run time."""


class ArefProtocolError(InterpreterError):
    """An aref was used against its protocol (consumed without get, values left behind, ...)."""


class InterpreterDeadlock(InterpreterError):
    """Every unfinished warp group waits on an aref that no other group can make ready."""


def op_location(op) -> Optional[SourceLocation]:
    """The first file:line:column in the op's MLIR location, with its source line; None for an unknown location
    or the parser's "-" (the package's one location reader, `tawa.ir.location.source_location`)."""
    return source_location(op)


