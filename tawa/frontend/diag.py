"""Error reporting for the frontend: every user mistake becomes one `CompilationError` at a node's position."""
from __future__ import annotations

import contextlib
import sys
import threading

from ..errors import CompilationError, location_of

# The lowering walks expressions recursively (about two Python frames per level of nesting). Python's default
# limit of 1000 frames would stop at ~450 terms of `x + x + ... + x`; while lowering, the limit is raised to
# `RECURSION_LIMIT` (~4,000 levels). Deeper programs get `TOO_DEEP` at the statement, never a RecursionError.
RECURSION_LIMIT = 10_000
TOO_DEEP = "expression too deeply nested"
_limit_lock = threading.Lock()
_limit_users = 0
_saved_limit = 0


@contextlib.contextmanager
def deep_recursion():
    """Raise the recursion limit to `RECURSION_LIMIT` while the body runs (shared by concurrent compiles: the
    old limit comes back when the last one ends)."""
    global _limit_users, _saved_limit
    with _limit_lock:
        if _limit_users == 0:
            _saved_limit = sys.getrecursionlimit()
            sys.setrecursionlimit(max(_saved_limit, RECURSION_LIMIT))
        _limit_users += 1
    try:
        yield
    finally:
        with _limit_lock:
            _limit_users -= 1
            if _limit_users == 0:
                sys.setrecursionlimit(_saved_limit)


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
