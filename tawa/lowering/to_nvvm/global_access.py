"""Per-thread global memory access: one predicated load per element, and the address and bounds check of one
element of a kernel argument (register loads, stores without TMA, the copies of the variant without TMA)."""
from __future__ import annotations

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


def leading_in_bounds(ctx: Ctx, arg: int, offsets: list, lead: int):
    """The in-bounds predicate of the fixed offsets of the leading (dropped) dims, or None when there are none."""
    b = ctx.b
    pred = None
    for d in range(lead):
        ok = b.cmpi("ult", offsets[d], ctx.params.dim(arg, d))
        pred = ok if pred is None else b.and_(pred, ok)
    return pred


def element_address(ctx: Ctx, arg: int, rank: int, offsets: list, coords: list, pred, elem: str) -> tuple:
    """(pointer, in-bounds predicate) of the element at `offsets` + `coords` (coords for the trailing dims; the
    leading dims' check is `pred`, from `leading_in_bounds`)."""
    b = ctx.b
    base = ctx.params.ptr(arg)
    lead = rank - len(coords)
    index = None
    for d in range(rank):
        pos = offsets[d] if d < lead else b.add(offsets[d], coords[d - lead])
        if d >= lead:
            ok = b.cmpi("ult", pos, ctx.params.dim(arg, d))
            pred = ok if pred is None else b.and_(pred, ok)
        term = b.ext_i64(pos)
        if d != rank - 1:
            term = b.mul(term, ctx.params.stride(arg, d))
        index = term if index is None else b.add(index, term)
    return b.gep(base, index, storage_type(elem)), pred


def load_b32(b, ptr: V) -> V:
    """One 4-byte global load through the read-only path, unpredicated (the caller knows it in bounds), as an
    i32; kept in program order like `predicated_load`."""
    text = "ld.global.nc.b32 $0, [$1];"
    return b.op(f'"llvm.inline_asm"({ptr}) <{{asm_string = "{text}", constraints = "=r,l", has_side_effects}}> : '
                f'(!llvm.ptr<1>) -> i32', "i32")
