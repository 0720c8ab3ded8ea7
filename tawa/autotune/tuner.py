"""The launchable object `tawa.autotune(...)` returns: picks a configuration per key, then launches it.

    gemm = tawa.autotune("examples/gemm.tawa")
    gemm(a, b, c)          # first call for these M, N, K: compile the space, time it, keep the fastest

On a call, the values of the key's shape symbols (read from the arguments' shapes) select the configuration:
1. one already chosen in this process for that key: launch it (a dictionary lookup; the launch is the kernel's
   own fast path);
2. else a result stored on disk for (this tuning run, this device, these values): compile it (a cache hit) and
   launch it, with no timing;
3. else tune: prune the candidates by shape, compile them all (in parallel, through the kernel cache), drop those
   that fail or spill, time the rest on the call's own arguments (CUDA events, L2 flushed), time the close calls
   (within 5% of the fastest, up to 4) again in alternating rounds and compare medians, store the fastest,
   launch it.
`TAWA_AUTOTUNE=0` skips 2 and 3: the first candidate that fits the shape and compiles runs (for a declared or
default space, the best general guess); `TAWA_AUTOTUNE=force` skips 2 and tunes again.

Tuning launches each candidate many times on the arguments of the call that triggered it, so outputs are
overwritten; the call then launches the winner once more, so its outputs are the winner's. A kernel that reads
what it writes (accumulates into an output) needs fresh inputs after a tuning call.
"""
from __future__ import annotations

import os
import statistics
import sys
import threading
from dataclasses import dataclass, field
from typing import Callable, Optional

from tawa import hopper
from tawa.errors import CompilationError, LaunchError, TawaError
from tawa.options import CompileOptions, cluster_name
from tawa.source import read_source
from tawa.runtime.kernel import check_launch_keywords

from . import compiling, launch_defaults, progress, results, space
from .config import Config, parse_configs
from .errors import AutotuneError

#: Candidates whose first time is within this fraction of the fastest are timed again (at most `FINALISTS` of them):
#: one timing of a GPU kernel moves by a few percent with clocks and power, as much as the differences tuning
#: must resolve, so a single pass picks among near-equals by chance.
CLOSE_CALL = 0.05
FINALISTS = 4
#: The runner-up is timed again with the fastest even when it was more than CLOSE_CALL slower: a candidate timed
#: first, on a GPU still below its power cap, can read 10% faster than it runs sustained, and would otherwise win
#: on that one timing.
MIN_FINALISTS = 2

#: `TAWA_AUTOTUNE` values: tune where needed (default), never tune, always tune again.
MODES = {"1": "on", "": "on", "0": "off", "force": "force"}


def mode() -> str:
    """The `TAWA_AUTOTUNE` switch: "on", "off" or "force"."""
    value = os.environ.get("TAWA_AUTOTUNE", "").strip().lower()
    if value not in MODES:
        raise AutotuneError(f"TAWA_AUTOTUNE={value!r}: expected 1 (tune where no result is stored; the default), "
                            f"0 (never tune: run the first candidate that fits) or force (tune again)")
    return MODES[value]


@dataclass
class Choice:
    """The configuration chosen for one key, and how."""
    config: dict
    kernel: object                   # tawa.Kernel
    how: str                         # "tuned", "stored" or "default" (tuning off)
    ms: Optional[float] = None       # its measured time (None when nothing was timed)
    timings: list = field(default_factory=list)     # per candidate: {"config", "ms"} or {"config", "pruned"}

    def report(self) -> str:
        """A table of the candidates of this key: time or why pruned, the winner marked."""
        lines = []
        for t in self.timings:
            label = Config(t["config"]).label()
            mark = "*" if t["config"] == self.config else " "
            what = f"{t['ms']:.4f} ms" if t.get("ms") is not None else f"pruned: {t.get('pruned')}"
            lines.append(f"{mark} {label}: {what}")
        return "\n".join(lines)


