"""User-facing errors: one message, the `file:line:column`, and the offending source line.

Every error the compiler or runtime raises on bad input is a `TawaError` (or a subclass). The CLI prints
`str(error)` and exits with status 1; no internal traceback reaches the user.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SourceLocation:
    filename: str
    line: int          # 1-based
    column: int        # 1-based
    source_line: str = ""

    def __str__(self) -> str:
        return f"{self.filename}:{self.line}:{self.column}"


class TawaError(Exception):
    """An error in the user's program, arguments or configuration."""

    def __init__(self, message: str, location: SourceLocation | None = None, note: str | None = None):
        super().__init__(message)
        self.message = message
        self.location = location
        self.note = note

    def __str__(self) -> str:
        text = f"{self.location}: error: {self.message}" if self.location else f"error: {self.message}"
        if self.location and self.location.source_line:
            caret = " " * (max(self.location.column, 1) - 1) + "^"
            text += f"\n    {self.location.source_line.rstrip()}\n    {caret}"
        if self.note:
            text += f"\nnote: {self.note}"
        return text


class CompilationError(TawaError):
    """The program is malformed or uses something the compiler does not support."""


class SharedMemoryError(CompilationError):
    """The laid-out kernel needs more shared memory than a block may use. `ring_depth`: the slots of its deepest
    aref ring (0 without one), which the driver may lower when it chose the depth itself."""

    def __init__(self, message: str, location=None, note: str | None = None, ring_depth: int = 0):
        super().__init__(message, location, note=note)
        self.ring_depth = ring_depth


class LaunchError(TawaError):
    """A kernel was launched with arguments that do not match its declaration."""


class TawaPerformanceWarning(UserWarning):
    """Something runs, but slower than it could (for instance a kernel variant without TMA)."""


class TmaAlignmentError(LaunchError):
    """An argument the kernel reads or writes through TMA breaks its 16-byte rules (base address or row stride).
    A kernel from `tawa.compile` or `tawa.autotune` then switches to its variant compiled with `tma=False`."""


class RequirementError(LaunchError):
    """The arguments' shapes break one of the kernel's `@requires` conditions. A variant the launch picked for the
    shapes (other tile constants) that breaks one gives way to the kernel's own configuration, which checks its
    own conditions."""


class PositiveScaleError(LaunchError):
    """A scalar argument the kernel was compiled to assume positive (`positive_scales`) is not, or lies outside
    `tawa.abi.POSITIVE_ARG_RANGE`. A kernel from `tawa.compile` or `tawa.autotune` then switches to its variant
    compiled with `positive_scales=False`."""


class InternalCompilerError(TawaError):
    """A bug in the compiler, not in the user's program: a pass met IR it should never see, or broke an
    invariant. The message names the pass and the op; the program may still be fine under other options."""

    def __init__(self, message: str, pass_name: str | None = None, op: str | None = None,
                 location: SourceLocation | None = None):
        where = "".join([f" in pass '{pass_name}'" if pass_name else "", f" on '{op}'" if op else ""])
        super().__init__(f"internal compiler error{where}: {message}", location,
                         note="this is a bug in the Tawa compiler; please report it with the kernel source. "
                              "Other options (e.g. warp_specialize=False) may avoid it meanwhile")
        self.pass_name = pass_name
        self.op = op


class DriverError(TawaError):
    """A CUDA driver call failed; the message names the call and the driver's error."""


def location_of(filename: str, source: str, line: int, column: int) -> SourceLocation:
    """Build a location, looking up the text of `line` in `source`."""
    lines = source.splitlines()
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    return SourceLocation(filename, line, column, text)
