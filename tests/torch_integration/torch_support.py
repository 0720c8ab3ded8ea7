"""Helpers for the torch integration tests: small kernels, unique operator names, prefill-aware compilation.

`TAWA_PREFILL=1 TAWA_CACHE_DIR=DIR pytest -m gpu tests/torch_integration` on a machine with the compiler compiles
every kernel the GPU tests use into DIR and skips them (tests/e2e/e2e_support.py explains the scheme); the GPU
machine then runs them from DIR (with TAWA_TEST_KEEP_CACHE=1) without the compiler.
"""
import itertools
import os
import pathlib

import pytest

import tawa

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
PREFILL = os.environ.get("TAWA_PREFILL") == "1"

#: Scales the rows of X in place: a kernel whose operator mutates its argument.
SCALE_INPLACE = """
@grid(cdiv(M, BLOCK_M))
def scale_rows(X: f32[M, N], alpha: f32, BLOCK_M: const = 64, BLOCK_N: const = 64):
    pid = program_id(0)
    x = load(X, (pid, 0), (BLOCK_M, BLOCK_N))
    store(X, (pid, 0), x * alpha)
"""

#: Two outputs from one input: Y = X * alpha, Z = X + alpha.
TWO_OUTPUTS = """
@grid(cdiv(M, BLOCK_M))
def two_outputs(X: f32[M, N], Y: f32[M, N], Z: f32[M, N], alpha: f32, BLOCK_M: const = 64, BLOCK_N: const = 64):
    pid = program_id(0)
    x = load(X, (pid, 0), (BLOCK_M, BLOCK_N))
    store(Y, (pid, 0), x * alpha)
    store(Z, (pid, 0), x + alpha)
"""

#: An output whose column count no input declares (P): the operator needs out_shapes.
FREE_SYMBOL = """
@grid(cdiv(M, BLOCK_M))
def broadcast_rows(X: f32[M, N], Y: f32[M, P], BLOCK_M: const = 64, BLOCK_N: const = 64):
    pid = program_id(0)
    x = load(X, (pid, 0), (BLOCK_M, BLOCK_N))
    s = sum(x, axis=1)
    store(Y, (pid, 0), zeros((BLOCK_M, BLOCK_N), f32) + s[:, None])
"""

_counter = itertools.count()


def op_name(base: str) -> str:
    """A fresh operator name: torch keeps every registration for the life of the process."""
    return f"tawa_test::{base}_{next(_counter)}"


def compile_all(specs: dict) -> dict:
    """{name: tawa.compile(source, **kwargs)} for {name: (example file or source, kwargs)}; in prefill mode,
    compile them all into the cache and skip the test."""
    kernels = {}
    for name, (source, kwargs) in specs.items():
        path = EXAMPLES / source
        try:
            kernels[name] = tawa.compile(str(path) if path.suffix == ".tawa" else source, **kwargs)
        except ImportError as error:
            pytest.fail(f"{name} is not in the kernel cache and this machine cannot compile ({error}); prefill "
                        "the cache on a machine with the compiler (see this module's docstring)")
    if PREFILL:
        pytest.skip("kernels compiled into the cache; the checks run on a GPU")
    return kernels
