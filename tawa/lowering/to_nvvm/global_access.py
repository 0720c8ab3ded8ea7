"""Per-thread global memory access: one predicated load per element, and the address and bounds check of one
element of a kernel argument (register loads, stores without TMA, the copies of the variant without TMA)."""
from __future__ import annotations

from mlir import ir

from tawa.ir.types import elem_bytes, elem_type

from .. import layouts as L
from .builder import V
from .context import Ctx
from .fp8 import storage_type


#: Predicated global loads by register class: the element, or 0 where the predicate is off (no branch, and no
#: memory access outside the tensor).
_PREDICATED_LOAD = {2: ("h", "b16", "mov.b16 $0, 0;"), 4: ("r", "b32", "mov.b32 $0, 0;"),
                    1: ("h", "u8", "mov.b16 $0, 0;")}


def predicated_load(b, ptr: V, pred: V, st: str, read_only: bool = False, ordered: bool = True) -> V:
    """`pred ? *ptr : 0` as one predicated global load (an element of 1, 2 or 4 bytes), with no branch.

    `read_only`: `ld.global.nc` through the read-only path, for a tensor the kernel never stores to; otherwise
    a plain coherent `ld.global`. `ordered`: kept in program order with the kernel's other memory accesses (a
    side effect for LLVM): for register loads, which program order also keeps from being hoisted all to the top
    of an epilogue, where their registers would be live together with the accumulator's."""
    size = {"i8": 1, "bf16": 2, "f16": 2, "i16": 2, "f32": 4, "i32": 4}[st]
    cons, width, zero = _PREDICATED_LOAD[size]
    reg = {1: "i16", 2: "i16", 4: "i32"}[size]
    kind = "ld.global.nc" if read_only else "ld.global"
    text = (f"{{\\0A.reg .pred p;\\0Asetp.ne.b32 p, $2, 0;\\0A{zero}\\0A@p {kind}.{width} $0, [$1];"
            f"\\0A}}")
    flag = b.cast("extui", pred, "i32")
    effects = ", has_side_effects" if ordered else ""
    raw = b.op(f'"llvm.inline_asm"({ptr}, {flag}) <{{asm_string = "{text}", constraints = "={cons},l,r"{effects}}}> : '
               f'(!llvm.ptr<1>, i32) -> {reg}', reg)
    if size == 1:
        return b.op(f"arith.trunci {raw} : i16 to i8", "i8")
    if st in ("i16", "i32"):
        return raw
    return b.op(f"arith.bitcast {raw} : {reg} to {st}", st)


#: A pair of adjacent elements (4- or 2-byte) in one load where both are in bounds and the pair is aligned, else
#: each element on its own, predicated (`paired_load`). Outputs, then: pointer, fast flag, in-bounds flags. Each
#: load writes registers of its own and a select picks the result: loads that share a destination register are
#: ordered by the scoreboard even when predicated off, and each pair then waited for a whole round trip (the
#: attention with a bias ran 6x slower so).
_PAIRED_LOAD = {
    4: ("=r,=r,l,r,r,r", "i32",
        ".reg .b32 v0, v1, s0, s1;\\0Amov.b32 v0, 0;\\0Amov.b32 v1, 0;\\0Amov.b32 s0, 0;\\0Amov.b32 s1, 0;\\0A"
        "@pf ld.global{nc}.v2.b32 {{v0, v1}}, [$2];\\0A@p0 ld.global{nc}.b32 s0, [$2];\\0A"
        "@p1 ld.global{nc}.b32 s1, [$2+4];\\0Aselp.b32 $0, v0, s0, pf;\\0Aselp.b32 $1, v1, s1, pf;"),
    2: ("=h,=h,l,r,r,r", "i16",
        ".reg .b32 w;\\0A.reg .b16 v0, v1, s0, s1;\\0Amov.b32 w, 0;\\0Amov.b16 s0, 0;\\0Amov.b16 s1, 0;\\0A"
        "@pf ld.global{nc}.b32 w, [$2];\\0A@p0 ld.global{nc}.b16 s0, [$2];\\0A@p1 ld.global{nc}.b16 s1, [$2+2];\\0A"
        "mov.b32 {{v0, v1}}, w;\\0Aselp.b16 $0, v0, s0, pf;\\0Aselp.b16 $1, v1, s1, pf;"),
}


def paired_load(b, ptr: V, fast: V, pred_lo: V, pred_hi: V, size: int, read_only: bool = False) -> tuple:
    """The elements at `ptr` and the next one (`size` bytes each, 2 or 4), as two raw registers (i16 or i32): one
    vector load when `fast` (both in bounds, the pair aligned to twice the size), else two predicated loads, 0
    where out of bounds. Kept in program order like `predicated_load`. Why: a thread of an mma layout holds its
    elements in pairs of adjacent columns; loaded one by one, each warp request uses half of every 32-byte
    sector it touches, and attention with an f32 bias saturated L1 at 96% of its throughput doing so (ncu)."""
    cons, reg, body = _PAIRED_LOAD[size]
    body = body.format(nc=".nc" if read_only else "")
    text = (f"{{\\0A.reg .pred pf, p0, p1;\\0Asetp.ne.b32 pf, $3, 0;\\0Asetp.ne.and.b32 p0, $4, 0, !pf;\\0A"
            f"setp.ne.and.b32 p1, $5, 0, !pf;\\0A{body}\\0A}}")
    flags = [b.cast("extui", v, "i32") for v in (fast, pred_lo, pred_hi)]
    struct = f"!llvm.struct<({reg}, {reg})>"
    res = b.op(f'"llvm.inline_asm"({ptr}, {", ".join(map(str, flags))}) <{{asm_string = "{text}", '
               f'constraints = "{cons}", has_side_effects}}> : (!llvm.ptr<1>, i32, i32, i32) -> {struct}', struct)
    return tuple(b.op(f"llvm.extractvalue {res}[{i}] : {struct}", reg) for i in range(2))


