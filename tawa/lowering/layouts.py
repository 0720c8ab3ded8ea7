"""Distributed register layouts: which thread holds which element of a register tile.

A layout is *linear*: the coordinate of register `i` in thread `t` (lane `l`, warp `w`) is

    regs[i] + sum_b bit_b(l) * lanes[b] + sum_b bit_b(w) * warps[b]

where every entry is a coordinate vector. Three warp groups (12 warps, a 192-row dot tile) are not a power of two
of warps: there the warp bits cover the 4 warps of a group and the group index g (w / 4) adds g * `group`, a
coordinate vector of its own (zero where each group holds a copy). A zero basis vector means that bit does not
move the element: the threads that differ only in it hold copies (replication, as in a row slice seen by the four lanes of a quad).
This one form covers the wgmma accumulator, the generic blocked layout, their slices (after a reduction) and
expansions (before a broadcast), so reductions, broadcasts and conversions are each written once against it.

Layouts are written into the IR as strings (`tawa.layout` attributes, see `describe`/`parse`) so that
`--dump-ir-after-all` shows them and the conversion rebuilds the exact same object.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import lru_cache

from tawa.errors import CompilationError, InternalCompilerError



@dataclass(frozen=True)
class Layout:
    shape: tuple
    regs: tuple      # per-register coordinate offsets
    lanes: tuple     # 5 basis vectors
    warps: tuple     # log2(num_warps) basis vectors (of the 4 warps of a group when `groups` is 3)
    desc: str        # the string form (also the identity used in the IR)
    #: Warp groups addressed by `group` (3); 1 where the warp bits address every warp.
    groups: int = 1
    #: The coordinate step from one warp group to the next when `groups` > 1.
    group: tuple = ()

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def num_warps(self) -> int:
        return (1 << len(self.warps)) * self.groups

    @property
    def replicated(self) -> bool:
        """Whether some element is held by more than one thread (a lane or warp basis vector of zero)."""
        return any(not any(v) for v in (*self.lanes, *self.warps)) or (self.groups > 1 and not any(self.group))

    def same_mapping(self, other: "Layout") -> bool:
        return (self.shape == other.shape and self.regs == other.regs and self.lanes == other.lanes
                and self.warps == other.warps and self.groups == other.groups and self.group == other.group)

    def _derived(self, shape, fn, desc: str) -> "Layout":
        """This layout with every coordinate vector mapped by `fn` (a slice, expansion or transposition)."""
        return Layout(shape, tuple(fn(r) for r in self.regs), tuple(fn(v) for v in self.lanes),
                      tuple(fn(v) for v in self.warps), desc, self.groups, fn(self.group) if self.groups > 1 else ())

    def __str__(self) -> str:
        return self.desc


def _zero(rank):
    return (0,) * rank


def _log2(x: int) -> int:
    if x <= 0 or x & (x - 1):
        raise CompilationError(f"tile extent {x} is not a power of two, which this register tile needs",
                               note="a tile dimension that is not a power of two (a multiple of 16 such as 96 or "
                                    "192) is for tiles in shared memory and dot accumulators and their row and "
                                    "column slices; make this tile's dimensions powers of two (e.g. 64, 128, 256)")
    return x.bit_length() - 1


#: Warp groups that are not a power of two, which `group` addresses: three consumer warp groups (a 192-row tile).
GROUPED_WARP_GROUPS = (3,)


def takes_three_groups(rows: int) -> bool:
    """Whether a dot tile of `rows` rows is split over three warp groups: 192 rows (or 384), a power-of-two number
    of 64-row slabs per group."""
    return rows > 0 and rows % (WGMMA_M * 3) == 0 and not (rows // 3) & (rows // 3 - 1)


def _grouped(num_warps: int) -> int:
    """The warp groups `group` addresses for a region of `num_warps` warps (3 for 12 warps), else 1."""
    return num_warps // 4 if num_warps % 4 == 0 and num_warps // 4 in GROUPED_WARP_GROUPS else 1


def _warp_bits(num_warps: int) -> int:
    groups = _grouped(num_warps)
    if groups > 1:
        return 2
    if num_warps <= 0 or num_warps & (num_warps - 1):
        raise CompilationError(f"a kernel of {num_warps} warps is not supported by the GPU backend: the number of "
                               f"warps must be a power of two", note="use @num_warps(4) or @num_warps(8)")
    return num_warps.bit_length() - 1


#: The rows one wgmma computes per warp group (m64), and the fewest rows of a dot tile: the 16 rows one warp
#: holds of a 64-row slab (lanes cover 8 rows, the fragment's second register half the next 8).
WGMMA_M = 64
MIN_DOT_M = 16


def mma(m: int, n: int, num_warps: int) -> Layout:
    """The wgmma m64nNk16 f32 accumulator fragment; warp groups split M in 64-row slabs.

    Thread (warp w in its group, lane l) holds, per slab, rows 16w + l/4 (+8) and columns 8j + 2(l%4) (+1).
    Slab s of warp group g covers rows 64 * (s * num_groups + g). Three warp groups (a 192-row tile, or a
    multiple of 192 rows) address their slabs through `group`.

    A tile of fewer rows than the warps cover (M of 16 or 32, or 64 over two warp groups) is replicated: the warp
    bits that would address rows beyond M have zero basis vectors, so those warps hold copies of the rows the
    others hold. The dot lowering makes that true by feeding every warp the rows it holds (row r of the 64-row
    wgmma reads row r mod M of A), so the copies are real copies, never padding.
    """
    groups = max(num_warps // 4, 1)
    if num_warps % 4:
        raise CompilationError(f"a dot needs a multiple of 4 warps, got {num_warps}",
                               note="a dot runs on whole warp groups of 4 warps: use @num_warps(4) or @num_warps(8)")
    _warp_bits(num_warps)
    if m < MIN_DOT_M:
        raise CompilationError(f"dot tile M={m} is not supported: the tensor cores compute at least "
                               f"{MIN_DOT_M} rows", note=f"choose BLOCK_M as a power of two of at least {MIN_DOT_M}")
    grouped = _grouped(num_warps)
    three = takes_three_groups(m)
    bad = (not three) if grouped > 1 else bool(m & (m - 1) or (m > WGMMA_M * groups and m % (WGMMA_M * groups)))
    if bad:
        raise CompilationError(f"dot tile M={m} is not supported by {groups} warp group{'s' * (groups > 1)}: the "
                               f"warp groups split a dot's rows in slabs of {WGMMA_M}, the same power of two of "
                               f"them each (N and K need not be powers of two)",
                               note=f"{m} rows need three consumer warp groups: a warp-specialized kernel "
                                    f"(num_consumer_groups=3, the default for {m} rows)" if three and grouped == 1
                               else f"choose BLOCK_M as a power of two of at least {MIN_DOT_M}, or 192")
    regs = []
    for s in range(max(m // (WGMMA_M * groups), 1)):
        for i in range(n // 2):
            regs.append((WGMMA_M * groups * s + 8 * ((i // 2) % 2), 8 * (i // 4) + (i % 2)))
    lanes = ((0, 2), (0, 4), (1, 0), (2, 0), (4, 0))
    rows = [16, 32] + [WGMMA_M * (1 << b) for b in range(_warp_bits(num_warps) - 2)]
    warps = [(r if r < m else 0, 0) for r in rows]
    return Layout((m, n), tuple(regs), lanes, tuple(warps), f"mma<{m}x{n},w={num_warps}>", grouped,
                  (WGMMA_M, 0) if grouped > 1 else ())


def wgmma_a(m: int, k: int, num_warps: int, elem_bytes: int) -> Layout:
    """The register fragment of a wgmma A operand, [m, k] elements of `elem_bytes` bytes (PTX ISA, "register
    fragment layout for matrix A"): per 64-row slab and per k-step of 32 bytes (k16 for 16-bit, k8 for tf32, k32
    for fp8), thread (warp w, lane l) holds four 32-bit registers of v = 4 / elem_bytes consecutive elements each:
    register j covers row 16w + l/4 + 8 (j % 2), columns v (l % 4) + (k-step / 2) (j / 2) + [0, v). Registers run
    slab, k-step, j, element. For 16-bit operands this is the accumulator layout `mma(m, k)`, which is returned
    (so a computed A in the accumulator's layout needs no conversion). Rows beyond m replicate as in `mma`."""
    if elem_bytes == 2:
        return mma(m, k, num_warps)
    acc = mma(m, 2 * 8, num_warps)          # checks m and the warps, gives the row bases
    v = 4 // elem_bytes
    step = 32 // elem_bytes
    if k % step:
        raise CompilationError(f"dot tile K={k} must be a multiple of {step}",
                               note=f"choose BLOCK_K as a multiple of {step} (one wgmma step reads 32 bytes of K)")
    groups = max(num_warps // 4, 1)
    regs = []
    for s in range(max(m // (WGMMA_M * groups), 1)):
        for kk in range(k // step):
            for j in range(4):
                for e in range(v):
                    regs.append((WGMMA_M * groups * s + 8 * (j % 2), step * kk + (step // 2) * (j // 2) + e))
    lanes = ((0, v), (0, 2 * v), (1, 0), (2, 0), (4, 0))
    return Layout((m, k), tuple(regs), lanes, acc.warps, f"wgmma_a<{m}x{k},w={num_warps},e={elem_bytes}>",
                  acc.groups, acc.group)


@lru_cache(maxsize=None)
def quad_shuffle_plan(src: Layout, dst: Layout):
    """How the four lanes of each quad trade a 1-byte tile from layout `src` into `dst` (to_nvvm.warp_shuffle):
    for each destination register of four bytes, two shuffles, each as (the two pairs of consecutive source
    registers every lane sends, the quad lane read per reader lane % 4, the half kept per reader lane % 4).

    None unless the conversion has that form: the same warps; both layouts without replicated lanes; each
    destination pair one source lane's two consecutive registers; per shuffle at most two pairs sent, the same in
    every lane; the lane read and the half kept depending only on the reader's lane within its quad. fp8
    attention's P, from the first dot's accumulator (`mma`) to wgmma A fragments of bytes (`wgmma_a`), has it."""
    if src.shape != dst.shape or (src.warps, src.groups, src.group) != (dst.warps, dst.groups, dst.group) or \
            len(src.regs) != len(dst.regs) or len(dst.regs) % 4 or len(src.regs) % 2:
        return None
    if any(not any(v) for v in (*src.lanes, *dst.lanes)):
        return None                                     # (replicated lanes: a copy could come from several)
    where = {}
    for lane in range(32):
        for reg, c in enumerate(coords_of(src, lane, 0)):
            where[c] = (lane, reg)
    held = [coords_of(dst, lane, 0) for lane in range(32)]
    plan = []
    for word in range(len(dst.regs) // 4):
        rounds = []
        for half in (0, 1):
            needs = []                                  # per reader lane: (source lane, source pair)
            for lane in range(32):
                a = where.get(held[lane][4 * word + 2 * half])
                b = where.get(held[lane][4 * word + 2 * half + 1])
                if a is None or b is None or a[0] != b[0] or a[1] % 2 or b[1] != a[1] + 1:
                    return None
                needs.append((a[0], a[1] // 2))
            pairs = sorted({pair for _, pair in needs})
            if len(pairs) > 2:
                return None
            sent = (pairs[0], pairs[-1])
            source, kept = [None] * 4, [None] * 4
            for lane, (from_lane, pair) in enumerate(needs):
                q = lane % 4
                if from_lane // 4 != lane // 4:
                    return None
                pick = sent.index(pair)
                if source[q] not in (None, from_lane % 4) or kept[q] not in (None, pick):
                    return None
                source[q], kept[q] = from_lane % 4, pick
            rounds.append((sent, tuple(source), tuple(kept)))
        plan.append(tuple(rounds))
    return tuple(plan)


def blocked(shape: tuple, num_warps: int) -> Layout:
    """A generic layout for tiles that feed no dot: 4 contiguous elements per thread along the last dim,
    lanes then warps fill the last dim first, then the others; what is left is covered by registers. Over three
    warp groups each group holds the whole tile (the power-of-two split of one group, copied)."""
    shape = tuple(shape)
    grouped = _grouped(num_warps)
    if grouped > 1:
        return replace(blocked(shape, 4), desc=f"blocked<{'x'.join(map(str, shape))},w={num_warps}>",
                       groups=grouped, group=_zero(len(shape)))
    rank = len(shape)
    bits = [_log2(s) for s in shape]
    # Per-dimension bit assignment, innermost first: vector bits, lane bits, warp bits, then register bits.
    used = [0] * rank
    regs_bases, lanes, warps = [], [], []

    def basis(dim, bit):
        v = [0] * rank
        v[dim] = 1 << bit
        return tuple(v)

    vec = min(bits[-1], 2) if rank else 0
    for b in range(vec):
        regs_bases.append(basis(rank - 1, used[rank - 1]))
        used[rank - 1] += 1
    for target, count in ((lanes, 5), (warps, _warp_bits(num_warps))):
        for _ in range(count):
            for d in reversed(range(rank)):
                if used[d] < bits[d]:
                    target.append(basis(d, used[d]))
                    used[d] += 1
                    break
            else:
                target.append(_zero(rank))
    for d in reversed(range(rank)):
        while used[d] < bits[d]:
            regs_bases.append(basis(d, used[d]))
            used[d] += 1
    # Registers: vector bits vary fastest, so registers 0..3 are consecutive elements of one row.
    regs = []
    for i in range(1 << len(regs_bases)):
        c = [0] * rank
        for b, v in enumerate(regs_bases):
            if i >> b & 1:
                c = [x + y for x, y in zip(c, v)]
        regs.append(tuple(c))
    dims = "x".join(str(s) for s in shape)
    return Layout(shape, tuple(regs), tuple(lanes), tuple(warps), f"blocked<{dims},w={num_warps}>")


def shared_read(shape: tuple, transposed: bool, num_warps: int) -> Layout:
    """The layout a shared tile of `shape` (as used) is read into registers in: `blocked` along the dimension
    contiguous in shared memory, so a thread's consecutive registers are consecutive bytes there (one vector load,
    no bank conflicts). A transposed use (`x.T` of a loaded tile) reads the stored tile's blocked layout,
    transposed: read along the used tile's rows, a [128, 64] fp8 weight's `.T` took one byte load a register, four
    rows apart, and its W8A16 GEMM ran at a fifth of the untransposed one's speed."""
    if transposed and len(shape) == 2:
        return transpose(blocked((shape[1], shape[0]), num_warps))
    return blocked(shape, num_warps)


def vector_runs(layout: Layout, axis: int, width: int) -> list | None:
    """The registers of `layout` in runs of `width` holding consecutive coordinates along `axis`, each run
    starting at a multiple of `width` in every thread (so a run is one aligned vector in memory laid out along
    `axis`); None where the registers do not form such runs."""
    if width < 2 or any(v and v[axis] % width for v in (*layout.lanes, *layout.warps, layout.group)):
        return None
    index = {c: i for i, c in enumerate(layout.regs)}
    if len(index) != len(layout.regs):
        return None
    runs, taken = [], set()
    for i, c in enumerate(layout.regs):
        if i in taken:
            continue
        if c[axis] % width:
            return None
        run = [index.get(c[:axis] + (c[axis] + d,) + c[axis + 1:]) for d in range(width)]
        if None in run:
            return None
        taken.update(run)
        runs.append(run)
    return runs


def widest_runs(layout: Layout, axis: int, elem_bytes: int, sizes: tuple) -> list:
    """`vector_runs` along `axis` of the widest of `sizes` bytes (each run at least two elements) that the layout
    has; none where it has none."""
    for nbytes in sizes:
        width = nbytes // elem_bytes
        runs = vector_runs(layout, axis, width) if width >= 2 else None
        if runs:
            return runs
    return []


def slice_(parent: Layout, axis: int) -> Layout:
    """The layout of `reduce(x, axis)` for x in `parent`: the coordinate along `axis` is dropped."""
    suffix = f",{axis}>"
    if parent.desc.startswith("expand<") and parent.desc.endswith(suffix):
        return parse(parent.desc[len("expand<"):-len(suffix)])     # slice(expand(L, a), a) is L
    def drop(v):
        return v[:axis] + v[axis + 1:]
    regs = []
    for r in parent.regs:
        d = drop(r)
        if d not in regs:
            regs.append(d)
    return replace(parent._derived(drop(parent.shape), drop, f"slice<{parent.desc},{axis}>"), regs=tuple(regs))


def expand(parent: Layout, axis: int) -> Layout:
    """The layout of `expand_dims(x, axis)`: a new dimension of extent 1 (coordinate always 0)."""
    def ins(v):
        return v[:axis] + (0,) + v[axis:]
    return parent._derived(parent.shape[:axis] + (1,) + parent.shape[axis:], ins, f"expand<{parent.desc},{axis}>")


def transpose(parent: Layout) -> Layout:
    def sw(v):
        return (v[1], v[0])
    return parent._derived(sw(parent.shape), sw, f"trans<{parent.desc}>")


def collapse(parent: Layout, shape: tuple) -> Layout:
    """The layout a broadcast's source must have to broadcast to `parent` with no data movement."""
    lay = parent
    for axis, extent in enumerate(shape):
        if extent == 1 and parent.shape[axis] != 1:
            lay = expand(slice_(lay, axis), axis)
    return lay


# ---- the string form ------------------------------------------------------------------------------------
_TOKEN = re.compile(r"\s*(wgmma_a|mma|blocked|slice|expand|trans|<|>|,|x|w=|e=|\d+)")


@lru_cache(maxsize=None)
def parse(text: str) -> Layout:
    """The layout a `tawa.layout` string describes (written by assign-layouts: a malformed one is a bug)."""
    try:
        return _parse(text)
    except (IndexError, ValueError):
        raise InternalCompilerError(f"malformed layout {text!r}") from None


def _parse(text: str) -> Layout:
    tokens = _TOKEN.findall(text)
    pos = 0

    def take(expect=None):
        nonlocal pos
        tok = tokens[pos]
        pos += 1
        if expect is not None and tok != expect:
            raise InternalCompilerError(f"malformed layout {text!r}")
        return tok

    def dims():
        out = [int(take())]
        while tokens[pos] == "x":
            take()
            out.append(int(take()))
        return tuple(out)

    def node() -> Layout:
        kind = take()
        take("<")
        if kind == "mma":
            m, n = dims()
            take(",")
            take("w=")
            lay = mma(m, n, int(take()))
        elif kind == "wgmma_a":
            m, k = dims()
            take(",")
            take("w=")
            warps = int(take())
            take(",")
            take("e=")
            lay = wgmma_a(m, k, warps, int(take()))
        elif kind == "blocked":
            shape = dims()
            take(",")
            take("w=")
            lay = blocked(shape, int(take()))
        elif kind in ("slice", "expand"):
            inner = node()
            take(",")
            axis = int(take())
            lay = slice_(inner, axis) if kind == "slice" else expand(inner, axis)
        elif kind == "trans":
            lay = transpose(node())
        else:
            raise InternalCompilerError(f"malformed layout {text!r}")
        take(">")
        return lay

    return node()


def coords_of(layout: Layout, lane: int, warp: int):
    """Concrete coordinates of every register of one thread (tests, documentation, `quad_shuffle_plan`)."""
    base = [0] * layout.rank
    for b, v in enumerate(layout.lanes):
        if lane >> b & 1:
            base = [x + y for x, y in zip(base, v)]
    for b, v in enumerate(layout.warps):
        if warp >> b & 1:
            base = [x + y for x, y in zip(base, v)]
    if layout.groups > 1:
        base = [x + (warp >> len(layout.warps)) * y for x, y in zip(base, layout.group)]
    return [tuple(x + y for x, y in zip(base, r)) for r in layout.regs]
