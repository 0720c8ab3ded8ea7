"""The launchable kernel object returned by `tawa.compile`.

`kernel(*args)` launches over the grid the kernel declares; `kernel[grid](*args)` overrides it. The same API
serves both targets: "cuda" launches the compiled cubin/PTX through the driver, "cpu" runs the tile IR in the
interpreter on numpy arrays (torch CPU tensors are read as numpy views of their memory). Nothing here imports
MLIR unless the CPU target is launched.

A kernel compiled from a GEMM-family or attention-family source without tile constants carries `ShapeVariants`:
each call launches the variant its shape calls for (`tawa.autotune.launch_defaults`: tile, schedule, split-K,
clusters; attention's query block).

`dry_run()` turns launches into argument-count checks on the calling thread, for code that runs a launching
function on tensors without memory (PyTorch's fake tensors, when `tawa.torch_ops` derives an op's output shapes).
"""
from __future__ import annotations

import contextlib
import threading

from tawa.abi import CompiledKernel
from tawa.errors import PositiveScaleError, RequirementError, TawaError, TawaPerformanceWarning, TmaAlignmentError


class _DryRun(threading.local):
    depth = 0


_dry = _DryRun()


@contextlib.contextmanager
def dry_run():
    """Within the block, on this thread, launching a `Kernel` checks the number of arguments and does nothing
    else: no argument is read, nothing reaches the driver or the interpreter."""
    _dry.depth += 1
    try:
        yield
    finally:
        _dry.depth -= 1


_MISS = object()


def _layouts(args, indices):
    """The shape, strides and element type of each argument in `indices`, as a dictionary key: everything the
    launch rules read from them (extents, row pitch in bytes). None where an argument is neither a torch tensor
    nor an array with byte `strides` (numpy, CuPy): those take the full path on every call."""
    key = []
    for i in indices:
        if i >= len(args):
            return None
        a = args[i]
        stride = getattr(a, "stride", None)
        try:
            if callable(stride):                     # torch: strides in elements, so the dtype too
                key.append((tuple(a.shape), tuple(stride()), a.dtype))
            else:
                strides = a.strides
                if strides is None:
                    return None
                key.append((tuple(a.shape), tuple(strides), str(a.dtype)))
        except (AttributeError, TypeError, RuntimeError):
            return None
    key = tuple(key)
    try:
        hash(key)
    except TypeError:                               # (an exotic array: the full path reads it)
        return None
    return key


