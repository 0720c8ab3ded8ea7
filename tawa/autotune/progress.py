"""A progress bar for tuning runs, on stderr, with no dependency.

Why: compiling and timing a space takes seconds to a minute, and a silent first call looks like a hang. On a
terminal the bar is redrawn in place (`\\r`); elsewhere (a log file, CI) the default is to print nothing, since a
redrawn bar is noise in a log, unless asked for (`progress=True` or `TAWA_AUTOTUNE_PROGRESS=1`), which prints
each phase's start and end on lines of their own.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Optional, TextIO

#: Characters of the bar itself.
WIDTH = 24


def enabled(requested: Optional[bool], stream: TextIO) -> bool:
    """Whether to show progress: as requested, else `TAWA_AUTOTUNE_PROGRESS` (0/1), else when `stream` is a
    terminal."""
    if requested is not None:
        return bool(requested)
    env = os.environ.get("TAWA_AUTOTUNE_PROGRESS")
    if env in ("0", "1"):
        return env == "1"
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """One phase of a tuning run: `advance()` per finished item, `close(summary)` at the end."""

    def __init__(self, title: str, total: int, show: bool, stream: Optional[TextIO] = None):
        self.title = title
        self.total = max(total, 0)
        self.done = 0
        self.show = show
        self.stream = stream if stream is not None else sys.stderr
        self.t0 = time.perf_counter()
        try:
            self.inline = show and self.stream.isatty()
        except (AttributeError, ValueError):
            self.inline = False
        if self.show and not self.inline:
            self._write(f"{self.title}: {self.total} ...\n")
        self._draw()

    def advance(self, n: int = 1) -> None:
        self.done = min(self.total, self.done + n)
        self._draw()

    def _draw(self) -> None:
        if not self.inline:
            return
        filled = WIDTH * self.done // self.total if self.total else WIDTH
        bar = "#" * filled + "." * (WIDTH - filled)
        self._write(f"\r{self.title} [{bar}] {self.done}/{self.total} {time.perf_counter() - self.t0:.1f}s")

    def close(self, summary: str = "") -> None:
        if not self.show:
            return
        tail = f" {summary}" if summary else ""
        elapsed = f"{time.perf_counter() - self.t0:.1f}s"
        if self.inline:
            self._draw()
            self._write(f"{tail}\n")
        else:
            self._write(f"{self.title}: {self.done}/{self.total} in {elapsed}{tail}\n")

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):     # a closed or broken stderr must not fail the tuning run
            self.show = self.inline = False
