"""Error reporting for the frontend: every user mistake becomes one `CompilationError` at a node's position."""
from __future__ import annotations

from ..errors import CompilationError, location_of


class Diagnostics:
    def __init__(self, filename: str, source: str):
        self.filename = filename
        self.source = source

    def error(self, node, message: str, note: str | None = None) -> CompilationError:
        """Build the error for `node` (anything with `line` and `column`, or a `(line, column)` pair)."""
        if isinstance(node, tuple):
            line, column = node
        elif node is None:
            line, column = 0, 0
        else:
            line, column = node.line, node.column
        loc = location_of(self.filename, self.source, line, column) if line else None
        return CompilationError(message, loc, note)
