"""Autotuning: pick the fastest configuration of a kernel for the shapes it is called with (docs/autotuning.md).

    import tawa
    gemm = tawa.autotune("examples/gemm.tawa")                    # the space the file declares (or the default)
    gemm = tawa.autotune("examples/gemm.tawa", configs=[{"BLOCK_N": 256}, {"BLOCK_M": 256}], key=["M", "N"],
                         DTYPE="f16")                             # or given here; keyword arguments are fixed
    gemm(a, b, c)                                                 # tunes on the first call per key, then reuses
    tawa.autotune.export_results("tuned.json")                    # results (and winning kernels) to carry over
    tawa.autotune.import_results("tuned.json")                    # ... and read in where no compiler is installed

This module is callable (`tawa.autotune(...)` builds an `Autotuner`) and holds the functions around it. The parts:
`config` (one candidate), `space` (where candidates come from, shape pruning), `launch_defaults` (what a kernel
compiled without tile constants launches per shape, untuned; also one more candidate), `compiling` (parallel compiles
through the kernel cache, pruning), `tuner` (the launchable object, choosing and timing), `results` (records on
disk, export and import), `progress` (the progress bar); timing itself is `tawa.runtime.timing`. Nothing here
imports MLIR or Lark until something must be compiled or parsed.
"""
from __future__ import annotations

import sys
import types
from typing import Optional

from .config import Config
from .errors import AutotuneError
from .results import export_results, import_results
from .tuner import Autotuner, Choice, mode

__all__ = ["autotune", "Autotuner", "Choice", "Config", "AutotuneError", "export_results", "import_results",
           "compile_space", "mode"]


def autotune(path_or_source, configs=None, key=None, **kwargs) -> Autotuner:
    """A launchable tuner for a kernel (a `.tawa` path or source text).

    - `configs`: candidate configurations, each a dict of const overrides and compile options (as
      `tawa.compile` takes them); default: the file's `@autotune(configs=...)`, else the default space.
    - `key`: the shape symbols whose values decide when to tune again; default: the file's `@autotune(key=...)`,
      else every shape symbol.
    - `target`, `timer` (a callable `timer(launch, *, stream, device, config) -> ms` with a `device_name(device)`
      method), `jobs` (compile processes), `show_progress` (None: on a terminal), `prune_spills` (True),
      `confirm_rounds` (4: rounds in which the candidates within 5% of the fastest are timed again; 0: one pass).
    - any other keyword: a compile option or constant fixed for every candidate (`DTYPE="f16"`, `HEAD_DIM=64`).
    """
    return Autotuner(path_or_source, configs, key, **kwargs)


def compile_space(path_or_source, configs=None, jobs: Optional[int] = None, target: str = "cuda",
                  show_progress: Optional[bool] = None, **fixed) -> list:
    """Compile every candidate of a kernel's space into the kernel cache (ahead of time: no GPU, no shapes, so
    no shape pruning); returns the `compiling.Outcome` of each, in order. What `tawac FILE --autotune-space` runs."""
    from tawa.options import CompileOptions
    from tawa.source import read_source

    from . import compiling, progress, space
    from .config import parse_configs

    CompileOptions.from_kwargs(dict(fixed, target=target)).validate()
    source, filename = read_source(path_or_source)
    info = space.space_info(source, filename)
    given = parse_configs(configs) if configs is not None else None
    candidates, _ = space.candidates(info, given, fixed)
    space.check_names(info, candidates)
    bar = progress.Progress(f"tawa autotune {info['name']} compile", len(candidates),
                            progress.enabled(show_progress, sys.stderr))
    outcomes = compiling.compile_all(source, filename, candidates, target, jobs, bar, space.plain_defaults(info))
    bar.close()
    return outcomes


class _CallableModule(types.ModuleType):
    """`tawa.autotune` is this module; calling it is calling `autotune` (one name for the function and the
    namespace of its helpers, `tawa.autotune.export_results` and the rest)."""

    def __call__(self, *args, **kwargs) -> Autotuner:
        return autotune(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
