"""Compile options: what a user may set in `tawa.compile(...)` or on the `tawac` command line.

`CompileOptions` is the one description of them: each field's type annotation, default and help text
(`field(metadata={"help": ...})`) are what `tawac` builds its flags from, and `validate()` is the one place their
values are checked. Pure Python (no MLIR, no Lark).
"""
from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass, field, fields, asdict
from typing import Optional

from tawa import hopper
from tawa.errors import CompilationError

#: Targets the compiler knows: "cuda" (sm_90a PTX/cubin) and "cpu" (the interpreter).
TARGETS = ("cuda", "cpu")
#: Consumer warp groups a specialized kernel may have.
CONSUMER_GROUPS = (1, 2, 3)
#: Tile schedules of a warp-specialized kernel: one program per output tile as the grid declares ("tile"), about
#: one CTA per SM looping over the output tiles ("persistent", the consumer warp groups sharing each tile), or
#: persistent with each consumer warp group on tiles of its own, one group's epilogue under the other's main loop
#: ("pingpong"), or persistent with the CTAs sharing the tiles of a sparse last wave by K iterations
#: ("streamk").
SCHEDULES = ("tile", "persistent", "pingpong", "streamk")
#: The schedules whose CTAs loop over the output tiles (`tawa.lowering.persistent_tiles`).
PERSISTENT_SCHEDULES = ("persistent", "pingpong", "streamk")
#: Thread-block cluster shapes of a persistent kernel, "AxB": A CTAs along grid axis 0, B along axis 1. The CTAs
#: of a cluster compute neighbouring output tiles and share the operand tile those have in common: each copies a
#: share of it into every CTA of the cluster (TMA multicast).
CLUSTERS = ("1x1", "2x1", "1x2")


def cluster_name(value):
    """A cluster as the option spells it: (2, 1) or [2, 1] (Triton's cluster_dims, JSON) becomes "2x1"; any other
    value comes back as it is (for `validate` to judge)."""
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return f"{value[0]}x{value[1]}"
    return value


def cluster_dims(name: str) -> tuple:
    """(CTAs along grid axis 0, along axis 1) of a cluster spelled "AxB"."""
    x, y = name.split("x")
    return (int(x), int(y))


def cluster_axis(dims) -> tuple:
    """(grid axis, CTAs along it) of cluster dims [x, y] with one of them above 1 (2x1 or 1x2)."""
    x, y = dims
    return (0, x) if x > 1 else (1, y)


#: Most programs one output tile's K loop may be split over (`split_k`).
MAX_SPLIT_K = 16
#: Most ring slots (num_buffers) or pipeline stages (num_stages) a kernel may ask for: far above what fits in
#: shared memory beside one tile, and small enough that the depth searches stay short.
MAX_PIPELINE_DEPTH = 64
#: Longest run of tiles along M in the grouped tile order (group_m): the index arithmetic stays within i32.
MAX_GROUP_M = 1 << 16
#: Warps per program on the uniform-warp path: one or two warp groups.
NUM_WARPS = (4, 8)
#: Other names accepted for an option (by `from_kwargs` and as extra `tawac` flags).
ALIASES = {"num_buffers_warp_spec": "num_buffers"}


class InvalidOptionError(CompilationError):
    """A compile option has a value the compiler cannot use; `option` names it, `expected` says what it takes."""

    def __init__(self, option: str, value, expected: str):
        super().__init__(f"invalid option {option}={value!r}: expected {expected}")
        self.option = option
        self.value = value
        self.expected = expected


def _opt(default=None, *, help: str, factory=None, **cli):
    """A dataclass field with its help text (and hints for `tawac`, e.g. `choices`) in the metadata."""
    metadata = dict(cli, help=help)
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


_REGISTERS = (f"a multiple of {hopper.SETMAXNREG_STEP} in [{hopper.SETMAXNREG_MIN}, {hopper.SETMAXNREG_MAX}]")


