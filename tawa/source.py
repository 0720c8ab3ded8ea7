"""Reading a kernel: the one `read_source`, shared by `tawa.compile`, the frontend and `tawac`.

Pure Python (no MLIR, no Lark), so `tawa.compile` can use it before deciding whether a cache hit spares the
compile.
"""
from __future__ import annotations

import os

from tawa.errors import CompilationError

__all__ = ["read_source", "read_file"]

#: Suffix of a kernel file: a string ending in it (and holding no newline) names a file, never source text.
KERNEL_SUFFIX = ".tawa"


def read_file(path: str) -> str:
    """The text of `path`, read as UTF-8; any failure is a CompilationError naming the file."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise CompilationError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CompilationError(f"{path} is not UTF-8 text: byte 0x{data[e.start]:02x} at offset {e.start} "
                               f"cannot be decoded") from None


def read_source(path_or_source) -> tuple[str, str]:
    """(source text, filename) of a kernel given as a path or as source text.

    - a path (str or os.PathLike) to an existing file is read as UTF-8 (`filename` is the path);
    - a string that ends in `.tawa`, holds no newline and names no file: CompilationError "no such kernel file";
    - anything else is kernel source text (`filename` is `<string>`).
    """
    if isinstance(path_or_source, os.PathLike):
        path = os.fspath(path_or_source)
        if not os.path.isfile(path):
            raise CompilationError(f"no such kernel file: {path}")
        return read_file(path), path
    if not isinstance(path_or_source, str):
        raise CompilationError(f"expected a kernel path or source text, got {type(path_or_source).__name__}")
    text = path_or_source
    if "\n" not in text and text.strip():
        if os.path.isfile(text):
            return read_file(text), text
        if text.endswith(KERNEL_SUFFIX):
            raise CompilationError(f"no such kernel file: {text}")
    return text, "<string>"
