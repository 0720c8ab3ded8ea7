"""Distributed register layouts: which thread holds which element of a register tile.

A layout is *linear*: the coordinate of register `i` in thread `t` (lane `l`, warp `w`) is

    regs[i] + sum_b bit_b(l) * lanes[b] + sum_b bit_b(w) * warps[b]

where every entry is a coordinate vector. A zero basis vector means that bit does not move the element: the
threads that differ only in it hold copies (replication, as in a row slice seen by the four lanes of a quad).
This one form covers the wgmma accumulator, the generic blocked layout, their slices (after a reduction) and
expansions (before a broadcast), so reductions, broadcasts and conversions are each written once against it.

Layouts are written into the IR as strings (`tawa.layout` attributes, see `describe`/`parse`) so that
`--dump-ir-after-all` shows them and the conversion rebuilds the exact same object.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from tawa.errors import CompilationError, InternalCompilerError



@dataclass(frozen=True)
class Layout:
    shape: tuple
    regs: tuple      # per-register coordinate offsets
    lanes: tuple     # 5 basis vectors
    warps: tuple     # log2(num_warps) basis vectors
    desc: str        # the string form (also the identity used in the IR)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def num_warps(self) -> int:
        return 1 << len(self.warps)

    def same_mapping(self, other: "Layout") -> bool:
        return (self.shape == other.shape and self.regs == other.regs and self.lanes == other.lanes
                and self.warps == other.warps)

    def __str__(self) -> str:
        return self.desc


def _zero(rank):
    return (0,) * rank


def _log2(x: int) -> int:
    if x <= 0 or x & (x - 1):
        raise CompilationError(f"tile extent {x} is not a power of two",
                               note="tile dimensions must be powers of two (e.g. 64, 128, 256)")
    return x.bit_length() - 1


def _warp_bits(num_warps: int) -> int:
    if num_warps <= 0 or num_warps & (num_warps - 1):
        raise CompilationError(f"a kernel of {num_warps} warps is not supported by the GPU backend: the number of "
                               f"warps must be a power of two", note="use @num_warps(4) or @num_warps(8)")
    return num_warps.bit_length() - 1


def mma(m: int, n: int, num_warps: int) -> Layout:
    """The wgmma m64nNk16 f32 accumulator fragment; warp groups split M in 64-row slabs.

    Thread (warp w in its group, lane l) holds, per slab, rows 16w + l/4 (+8) and columns 8j + 2(l%4) (+1).
    Slab s of warp group g covers rows 64 * (s * num_groups + g).
    """
    groups = max(num_warps // 4, 1)
    if num_warps % 4:
        raise CompilationError(f"a dot needs a multiple of 4 warps, got {num_warps}",
                               note="a dot runs on whole warp groups of 4 warps: use @num_warps(4) or @num_warps(8)")
    _warp_bits(num_warps)
    if m % (64 * groups):
        raise CompilationError(f"dot tile M={m} is not a multiple of 64 x {groups} warp group(s)",
                               note=f"choose BLOCK_M as a multiple of {64 * groups} (each of the {groups} warp "
                                    f"group(s) computes 64-row slabs)"
                                    + (", or use 4 warps" if groups > 1 else ""))
    regs = []
    for s in range(m // (64 * groups)):
        for i in range(n // 2):
            regs.append((64 * groups * s + 8 * ((i // 2) % 2), 8 * (i // 4) + (i % 2)))
    lanes = ((0, 2), (0, 4), (1, 0), (2, 0), (4, 0))
    warps = [(16, 0), (32, 0)] + [(64 * (1 << b), 0) for b in range(_warp_bits(num_warps) - 2)]
    return Layout((m, n), tuple(regs), lanes, tuple(warps), f"mma<{m}x{n},w={num_warps}>")


def blocked(shape: tuple, num_warps: int) -> Layout:
    """A generic layout for tiles that feed no dot: 4 contiguous elements per thread along the last dim,
    lanes then warps fill the last dim first, then the others; what is left is covered by registers."""
    shape = tuple(shape)
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
    return Layout(drop(parent.shape), tuple(regs), tuple(drop(v) for v in parent.lanes),
                  tuple(drop(v) for v in parent.warps), f"slice<{parent.desc},{axis}>")


def expand(parent: Layout, axis: int) -> Layout:
    """The layout of `expand_dims(x, axis)`: a new dimension of extent 1 (coordinate always 0)."""
    def ins(v):
        return v[:axis] + (0,) + v[axis:]
    return Layout(parent.shape[:axis] + (1,) + parent.shape[axis:], tuple(ins(r) for r in parent.regs), tuple(ins(v) for v in parent.lanes),
                  tuple(ins(v) for v in parent.warps), f"expand<{parent.desc},{axis}>")


def transpose(parent: Layout) -> Layout:
    def sw(v):
        return (v[1], v[0])
    return Layout(sw(parent.shape), tuple(sw(r) for r in parent.regs), tuple(sw(v) for v in parent.lanes),
                  tuple(sw(v) for v in parent.warps), f"trans<{parent.desc}>")


def collapse(parent: Layout, shape: tuple) -> Layout:
    """The layout a broadcast's source must have to broadcast to `parent` with no data movement."""
    lay = parent
    for axis, extent in enumerate(shape):
        if extent == 1 and parent.shape[axis] != 1:
            lay = expand(slice_(lay, axis), axis)
    return lay


# ---- the string form ------------------------------------------------------------------------------------
_TOKEN = re.compile(r"\s*(mma|blocked|slice|expand|trans|<|>|,|x|w=|\d+)")


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
    """Concrete coordinates of every register of one thread (tests and documentation)."""
    base = [0] * layout.rank
    for b, v in enumerate(layout.lanes):
        if lane >> b & 1:
            base = [x + y for x, y in zip(base, v)]
    for b, v in enumerate(layout.warps):
        if warp >> b & 1:
            base = [x + y for x, y in zip(base, v)]
    return [tuple(x + y for x, y in zip(base, r)) for r in layout.regs]
