"""Helpers for the end-to-end GPU tests.

The GPU tests compile through `tawa.compile`, so on a GPU machine without MLIR they run from the kernel cache.
`TAWA_PREFILL=1 TAWA_CACHE_DIR=DIR pytest tests/e2e` on a machine that has the compiler but no GPU fills DIR
with every kernel these tests use and then skips each test (nothing is checked there); pointing TAWA_CACHE_DIR at
DIR on the GPU machine then runs them all from the cache.
"""
import os
import pathlib

import pytest

import tawa

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
PREFILL = os.environ.get("TAWA_PREFILL") == "1"


def compiled(example: str, **kwargs):
    """Compile an example for the GPU (a cache hit when prefilled); in prefill mode, skip after compiling."""
    try:
        kernel = tawa.compile(str(EXAMPLES / example), **kwargs)
    except tawa.CompilationError as error:
        if "cannot be lowered" in str(error) or "does not support" in str(error) or "must come" in str(error):
            pytest.xfail(f"not supported by the GPU backend yet: {error.message}")
        raise
    if PREFILL:
        pytest.skip("kernel compiled into the cache; the check runs on a GPU")
    return kernel


def rel_err(out, ref) -> float:
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm()).item()


def poisoned(torch, shape, dtype):
    """An output buffer full of NaN, so an element the kernel does not write fails the check."""
    return torch.full(shape, float("nan"), device="cuda", dtype=dtype)
