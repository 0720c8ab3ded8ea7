"""The on-disk kernel cache: compiled kernels by a hash of everything that determines them.

Takes kernel source text, constants, compile options, target; gives a key (`cache_key`) under which `store`
writes a `CompiledKernel` and `load` reads it back. Layout: `$TAWA_CACHE_DIR` (default `~/.cache/tawa`) /
`<key>/kernel.json` (`CompiledKernel.to_json()` without the PTX) plus `kernel.ptx` and `kernel.cubin` when the
kernel has them. Every file is written to a temporary name and renamed into place, `kernel.json` last, so a
reader sees either a complete entry or none, even with several processes compiling at once. A missing, partial
or unreadable entry reads as a miss. Needs neither MLIR nor the frontend: a cache hit launches without them.
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import tempfile
import warnings
from typing import Optional

from tawa.abi import CompiledKernel
from tawa.version import __version__

_JSON, _PTX, _CUBIN = "kernel.json", "kernel.ptx", "kernel.cubin"

#: The `tawa` package directory, found without importing the package root (the runtime sits below it).
_PACKAGE_DIR = pathlib.Path(__file__).resolve().parents[1]
#: Modules directly in the package that decide the generated code, hashed with the frontend, ir and lowering.
_TOP_LEVEL_SOURCES = ("compiler.py", "options.py", "hopper.py", "abi.py", "elements.py", "tile_plan.py")


def cache_dir() -> pathlib.Path:
    """The cache root: `$TAWA_CACHE_DIR`, else `~/.cache/tawa`."""
    env = os.environ.get("TAWA_CACHE_DIR")
    return pathlib.Path(env).expanduser() if env else pathlib.Path.home() / ".cache" / "tawa"


_VERSION = None


def _compiler_version() -> str:
    """The package version plus a hash of the compiler's own sources, so that editing the compiler never
    serves a kernel compiled by an older version of it. Computed once per process (a few milliseconds)."""
    global _VERSION
    if _VERSION is None:
        root = _PACKAGE_DIR
        digest = hashlib.sha256()
        for sub in ("frontend", "ir", "lowering"):
            for path in sorted((root / sub).rglob("*")):
                if path.suffix in (".py", ".lark"):
                    digest.update(path.relative_to(root).as_posix().encode())
                    digest.update(path.read_bytes())
        for name in _TOP_LEVEL_SOURCES:
            digest.update((root / name).read_bytes())
        _VERSION = f"{__version__}+{digest.hexdigest()[:16]}"
    return _VERSION


def cache_key(source: str, options=None, constants: Optional[dict] = None, target: Optional[str] = None,
              version: Optional[str] = None) -> str:
    """sha256 over the source text, the option fields that affect code (`CompileOptions.cache_key_fields()`, or a
    plain dict), the constants, the target and the compiler version. `constants` and `target` default to the
    options' own."""
    if options is not None and hasattr(options, "cache_key_fields"):
        fields = options.cache_key_fields()
    else:
        fields = dict(options or {})
    payload = {
        "source": source,
        "options": fields,
        "constants": constants if constants is not None else fields.get("constants", {}),
        "target": target if target is not None else fields.get("target", "cuda"),
        "version": version if version is not None else _compiler_version(),
    }
    text = json.dumps(payload, sort_keys=True, default=repr, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def entry_dir(key: str) -> pathlib.Path:
    return cache_dir() / key


def atomic_write(path: pathlib.Path, data: bytes) -> None:
    """Write to a temporary name and rename it into place: readers see all of it or none."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def store(key: str, kernel: CompiledKernel) -> Optional[pathlib.Path]:
    """Write `kernel` under `key`; returns the entry's directory, or None (with a warning) when the cache cannot
    be written: the cache only saves time, so an unwritable one must not fail a compilation."""
    try:
        return _store(key, kernel)
    except OSError as exc:
        warnings.warn(f"tawa: could not write the kernel cache at {entry_dir(key)}: {exc}", RuntimeWarning,
                      stacklevel=2)
        return None


def _store(key: str, kernel: CompiledKernel) -> pathlib.Path:
    d = entry_dir(key)
    d.mkdir(parents=True, exist_ok=True)
    meta = kernel.to_json()
    ptx = meta.pop("ptx", None)
    meta["has_ptx"] = ptx is not None
    meta["has_cubin"] = kernel.cubin is not None
    if ptx is not None:
        atomic_write(d / _PTX, ptx.encode())
    if kernel.cubin is not None:
        atomic_write(d / _CUBIN, bytes(kernel.cubin))
    atomic_write(d / _JSON, json.dumps(meta, indent=1, sort_keys=True).encode())
    return d


def load(key: str) -> Optional[CompiledKernel]:
    """The kernel stored under `key`, or None when there is no complete, readable entry."""
    d = entry_dir(key)
    try:
        meta = json.loads((d / _JSON).read_text())
        has_ptx = meta.pop("has_ptx", False)
        has_cubin = meta.pop("has_cubin", False)
        meta["ptx"] = (d / _PTX).read_text() if has_ptx else None
        cubin = (d / _CUBIN).read_bytes() if has_cubin else None
        return CompiledKernel.from_json(meta, cubin=cubin)
    except (OSError, ValueError, TypeError, KeyError):
        return None
