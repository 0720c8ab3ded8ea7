"""Compiling a tuning run's candidates: through the kernel cache, in parallel, and pruning those not worth timing.

Every candidate goes through the disk cache exactly as `tawa.compile` does (same key, same entries), so a candidate
compiled once, by a tuning run, by `tawac --autotune-space` or by `tawa.compile`, is never compiled again, and a
machine without the compiler tunes from a prefilled cache. Cache misses compile in a process pool
(`concurrent.futures.ProcessPoolExecutor`, one worker per core): a compile is a few hundred milliseconds of
single-threaded Python and MLIR, so a space of ten candidates costs about one compile of wall time.

Workers are started with `spawn` (a fresh interpreter: no inherited CUDA context or threads, which `fork` would
copy in a half-usable state), and with the parent's `__main__` hidden while they start: otherwise each worker
would first re-run the user's script, which usually allocates GPU tensors and calls the tuner again.

A candidate is dropped before timing (`prune`) when it does not compile (shared memory over the limit, a tile
the hardware cannot do, an invalid combination of options: the reason is the compiler's message), or when ptxas
reports register spills while another candidate has none (a spilling kernel is never the fastest worth having).
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import importlib.util
import multiprocessing
import os
import sys
import time
import types
from dataclasses import dataclass
from typing import Optional

from tawa.abi import CompiledKernel
from tawa.errors import TawaError

from .config import Config
from .errors import AutotuneError

#: Why a candidate cannot be had on a machine without the compiler when the cache does not hold it.
NO_COMPILER = "not in the kernel cache, and this machine has no compiler (MLIR and Lark are not installed)"


@dataclass
class Outcome:
    """One candidate after compilation: the kernel, or why it has none."""
    config: Config
    kernel: Optional[CompiledKernel] = None
    error: Optional[str] = None
    cache_key: Optional[str] = None
    from_cache: bool = False
    pruned: Optional[str] = None            # why it is not timed (set by `prune` or the tuner)
    ms: Optional[float] = None              # its time, once measured


def compiler_available() -> bool:
    """Whether this machine can compile (MLIR's Python bindings and Lark are installed)."""
    return all(importlib.util.find_spec(m) is not None for m in ("mlir", "lark"))


def _lookup(source: str, config: Config, target: str) -> tuple:
    """(cache key, cached kernel or None) of one candidate; the key is None for targets the cache does not keep."""
    from tawa.runtime import cache
    options = config.options(target).validate()
    if target != "cuda":
        return None, None
    key = cache.cache_key(source, options)
    return key, cache.load(key)


def compile_one(source: str, filename: str, config: Config, target: str = "cuda",
                defaults: Optional[dict] = None) -> Outcome:
    """Compile one candidate in this process, through the disk cache. `defaults` (the kernel's constants) lets a
    candidate that restates them share the cache entry of `tawa.compile` (`Config.without_defaults`)."""
    config, given = config.without_defaults(defaults), config
    try:
        key, hit = _lookup(source, config, target)
        if hit is not None:
            return Outcome(given, hit, cache_key=key, from_cache=True)
        if not compiler_available():
            return Outcome(given, error=NO_COMPILER, cache_key=key)
        kernel, error = _compile(source, filename, config.as_dict(), target)
        return Outcome(given, kernel, error, cache_key=key)
    except TawaError as e:
        return Outcome(given, error=str(e))


def _compile(source: str, filename: str, values: dict, target: str) -> tuple:
    """(CompiledKernel, None) or (None, the error as the user would see it); stores the kernel in the cache.
    Runs in the pool's workers, so it takes and returns plain picklable values."""
    from tawa.compiler import compile_source
    from tawa.runtime import cache
    try:
        options = Config(values).options(target).validate()
        t0 = time.perf_counter()
        kernel = compile_source(source, filename, options)
        kernel.compile_seconds = time.perf_counter() - t0
        if target == "cuda":
            cache.store(cache.cache_key(source, options), kernel)
        return kernel, None
    except TawaError as e:
        return None, str(e)
    except Exception as e:      # a compiler bug in one candidate must not end the tuning run; it says what it was
        return None, f"internal error: {type(e).__name__}: {e}"


def default_jobs() -> int:
    """Worker processes: `TAWA_AUTOTUNE_JOBS`, else one per core this process may run on."""
    env = os.environ.get("TAWA_AUTOTUNE_JOBS", "").strip()
    if env:
        if not env.isdigit() or int(env) < 1:
            raise AutotuneError(f"TAWA_AUTOTUNE_JOBS={env!r}: expected a positive number of compile processes")
        return int(env)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@contextlib.contextmanager
def _main_hidden():
    """Hide `__main__` while spawn workers start (see the module docstring): with no `__file__` and no
    `__spec__`, multiprocessing gives the worker nothing of the user's script to re-run."""
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main


def compile_all(source: str, filename: str, configs: list, target: str = "cuda", jobs: Optional[int] = None,
                progress=None, defaults: Optional[dict] = None) -> list:
    """Outcomes of every candidate, in the order of `configs`: cache hits first, misses in a process pool
    (`jobs` workers; in this process when there is only one miss or one job). `defaults` as for `compile_one`."""
    outcomes: list = [None] * len(configs)
    misses = []
    can_compile = compiler_available()
    for i, config in enumerate(configs):
        try:
            key, hit = _lookup(source, config.without_defaults(defaults), target)
        except TawaError as e:
            outcomes[i] = Outcome(config, error=str(e))
            continue
        if hit is not None:
            outcomes[i] = Outcome(config, hit, cache_key=key, from_cache=True)
        elif not can_compile:
            outcomes[i] = Outcome(config, error=NO_COMPILER, cache_key=key)
        else:
            misses.append((i, key))
    if progress is not None:
        progress.advance(len(configs) - len(misses))
    jobs = min(jobs or default_jobs(), len(misses))
    if jobs <= 1:
        for i, key in misses:
            kernel, error = _compile(source, filename, configs[i].without_defaults(defaults).as_dict(), target)
            outcomes[i] = Outcome(configs[i], kernel, error, cache_key=key)
            if progress is not None:
                progress.advance()
        return outcomes
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        with _main_hidden():
            futures = {pool.submit(_compile, source, filename, configs[i].without_defaults(defaults).as_dict(),
                                   target): (i, key) for i, key in misses}
        for future in concurrent.futures.as_completed(futures):
            i, key = futures[future]
            try:
                kernel, error = future.result()
            except Exception as e:  # a worker that died (out of memory, killed): that candidate only
                kernel, error = None, f"the compile worker failed: {type(e).__name__}: {e}"
            outcomes[i] = Outcome(configs[i], kernel, error, cache_key=key)
            if progress is not None:
                progress.advance()
    return outcomes


def prune(outcomes: list, spills: bool = True) -> list:
    """Mark the outcomes not worth timing (`Outcome.pruned`): compile errors, and spills while some candidate
    has none. Returns the outcomes left to time."""
    for o in outcomes:
        if o.kernel is None and o.pruned is None:
            o.pruned = f"does not compile: {o.error}"
    alive = [o for o in outcomes if o.pruned is None]
    if spills:
        clean = [o for o in alive if not o.kernel.spill_bytes]
        if clean:
            for o in alive:
                n = o.kernel.spill_bytes
                if n:
                    o.pruned = f"ptxas spills {n} bytes of registers"
            alive = clean
    return alive