class Autotuner:
    """See the module docstring; built by `tawa.autotune(path_or_source, configs=None, key=None, **fixed)`."""

    def __init__(self, path_or_source, configs=None, key=None, *, target: str = "cuda",
                 timer: Optional[Callable] = None, jobs: Optional[int] = None, show_progress: Optional[bool] = None,
                 prune_spills: bool = True, confirm_rounds: int = 4, **fixed):
        options = CompileOptions.from_kwargs(dict(fixed, target=target)).validate()
        bad = [k for k in fixed if k in ("dump_ir_after_all", "verify_each")]
        if bad:
            raise AutotuneError(f"'{bad[0]}' is a debugging switch of tawa.compile, not a tuning argument")
        self.target = options.target
        self.fixed = dict(fixed)
        self._own_outcome = None            # the fixed configuration alone, compiled on first need (`_own`)
        self.source, self.filename = read_source(path_or_source)
        self.info = space.space_info(self.source, self.filename)
        given = parse_configs(configs) if configs is not None else None
        self.configs, self.origin = space.candidates(self.info, given, self.fixed)
        space.check_names(self.info, self.configs)
        self.key = space.resolve_key(self.info, key)
        self.identity = results.identity(self.source, self.target, self.configs, self.key)
        if timer is None:
            from tawa.runtime.timing import CudaEventTimer, WallClockTimer
            timer = CudaEventTimer() if self.target == "cuda" else WallClockTimer()
        self.timer = timer
        self.jobs = jobs
        self.show_progress = show_progress
        self.prune_spills = prune_spills
        if isinstance(confirm_rounds, bool) or not isinstance(confirm_rounds, int) or confirm_rounds < 0:
            raise AutotuneError(f"confirm_rounds={confirm_rounds!r}: expected a whole number >= 0")
        self.confirm_rounds = confirm_rounds
        self.choices: dict = {}            # key values (tuple) -> Choice, for this process
        self._lock = threading.Lock()      # one tuning run at a time: a second caller waits and reuses it
        positions = space.symbol_positions(self.info)
        self._where = [positions[s] for s in self.key]
        self._nparams = len(self.info["params"])
        self._defaults = space.plain_defaults(self.info)

    # -- introspection -------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.info["name"]

    def __repr__(self) -> str:
        return (f"<tawa.autotune {self.name}: {len(self.configs)} {self.origin} candidates, key "
                f"({', '.join(self.key)})>")

    def key_of(self, args) -> tuple:
        """The key values of a call: the extent of each key symbol, read from the argument that declares it."""
        if len(args) != self._nparams:
            names = ", ".join(self.info["params"])
            raise LaunchError(f"kernel '{self.name}' takes {self._nparams} arguments ({names}), got {len(args)}")
        return tuple(_extent(args[i], axis, self.info["params"][i]) for i, axis in self._where)

    # -- launching -----------------------------------------------------------------------------------------
    def __call__(self, /, *args, **kw):
        check_launch_keywords(self.name, kw, self.target)
        key = self.key_of(args)
        choice = self.choices.get(key)
        if choice is None:
            choice = self._choose(args, key, None, kw.get("stream"))
        return choice.kernel(*args, **kw)

    def __getitem__(self, grid):
        """`tuner[grid](*args)`: an explicit grid, a tuple or a function of the chosen configuration's constants
        (`lambda c: (cdiv(M, c["BLOCK_M"]), ...)`), since candidates may tile differently."""
        def launch(*args, **kw):
            check_launch_keywords(self.name, kw, self.target)
            key = self.key_of(args)
            choice = self.choices.get(key)
            if choice is None:
                choice = self._choose(args, key, grid, kw.get("stream"))
            return choice.kernel[_grid_for(grid, choice.kernel)](*args, **kw)
        return launch

    def tune(self, *args, stream=None, grid=None) -> Choice:
        """Choose the configuration for these arguments (from memory, the disk, or by tuning) without the final
        launch; returns the Choice."""
        key = self.key_of(args)
        choice = self.choices.get(key)
        return choice if choice is not None else self._choose(args, key, grid, stream)

    def kernel_for(self, *args):
        """The `tawa.Kernel` chosen for these arguments."""
        return self.tune(*args).kernel

    def best_config(self, *args) -> dict:
        """The configuration chosen for these arguments (a dict of constants and options)."""
        return dict(self.tune(*args).config)

    def _kernel(self, outcome, config: dict):
        """The launchable kernel of a compiled candidate, with the variants `tawa.compile`'s kernels launch by
        themselves: with `tma` left automatic, the candidate compiled with tma=False for arguments that break TMA's
        16-byte rules; with `positive_scales` left automatic, the candidate compiled with positive_scales=False for
        a scale the code assumes positive that is not. Each variant has the other's fallback in turn."""
        from tawa.runtime.kernel import Kernel

        def launchable(kernel, from_cache: bool, config: dict):
            def without_tma():
                # (the schedules and clusters that need TMA's rings are left to the compiler's choice without TMA)
                plain = {k: v for k, v in config.items() if k not in ("schedule", "cluster")}
                return compiled(dict(plain, tma=False))

            def general():
                return compiled(dict(config, positive_scales=False))
            cuda = self.target == "cuda"
            return Kernel(kernel, from_cache, without_tma=without_tma if cuda and config.get("tma") is None else None,
                          general=general if cuda and config.get("positive_scales") is None else None)

        def compiled(config: dict):
            variant = compiling.compile_one(self.source, self.filename, Config(config), self.target, self._defaults)
            if variant.kernel is None:
                raise CompilationError(str(variant.error))
            return launchable(variant.kernel, variant.from_cache, config)
        return launchable(outcome.kernel, outcome.from_cache, dict(config))

    # -- choosing ------------------------------------------------------------------------------------------
    def _choose(self, args, key: tuple, grid, stream) -> Choice:
        with self._lock:
            choice = self.choices.get(key)
            return choice if choice is not None else self._choose_locked(args, key, grid, stream)

    def _choose_locked(self, args, key: tuple, grid, stream) -> Choice:
        extents = dict(zip(self.key, key))
        how = mode()
        candidates, shape_pruned = space.prune_by_shape(self.info, self.configs, extents)
        if how == "off":
            choice = self._first_that_compiles(candidates, shape_pruned)
            self.choices[key] = choice
            return choice
        device_ordinal = _device_of(args)
        device = self.timer.device_name(device_ordinal)
        launched = None
        if self.origin != "python" and (grid is None or callable(grid)):
            # (not with candidates given from Python, which are the user's list; nor with a grid given as numbers,
            # sized for the tiles of those candidates)
            launched = self._launch_default(args, extents, device_ordinal)
            if launched is not None and any(_normal(c) == _normal(launched) for c in candidates):
                launched = None
        if launched is not None:
            candidates = candidates + [launched]
        if how == "on":
            record = results.load(self.identity, device, extents)
            stored = Config(record["config"]) if record is not None else None
            if stored is not None and (stored in self.configs or stored == launched):
                outcome = compiling.compile_one(self.source, self.filename, Config(record["config"]), self.target,
                                                self._defaults)
                if outcome.kernel is not None:
                    choice = Choice(record["config"], self._kernel(outcome, record["config"]), "stored",
                                    record.get("ms"), record.get("timings", []))
                    self.choices[key] = choice
                    return choice
        choice = self._tune(args, extents, candidates, shape_pruned, device, device_ordinal, grid, stream)
        self.choices[key] = choice
        return choice

    def _launch_default(self, args, extents: dict, ordinal):
        """The configuration the kernel compiled without tile constants launches for these arguments
        (`launch_defaults.shape_defaults`: a tile, schedule or clusters chosen by the shape), as one more candidate,
        so that tuning never picks slower than not tuning; None where that is the kernel's own defaults."""
        if self.target != "cuda" or not launch_defaults.has_shape_defaults(self.info):
            return None
        sms = hopper.TYPICAL_SMS
        try:
            from tawa.runtime import driver
            sms = driver.sm_count(ordinal if ordinal is not None else driver.default_device())
        except Exception:                   # noqa: BLE001 -- no driver here: the typical Hopper count
            pass
        misaligned = launch_defaults.misaligned_operands(launch_defaults.watched_operands(self.info), args)
        config = launch_defaults.shape_defaults(self.info, extents, sms, misaligned, self.fixed, self._own())
        return Config(config).merged(self.fixed) if config else None

    def _own(self):
        """The kernel `tawa.compile` gives for the fixed constants and options alone (its configuration and loop
        traits, which the attention launch rule reads), compiled once (a kernel-cache hit where it is there); None
        where it does not compile here, or the kernel is not of the attention family (no other rule reads it)."""
        if not launch_defaults.is_attention_family(self.info):
            return None
        if self._own_outcome is None:
            self._own_outcome = compiling.compile_one(self.source, self.filename, Config(dict(self.fixed)),
                                                      self.target, self._defaults)
        return self._own_outcome.kernel

    def _first_that_compiles(self, candidates: list, shape_pruned: list) -> Choice:
        errors, spilling = [], None
        for config in candidates:
            outcome = compiling.compile_one(self.source, self.filename, config, self.target, self._defaults)
            if outcome.kernel is None:
                errors.append((config, f"does not compile: {outcome.error}"))
            elif self.prune_spills and outcome.kernel.spill_bytes:
                spilling = spilling or outcome          # used only if every candidate that compiles spills
            else:
                return Choice(config.as_dict(), self._kernel(outcome, config.as_dict()), "default")
        if spilling is not None:
            return Choice(spilling.config.as_dict(), self._kernel(spilling, spilling.config.as_dict()), "default")
        raise self._none_left(errors + shape_pruned)

    def _tune(self, args, extents, candidates, shape_pruned, device, ordinal, grid, stream) -> Choice:
        show = progress.enabled(self.show_progress, sys.stderr)
        title = f"tawa autotune {self.name} ({', '.join(f'{k}={v}' for k, v in extents.items())})"
        bar = progress.Progress(f"{title} compile", len(candidates), show)
        outcomes = compiling.compile_all(self.source, self.filename, candidates, self.target, self.jobs, bar,
                                         self._defaults)
        alive = compiling.prune(outcomes, spills=self.prune_spills)
        bar.close(f"{len(alive)} of {len(candidates)} to time")
        if not alive:
            raise self._none_left([(o.config, o.pruned) for o in outcomes] + shape_pruned)
        stream_value = _stream_of(args, stream) if self.target == "cuda" else 0
        kernels = {id(o): self._kernel(o, o.config.as_dict()) for o in alive}
        if len(alive) > 1:
            launches = {id(o): _launcher(kernels[id(o)], args, grid, stream_value if self.target == "cuda" else None)
                        for o in alive}
            bar = progress.Progress(f"{title} time", len(alive), show)
            best = self._fastest(alive, launches, stream_value, ordinal, bar)
            if best is None:
                raise self._none_left([(o.config, o.pruned) for o in outcomes] + shape_pruned)
        else:
            best = alive[0]                     # nothing to compare it with: no timing
        timings = [{"config": o.config.as_dict(), "ms": o.ms} if o.pruned is None else
                   {"config": o.config.as_dict(), "pruned": o.pruned} for o in outcomes]
        timings += [{"config": c.as_dict(), "pruned": why} for c, why in shape_pruned]
        results.store(results.new_record(self.identity, self.name, device, extents, best.config.as_dict(), best.ms,
                                         best.cache_key, self.info.get("space_key"), timings))
        return Choice(best.config.as_dict(), kernels[id(best)], "tuned", best.ms, timings)

    def _fastest(self, alive: list, launches: dict, stream: int, ordinal, bar):
        """Time every candidate once, then the close calls (`_finalists`) in `confirm_rounds` more rounds; each
        outcome's `ms` is the median of its timings. The fastest outcome, or None when none could run."""
        samples: dict = {}                  # id(outcome) -> its measured times

        def measure(o) -> None:
            try:
                ms = float(self.timer(launches[id(o)], stream=stream, device=ordinal, config=o.config.as_dict()))
            except TawaError as e:          # a launch the driver refuses (resources), a bad grid, ...
                o.pruned = f"does not run: {e.message}"
                return
            samples.setdefault(id(o), []).append(ms)
            o.ms = statistics.median(samples[id(o)])

        for o in alive:
            measure(o)
            bar.advance()
        timed = [o for o in alive if o.pruned is None]
        if not timed:
            return None
        finalists = _finalists(timed)
        for r in range(self.confirm_rounds if len(finalists) > 1 else 0):
            shift = r % len(finalists)      # a different candidate first each round: drift in clocks spreads evenly
            for o in finalists[shift:] + finalists[:shift]:
                if o.pruned is None:
                    measure(o)
        best = min((o for o in timed if o.pruned is None), key=lambda o: o.ms)
        rounds = f" (median of {len(samples[id(best)])})" if len(samples[id(best)]) > 1 else ""
        bar.close(f"best {best.config.label()}: {best.ms:.4f} ms{rounds}")
        return best

    def _none_left(self, reasons: list) -> AutotuneError:
        shown = "\n".join(f"  {c.label()}: {(why or '').splitlines()[0] if why else '?'}" for c, why in reasons[:12])
        more = f"\n  ... and {len(reasons) - 12} more" if len(reasons) > 12 else ""
        return AutotuneError(f"kernel '{self.name}': no candidate configuration can run:\n{shown}{more}")


