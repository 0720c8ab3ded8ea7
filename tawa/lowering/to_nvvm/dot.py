"""Lowering of `tawa.dot` to Hopper wgmma with shared-memory descriptors computed here.

Operands live in shared memory as TMA wrote them (128-byte swizzle, column boxes of 128 bytes; see context.py).
The accumulator is a register tile in the `mma` layout. Per 64-row slab of each warp group and per k-step
(32 bytes of K) one `wgmma.mma_async.m64nNk{16,32}` is issued through inline PTX (so that the accumulate-or-
overwrite input can be a run-time predicate: the first dot of a loop whose accumulator starts at zero overwrites).

Descriptors (PTX ISA "matrix descriptor"; CUTLASS's canonical GMMA layouts):
  bits 0-13 start address >> 4, 16-29 leading byte offset >> 4, 32-45 stride byte offset >> 4, 62-63 swizzle
  (1 = 128 bytes).
- K-major operand (A as loaded; B loaded as [N, K] and transposed): rows of 128 bytes, 8-row atoms 1024 bytes
  apart (SBO = 1024); one k-step moves the start address by 32 bytes inside the swizzle atom, and crosses to
  the next column box every 128 bytes.
- MN-major B (loaded as [K, N], N contiguous, `tnspB`): 64-element (128-byte) N chunks are column boxes
  `K * 128` bytes apart (LBO), 8-row K groups 1024 bytes apart (SBO); a k-step moves 16 rows = 2048 bytes.
"""
from __future__ import annotations

from tawa.errors import CompilationError

from .. import layouts as L
from . import sync
from .builder import Builder, V
from tawa.ir import attrs
from tawa.ir.types import elem_bytes

from .context import Ctx, SmemTile, Tile, SWIZZLE_BYTES

_PTX_TYPE = {"bf16": "bf16", "f16": "f16", "f8E4M3FN": "e4m3", "f8E5M2": "e5m2"}


def smem_desc(b: Builder, addr: V, lbo: int, sbo: int) -> V:
    """The 64-bit wgmma descriptor of a 128B-swizzled operand starting at shared address `addr`."""
    hi = ((sbo >> 4) & 0x3FFF) | (1 << 30)       # bits 32-45 SBO, bits 62-63 = 1 (128B swizzle)
    lo_addr = b.and_(b.shr(addr, 4), 0x3FFF)
    lo = b.or_(lo_addr, ((lbo >> 4) & 0x3FFF) << 16)
    lo64 = b.cast("extui", lo, "i64")
    return b.or_(lo64, b.const(hi << 32, "i64"))


def wgmma(b: Builder, acc: list, desc_a, desc_b: V, scale_d: V, n: int, k: int, in_type: str,
          trans_b: bool) -> list:
    """One warpgroup MMA m64nNkK, f32 accumulators in `acc` (n/2 registers); returns the new accumulators.

    `desc_a` is a shared-memory descriptor, or a list of four i32 registers (A from registers: two 16-bit
    elements each, in the accumulator-like fragment order; 16-bit types only)."""
    nacc = len(acc)
    t = _PTX_TYPE[in_type]
    outs = ", ".join(f"${i}" for i in range(nacc))
    reg_a = isinstance(desc_a, list)
    if reg_a:
        ia = 2 * nacc
        a_text = "{" + ", ".join(f"${ia + j}" for j in range(4)) + "}"
        ib, isd = ia + 4, ia + 5
    else:
        ia, ib, isd = 2 * nacc, 2 * nacc + 1, 2 * nacc + 2
        a_text = f"${ia}"
    if in_type in ("bf16", "f16"):
        tail = f"p, 1, 1, {1 if trans_b else 0}" if reg_a else f"p, 1, 1, 0, {1 if trans_b else 0}"
    else:
        if trans_b:
            raise CompilationError("fp8 wgmma needs a K-major B operand (load B as [N, K] and transpose it)")
        tail = "p, 1, 1"
    asm = (f"{{\\0A.reg .pred p;\\0Asetp.ne.b32 p, ${isd}, 0;\\0A"
           f"wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{t}.{t} {{{outs}}}, {a_text}, ${ib}, {tail};\\0A}}")
    a_cons = ["r"] * 4 if reg_a else ["l"]
    cons = ",".join(["=f"] * nacc + [str(i) for i in range(nacc)] + a_cons + ["l", "r"])
    struct = f"!llvm.struct<({', '.join(['f32'] * nacc)})>"
    operands = list(acc) + (list(desc_a) if reg_a else [desc_a]) + [desc_b, scale_d]
    res = b.op(f'"llvm.inline_asm"({", ".join(o.name for o in operands)}) <{{asm_string = "{asm}", '
               f'constraints = "{cons}", has_side_effects}}> : ({", ".join(o.type for o in operands)}) -> {struct}',
               struct)
    return [b.op(f"llvm.extractvalue {res}[{i}] : {struct}", "f32") for i in range(nacc)]


