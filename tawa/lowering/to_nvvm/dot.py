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

from tawa.errors import CompilationError, InternalCompilerError

from .. import layouts as L
from . import sync
from .builder import Builder, V
from tawa.ir import attrs
from tawa.ir.location import source_location
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
        if trans_b:   # lower_dot refuses an MN-major fp8 B before emitting anything
            raise InternalCompilerError("an fp8 wgmma was emitted with an MN-major B operand")
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
    if a.transposed:   # lower_dot refuses it before emitting anything
        raise InternalCompilerError("a wgmma descriptor was requested for a transposed A operand")
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


#: The element types wgmma takes from registers (A operand only).
_REGISTER_A_TYPES = ("bf16", "f16")


def _check_operands(op, a, bt) -> None:
    """Refuse, before anything is emitted, the dots the tensor cores cannot run as written; each refusal says
    what to change. `a` is a shared-memory or register tile, `bt` the B operand as lowered."""
    loc = source_location(op)
    if not isinstance(bt, SmemTile):
        raise CompilationError(
            "the B operand of a dot must come straight from a load (optionally transposed with .T)", loc,
            note="the tensor cores read B from shared memory exactly as it was loaded: load B from a tensor that "
                 "already holds the values (only the A operand may be computed in registers)")
    if not isinstance(a, (Tile, SmemTile)):
        raise InternalCompilerError("the A operand of a dot is neither a shared-memory nor a register tile",
                                    op=op.name, location=loc)
    if a.elem != bt.elem:   # the frontend and the verifier (`dot-dtype`) guarantee equal operand types
        raise InternalCompilerError(f"dot operands have different types ({a.elem}, {bt.elem})", op=op.name,
                                    location=loc)
    if a.elem not in _PTX_TYPE:
        raise CompilationError(
            f"dot on {a.elem} operands is not supported on the GPU", loc,
            note="the tensor cores take bf16, f16 or fp8 (f8e4m3, f8e5m2) operands: store A and B as bf16 or f16 "
                 "tensors (the accumulator stays f32), or compile with target='cpu'")
    m, kdim = a.shape
    n = bt.shape[1]
    if n > 256 or n % 8:
        raise CompilationError(f"dot tile N={n} must be a multiple of 8 and at most 256", loc,
                               note="choose BLOCK_N in 8..256, a multiple of 8 (wgmma computes N = 8..256 "
                                    "columns per instruction)")
    if isinstance(a, Tile):
        if a.elem not in _REGISTER_A_TYPES:
            raise CompilationError(
                "a dot with A in registers needs 16-bit operands", loc,
                note=f"the tensor cores read an {a.elem} A operand from shared memory only: pass the loaded tile "
                     f"to the dot unchanged (apply the computation before A is stored), or use bf16/f16 operands")
        ksz = 16
    else:
        if a.transposed:
            raise CompilationError(
                "a transposed A operand is not supported by the GPU backend", loc,
                note="store A as [M, K] (K contiguous) and load [BLOCK_M, BLOCK_K] tiles: the tensor cores read A "
                     "from shared memory K-major only")
        if a.elem not in _REGISTER_A_TYPES and not bt.transposed:
            raise CompilationError(
                "an fp8 dot needs a K-major B operand", loc,
                note="store B as [N, K] (K contiguous), load [BLOCK_N, BLOCK_K] tiles and use b.T in the dot "
                     "(as examples/gemm_fp8.tawa does)")
        ksz = 32 // elem_bytes(a.elem)
    if kdim % ksz:
        raise CompilationError(f"dot tile K={kdim} must be a multiple of {ksz}", loc,
                               note=f"choose BLOCK_K as a multiple of {ksz} for {a.elem} operands (one wgmma "
                                    f"step reads 32 bytes of K)")


def lower_dot(ctx: Ctx, op) -> None:
    from .shape import convert
    precomputed = ctx.schedule.precomputed_dot(ctx, op)
    if precomputed is not None:     # the loop's schedule issued this dot ahead, in the previous iteration
        ctx.set(op.results[0], precomputed)
        return
    a, bt, acc = (ctx.get(v) for v in op.operands)
    _check_operands(op, a, bt)
    if isinstance(a, Tile):
        return _lower_dot_register_a(ctx, op, a, bt, acc)
    layout = L.parse(attrs.LAYOUT.get(op))
    acc = convert(ctx, acc, layout)
    scale_d = ctx.schedule.scale_d(ctx, op)
    ctx.schedule.before_dot_issue(ctx, op)
    regs = issue_shared(ctx, a, bt, list(acc.regs), scale_d)
    _finish(ctx, op, regs, layout)


