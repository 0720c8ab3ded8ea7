"""Helpers for the end-to-end GPU tests.

The GPU tests compile through `tawa.compile`, so on a GPU machine without MLIR they run from the kernel cache.
`TAWA_PREFILL=1 TAWA_CACHE_DIR=DIR pytest tests/e2e` on a machine that has the compiler but no GPU fills DIR
with every kernel these tests use and then skips each test (nothing is checked there); pointing TAWA_CACHE_DIR at
DIR on the GPU machine then runs them all from the cache.
"""
import json
import os
import pathlib

import pytest

import tawa

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
PREFILL = os.environ.get("TAWA_PREFILL") == "1"


def _unsupported_file() -> pathlib.Path:
    from tawa.runtime.cache import cache_dir
    return cache_dir() / "unsupported.json"


def compiled(example: str, **kwargs):
    """Compile an example for the GPU (a cache hit when prefilled); in prefill mode, skip after compiling.

    A kernel the GPU backend does not support yet is an expected failure, here and (through a list kept next to
    the prefilled cache) on the GPU machine."""
    label = f"{example} {sorted(kwargs.items())}"
    listed = json.loads(_unsupported_file().read_text()) if _unsupported_file().exists() else {}
    if label in listed and not PREFILL:
        pytest.xfail(f"not supported by the GPU backend yet: {listed[label]}")
    try:
        kernel = tawa.compile(str(EXAMPLES / example), **kwargs)
    except tawa.CompilationError as error:
        if not any(s in error.message for s in ("cannot be lowered", "does not support", "must come")):
            raise
        if PREFILL:
            listed[label] = error.message
            _unsupported_file().parent.mkdir(parents=True, exist_ok=True)
            _unsupported_file().write_text(json.dumps(listed, indent=1))
        pytest.xfail(f"not supported by the GPU backend yet: {error.message}")
    except ImportError as error:
        pytest.fail(f"{label} is not in the kernel cache and this machine cannot compile ({error}); "
                    "prefill the cache on a machine with the compiler (see this module's docstring)")
    if PREFILL:
        pytest.skip("kernel compiled into the cache; the check runs on a GPU")
    return kernel


def rel_err(out, ref) -> float:
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm()).item()


def poisoned(torch, shape, dtype):
    """An output buffer full of NaN, so an element the kernel does not write fails the check."""
    return torch.full(shape, float("nan"), device="cuda", dtype=dtype)