class ShapeVariants:
    """Per-shape configurations of a kernel compiled without tile constants: at launch the extents of its shape
    symbols choose a configuration (`shape_defaults`, no timing); one other than the kernel's own launches that
    variant, compiled on first need (a kernel-cache hit after the first time) and kept per extents.

    `read_info() -> dict` gives the kernel's tuning view (`tawa.autotune.space.space_info`: symbols, tiles);
    `compile_variant(config) -> Kernel` compiles the source with the configuration added. Both run on the first
    launch, not at compile time. A variant that does not compile (or is neither cached nor compilable here) falls
    back to the kernel's own configuration."""

    def __init__(self, read_info, compile_variant, fixed=None):
        self._read_info = read_info
        self._compile_variant = compile_variant
        #: Options the kernel was compiled with explicitly: a configuration never overrides them (a small-M
        #: variant drops clusters by design; stream-K, which cannot run in clusters, is not taken with them).
        self._fixed = dict(fixed or {})
        self._positions = None              # [(argument index, axis)] per shape symbol; [] when not applicable
        self._watched = ()                  # argument indices whose row alignment the rules read
        self._misaligned = None             # `launch_defaults.misaligned_operands`, bound when the rules apply
        self._info = None
        self._sms = 132
        self._by_extents: dict = {}         # extents -> the Kernel to launch (None: the kernel itself)
        self._by_layout: dict = {}          # the read arguments' layouts (`_layouts`) -> the same
        self._read = ()                     # the argument indices whose extents or row pitch the rules read
        self._variants: dict = {}           # configuration (sorted items) -> Kernel or None

    def _prepare(self, target: str) -> None:
        from tawa.errors import TawaError
        try:
            self._info = self._read_info()
        except TawaError:                   # no compiler and no cached record: launch the defaults
            self._info = None
        self._adopt(self._info)
        if target == "cuda":
            try:
                from tawa.runtime import driver
                self._sms = driver.sm_count(driver.default_device())
            except Exception:               # noqa: BLE001 -- any driver trouble surfaces at the launch itself
                pass

    def _adopt(self, info) -> None:
        """Read where the shape symbols and the operands whose row alignment the rules read (`shape_defaults`) are
        among the arguments, from the kernel's tuning view."""
        from tawa.autotune.launch_defaults import has_shape_defaults, misaligned_operands, watched_operands
        self._misaligned = misaligned_operands
        self._info = info
        applies = info is not None and has_shape_defaults(info)
        self._watched = watched_operands(info) if applies else ()
        self._positions = [(arg, axis) for _, arg, axis in info["symbols"]] if applies else []
        self._read = tuple(sorted({arg for arg, _ in self._positions} | set(self._watched)))

    def pick(self, args, target: str, own=None):
        """The Kernel to launch for these arguments instead of the kernel itself, or None. `own`: the kernel's
        `CompiledKernel` (its constants and loop traits, which the attention rule reads)."""
        if self._positions is None:
            self._prepare(target)
        if not self._positions:
            return None
        # The steady state: arguments laid out as in an earlier call choose what that call chose. Reading shapes
        # and strides is cheaper than deriving the extents and every operand's row alignment again.
        layouts = _layouts(args, self._read)
        if layouts is not None:
            hit = self._by_layout.get(layouts, _MISS)
            if hit is not _MISS:
                return hit
        try:
            extents = tuple(int(args[arg].shape[axis]) for arg, axis in self._positions)
        except (IndexError, AttributeError, TypeError, ValueError):
            return None                     # the launcher's own checks say what is wrong with the arguments
        misaligned = self._misaligned(self._watched, args)
        key = (extents, misaligned)
        if key in self._by_extents:
            variant = self._by_extents[key]
            self._remember(layouts, variant)
            return variant
        from tawa.autotune.launch_defaults import keeps_variant, shape_defaults
        from tawa.runtime.grid import requirements_met
        names = [name for name, _, _ in self._info["symbols"]]
        config = shape_defaults(self._info, dict(zip(names, extents)), self._sms, misaligned, self._fixed, own)
        variant = self._variant(config) if config else None
        if variant is not None and not keeps_variant(self._info, config, own, variant.compiled):
            variant = None                  # (the rule's premise did not hold for the compiled variant)
        if variant is not None and not requirements_met(variant.compiled, dict(zip(names, extents))):
            variant = None                  # (its tile constants break a @requires condition on these extents)
        if len(self._by_extents) >= 1024:
            self._by_extents.clear()
        self._by_extents[key] = variant
        self._remember(layouts, variant)
        return variant

    def _remember(self, layouts, variant) -> None:
        if layouts is not None:
            if len(self._by_layout) >= 1024:
                self._by_layout.clear()
            self._by_layout[layouts] = variant

    def _variant(self, config: dict):
        label = tuple(sorted(config.items()))
        if label not in self._variants:
            from tawa.errors import CompilationError
            try:
                self._variants[label] = self._compile_variant(config)
            except (CompilationError, ImportError):
                # Refused, or not in the kernel cache with no compiler here (where it was refused when the cache
                # was filled, the smaller variant below is the one in the cache). Try without split-K, then
                # without the clusters, then with the tile the rule chose but the schedule the compiler picks (a
                # K loop under an `if` in a loop the program writes refuses the persistent ones; a wider tile on
                # one program per CTA still beats the kernel's own), then the kernel's own.
                smaller = next(({k: v for k, v in config.items() if k not in _DROPPED_WITH[drop]}
                                for drop in ("split_k", "cluster", "schedule") if drop in config), None)
                self._variants[label] = self._variant(smaller) if smaller else None
        return self._variants[label]


#: The options a launch variant loses together when it is retried without the first of them.
_DROPPED_WITH = {"split_k": ("split_k",), "cluster": ("cluster",),
                 "schedule": ("schedule", "cluster", "dynamic_tiles", "group_m")}


