"""State shared by the op-family lowerings: values, register tiles, shared memory, kernel parameters, threads.

- A register tile (`Tile`) is the list of SSA scalars one thread holds plus its `Layout` (tawa.lowering.layouts).
- A shared tile (`SmemTile`) is a tile that lives in shared memory in the TMA 128-byte-swizzled form: row-major
  `[rows, cols]`, cut along the columns into boxes of 128 bytes, box `j` at byte `j * rows * 128`. It is what a
  load feeding a dot becomes; the dot reads it through wgmma descriptors.
- Kernel parameters are collected on demand (a tensor map per loaded box, a pointer and extents for register
  loads and stores) and become the `AbiParam` list the runtime packs.
- Shared memory is a bump allocator over the dynamic segment with scopes (a loop's ring is freed after it).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from mlir import ir

from tawa import hopper
from tawa.abi import AbiParam
from tawa.errors import CompilationError, InternalCompilerError

from .. import layouts as L
from . import sync
from .builder import Builder, V
from .schedule import LoopSchedule

SWIZZLE_BYTES = hopper.SWIZZLE_BYTES
#: Bytes reserved at the start of shared memory for mbarriers (tiles start 1024-aligned after it).
BARRIER_REGION = hopper.SMEM_BARRIER_REGION

#: The schedule in force outside every loop: program order, every dot completes.
NO_SCHEDULE = LoopSchedule(None, None)


@dataclass
class Tile:
    regs: list
    layout: L.Layout
    elem: str
    #: One value in every element, the same in every thread (a splat or a splatted constant): any layout holds it
    #: without moving data. (Repeated registers alone do not say so: a tile of one register per thread, or a row
    #: broadcast whose thread holds one row, repeats its register yet differs between threads.)
    uniform: bool = False

    @property
    def shape(self):
        return self.layout.shape


def swizzled(b, r: V, byte: V, width: int = SWIZZLE_BYTES) -> V:
    """Byte offset of (row `r`, byte `byte` of the row) inside its `width`-byte column box with the swizzle of that
    width, as TMA writes and wgmma reads it: 16-byte chunk c of row r is stored at chunk c ^ `_phase(r)` (r % 8
    with 128-byte rows, (r / 2) % 4 with 64, (r / 4) % 2 with 32: the offset's bits from 7 up, as many as the
    chunk index has)."""
    inrow = b.and_(byte, width - 1)
    chunk = b.xor(b.shr(inrow, 4), _phase(b, r, width))
    return b.add(b.mul(r, width), b.add(b.shl(chunk, 4), b.and_(inrow, 15)))


def box_offset(b, r: V, c: V, rows: int, es: int) -> V:
    """Byte offset of element (`r`, `c`) of a `rows`-row tile of `es`-byte elements laid out as TMA writes it:
    128-byte column boxes one after the other, each with the 128-byte swizzle (`swizzled`)."""
    byte = b.mul(c, es)
    return b.add(b.mul(b.shr(byte, 7), rows * SWIZZLE_BYTES), swizzled(b, r, byte))


def _phase(b, r: V, width: int) -> V:
    """The chunk mask of row `r` in a `width`-byte swizzle (see `swizzled`); rows 8 apart share it."""
    shift = {128: 0, 64: 1, 32: 2}[width]
    return b.and_(b.shr(r, shift) if shift else r, width // 16 - 1)


def swizzled_register(b, base: list, ro: int, co: int, es: int, width: int = SWIZZLE_BYTES) -> V:
    """Byte offset inside its `width`-byte column box (`swizzled`) of the register at (`ro`, `co`) of a thread
    whose coordinates start at `base` (`Ctx.base_coords`), elements of `es` bytes.

    Where the register's row is a multiple of 8 past the thread's (an mma layout), it has the thread's swizzle
    (rows 8 apart share it), so the offset is computed as thread row x width + a column part that depends only
    on `co`, plus the constant `ro` x width: the column parts are shared by the thread's rows and the rest folds
    into the load's or store's immediate. Computed from the register's own row, the 32 words of a 128x64 box each
    kept an address register, live across the main loop (a ping-pong 128x192 epilogue with a residual spilled 780
    bytes)."""
    if ro % 8:
        return swizzled(b, b.add(base[0], ro), b.mul(b.add(base[1], co), es), width)
    inrow = b.and_(b.add(b.mul(base[1], es), (co * es) % width), width - 1)
    chunk = b.xor(b.shr(inrow, 4), _phase(b, base[0], width))
    column = b.add(b.shl(chunk, 4), b.and_(inrow, 15))
    return b.add(b.add(b.mul(base[0], width), column), ro * width)


def staging_registers(layout: L.Layout, es: int, width: int = SWIZZLE_BYTES) -> list:
    """(register, its pair or None, column box) for each staging access of a thread, in register order: with
    16-bit data a register and the one of the next column, when the thread holds both, go in one 4-byte access
    (the odd one is then not listed). The box (of `width` bytes) is static: in an mma layout a thread's column
    offset is below 8 and its register columns are multiples of 8 plus 0 or 1."""
    by_coord = {c: i for i, c in enumerate(layout.regs)}
    out = []
    for i, (ro, co) in enumerate(layout.regs):
        if es == 2 and co % 2 == 1 and (ro, co - 1) in by_coord:
            continue
        pair = by_coord.get((ro, co + 1)) if es == 2 and co % 2 == 0 else None
        out.append((i, pair, (co - co % 8) * es // width))
    return out


class LazyTile:
    """A register tile whose registers are emitted on demand, each with the chain of ops that computes it.

    Outside scheduled loops (an epilogue), elementwise ops, broadcasts and register loads give lazy tiles; the
    first op that needs the registers (a store, a dot, a reduction, a loop, a branch: `Ctx.get`) materializes
    them register by register, so that the load, the math and the result of one element are emitted together
    instead of each op over the whole tile. The live registers are then the inputs not yet consumed and the
    results so far, not every intermediate tile at once: a 128x256 epilogue with a loaded residual fits the
    register budget this way. Each register is emitted once (memoized), where it is first needed."""

    def __init__(self, layout: L.Layout, elem: str, make: Callable, loaded: bool = False):
        self.layout = layout
        self.elem = elem
        self._make = make
        self._regs: dict = {}
        #: Registers loaded from a tensor (`lower_register_load`), which a TMA store may serve from its staging.
        self.loaded = loaded
        #: For a register load: registers -> {register: value}, loaded together (`chunk_loads`); or None.
        self.load_batch: Callable | None = None

    @property
    def shape(self):
        return self.layout.shape

    def reg(self, i: int) -> V:
        if i not in self._regs:
            self._regs[i] = self._make(i)
        return self._regs[i]

    @property
    def touched(self) -> bool:
        """Whether any register was emitted already."""
        return bool(self._regs)

    def redirect(self, make: Callable) -> Callable:
        """Emit the registers not yet emitted with `make` instead; returns the previous maker."""
        previous, self._make = self._make, make
        return previous

    def emitted(self, i: int) -> bool:
        return i in self._regs

    def provide(self, i: int, value) -> None:
        """Register i, emitted by the maker of another register (a paired load)."""
        self._regs.setdefault(i, value)

    def materialize(self) -> "Tile":
        return Tile([self.reg(i) for i in range(len(self.layout.regs))], self.layout, self.elem)


@dataclass
class SmemTile:
    """A tile in shared memory as TMA wrote it (see module docstring). `transposed`: used as its transpose."""
    offset: V            # i32 byte offset of the tile from the shared segment base
    rows: int
    cols: int
    elem: str
    transposed: bool = False
    #: Written by the threads from registers (`dot.stage_b`), not by TMA: its buffer is rewritten every iteration.
    staged: bool = False

    @property
    def shape(self):
        return (self.cols, self.rows) if self.transposed else (self.rows, self.cols)


class SharedAllocator:
    def __init__(self, start: int):
        self.top = start
        self.peak = start
        self._marks = []

    def alloc(self, nbytes: int, align: int = 1024) -> int:
        off = (self.top + align - 1) // align * align
        self.top = off + nbytes
        self.peak = max(self.peak, self.top)
        return off

    def push(self):
        self._marks.append(self.top)

    def pop(self):
        self.top = self._marks.pop()


class Params:
    """The kernel's parameter list, in the order the runtime packs it."""

    def __init__(self, func_args):
        self.args = list(func_args)       # the tawa function's block arguments
        self.abi: list[AbiParam] = []
        self.values: list[V] = []
        self.decls: list[str] = []
        self._cache = {}
        #: Bytes of split-K workspace per output tile (`to_nvvm.split_k`), 0 when the kernel is not split.
        self.workspace_per_tile = 0

    def arg_index(self, value: ir.Value) -> int:
        for i, a in enumerate(self.args):
            if a == value:
                return i
        raise CompilationError("a tensor operand must be a kernel parameter")

    def _add(self, key, param: AbiParam, type: str, decl_attrs: str = ""):
        if key not in self._cache:
            name = f"%p{len(self.values)}"
            v = V(name, type)
            self.abi.append(param)
            self.values.append(v)
            self.decls.append(f"{name}: {type}{decl_attrs}")
            self._cache[key] = v
        return self._cache[key]

    def tensormap(self, arg: int, box: list, swizzle: int) -> V:
        return self._add(("tm", arg, tuple(box), swizzle), AbiParam("tensormap", arg, box=list(box), swizzle=swizzle,
                                                                     by_value=True),
                         "!llvm.ptr", " {llvm.align = 64 : i64, llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant}")

    def tile_map(self, tensor: ir.Value, rows: int, cols: int, swizzle: int) -> V:
        """The tensor map of kernel argument `tensor` for 2-D boxes of `rows` x `cols` elements (1 along any
        leading dimension), as TMA loads and stores of tiles use them."""
        rank = ir.MemRefType(tensor.type).rank
        return self.tensormap(self.arg_index(tensor), [1] * (rank - 2) + [rows, cols], swizzle)

    def ptr(self, arg: int) -> V:
        return self._add(("ptr", arg), AbiParam("ptr", arg), "!llvm.ptr<1>", " {llvm.noalias}")

    def dim(self, arg: int, axis: int) -> V:
        return self._add(("dim", arg, axis), AbiParam("dim", arg, axis=axis), "i32")

    def stride(self, arg: int, axis: int) -> V:
        return self._add(("stride", arg, axis), AbiParam("stride", arg, axis=axis), "i64")

    def grid_extent(self, axis: int) -> V:
        """The extent of the grid a persistent kernel was written for (the runtime passes it; no user argument)."""
        return self._add(("grid", axis), AbiParam("grid", -1, axis=axis), "i32")

    def workspace(self) -> V:
        """The split-K workspace the runtime allocates (no user argument; see `to_nvvm.split_k`)."""
        return self._add(("workspace",), AbiParam("workspace", -1), "!llvm.ptr<1>")

    def scalar(self, arg: int, dtype: str) -> V:
        return self._add(("scalar", arg), AbiParam("scalar", arg, dtype=dtype), dtype)


