"""Tawa: a tile-based kernel language for NVIDIA Hopper GPUs with an automatic warp-specializing compiler.

    import tawa
    gemm = tawa.compile("examples/gemm.tawa", BLOCK_N=256)   # JIT, cached on disk
    gemm(a, b, c)                                             # grid from the kernel's @grid declaration
    gemm[(8, 8)](a, b, c)                                     # or an explicit grid
    gemm = tawa.autotune("examples/gemm.tawa")                # the fastest configuration per shape

This module imports neither MLIR nor Lark: a kernel found in the cache loads and launches without them.
"""
from __future__ import annotations

import time

from tawa.errors import (CompilationError, DriverError, LaunchError, RequirementError, TawaError,  # noqa: F401
                         TawaPerformanceWarning, TmaAlignmentError)
from tawa.options import CompileOptions
from tawa.version import __version__  # noqa: F401
from tawa.source import read_source  # noqa: F401  (re-exported: `tawa.read_source`)

__all__ = ["compile", "interpret", "CompileOptions", "TawaError", "CompilationError", "LaunchError",
           "DriverError", "Kernel", "autotune"]


#: Keyword arguments of `compile` that fix what the per-shape defaults would choose: given any, they are kept.
SHAPE_CHOICES = {"BLOCK_M", "BLOCK_N", "split_k"}


def compile(path_or_source: str, *, target: str = "cuda", cache: bool = True, **kwargs):
    """Compile a kernel (a `.tawa` path or source text) and return a launchable `Kernel`.

    Keyword arguments are compile options (`warp_specialize`, `num_consumer_groups`, `num_buffers` /
    `num_buffers_warp_spec`, `num_stages`, `num_warps`, `producer_registers`, `consumer_registers`) or
    overrides of the kernel's `const` parameters (any other name). Options are checked first, before the source
    is read or parsed: a bad value raises CompilationError naming the option.

    A GEMM-family kernel (a dot, a grid tiled by BLOCK_M and BLOCK_N) compiled without BLOCK_M, BLOCK_N or split_k
    launches, per call, the variant its shape calls for (`tawa.autotune.launch_defaults`, docs/autotuning.md):
    64-row tiles and split-K for M <= 64; another tile, split-K or stream-K where that fills the SMs' waves better;
    clusters that share an operand whose rows are off the 32-byte sector grid. An attention-family kernel (two dots, a grid tiled
    by BLOCK_M along the sequence) at head dims up to 64 takes 192-row query blocks on long sequences. Options
    given here are never overridden. Variants
    are compiled on a call's first need; `kernel.variant_for(*args)` says which kernel a call runs.
    """
    from tawa.runtime.kernel import Kernel, ShapeVariants

    options = CompileOptions.from_kwargs(dict(kwargs, target=target)).validate()
    source, filename = read_source(path_or_source)
    # With tma left automatic, arguments that break TMA's alignment rules get the variant compiled without it.
    without_tma = None
    if target == "cuda" and options.tma is None:
        # (the copies by threads run on the uniform-warp path: no warp-specialized schedule, clusters or dynamic
        # tiles; a kernel compiled with schedule="persistent" once failed here on an unaligned view)
        plain = {k: v for k, v in kwargs.items() if k not in ("cluster", "dynamic_tiles", "schedule")}
        without_tma = lambda: compile(path_or_source, target=target, cache=cache,  # noqa: E731
                                      **dict(plain, tma=False))
    # With positive_scales left automatic, a scalar the code assumes positive that is not gets the variant without
    # the assumption.
    general = None
    if target == "cuda" and options.positive_scales is None:
        general = lambda: compile(path_or_source, target=target, cache=cache,  # noqa: E731
                                  **dict(kwargs, positive_scales=False))
    # Without tile constants, a GEMM-family kernel launches the tile (and split-K) that suits small-M shapes.
    shapes = None
    if target == "cuda" and not SHAPE_CHOICES & set(kwargs):
        from tawa.autotune.space import space_info
        # (Small-M variants run without clusters: the pairs would share no tiles worth the pairing, and split-K
        # cannot pair programs.)
        alone = {k: v for k, v in kwargs.items() if k != "cluster"}
        shapes = ShapeVariants(lambda: space_info(source, filename),
                               lambda config: compile(path_or_source, target=target, cache=cache, **alone, **config),
                               fixed=kwargs)
    key = None
    if cache and target == "cuda":
        from tawa.runtime import cache as disk_cache
        key = disk_cache.cache_key(source, options)
        hit = disk_cache.load(key)
        if hit is not None:
            return Kernel(hit, from_cache=True, without_tma=without_tma, shape_variants=shapes, general=general)
    from tawa.compiler import compile_source
    t0 = time.perf_counter()
    compiled = compile_source(source, filename, options)
    compiled.compile_seconds = time.perf_counter() - t0
    if key is not None:
        disk_cache.store(key, compiled)
    return Kernel(compiled, without_tma=without_tma, shape_variants=shapes, general=general)


def interpret(path_or_source: str, **kwargs):
    """Compile for the CPU interpreter: the returned kernel runs the tile IR on numpy arrays."""
    return compile(path_or_source, target="cpu", **kwargs)


def __getattr__(name):
    if name == "Kernel":
        from tawa.runtime.kernel import Kernel
        return Kernel
    if name == "autotune":
        # `tawa.autotune(path, configs=..., key=...)`: the module is callable (docs/autotuning.md); imported on
        # first use, like the runtime.
        import importlib
        return importlib.import_module("tawa.autotune")
    raise AttributeError(name)
