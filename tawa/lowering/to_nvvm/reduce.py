"""Lowering of `tawa.reduce`: in-thread, then across lanes with butterfly shuffles, then across warps via smem.

For a linear layout the threads that hold parts of one output element are exactly those that differ in the
lane/warp bits whose basis vector moves along the reduced axis; lanes are combined with `shfl.bfly` on those
bits, warps through a small shared-memory scratch. The result has the slice layout (`layouts.slice_`).
"""
from __future__ import annotations

from tawa.ir.ops import ReduceOp
from tawa.errors import InternalCompilerError

from .. import layouts as L
from . import sync
from .builder import Builder, V, is_float
from tawa.ir.location import source_location

from .context import Ctx, Tile
from .fp8 import float_cast, is_fp8
from .shape import register_tile


def _combine(b: Builder, kind: str, x: V, y: V) -> V:
    f = is_float(x.type)
    name = {("sum", True): "addf", ("sum", False): "addi", ("max", True): "maximumf", ("max", False): "maxsi",
            ("min", True): "minimumf", ("min", False): "minsi"}[(kind, f)]
    return b.binary(name, x, y)


def lower_reduce(ctx: Ctx, op) -> None:
    b = ctx.b
    src = register_tile(ctx.get(ReduceOp(op).src), op, ctx)
    axis = op.attributes["axis"].value
    kind = op.attributes["kind"].value
    if kind not in ("sum", "max", "min"):   # the frontend and the verifier (REDUCE_KINDS) allow no other
        raise InternalCompilerError(f"unknown reduction kind {kind!r}", op=op.name, location=source_location(op))
    lay = src.layout
    out_lay = L.slice_(lay, axis)
    elem = src.elem
    # Shuffles and the scratch work on 32-bit values (fp8 through its exact f32 value).
    work = "f32" if elem in ("f16", "bf16") or is_fp8(elem) else elem
    regs = [float_cast(b, r, work) for r in src.regs]
    # 1) in-thread
    partial = {}
    for c, v in zip(lay.regs, regs):
        key = c[:axis] + c[axis + 1:]
        partial[key] = v if key not in partial else _combine(b, kind, partial[key], v)
    # 2) across lanes
    for bit, vec in enumerate(lay.lanes):
        if vec[axis]:
            for key in partial:
                partial[key] = _combine(b, kind, partial[key], sync.shfl_xor(b, partial[key], 1 << bit))
    # 3) across warps, through shared memory: slot [warp bits along axis][output element]
    wbits = [bit for bit, vec in enumerate(lay.warps) if vec[axis]]
    across_groups = lay.groups > 1 and lay.group[axis]       # three warp groups split the axis
    if wbits or across_groups:
        keys = list(out_lay.regs)
        out_elems = 1
        for s in out_lay.shape:
            out_elems *= s
        nw = (1 << len(wbits)) * (lay.groups if across_groups else 1)
        ctx.smem.push()
        off = ctx.smem.alloc(nw * out_elems * 4, align=16)
        ctx.smem.pop()
        base = ctx.base_coords(out_lay)
        # index of this thread's warp among the warps along the axis
        widx = b.i32(0)
        for i, bit in enumerate(wbits):
            widx = b.or_(widx, b.shl(b.and_(b.shr(ctx.warp(), bit), 1), i))
        if across_groups:
            widx = b.add(widx, b.shl(b.shr(ctx.warp(), len(lay.warps)), len(wbits)))

        def elem_index(key):
            idx = b.i32(0)
            for d in range(out_lay.rank):
                idx = b.add(b.mul(idx, out_lay.shape[d]), b.add(base[d], key[d]))
            return idx

        ctx.sync_threads()
        for key in keys:
            slot = b.add(b.mul(widx, out_elems), elem_index(key))
            b.line(f"llvm.store {partial[key]}, {ctx.smem_ptr(b.add(b.mul(slot, 4), off))} : {work}, !llvm.ptr<3>")
        ctx.sync_threads()
        for key in keys:
            acc = None
            for w in range(nw):
                slot = b.add(elem_index(key), w * out_elems)
                v = b.op(f"llvm.load {ctx.smem_ptr(b.add(b.mul(slot, 4), off))} : !llvm.ptr<3> -> {work}", work)
                acc = v if acc is None else _combine(b, kind, acc, v)
            partial[key] = acc
        ctx.sync_threads()
    out = [partial[k] for k in out_lay.regs]
    if work != elem:
        out = [float_cast(b, v, elem) for v in out]
    if out_lay.rank == 0:
        ctx.set(op.results[0], out[0])
    else:
        ctx.set(op.results[0], Tile(out, out_lay, elem))