def _operand_a(ctx: Ctx, a: SmemTile, row0: V, kk: int, ksz: int) -> V:
    """Descriptor of A rows [row0, row0+64), k-step `kk` (A is K-major: rows of K)."""
    if a.transposed:
        raise CompilationError("a transposed A operand is not supported by the dot lowering")
    b = ctx.b
    es = elem_bytes(a.elem)
    kbyte = kk * ksz * es
    box, inner = divmod(kbyte, SWIZZLE_BYTES)
    off = b.add(b.add(a.offset, b.mul(row0, SWIZZLE_BYTES)), box * a.rows * SWIZZLE_BYTES + inner)
    return smem_desc(b, ctx.smem_addr(off), 16, 1024)


def _operand_b(ctx: Ctx, bt: SmemTile, kk: int, ksz: int) -> tuple:
    """(descriptor, transposed-flag) of B rows of k-step `kk`."""
    b = ctx.b
    es = elem_bytes(bt.elem)
    if bt.transposed:
        # Stored [N, K] (K contiguous): K-major, same stepping as A.
        kbyte = kk * ksz * es
        box, inner = divmod(kbyte, SWIZZLE_BYTES)
        off = b.add(bt.offset, box * bt.rows * SWIZZLE_BYTES + inner)
        return smem_desc(b, ctx.smem_addr(off), 16, 1024), False
    # Stored [K, N] (N contiguous): MN-major.
    off = b.add(bt.offset, kk * ksz * SWIZZLE_BYTES)
    return smem_desc(b, ctx.smem_addr(off), bt.rows * SWIZZLE_BYTES, 1024), True