class Kernel:
    def __init__(self, compiled: CompiledKernel, from_cache: bool = False, without_tma=None,
                 shape_variants: ShapeVariants | None = None, general=None):
        self.compiled = compiled
        self.from_cache = from_cache
        self._launcher = None
        self._module = None
        #: () -> Kernel: the same kernel compiled with tma=False, for arguments that break TMA's alignment rules
        #: (set by `tawa.compile` with tma left automatic); built on the first such launch.
        self._without_tma = without_tma
        self._fallback = None
        #: () -> Kernel: the same kernel compiled with positive_scales=False, for a scalar argument the code
        #: assumes positive that is not (set by `tawa.compile` with the option left automatic); built on need.
        self._general = general
        self._general_kernel = None
        #: Per-shape variants (`ShapeVariants`) of a kernel compiled without tile constants, or None.
        self._shapes = shape_variants
        #: argument signature (`GpuLauncher.read_arguments`) -> the launcher a call with it launched through
        self._known_launchers: dict = {}

    # -- introspection -------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.compiled.name

    @property
    def target(self) -> str:
        return self.compiled.target

    @property
    def ptx(self):
        return self.compiled.ptx

    @property
    def cubin(self):
        return self.compiled.cubin

    @property
    def ir(self):
        return self.compiled.ir

    @property
    def notes(self) -> list:
        """Diagnostics from compilation (for instance why warp specialization did not apply)."""
        return self.compiled.notes

    def __repr__(self) -> str:
        return f"<tawa.Kernel {self.name} target={self.target}>"

    # -- launch --------------------------------------------------------------------------------------------
    def __getitem__(self, grid):
        """`kernel[grid](*args)`: launch with an explicit grid of 1 to 3 non-negative integers."""
        grid = _explicit_grid(grid)
        launcher = self._launcher

        def launch(*args, **kw):
            if launcher is not None and not kw and not _dry.depth:
                try:
                    return launcher.launch(args, grid=grid)
                except TmaAlignmentError as error:
                    return self._unaligned(error)[grid](*args)
                except PositiveScaleError as error:
                    return self._without_assumption(error)[grid](*args)
            return self._launch(args, grid, kw)
        return launch

    def variant_for(self, *args) -> "Kernel":
        """The kernel a call with these arguments launches: this one, the variant its shapes choose, or either's
        variant without the assumption of a positive scale where a scalar argument breaks it."""
        variant = self._shapes.pick(args, self.target, self.compiled) if self._shapes is not None else None
        variant = variant if variant is not None else self
        return variant._assumption_kept(args)

    def _assumption_kept(self, args) -> "Kernel":
        """This kernel, or its variant compiled with positive_scales=False where one of `args` it assumes positive
        is not (built now, as the launch would)."""
        from tawa.abi import POSITIVE_ARG_RANGE
        positive = getattr(self.compiled, "positive_params", None) or []
        try:
            kept = all(POSITIVE_ARG_RANGE[0] <= float(args[i]) <= POSITIVE_ARG_RANGE[1] for i in positive)
        except (IndexError, TypeError, ValueError):
            return self                     # (the launch says what is wrong with the arguments)
        if kept or self._general is None:
            return self
        try:
            return self._without_assumption(PositiveScaleError(f"kernel '{self.name}' assumes a positive scale"))
        except PositiveScaleError:
            return self                     # (no variant to be had: the launch raises, saying why)

    def __call__(self, /, *args, **kw):
        signature = None
        read = None
        if self._shapes is not None and not kw and not _dry.depth and self.target == "cuda":
            try:
                read = getattr(self._launcher or self._gpu_launcher(), "read_arguments", None)
            except TawaError:               # (a kernel that cannot be launched: the full path says why)
                read = None
        if read is not None:
            # The steady state of a kernel with shape variants: the arguments are read once (types, shapes,
            # strides, addresses), and a signature seen before launches the kernel an earlier call with it launched
            # (this one or a shape variant) with that call's checked plan, without asking the shape rule again.
            # The plan checks the addresses' TMA alignment and the scalars' values again; where those fail, the
            # full path below decides, as on the first call. (A kernel without variants goes to its launcher,
            # which keeps its plans per signature itself.)
            signature, ptrs, stream_value = read(args)
            known = self._known_launchers.get(signature) if signature is not None else None
            if known is not None:
                try:
                    if known.launch_planned(signature, args, ptrs, stream_value):
                        return None
                except (TmaAlignmentError, PositiveScaleError):
                    pass
        result = self._full_call(args, kw)
        if signature is not None:
            self._remember_launcher(args, signature)
        return result

    def _full_call(self, args, kw: dict):
        if self._shapes is not None and not _dry.depth:
            variant = self._shapes.pick(args, self.target, self.compiled)
            if variant is not None:
                try:
                    return variant(*args, **kw)
                except TmaAlignmentError:   # arguments TMA cannot copy and a variant whose schedule needs it
                    pass                    # (persistent, clusters): the kernel's own variant without TMA
                except RequirementError:    # the variant's tile constants break a @requires condition: the
                    pass                    # kernel's own configuration (which checks its own)
        launcher = self._launcher
        if launcher is not None and not kw and not _dry.depth:
            try:
                return launcher.launch(args)     # the steady state: the launcher checks the argument count
            except TmaAlignmentError as error:
                return self._unaligned(error)(*args)
            except PositiveScaleError as error:
                return self._without_assumption(error)(*args)
        return self._launch(args, None, kw)

    def _gpu_launcher(self):
        """This kernel's `GpuLauncher`, made on first need (it reads the compiled kernel only: no driver call)."""
        if self._launcher is None:
            from tawa.runtime.launcher import GpuLauncher
            self._launcher = GpuLauncher(self.compiled)
        return self._launcher

    def _remember_launcher(self, args, signature) -> None:
        """After a full call that launched: remember for `signature` the launcher that call's shape rule chose
        (this kernel's, or a variant's), once it holds the plan. A variant refused when its plan was made (a
        `@requires` condition, TMA's stride rules) holds none and is not remembered; one whose per-launch checks
        (an address off TMA's alignment, a scalar assumed positive) sent the call to a fallback kernel is, and
        those checks send the next such call down the full path again."""
        variant = self._shapes.pick(args, self.target, self.compiled) if self._shapes is not None else None
        chosen = (variant if variant is not None else self)._launcher
        if signature in getattr(chosen, "_plans", ()):
            if len(self._known_launchers) >= 256:
                self._known_launchers.clear()
            self._known_launchers[signature] = chosen

    def _unaligned(self, error) -> "Kernel":
        """The variant without TMA, for a launch whose arguments break TMA's 16-byte rules; or the error, when
        this kernel has none (loaded ahead of time, or compiled with tma=True)."""
        if self._without_tma is None:
            error.note = ((error.note + "; ") if error.note else "") + \
                "or compile the kernel with tma=False (the threads copy the tiles; slower)"
            raise error
        if self._fallback is None:
            import warnings
            from tawa.errors import CompilationError
            try:
                self._fallback = self._without_tma()
            except CompilationError as why:
                self._without_tma = None    # (not tried again on every launch)
                error.note = f"its variant without TMA does not compile either: {why.message}"
                raise error from None
            except ImportError as why:
                self._without_tma = None
                error.note = (f"its variant without TMA is not in the kernel cache and this machine cannot compile "
                              f"it ({why}); compile it where the compiler is (tma=False) and copy the cache")
                raise error from None
            warnings.warn(f"kernel '{self.name}': {error.message} -- launching its variant without TMA "
                          f"(tma=False, slower) for such arguments", TawaPerformanceWarning, stacklevel=3)
        return self._fallback

    def _without_assumption(self, error) -> "Kernel":
        """The variant compiled with positive_scales=False, for a launch whose scalar argument the code assumes
        positive is not; or the error, when this kernel has none (loaded ahead of time, or compiled with the
        option given)."""
        if self._general_kernel is None:
            from tawa.errors import CompilationError
            if self._general is None:
                raise error
            try:
                self._general_kernel = self._general()
            except (CompilationError, ImportError) as why:
                self._general = None        # (not tried again on every launch)
                error.note = (f"its variant with positive_scales=False could not be built here ({why}); compile "
                              f"it where the compiler is and copy the kernel cache")
                raise error from None
            import warnings
            warnings.warn(f"kernel '{self.name}': {error.message} -- launching its variant compiled with "
                          f"positive_scales=False (a multiply more per scaled element) for such values",
                          TawaPerformanceWarning, stacklevel=3)
        return self._general_kernel

    def _launch(self, args, grid, kw: dict):
        """A launch through `kernel(...)` or `kernel[grid](...)`; `kw` holds the call's keywords as given (a dict,
        so that a keyword named like a parameter here, `grid=` from a Triton habit, is the user's error to report
        rather than a clash of Python arguments)."""
        from tawa.errors import LaunchError
        check_launch_keywords(self.name, kw, self.target, [p["name"] for p in self.compiled.params])
        stream, seed = kw.get("stream"), kw.get("seed")
        params = self.compiled.params
        if len(args) != len(params):
            names = ", ".join(p["name"] for p in params)
            raise LaunchError(f"kernel '{self.name}' takes {len(params)} arguments ({names}), got {len(args)}")
        if _dry.depth:
            return None
        if self.target == "cpu":
            return self._launch_cpu(list(args), grid, seed)
        try:
            return self._gpu_launcher().launch(args, grid=grid, stream=stream)
        except TmaAlignmentError as error:
            fallback = self._unaligned(error)
            return fallback._launch(args, grid, kw)
        except PositiveScaleError as error:
            return self._without_assumption(error)._launch(args, grid, kw)

    def _launch_cpu(self, args, grid, seed):
        from tawa.errors import LaunchError
        from tawa.runtime.grid import check_requires, eval_grid
        from tawa.runtime.interpreter import bind_numpy_args, run_kernel
        args = [_numpy_view(a, p["name"]) for a, p in zip(args, self.compiled.params)]
        bindings = bind_numpy_args(self.compiled.params, args)
        check_requires(self.compiled, bindings)
        if grid is None:
            if not self.compiled.grid:
                raise LaunchError(f"kernel '{self.name}' declares no grid: launch it as kernel[grid](...)")
            grid = eval_grid(self.compiled.grid, bindings, self.compiled.constants)
        if self._module is None:
            from mlir import ir
            from tawa.ir.dialect import make_context
            self._context = make_context()
            with self._context:
                self._module = ir.Module.parse(self.compiled.ir)
        run_kernel(self._module, args, tuple(grid), kernel_name=self.name, seed=seed)


