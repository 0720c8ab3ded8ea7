"""Tawa: a tile-based kernel language for NVIDIA Hopper GPUs with an automatic warp-specializing compiler.

    import tawa
    gemm = tawa.compile("examples/gemm.tawa", BLOCK_N=256)   # JIT, cached on disk
    gemm(a, b, c)                                             # grid from the kernel's @grid declaration
    gemm[(8, 8)](a, b, c)                                     # or an explicit grid

This module imports neither MLIR nor Lark: a kernel found in the cache loads and launches without them.
"""
from __future__ import annotations

__version__ = "0.1.0"

import os
import time

from tawa.errors import CompilationError, DriverError, LaunchError, TawaError  # noqa: F401
from tawa.options import CompileOptions

__all__ = ["compile", "interpret", "CompileOptions", "TawaError", "CompilationError", "LaunchError",
           "DriverError", "Kernel"]


def read_source(path_or_source: str) -> tuple[str, str]:
    """(source text, filename): a path to an existing file is read, anything else is kernel source."""
    text = str(path_or_source)
    if "\n" not in text and (text.endswith(".tawa") or os.path.isfile(text)):
        if not os.path.isfile(text):
            raise CompilationError(f"no such kernel file: {text}")
        with open(text, encoding="utf-8") as f:
            return f.read(), text
    return text, "<string>"


def compile(path_or_source: str, *, target: str = "cuda", cache: bool = True, **kwargs):
    """Compile a kernel (a `.tawa` path or source text) and return a launchable `Kernel`.

    Keyword arguments are compile options (`warp_specialize`, `num_consumer_groups`, `num_buffers` /
    `num_buffers_warp_spec`, `num_stages`, `num_warps`, `producer_registers`, `consumer_registers`) or
    overrides of the kernel's `const` parameters (any other name).
    """
    from tawa.runtime.kernel import Kernel

    source, filename = read_source(path_or_source)
    options = CompileOptions.from_kwargs(dict(kwargs, target=target))
    key = None
    if cache and target == "cuda":
        from tawa.runtime import cache as disk_cache
        key = disk_cache.cache_key(source, options)
        hit = disk_cache.load(key)
        if hit is not None:
            return Kernel(hit, from_cache=True)
    from tawa.compiler import compile_source
    t0 = time.perf_counter()
    compiled = compile_source(source, filename, options)
    compiled.compile_seconds = time.perf_counter() - t0
    if key is not None:
        disk_cache.store(key, compiled)
    return Kernel(compiled)


def interpret(path_or_source: str, **kwargs):
    """Compile for the CPU interpreter: the returned kernel runs the tile IR on numpy arrays."""
    return compile(path_or_source, target="cpu", **kwargs)


def __getattr__(name):
    if name == "Kernel":
        from tawa.runtime.kernel import Kernel
        return Kernel
    raise AttributeError(name)