def _finalists(timed: list) -> list:
    """The candidates worth timing again: those within CLOSE_CALL of the fastest, fastest first, at most
    FINALISTS of them and at least MIN_FINALISTS (the fastest ones)."""
    ranked = sorted(timed, key=lambda o: o.ms)
    close = [o for o in ranked if o.ms <= ranked[0].ms * (1 + CLOSE_CALL)]
    return ranked[:max(min(len(close), FINALISTS), MIN_FINALISTS)]


# ---- reading arguments ---------------------------------------------------------------------------------------
def _extent(obj, axis: int, name: str) -> int:
    shape = getattr(obj, "shape", None)
    if shape is None:
        cai = getattr(obj, "__cuda_array_interface__", None)
        shape = cai.get("shape") if isinstance(cai, dict) else None
    if shape is None:
        raise LaunchError(f"argument '{name}' must be an array, got {type(obj).__name__}")
    if axis >= len(shape):
        raise LaunchError(f"argument '{name}' has {len(shape)} dimensions {list(shape)}, expected more than {axis}")
    return int(shape[axis])


def _normal(config) -> dict:
    """A configuration as the kernel it compiles to: clusters by name, a 1x1 cluster the same as none."""
    out = dict(config.as_dict() if hasattr(config, "as_dict") else config)
    if "cluster" in out:
        name = cluster_name(out["cluster"])
        if name in (None, "1x1"):
            del out["cluster"]
        else:
            out["cluster"] = name
    return out