def lower_dot(ctx: Ctx, op) -> None:
    from .shape import convert
    a, bt, acc = (ctx.get(v) for v in op.operands)
    if not isinstance(bt, SmemTile):
        raise CompilationError("the B operand of a dot must come straight from tawa.load (optionally through "
                               "tawa.trans)")
    if isinstance(a, Tile):
        return _lower_dot_register_a(ctx, op, a, bt, acc)
    if not isinstance(a, SmemTile):
        raise CompilationError("the A operand of a dot must be a loaded tile or a register tile")
    if a.elem != bt.elem:
        raise CompilationError(f"dot operands have different types ({a.elem}, {bt.elem})")
    if a.elem not in _PTX_TYPE:
        raise CompilationError(f"dot on {a.elem} operands is not supported on the GPU")
    m, kdim = a.shape
    kdim2, n = bt.shape
    layout = L.parse(attrs.LAYOUT.get(op))
    acc = convert(ctx, acc, layout)
    if n > 256 or n % 8:
        raise CompilationError(f"dot tile N={n} must be a multiple of 8 and at most 256")
    ksz = 32 // elem_bytes(a.elem)
    if kdim % ksz:
        raise CompilationError(f"dot tile K={kdim} must be a multiple of {ksz}")
    b = ctx.b
    groups = max(ctx.num_warps // 4, 1)
    slabs = m // (64 * groups)
    per_slab = n // 2
    scale_d = ctx.schedule.scale_d(ctx, op)
    sync.wgmma_fence(b)
    regs = list(acc.regs)
    for s in range(slabs):
        # Rows of this warp group's slab s: 64 * (s * groups + warp_group).
        row0 = b.mul(b.add(ctx.warp_group(), s * groups), 64) if groups > 1 else b.i32(64 * s)
        chunk = regs[s * per_slab:(s + 1) * per_slab]
        for kk in range(kdim // ksz):
            da = _operand_a(ctx, a, row0, kk, ksz)
            db, trans_b = _operand_b(ctx, bt, kk, ksz)
            chunk = wgmma(b, chunk, da, db, scale_d if kk == 0 else b.i32(1), n, ksz, a.elem, trans_b)
        regs[s * per_slab:(s + 1) * per_slab] = chunk
    _finish(ctx, op, regs, layout)


def _finish(ctx: Ctx, op, regs: list, layout) -> None:
    """The wgmma wait policy, written once: commit the group; a dot the loop's schedule keeps in flight leaves one
    group pending (the schedule waits for it later), any other dot waits for completion and fences its
    accumulators so that nothing reads them early."""
    b = ctx.b
    sync.wgmma_commit(b)
    pending = 1 if ctx.schedule.keeps_dot_async(op) else 0
    sync.wgmma_wait(b, pending)
    if not pending:
        regs = sync.fence_registers(b, regs)
    ctx.set(op.results[0], Tile(regs, layout, "f32"))


def _pack2(b: Builder, x: V, y: V) -> V:
    vec = f"vector<2x{x.type}>"
    u = b.op(f"llvm.mlir.undef : {vec}", vec)
    u = b.op(f"llvm.insertelement {x}, {u}[{b.i32(0)} : i32] : {vec}", vec)
    u = b.op(f"llvm.insertelement {y}, {u}[{b.i32(1)} : i32] : {vec}", vec)
    return b.op(f"llvm.bitcast {u} : {vec} to i32", "i32")


def _lower_dot_register_a(ctx: Ctx, op, a: Tile, bt: SmemTile, acc) -> None:
    """A from registers (e.g. attention's P): the m64k16 A fragment of thread (w, l) holds rows 16w + l/4 (+8),
    columns 2(l%4) (+1) (+8) -- the accumulator layout of a 16-column chunk -- so an `mma<M x K>` tile feeds
    wgmma with no data movement: registers 8kk .. 8kk+7 of each slab, packed in pairs."""
    from .shape import convert
    if a.elem not in ("bf16", "f16"):
        raise CompilationError("a dot with A in registers needs 16-bit operands")
    if a.elem != bt.elem:
        raise CompilationError(f"dot operands have different types ({a.elem}, {bt.elem})")
    m, kdim = a.shape
    kdim2, n = bt.shape
    a = convert(ctx, a, L.mma(m, kdim, ctx.num_warps))
    layout = L.parse(attrs.LAYOUT.get(op))
    acc = convert(ctx, acc, layout)
    b = ctx.b
    groups = max(ctx.num_warps // 4, 1)
    slabs = m // (64 * groups)
    per_slab, a_per_slab = n // 2, kdim // 2
    scale_d = ctx.schedule.scale_d(ctx, op)
    sync.wgmma_fence(b)
    regs = list(acc.regs)
    for s in range(slabs):
        chunk = regs[s * per_slab:(s + 1) * per_slab]
        for kk in range(kdim // 16):
            r = a.regs[s * a_per_slab + 8 * kk: s * a_per_slab + 8 * kk + 8]
            frag = [_pack2(b, r[2 * j], r[2 * j + 1]) for j in range(4)]
            db, trans_b = _operand_b(ctx, bt, kk, 16)
            chunk = wgmma(b, chunk, frag, db, scale_d if kk == 0 else b.i32(1), n, 16, a.elem, trans_b)
        regs[s * per_slab:(s + 1) * per_slab] = chunk
    _finish(ctx, op, regs, layout)