@dataclass
class CompileOptions:
    target: str = _opt("cuda", choices=TARGETS,
                       help="cuda: sm_90a PTX/cubin; cpu: the tile-IR interpreter")
    warp_specialize: Optional[bool] = _opt(
        None, help="auto: specialize where it applies; on/off force either path (on fails, saying why, where "
                   "it cannot apply)")
    num_consumer_groups: Optional[int] = _opt(
        None, choices=CONSUMER_GROUPS,
        help="consumer warp groups of a specialized kernel (1, 2 or 3; default: 3 for accumulators of 192 rows, 2 for "
             "128 rows or more, else 1)")
    consumer_pingpong: Optional[bool] = _opt(
        None, help="order the tensor-core phases of two consumer warp groups with named barriers, so that one "
                   "group's math (a softmax) runs under the other's wgmma, where the consumer loop does math on a "
                   "dot's result (auto: on where the consumer loop is softmax-pipelined, as attention's)")
    consumer_lookahead: Optional[bool] = _opt(
        None, help="inside each consumer warp group, issue the next iteration's first dot (attention's Q K^T) "
                   "before this iteration's math on the current one, so the two overlap (auto: where the dot's "
                   "operands allow it)")
    register_overlap: Optional[bool] = _opt(
        None, help="let a consumer warp group hold more registers to overlap work with the tensor cores: an "
                   "epilogue's register loads issued a chunk ahead of their math, the next K step's A computed in "
                   "registers under the current wgmmas, a B computed in registers written into a second buffer "
                   "while the dot runs (auto and on: each where it applies, which leaves out a double-buffered B "
                   "on three consumer warp groups; off: none; the kernel's notes name the ones taken)")
    tma: Optional[bool] = _opt(
        None, help="load dot operands and store tiles with TMA copies (auto and on); off: the threads copy them, "
                   "for tensors whose rows or base address are not 16-byte aligned (slower; implies the "
                   "uniform-warp schedule). With auto, a JIT-compiled kernel launched on such tensors switches "
                   "to the off variant by itself")
    positive_scales: Optional[bool] = _opt(
        None, help="a kernel's f32 scalar argument that scales scores before their row maximum (attention's "
                   "sm_scale in `s = dot(q, k.T) * sm_scale`) is assumed positive, so the maximum is taken on the "
                   "unscaled scores, saving a multiply per score (auto and on); the launcher checks the value "
                   "(within 2^-60 to 2^60) at every launch, and with auto a JIT-compiled kernel launched with "
                   "another value switches to the off variant by itself; off: no assumption")
    schedule: Optional[str] = _opt(
        None, choices=SCHEDULES,
        help="tile schedule of a warp-specialized kernel: 'tile' runs one program per output tile as the grid "
             "declares; 'persistent' launches about one CTA per SM, each looping over output tiles in grouped "
             "order with the aref ring running across tiles and the epilogue's TMA store overlapping the next "
             "tile; 'pingpong' is persistent with each of two consumer warp groups on tiles of its own, so that "
             "one group's epilogue runs under the other's main loop; 'streamk' is persistent with the tiles of a "
             "sparse last wave (over an eighth of all slots idle) shared by K iterations between the CTAs (a GEMM whose epilogue "
             "loads no tensor) (auto: persistent or pingpong where it applies, see the kernel's notes)")
    cluster: Optional[str] = _opt(
        None, choices=CLUSTERS,
        help="thread-block cluster of a persistent kernel ('AxB' or (A, B)): '2x1' pairs CTAs along grid axis 0 (a GEMM's M), '1x2' "
             "along axis 1 (N); the two compute neighbouring tiles and load the operand tile they share once, "
             "half each, multicast to both (TMA multicast), halving its traffic from L2. Launches whose grid "
             "does not divide into clusters run without them. Default and '1x1': no clusters")
    group_m: Optional[int] = _opt(
        None, help="output tiles along grid axis 0 (a GEMM's M) that a persistent kernel visits for each tile "
                   "along axis 1 before moving on (Triton's GROUP_SIZE_M; with 2x1 clusters, counted in "
                   "clusters). Auto: the group that makes the tiles resident at one time read about as many "
                   "operand bytes along M as along N, so each k-step's operands come from DRAM once per wave "
                   "for the fewest bytes")
    dynamic_tiles: Optional[bool] = _opt(
        None, help="persistent CTAs take their next tile from a counter in device memory as they free up, heaviest "
                   "first, instead of fixed shares of the grid (auto: on for a persistent kernel whose loops run "
                   "longer for some programs than others, as causal attention's; never with clusters, ping-pong, "
                   "stream-K or split-K). True also makes the compiler choose the persistent schedule where it "
                   "would choose ping-pong or one program per CTA")
    ctas_per_sm: Optional[int] = _opt(
        None, choices=hopper.CTAS_PER_SM,
        help="blocks kept resident per SM (1 or 2): with 2, each block gets half the registers and shared memory "
             "(the ring is sized to half, a warp-specialized kernel's producer gets 24 registers and its "
             "consumers what is left of half the register file, at most consumer_registers), and the two "
             "blocks' warp groups hide each other's latencies. Auto: 2 for a warp-specialized kernel whose "
             "consumer loop feeds math on one dot's result into another dot (attention) and whose tiles fit "
             "twice on an SM with registers to spare (attention at head dim 64), falling back to 1 if ptxas "
             "then spills; else 1")
    split_k: int = _opt(
        1, help=f"split each output tile's K loop over this many programs (1 to {MAX_SPLIT_K}; default 1, no "
                "split), for grids too small to fill the GPU (decode-shaped GEMMs): each program reduces part "
                "of K, and the last of a tile's programs to finish sums the partials in a fixed order and runs "
                "the epilogue. The kernel's one K loop must carry only dot accumulators starting from zero")
    num_buffers: Optional[int] = _opt(
        None, help="aref ring depth of a specialized kernel (default: as many as fit in shared memory)")
    num_stages: int = _opt(3, help="loads in flight in the uniform-warp software pipeline (default 3)")
    num_warps: Optional[int] = _opt(None, choices=NUM_WARPS,
                                    help="warps per program on the uniform-warp path (4 or 8)")
    producer_registers: Optional[int] = _opt(
        None, help=f"setmaxnreg budget of the producer warp group ({_REGISTERS}; auto: "
                   f"{hopper.PRODUCER_REGISTERS}, or {hopper.SETMAXNREG_MIN} with three consumer warp groups or two "
                   f"CTAs per SM)")
    consumer_registers: Optional[int] = _opt(
        None, help=f"setmaxnreg budget of each consumer warp group ({_REGISTERS}; auto: "
                   f"{hopper.CONSUMER_REGISTERS}, or with three consumer warp groups or two CTAs per SM an equal share "
                   f"of what the producer leaves)")
    constants: dict = _opt(factory=dict, help="overrides of the kernel's const parameters (NAME=VALUE)")
    dump_ir_after_all: bool = _opt(False, help="print the IR after every pass to stderr (also verifies each)")
    verify_each: bool = _opt(False, help="run the tawa verifier after every pass (also TAWA_VERIFY_EACH=1)")

    def cluster_dims(self) -> tuple:
        """(CTAs along grid axis 0, along axis 1) of the `cluster` option; (1, 1) without clusters."""
        return cluster_dims(self.cluster) if self.cluster else (1, 1)

    def cache_key_fields(self) -> dict:
        """The fields that determine the generated code (the disk cache's key): not the debugging switches."""
        fields = asdict(self)
        fields.pop("dump_ir_after_all")
        fields.pop("verify_each")
        return fields

    def validate(self) -> "CompileOptions":
        """Check every field, in this one place; raises InvalidOptionError (a CompilationError) naming the
        option. Returns self."""

        def bad(name, value, want):
            raise InvalidOptionError(name, value, want)

        def is_int(v):
            return isinstance(v, int) and not isinstance(v, bool)

        def is_bool(v):
            return v is True or v is False

        if not isinstance(self.target, str) or self.target not in TARGETS:
            bad("target", self.target, " or ".join(repr(t) for t in TARGETS))
        if self.warp_specialize is not None and not is_bool(self.warp_specialize):
            bad("warp_specialize", self.warp_specialize, "True, False or None (auto)")
        if self.consumer_lookahead is not None and not is_bool(self.consumer_lookahead):
            bad("consumer_lookahead", self.consumer_lookahead, "True, False or None (auto)")
        if self.register_overlap is not None and not is_bool(self.register_overlap):
            bad("register_overlap", self.register_overlap, "True, False or None (auto)")
        if self.tma is not None and not is_bool(self.tma):
            bad("tma", self.tma, "True, False or None (auto)")
        if self.positive_scales is not None and not is_bool(self.positive_scales):
            bad("positive_scales", self.positive_scales, "True, False or None (auto)")
        if self.tma is False and self.warp_specialize is True:
            raise InvalidOptionError("warp_specialize", True, "False or None with tma=False (the producer warp "
                                     "group loads through TMA)")
        if self.consumer_pingpong is not None and not is_bool(self.consumer_pingpong):
            bad("consumer_pingpong", self.consumer_pingpong, "True, False or None (auto)")
        if self.schedule is not None and self.schedule not in SCHEDULES:
            bad("schedule", self.schedule, " or ".join(repr(t) for t in SCHEDULES) + " (or None: chosen by the "
                "compiler)")
        if self.num_consumer_groups is not None and (not is_int(self.num_consumer_groups)
                                                     or self.num_consumer_groups not in CONSUMER_GROUPS):
            bad("num_consumer_groups", self.num_consumer_groups, "1, 2 or 3 (or None: chosen by the compiler)")
        self.cluster = cluster_name(self.cluster)
        if self.cluster is not None and self.cluster not in CLUSTERS:
            bad("cluster", self.cluster, " or ".join(repr(c) for c in CLUSTERS) + ", the same as (x, y), or None "
                "(no clusters)")
        if self.ctas_per_sm is not None and (not is_int(self.ctas_per_sm)
                                             or self.ctas_per_sm not in hopper.CTAS_PER_SM):
            bad("ctas_per_sm", self.ctas_per_sm, "1 or 2 (or None: chosen by the compiler)")
        if self.dynamic_tiles is not None and not is_bool(self.dynamic_tiles):
            bad("dynamic_tiles", self.dynamic_tiles, "True, False or None (auto)")
        if self.dynamic_tiles:
            # Dynamic tiles are a persistent warp-specialized schedule's: refuse what rules that out up front.
            clash = [(name, value) for name, value, ok in (
                ("warp_specialize", self.warp_specialize, self.warp_specialize is not False
                 and not (self.target == "cpu" and self.warp_specialize is None)),
                ("tma", self.tma, self.tma is not False),
                ("schedule", self.schedule, self.schedule in (None, "persistent")),
                ("cluster", self.cluster, cluster_name(self.cluster) in (None, "1x1")),
                ("split_k", self.split_k, self.split_k == 1)) if not ok]
            if clash:
                name, value = clash[0]
                raise InvalidOptionError(
                    "dynamic_tiles", True, f"a persistent warp-specialized schedule without clusters or split-K, "
                    f"not {name}={value!r}" + (" (the cpu target specializes only with warp_specialize=True)"
                                               if name == "warp_specialize" and value is None else ""))
        if self.group_m is not None and (not is_int(self.group_m) or not 1 <= self.group_m <= MAX_GROUP_M):
            bad("group_m", self.group_m, f"an integer from 1 to {MAX_GROUP_M} (or None: chosen by the compiler)")
        if not is_int(self.split_k) or not 1 <= self.split_k <= MAX_SPLIT_K:
            bad("split_k", self.split_k, f"an integer from 1 (no split) to {MAX_SPLIT_K}")
        if self.num_buffers is not None and (not is_int(self.num_buffers) or
                                             not 1 <= self.num_buffers <= MAX_PIPELINE_DEPTH):
            bad("num_buffers", self.num_buffers, f"an integer from 1 to {MAX_PIPELINE_DEPTH} (or None: as many as fit)")
        if not is_int(self.num_stages) or not 1 <= self.num_stages <= MAX_PIPELINE_DEPTH:
            bad("num_stages", self.num_stages, f"an integer from 1 to {MAX_PIPELINE_DEPTH}")
        if self.num_warps is not None and (not is_int(self.num_warps) or self.num_warps not in NUM_WARPS):
            bad("num_warps", self.num_warps, "4 or 8 (one or two warp groups)")
        for name in ("producer_registers", "consumer_registers"):
            v = getattr(self, name)
            if v is not None and (not is_int(v) or v % hopper.SETMAXNREG_STEP
                                  or not hopper.SETMAXNREG_MIN <= v <= hopper.SETMAXNREG_MAX):
                bad(name, v, f"{_REGISTERS} (what setmaxnreg accepts, or None: chosen by the compiler)")
        if self.num_consumer_groups is not None and self.consumer_registers is not None \
                and (self.ctas_per_sm or 1) == 1:
            # With the consumer count known, a given consumer budget can be checked here against the registers the
            # block starts with (setmaxnreg only moves those between its warp groups); otherwise the
            # register-realloc pass checks it once partitioning has chosen the count.
            producer = self.producer_registers
            if producer is None:
                producer = hopper.producer_registers(self.num_consumer_groups)
            threads = hopper.THREADS_PER_WARP_GROUP * (1 + self.num_consumer_groups)
            pool, most = hopper.consumer_register_limit(producer, self.num_consumer_groups)
            need = hopper.THREADS_PER_WARP_GROUP * (producer + self.num_consumer_groups * self.consumer_registers)
            if self.consumer_registers > most:
                bad("consumer_registers", self.consumer_registers,
                    f"at most {most} with producer_registers={producer} and "
                    f"num_consumer_groups={self.num_consumer_groups} (128 x ({producer} + "
                    f"{self.num_consumer_groups} x {self.consumer_registers}) = {need} registers > the {pool} "
                    f"its {threads} threads start with)")
        if not isinstance(self.constants, dict) or not all(isinstance(k, str) for k in self.constants):
            bad("constants", self.constants, "a dict from constant names to values")
        for name in ("dump_ir_after_all", "verify_each"):
            if not is_bool(getattr(self, name)):
                bad(name, getattr(self, name), "True or False")
        return self

    @classmethod
    def names(cls) -> list[str]:
        """The option names, in declaration order."""
        return [f.name for f in fields(cls)]

    @classmethod
    def from_kwargs(cls, kwargs: dict) -> "CompileOptions":
        """Split `tawa.compile` keyword arguments into options and kernel constants (any other name).

        Does not validate: call `.validate()` (`tawa.compile` does, before reading the source)."""
        kwargs = dict(kwargs)
        names = {f for f in cls.names() if f != "constants"} | set(ALIASES)
        opts = cls(**{k: kwargs.pop(k) for k in list(kwargs) if k in names})
        opts.constants = dict(kwargs)
        return opts