def _device_of(args) -> Optional[int]:
    """The CUDA device of the first torch tensor on a GPU among `args`, else None (the driver's default)."""
    for a in args:
        device = getattr(a, "device", None)
        if getattr(device, "type", None) == "cuda":
            return device.index if device.index is not None else None
    return None


def _stream_of(args, stream) -> int:
    """The raw stream the candidates run and are timed on: the caller's, else torch's current stream for torch
    tensors (where the kernel itself would launch), else the legacy default stream."""
    from tawa.runtime.launcher import stream_handle
    if stream is not None:
        return stream_handle(stream)
    torch = sys.modules.get("torch")
    if torch is not None:
        for a in args:
            if isinstance(a, torch.Tensor) and a.is_cuda:
                return int(torch.cuda.current_stream(a.device).cuda_stream)
    cupy = sys.modules.get("cupy")
    if cupy is not None and any(isinstance(a, cupy.ndarray) for a in args):
        return int(cupy.cuda.get_current_stream().ptr)
    return 0


def _grid_for(grid, kernel):
    return grid(dict(kernel.compiled.constants)) if callable(grid) else grid


def _launcher(kernel, args, grid, stream):
    """A zero-argument launch of `kernel` on `args` (on `stream`), for the timer."""
    kw = {} if stream is None else {"stream": stream}
    if grid is None:
        return lambda: kernel(*args, **kw)
    target = kernel[_grid_for(grid, kernel)]
    return lambda: target(*args, **kw)