#: torch dtypes numpy lacks, read through an integer of the same width: (carrier, ml_dtypes type).
_RAW_VIEWS = {"torch.bfloat16": ("int16", "bfloat16"), "torch.float8_e4m3fn": ("uint8", "float8_e4m3fn"),
              "torch.float8_e5m2": ("uint8", "float8_e5m2")}


def _numpy_view(arg, name: str):
    """The interpreter runs on numpy arrays: a torch CPU tensor becomes a numpy view of its memory (so the
    kernel's stores land in the tensor); anything else is passed through unchanged."""
    import sys
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(arg, torch.Tensor):
        return arg
    if arg.device.type != "cpu":
        from tawa.errors import LaunchError
        raise LaunchError(f"argument '{name}' is on {arg.device}; a kernel compiled for the CPU interpreter "
                          "(target 'cpu') runs on CPU tensors and numpy arrays")
    arg = arg.detach()
    raw = _RAW_VIEWS.get(str(arg.dtype))
    if raw is None:
        return arg.numpy()
    import ml_dtypes
    return arg.view(getattr(torch, raw[0])).numpy().view(getattr(ml_dtypes, raw[1]))


def _explicit_grid(grid) -> tuple:
    """A grid given as `kernel[grid]`, checked once: an int or a tuple/list of 1 to 3 ints, each >= 0."""
    import numbers
    from tawa.errors import LaunchError

    def is_int(g):
        return isinstance(g, numbers.Integral) and not isinstance(g, bool)
    items = (grid,) if is_int(grid) else grid
    if not isinstance(items, (tuple, list)) or not 1 <= len(items) <= 3 or \
            not all(is_int(g) and g >= 0 for g in items):
        raise LaunchError(f"a launch grid is an int or a tuple of 1 to 3 non-negative ints, got {grid!r}",
                          note="for example kernel[(cdiv(M, 128), cdiv(N, 128))](...)")
    return tuple(int(g) for g in items)


def check_launch_keywords(name: str, kw: dict, target: str, params=None) -> None:
    """Refuse a launch keyword other than stream= (and, in the interpreter, seed=), saying what it may have meant;
    shared by kernels and tuners (which check before tuning)."""
    from tawa.errors import LaunchError
    unknown = sorted(set(kw) - ({"stream", "seed"} if target == "cpu" else {"stream"}))
    if not unknown:
        return
    if unknown[0] == "grid":
        hint = "the grid goes in brackets, kernel[grid](...), or comes from the kernel's @grid"
    elif unknown[0] == "seed":
        hint = "seed= picks the interleaving of warp groups in the interpreter (tawa.interpret) only"
    else:
        hint = "the only keywords are stream= and, in the interpreter, seed="
    named = f" ({', '.join(params)})" if params else ""
    raise LaunchError(f"kernel '{name}' got the keyword argument '{unknown[0]}'; kernel arguments are "
                      f"positional{named}; {hint}")