def pair_aligned(ctx: Ctx, arg: int, rank: int, offsets: list, lead, elem: str, tile_rank: int) -> V:
    """Whether every pair of adjacent elements at an even column of the tile at `offsets` is aligned to twice
    the element size: the tile's first element is, and (for a 2-D tile) so is the row pitch. Uniform over the
    threads; computed once per load."""
    b = ctx.b
    es = elem_bytes(elem)
    first, _ = element_address(ctx, arg, rank, offsets, [b.i32(0)] * tile_rank, lead, elem)
    addr = b.op(f"llvm.ptrtoint {first} : !llvm.ptr<1> to i64", "i64")
    bits = addr
    if tile_rank == 2:
        bits = b.or_(bits, b.mul(ctx.params.stride(arg, rank - 2), es))
    return b.cmpi("eq", b.and_(bits, b.const(2 * es - 1, "i64")), b.const(0, "i64"))


def leading_in_bounds(ctx: Ctx, arg: int, offsets: list, lead: int, extents: list | None = None):
    """The in-bounds predicate of the fixed offsets of the leading (dropped) dims, or None when there are none."""
    b = ctx.b
    pred = None
    for d in range(lead):
        ok = b.cmpi("ult", offsets[d], ctx.params.dim(arg, d) if extents is None else extents[d])
        pred = ok if pred is None else b.and_(pred, ok)
    return pred


def element_address(ctx: Ctx, arg: int, rank: int, offsets: list, coords: list, pred, elem: str,
                    extents: list | None = None) -> tuple:
    """(pointer, in-bounds predicate) of the element at `offsets` + `coords` (coords for the trailing dims; the
    leading dims' check is `pred`, from `leading_in_bounds`); `extents`, where given, replace the tensor's dims in
    the trailing dims' check (a store through a view that ends first: `memory.store_extents`)."""
    b = ctx.b
    base = ctx.params.ptr(arg)
    lead = rank - len(coords)
    index = None
    for d in range(rank):
        pos = offsets[d] if d < lead else b.add(offsets[d], coords[d - lead])
        if d >= lead:
            ok = b.cmpi("ult", pos, ctx.params.dim(arg, d) if extents is None else extents[d])
            pred = ok if pred is None else b.and_(pred, ok)
        term = b.ext_i64(pos)
        if d != rank - 1:
            term = b.mul(term, ctx.params.stride(arg, d))
        index = term if index is None else b.add(index, term)
    return b.gep(base, index, storage_type(elem)), pred


def load_words(b, ptr: V, words: int, read_only: bool = False) -> list:
    """`words` (1 or 2) consecutive 4-byte words at `ptr` in one unpredicated global load (the caller knows them
    in bounds and the address aligned to their size), as i32s; kept in program order like `predicated_load`."""
    kind = "ld.global.nc" if read_only else "ld.global"
    if words == 1:
        return [b.op(f'"llvm.inline_asm"({ptr}) <{{asm_string = "{kind}.b32 $0, [$1];", constraints = "=r,l", '
                     f'has_side_effects}}> : (!llvm.ptr<1>) -> i32', "i32")]
    struct = "!llvm.struct<(i32, i32)>"
    res = b.op(f'"llvm.inline_asm"({ptr}) <{{asm_string = "{kind}.v2.b32 {{$0, $1}}, [$2];", '
               f'constraints = "=r,=r,l", has_side_effects}}> : (!llvm.ptr<1>) -> {struct}', struct)
    return [b.op(f"llvm.extractvalue {res}[{i}] : {struct}", "i32") for i in range(2)]


def column_pairs(layout: L.Layout, elem: str) -> tuple:
    """({upper register: lower}, {lower register: upper}) of the registers an mma layout gives a thread at two
    adjacent columns of one row, the lower at an even column (its per-thread column offset is even); none for
    other layouts and other element sizes than 2 and 4 bytes."""
    if not layout.desc.startswith("mma<") or elem_bytes(elem) not in (2, 4) or elem.startswith("f8"):
        return {}, {}
    by_coord = {c: i for i, c in enumerate(layout.regs)}
    upper_of = {i: by_coord[(c[0], c[1] + 1)] for i, c in enumerate(layout.regs)
                if len(c) == 2 and c[1] % 2 == 0 and (c[0], c[1] + 1) in by_coord}
    return {u: l for l, u in upper_of.items()}, upper_of


def raw_to(b, raw: V, st: str) -> V:
    """A raw loaded register (i16 or i32) as the storage type `st` (of the same size)."""
    return raw if st in ("i16", "i32") or raw.type == st else b.op(f"arith.bitcast {raw} : {raw.type} to {st}", st)


def load_b32(b, ptr: V) -> V:
    """One 4-byte global load through the read-only path, unpredicated (the caller knows it in bounds), as an
    i32; kept in program order like `predicated_load`."""
    return load_words(b, ptr, 1, read_only=True)[0]