@dataclass
class Ctx:
    b: Builder
    params: Params
    smem: SharedAllocator
    num_warps: int
    env: dict = field(default_factory=dict)
    #: Values lowered to lazy tiles, not materialized yet (`LazyTile`, `flush`).
    pending: list = field(default_factory=list)
    _bases: dict = field(default_factory=dict)
    _tid: V | None = None
    #: The conversion's op dispatch, `lowerer(ctx, block)` (`kernel.lower_block`): region lowerings call
    #: `ctx.lower_block(block)` instead of importing the dispatcher.
    lowerer: Callable = None
    #: The loop schedule of the innermost loop that installed one (`schedule.LoopSchedule`), queried by the op
    #: lowerings while its body is lowered.
    schedule: LoopSchedule = NO_SCHEDULE
    loop_depth: int = 0
    #: The barrier that synchronises this context's threads: 0 = the whole CTA (`bar.sync 0`); inside a warp
    #: group region a named barrier over the region's threads only (the other regions never reach it).
    barrier_id: int = 0
    #: Shared-memory ranges (offset, bytes) no longer read or written by anyone (an aref ring after its consumer
    #: loop drained it): epilogue staging may reuse them.
    dead_smem: list = field(default_factory=list)
    #: Grouped launch order for 2-D grids: program ids are remapped so that `pid_group` consecutive programs
    #: along axis 0 share their axis-1 tiles (L2 reuse); 0 leaves ids as launched.
    pid_group: int = 0
    #: A persistent kernel (`tawa.persistent`): its warp groups loop over tiles, so rings are never drained and
    #: shared staging is reused from one tile to the next.
    persistent: bool = False
    #: Uses of each aref ring (by `id(Ring)`) before the current loop, where that is not 0 (`arefs.stage_of`).
    ring_uses: dict = field(default_factory=dict)
    #: The iteration count of each dynamic tile loop being lowered (`dynamic_tiles.lower_tile_loop`), by the
    #: loop's first result: the arefs used directly in its body take their slots from it (`arefs.iteration`).
    tile_iterations: dict = field(default_factory=dict)
    #: Whether this context issued TMA stores it has not yet waited for (a persistent epilogue defers the wait).
    stores_in_flight: bool = False
    #: Dot operands and tile stores go through TMA; False (compile option `tma=False`): the threads copy them.
    tma: bool = True
    #: A ping-pong consumer region's (index, count) (`tawa.tile_share`): its loops pass over the other groups'
    #: tiles in the rings they use (`arefs.skip_tiles`); None elsewhere.
    tile_share: tuple | None = None
    #: A clustered persistent kernel's [CTAs along grid axis 0, along axis 1] (`tawa.cluster`); None elsewhere.
    cluster: list | None = None
    #: CTAs kept resident per SM (`ctas_per_sm`): the registers each thread holds at entry depend on it.
    ctas_per_sm: int = 1
    #: Whether the kernel has a dot: without one, register loads and stores go in vectors (`vector_access`).
    has_dots: bool = True
    #: Whether consumer warp groups may hold more registers to overlap work with the tensor cores (compile option
    #: `register_overlap`: chunked epilogue loads, the register-A loop, a double-buffered computed B).
    register_overlap: bool = True
    #: The overlaps of `register_overlap` this kernel took (named in the kernel's notes by `compiler.compile_module`).
    overlaps: set = field(default_factory=set)
    #: The registers a thread of this context may hold: its warp-group region's `setmaxnreg` budget, or None
    #: outside one (`register_budget`).
    max_registers: int | None = None

    def register_budget(self) -> int:
        """Registers a thread of this context may hold: its region's budget, else the register file shared by the
        CTA's threads (at most 232: some are the hardware's)."""
        if self.max_registers is not None:
            return self.max_registers
        return min(232, 65536 // max(self.num_threads * self.ctas_per_sm, 1))
    #: A persistent epilogue's staging (`staged_operand.persistent_staging`): [shared offset, mbarriers or None]
    #: by (box bytes, boxes), shared by the TMA store and the prefetch that fills it ahead of the store.
    stagings: dict = field(default_factory=dict)
    #: Epilogue operands whose first boxes a `tawa.prefetch` copied into a staging, and whose later boxes it may
    #: have loaded into registers (`staged_operand.Prefetched`), that no store has taken yet.
    prefetched: list = field(default_factory=list)
    #: 1-D epilogue operands that a `tawa.prefetch` loaded into registers, spread over the threads
    #: (`broadcast_operand.RowPrefetch`), that no load has taken yet.
    row_prefetches: list = field(default_factory=list)
    #: Copies a `tawa.prefetch` starts for the main loop right after it (`staged_operand.lower_prefetch`),
    #: emitters without arguments that `control.lower_for` places in that loop's body.
    main_loop_copies: list = field(default_factory=list)

    def lower_block(self, block) -> None:
        """Lower the ops of `block` in this context."""
        self.lowerer(self, block)

    def lower_ops(self, ops: list) -> None:
        """Lower these ops now, in the order given (a schedule lowering the ops it deferred)."""
        saved, self.schedule = self.schedule, NO_SCHEDULE
        try:
            self.lowerer(self, list(ops))
        finally:
            self.schedule = saved

    # ---- values --------------------------------------------------------------------------------------------
    def get(self, value: ir.Value):
        """The lowered value; a lazy tile is materialized here (see `LazyTile`)."""
        lowered = self.get_lazy(value)
        if isinstance(lowered, LazyTile):
            lowered = lowered.materialize()
            self.env[value] = lowered
        return lowered

    def get_lazy(self, value: ir.Value):
        """The lowered value as it is, lazy tiles included (for the lowerings that build on them)."""
        try:
            return self.env[value]
        except KeyError:
            raise InternalCompilerError(f"value used before it was lowered: {value}") from None

    def set(self, value: ir.Value, lowered) -> None:
        self.env[value] = lowered
        if isinstance(lowered, LazyTile):
            self.pending.append(value)

    @property
    def lazy(self) -> bool:
        """Whether tile ops may give lazy tiles here: outside the loops a schedule lowers (their bodies' order is
        the schedule's)."""
        return self.schedule is NO_SCHEDULE

    def flush(self, first=()) -> None:
        """Materialize the lazy tiles not yet needed: those in `first` (an op's operands), then the others in
        the order they were made."""
        for value in list(first) + self.pending:
            if isinstance(self.env.get(value), LazyTile):
                self.get(value)
        self.pending.clear()

    # ---- threads -------------------------------------------------------------------------------------------
    @property
    def num_threads(self) -> int:
        return self.num_warps * 32

    def tid(self) -> V:
        if self._tid is None:
            self._tid = self.b.op('"nvvm.read.ptx.sreg.tid.x"() : () -> i32', "i32", prelude=True)
        return self._tid

    def _prelude_bin(self, op: str, a: V, c: int) -> V:
        return self.b.op(f"arith.{op} {a}, {self.b.i32(c)} : i32", "i32", prelude=True)

    def lane(self) -> V:
        return self._cached("lane", lambda: self._prelude_bin("andi", self.tid(), 31))

    def warp(self) -> V:
        return self._cached("warp", lambda: self._warp_uniform(self._prelude_bin("shrui", self.tid(), 5)))

    def warp_group(self) -> V:
        return self._cached("wg", lambda: self._warp_uniform(self._prelude_bin("shrui", self.tid(), 7)))

    def _warp_uniform(self, value: V) -> V:
        """`value` (the same in every lane of a warp) read from lane 0: ptxas then knows it is warp-uniform and
        keeps what derives from it (slots, shared addresses, wgmma descriptors) in uniform registers, instead of
        computing them per thread and copying each into a uniform register for the wgmma (docs/compiler.md,
        "Issue slots in the main loops"). Emitted at kernel entry, where every lane is active."""
        return sync.shfl(self.b, value, 0, "idx", prelude=True)

    def cluster_rank(self) -> V:
        """This CTA's rank in its cluster (0 without clusters)."""
        return self._cached("ctarank", lambda: self.b.op('"nvvm.read.ptx.sreg.cluster.ctarank"() : () -> i32', "i32",
                                                         prelude=True))

    def cluster_size(self) -> V:
        """The CTAs of this CTA's cluster (1 when the launch has no clusters)."""
        return self._cached("nctarank", lambda: self.b.op('"nvvm.read.ptx.sreg.cluster.nctarank"() : () -> i32',
                                                          "i32", prelude=True))

    def is_warp0(self) -> V:
        return self._cached("w0", lambda: self.b.op(f"arith.cmpi eq, {self.warp()}, {self.b.i32(0)} : i32", "i1",
                                                    prelude=True))

    def _cached(self, key, fn):
        if key not in self._bases:
            self._bases[key] = fn()
        return self._bases[key]

    def base_coords(self, layout: L.Layout) -> list:
        """Per-thread coordinate offsets (i32, one per dim) of a layout: the lane and warp contributions."""
        key = ("base", layout.desc)
        if key in self._bases:
            return self._bases[key]
        out = []
        for d in range(layout.rank):
            acc = None
            for src, bases in ((self.lane, layout.lanes), (self.warp, layout.warps)):
                for bit, vec in enumerate(bases):
                    if vec[d] == 0:
                        continue
                    bitv = self._prelude_bin("andi", self._prelude_bin("shrui", src(), bit), 1) if bit else \
                        self._prelude_bin("andi", src(), 1)
                    term = self._prelude_bin("muli", bitv, vec[d])
                    acc = term if acc is None else self.b.op(f"arith.addi {acc}, {term} : i32", "i32", prelude=True)
            if layout.groups > 1 and layout.group[d]:
                # Three warp groups: the group index (warp / 4) steps by `group`.
                term = self._prelude_bin("muli", self._prelude_bin("shrui", self.warp(), len(layout.warps)),
                                         layout.group[d])
                acc = term if acc is None else self.b.op(f"arith.addi {acc}, {term} : i32", "i32", prelude=True)
            out.append(acc if acc is not None else self.b.i32(0))
        self._bases[key] = out
        return out

    def coords(self, layout: L.Layout, reg: int) -> list:
        """i32 coordinates of register `reg` of this thread."""
        base = self.base_coords(layout)
        return [self.b.add(base[d], layout.regs[reg][d]) if layout.regs[reg][d] else base[d]
                for d in range(layout.rank)]

    def sync_threads(self) -> None:
        """A barrier over the threads of this context (the CTA, or one warp-group region)."""
        from . import sync
        if self.barrier_id == 0:
            sync.barrier(self.b)
        else:
            sync.named_barrier(self.b, self.barrier_id, self.num_threads)

    def scratch(self, nbytes: int) -> int:
        """Shared bytes for staging that is dead again before anyone else touches the range: a dead ring when
        one is large enough, else fresh memory."""
        for off, size in self.dead_smem:
            if size >= nbytes:
                return off
        return self.smem.alloc(nbytes)

    # ---- shared memory -------------------------------------------------------------------------------------
    #: (byte offset, arrival count, whether the count is per CTA of the cluster), initialised at kernel start.
    barriers: list = field(default_factory=list)

    def alloc_barriers(self, n: int, count: int, per_cluster_cta: bool = False) -> int:
        """`n` consecutive mbarriers (8 bytes each) in the reserved region at the start of shared memory; with
        `per_cluster_cta`, each expects `count` arrivals from every CTA of the cluster."""
        off = 8 * len(self.barriers)
        if off + 8 * n > BARRIER_REGION:
            raise CompilationError(f"the kernel needs more than {BARRIER_REGION // 8} mbarriers",
                                   note="use fewer pipeline stages or ring slots (num_stages, num_buffers)")
        self.barriers.extend((off + 8 * i, count, per_cluster_cta) for i in range(n))
        return off

    def alloc_word(self) -> int:
        """Four bytes of shared memory for a value the threads exchange (in the reserved region, never
        initialised as an mbarrier: tiles and rings, which other warp groups may be using, stay untouched)."""
        return self.alloc_barriers(1, 0)

    def smem_base(self) -> V:
        return self._cached("smem", lambda: self.b.op("llvm.mlir.addressof @tawa_smem : !llvm.ptr<3>", "!llvm.ptr<3>",
                                                      prelude=True))

    def smem_ptr(self, offset) -> V:
        if isinstance(offset, int):
            return self.b.gep(self.smem_base(), offset)
        return self.b.gep(self.smem_base(), offset)

    def smem_addr(self, offset: V) -> V:
        """The 32-bit shared-window address of a byte offset (what wgmma descriptors hold)."""
        base = self._cached("smem_addr", lambda: self.b.op(f"llvm.ptrtoint {self.smem_base()} : !llvm.ptr<3> to i32",
                                                           "i32", prelude=True))
        return self.b.add(base, offset)