def issue_shared(ctx: Ctx, a: SmemTile, bt: SmemTile, regs: list, scale_d) -> list:
    """Issue the wgmmas of `acc + a @ bt` with both operands in shared memory, and commit them as one group (no
    wait): `wgmma.fence`, then per 64-row slab of each warp group and per k-step one wgmma. Returns the new
    accumulator registers, which are in flight until a `wgmma.wait_group` covers the group."""
    m, kdim = a.shape
    n = bt.shape[1]
    ksz = 32 // elem_bytes(a.elem)
    b = ctx.b
    groups = max(ctx.num_warps // 4, 1)
    slabs = m // (64 * groups)
    per_slab = n // 2
    sync.wgmma_fence(b)
    regs = list(regs)
    for s in range(slabs):
        # Rows of this warp group's slab s: 64 * (s * groups + warp_group).
        row0 = b.mul(b.add(ctx.warp_group(), s * groups), 64) if groups > 1 else b.i32(64 * s)
        chunk = regs[s * per_slab:(s + 1) * per_slab]
        for kk in range(kdim // ksz):
            da = _operand_a(ctx, a, row0, kk, ksz)
            db, trans_b = _operand_b(ctx, bt, kk, ksz)
            chunk = wgmma(b, chunk, da, db, scale_d if kk == 0 else b.i32(1), n, ksz, a.elem, trans_b)
        regs[s * per_slab:(s + 1) * per_slab] = chunk
    sync.wgmma_commit(b)
    return regs


def _finish(ctx: Ctx, op, regs: list, layout) -> None:
    """The wgmma wait policy, written once (the group is committed): a dot the loop's schedule keeps in flight leaves one
    group pending (the schedule waits for it later), any other dot waits for completion and fences its
    accumulators so that nothing reads them early."""
    b = ctx.b
    ctx.schedule.after_dot_issue(ctx, op)
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
    wgmma with no data movement: registers 8kk .. 8kk+7 of each slab, packed in pairs.

    Every fragment is packed before `wgmma.fence` and passed through `fence_registers`: a register written
    between the fence and the wgmma that reads it makes ptxas insert a warp-group arrive there and serialize
    every wgmma of the kernel (note C7519), and LLVM would otherwise sink the packing next to its use."""
    from .shape import convert
    m, kdim = a.shape
    n = bt.shape[1]
    a = convert(ctx, a, L.mma(m, kdim, ctx.num_warps))
    layout = L.parse(attrs.LAYOUT.get(op))
    acc = convert(ctx, acc, layout)
    b = ctx.b
    groups = max(ctx.num_warps // 4, 1)
    slabs = m // (64 * groups)
    per_slab, a_per_slab = n // 2, kdim // 2
    scale_d = ctx.schedule.scale_d(ctx, op)
    steps = [(s, kk) for s in range(slabs) for kk in range(kdim // 16)]
    packed = []
    for s, kk in steps:
        r = a.regs[s * a_per_slab + 8 * kk: s * a_per_slab + 8 * kk + 8]
        packed.extend(_pack2(b, r[2 * j], r[2 * j + 1]) for j in range(4))
    packed = sync.fence_registers(b, packed)
    frags = {step: packed[4 * i:4 * i + 4] for i, step in enumerate(steps)}
    ctx.schedule.before_dot_issue(ctx, op)
    sync.wgmma_fence(b)
    regs = list(acc.regs)
    for s in range(slabs):
        chunk = regs[s * per_slab:(s + 1) * per_slab]
        for kk in range(kdim // 16):
            db, trans_b = _operand_b(ctx, bt, kk, 16)
            chunk = wgmma(b, chunk, frags[(s, kk)], db, scale_d if kk == 0 else b.i32(1), n, 16, a.elem, trans_b)
        regs[s * per_slab:(s + 1) * per_slab] = chunk
    sync.wgmma_commit(b)
    _finish(ctx, op, regs, layout)