_dataclass_init = CompileOptions.__init__


@functools.wraps(_dataclass_init)
def _init(self, *args, **kwargs):
    # An unknown name is a CompilationError (with a suggestion), not the dataclass's TypeError.
    known = CompileOptions.__dataclass_fields__
    for alias, name in ALIASES.items():
        if alias in kwargs:
            if name in kwargs:
                raise CompilationError(f"options {name} and {alias} are the same option; give one of them")
            kwargs[name] = kwargs.pop(alias)
    for name in kwargs:
        if name not in known:
            close = difflib.get_close_matches(name, list(known), n=1)
            hint = f"did you mean {close[0]}?" if close else f"options: {', '.join(known)}"
            raise CompilationError(f"unknown compile option '{name}'", note=hint)
    _dataclass_init(self, *args, **kwargs)


CompileOptions.__init__ = _init


#: Fields that say where or how verbosely a kernel is compiled rather than what code it gets: an autotuning
#: candidate (`tawa.autotune`, `@autotune` in a .tawa file) may not vary them.
NOT_TUNABLE = ("target", "constants", "dump_ir_after_all", "verify_each")


def tunable_options() -> list:
    """The option names an autotuning candidate may set: every code-affecting field, then the aliases."""
    return [n for n in CompileOptions.names() if n not in NOT_TUNABLE] + list(ALIASES)
