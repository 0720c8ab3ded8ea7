"""Lowering of `tawa.dot` to Hopper wgmma with shared-memory descriptors computed here.

Operands live in shared memory as TMA wrote them: row-major `[rows, cols]` with swizzled rows of W = 32, 64 or 128
bytes (`assign_layouts.smem_swizzle`: rows are cut into column boxes of the widest of them that divides the row,
box j at byte `j * rows * W`). The accumulator is a register tile in the
`mma` layout. Per 64-row slab of each warp group and per k-step (32 bytes of K) one
`wgmma.mma_async.m64nNk{8,16,32}` is issued through inline PTX (so that the accumulate-or-overwrite input can be a
run-time predicate: the first dot of a loop whose accumulator starts at zero overwrites).

Descriptors (PTX ISA "matrix descriptor"; CUTLASS's canonical GMMA layouts):
  bits 0-13 start address >> 4, 16-29 leading byte offset >> 4, 32-45 stride byte offset >> 4, 62-63 swizzle
  (1 = 128 bytes, 2 = 64, 3 = 32).
- K-major operand (A as loaded; B loaded as [N, K] and transposed): rows of W bytes, 8-row atoms 8W bytes apart
  (SBO); one k-step moves the start address by 32 bytes inside the swizzle atom, and crosses to the next column
  box every 128 bytes.
- MN-major operand (B loaded as [K, N], N contiguous: `tnspB`; A loaded as [K, M] and transposed: `tnspA`, 16-bit
  types only): column boxes of W / elem elements along M or N are `rows * W` bytes apart (LBO), 8-row K groups
  8W bytes apart (SBO); a k-step moves 16 rows.

Element types: bf16 and f16, fp8 (e4m3, e5m2: K-major operands only) and f32, which runs as tf32 (K-major
operands only; the tensor cores read the top 19 bits of each f32, so operands lose their 13 low mantissa bits).

A from registers: a computed A, an A of fewer rows than a 64-row wgmma (M of 16 or 32), and a transposed fp8 or
f32 A (which wgmma cannot read from shared memory) are given to wgmma in registers, in its A fragment layout
(`layouts.wgmma_a`). Such a dot completes before anything else may reuse those registers.
"""
from __future__ import annotations

from tawa import hopper
from tawa.errors import CompilationError, InternalCompilerError

from .. import layouts as L
from ..assign_layouts import smem_swizzle
from . import sync
from .builder import Builder, V
from tawa.ir import attrs
from tawa.ir.location import source_location
from tawa.ir.ops import DotOp
from tawa.ir.types import elem_bytes, elem_type, tile_shape

from .context import SWIZZLE_BYTES, Ctx, SmemTile, Tile, box_offset
from .fp8 import pack_word, storage_type, to_storage

_PTX_TYPE = {"bf16": "bf16", "f16": "f16", "f8E4M3FN": "e4m3", "f8E5M2": "e5m2", "f32": "tf32"}
#: Element types whose shared-memory operands wgmma may read MN-major (transposed).
_TRANSPOSABLE = ("bf16", "f16")
#: The descriptor's swizzle field, by swizzle width in bytes.
_SWIZZLE_MODE = {128: 1, 64: 2, 32: 3}


def k_step(elem: str) -> int:
    """Elements of K one wgmma reads: 32 bytes (k16 for 16-bit types, k8 for tf32, k32 for fp8)."""
    return 32 // elem_bytes(elem)


def _desc_low(b: Builder, addr: V, lbo: int) -> V:
    """Bits 0-31 of a descriptor: start address >> 4 (bits 0-13) and the leading byte offset >> 4 (16-29)."""
    return b.or_(b.and_(b.shr(addr, 4), 0x3FFF), ((lbo >> 4) & 0x3FFF) << 16)


def _desc_from_low(b: Builder, lo: V, sbo: int, swizzle: int) -> V:
    hi = ((sbo >> 4) & 0x3FFF) | (_SWIZZLE_MODE[swizzle] << 30)    # bits 32-45 SBO, bits 62-63 swizzle mode
    return b.or_(b.cast("extui", lo, "i64"), b.const(hi << 32, "i64"))


class Descriptors:
    """The wgmma descriptors of one issue of wgmmas (every k-step of every 64-row slab).

    An operand's descriptor at k-step kk differs from the one at its first k-step only by a constant byte offset
    (the k-step's place in its swizzle atom and column box). The low word is computed once per operand and the
    k-steps add `offset >> 4` to it: one integer add per wgmma instead of an add, a shift and two logic ops. The
    addition cannot carry out of the 14-bit address field, which holds `address >> 4` of a shared-window address:
    those stay below 2^18 bytes (the SM has 228 KiB of shared memory)."""

    def __init__(self, ctx: Ctx):
        self.ctx = ctx
        self.low = {}

    def at(self, offset: V, start, scale: int, const_off: int, lbo: int, sbo: int, swizzle: int) -> V:
        """The descriptor of the operand at shared byte offset `offset + start * scale + const_off` (`start`: an
        i32 value or an int; the result 16-byte aligned)."""
        b = self.ctx.b
        if not isinstance(start, V):
            start, const_off = 0, const_off + start * scale
        key = (offset.name, getattr(start, "name", 0), scale, lbo)
        if key not in self.low:
            base = b.add(offset, b.mul(start, scale)) if isinstance(start, V) else offset
            self.low[key] = _desc_low(b, self.ctx.smem_addr(base), lbo)
        return _desc_from_low(b, b.add(self.low[key], const_off >> 4), sbo, swizzle)


def wgmma(b: Builder, acc: list, desc_a, desc_b: V, scale_d: V, n: int, k: int, in_type: str,
          trans_b: bool, trans_a: bool = False) -> list:
    """One warpgroup MMA m64nNkK, f32 accumulators in `acc` (n/2 registers); returns the new accumulators.

    `desc_a` is a shared-memory descriptor, or a list of four i32 registers (A from registers, in wgmma's A
    fragment order). The transpose flags exist for 16-bit types only (the others read K-major operands)."""
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
    if in_type in _TRANSPOSABLE:
        if reg_a and trans_a:
            raise InternalCompilerError("a wgmma was emitted with a transposed A operand in registers")
        tail = f"p, 1, 1, {int(trans_b)}" if reg_a else f"p, 1, 1, {int(trans_a)}, {int(trans_b)}"
    else:
        if trans_a or trans_b:   # check_operands refuses an MN-major fp8/tf32 operand before emitting anything
            raise InternalCompilerError(f"an {in_type} wgmma was emitted with an MN-major operand")
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


def _width(t: SmemTile) -> int:
    w = smem_swizzle(t.cols, t.elem)
    if w is None:   # check_dot_tile refused such a load before anything was emitted
        raise InternalCompilerError(f"a shared tile of {t.cols} {t.elem} columns has no swizzle mode")
    return w


def _k_major(descs: Descriptors, t: SmemTile, row0, kk: int) -> V:
    """Descriptor of a K-major operand (stored [rows of M or N, K]) from row `row0` (i32 value or int), k-step
    `kk`: rows of W bytes, 8-row atoms 8W bytes apart."""
    w = _width(t)
    box, inner = divmod(kk * 32, w)
    return descs.at(t.offset, row0, w, box * t.rows * w + inner, 16, 8 * w, w)


def _mn_major(descs: Descriptors, t: SmemTile, col0, kk: int) -> V:
    """Descriptor of an MN-major operand (stored [K, M or N], 16-bit) from column `col0` (a multiple of the box's
    columns; i32 value or int), k-step `kk` (16 rows): boxes `rows * W` bytes apart, 8-row K groups 8W apart."""
    w = _width(t)
    box_cols = w // elem_bytes(t.elem)
    box_bytes = t.rows * w
    # col0 is a multiple of the box's columns, so col0 // box_cols * box_bytes == col0 * (box_bytes // box_cols)
    return descs.at(t.offset, col0, box_bytes // box_cols, kk * k_step(t.elem) * w, box_bytes, 8 * w, w)


def _operand_a(descs: Descriptors, a: SmemTile, row0, kk: int) -> V:
    """Descriptor of A rows [row0, row0+64), k-step `kk`; a transposed A (stored [K, M]) is MN-major."""
    return _mn_major(descs, a, row0, kk) if a.transposed else _k_major(descs, a, row0, kk)


def _operand_b(descs: Descriptors, bt: SmemTile, kk: int, col0: int = 0) -> tuple:
    """(descriptor, transposed-flag) of B's k-step `kk` from column `col0` of N (`n_chunks`): stored [N, K] and
    transposed it is K-major; stored [K, N] (N contiguous) it is MN-major."""
    if bt.transposed:
        return _k_major(descs, bt, col0, kk), False
    return _mn_major(descs, bt, col0, kk), True


#: Columns of one dot at most: a warp group holds N / 2 accumulator registers a thread per 64-row slab, and 384
#: columns' 192 are what fits beside the addresses and descriptors under the 232-240 registers a consumer group gets.
MAX_DOT_N = 384
#: Rows of a dot tile: one TMA copy of the output tile (or an epilogue operand) moves at most TMA_BOX_MAX.
MAX_DOT_M = hopper.TMA_BOX_MAX


def n_chunks(bt: SmemTile) -> list:
    """(first column, columns) of each wgmma along B's N: one wgmma up to 256 columns; a wider B (a 128x320 tile,
    whose 1440 tiles fill 132 SMs' waves at 4096x14336 where 128x256 leaves a 58% last wave) as a few of nearly
    equal width, cut where a descriptor can start: at a column box (MN-major) or a multiple of 8 rows (K-major).
    The accumulator's registers run along N in 8-column groups (`layouts.mma`), so chunk c owns registers
    [first / 2, (first + columns) / 2) of each slab."""
    n = bt.shape[1]
    if n <= hopper.WGMMA_MAX_N:
        return [(0, n)]
    unit = 8 if bt.transposed else _width(bt) // elem_bytes(bt.elem)
    count = -(-n // hopper.WGMMA_MAX_N)
    width = -(-n // (count * unit)) * unit
    return [(c, min(width, n - c)) for c in range(0, n, width)]


def _register_a(a) -> bool:
    """Whether the dot gives A to wgmma in registers: computed in registers, fewer rows than one 64-row wgmma
    (every warp then feeds the rows it holds: see `layouts.mma`), or transposed in shared memory for a type wgmma
    reads K-major only."""
    return isinstance(a, Tile) or a.shape[0] < L.WGMMA_M or (a.transposed and a.elem not in _TRANSPOSABLE)


#: Element types whose B operand wgmma reads from shared memory in either major order (a B computed in registers
#: is written N-major); the others are read K-major only.
_STAGEABLE_B = ("bf16", "f16")


def stage_b(ctx: Ctx, op, bt: Tile) -> SmemTile:
    """A B operand computed in registers (a weight converted or scaled after its load: `dot(a, w.to(bf16))`),
    written into shared memory as a TMA copy of it would be (128-byte column boxes, 128-byte swizzle), so that
    wgmma reads it as usual: N-major ([K, N], N contiguous), or K-major ([N, K]) where the thread's consecutive
    registers run along K (a weight stored [N, K] and used as `w.T`: its registers were read along K,
    `layouts.shared_read`), each run of registers one vector store. A barrier of the region's threads first lets
    every warp finish its previous dot's reads of the buffer (each dot with a staged B waits for its wgmmas, or
    the loop double-buffers it); after the writes, a proxy fence makes them visible to wgmma and a second barrier
    publishes them. Threads holding copies of an element write the same value."""
    from .shape import register_tile
    loc = source_location(op)
    bt = register_tile(bt, op, ctx)
    if bt.elem not in _STAGEABLE_B:
        raise CompilationError(
            f"the B operand of a dot must come straight from a load for {bt.elem} operands", loc,
            note="the tensor cores read B from shared memory; a B computed in registers is staged there for 16-bit "
                 "types only: compute it in bf16 or f16, or load B from a tensor that already holds the values")
    rows, cols = bt.shape
    es = elem_bytes(bt.elem)
    k_runs = L.vector_runs(bt.layout, 0, 2) if (rows * es) % SWIZZLE_BYTES == 0 else None
    k_major = bool(k_runs) and not L.vector_runs(bt.layout, 1, 2)
    if not k_major and (cols * es) % SWIZZLE_BYTES:
        along_k = L.vector_runs(bt.layout, 0, 2) is not None
        raise CompilationError(
            f"a B operand computed in registers needs rows of a multiple of {SWIZZLE_BYTES} bytes, got {cols} "
            f"{bt.elem} elements", loc, note=f"make BLOCK_N a multiple of {SWIZZLE_BYTES // es}" +
            (f", or BLOCK_K a multiple of {SWIZZLE_BYTES // es} (this B, a transposed load, is written along K)"
             if along_k else ""))
    axis = 0 if k_major else 1
    runs = next((r for w in (4, 2) for r in [L.vector_runs(bt.layout, axis, w)] if r),
                [[i] for i in range(len(bt.regs))])
    b = ctx.b
    size = rows * cols * es
    # Left in flight by the loop's schedule, the dot writes one of two buffers in turn: the barrier below then
    # finds the group that last read it (two iterations ago) complete in every warp group, since each waited for
    # all but its latest group before it.
    parity = ctx.schedule.staging_parity(ctx, op)
    base = ctx.smem.alloc(size * (2 if parity is not None else 1))
    off = b.add(b.i32(base), b.mul(parity, size)) if parity is not None else b.i32(base)
    ctx.sync_threads()
    for run in runs:
        k, n = ctx.coords(bt.layout, run[0])
        addr = box_offset(b, n, k, cols, es) if k_major else box_offset(b, k, n, rows, es)
        ptr = ctx.smem_ptr(b.add(addr, off))
        if len(run) == 1:
            b.line(f"llvm.store {to_storage(b, bt.regs[run[0]])}, {ptr} : {storage_type(bt.elem)}, !llvm.ptr<3>")
            continue
        vec = f"vector<{len(run)}x{bt.elem}>"
        u = b.op(f"llvm.mlir.undef : {vec}", vec)
        for d, r in enumerate(run):
            u = b.op(f"llvm.insertelement {bt.regs[r]}, {u}[{b.i32(d)} : i32] : {vec}", vec)
        b.line(f"llvm.store {u}, {ptr} : {vec}, !llvm.ptr<3>")
    sync.fence_proxy_async(b)
    ctx.sync_threads()
    if k_major:
        return SmemTile(off, cols, rows, bt.elem, transposed=True, staged=parity is None)
    return SmemTile(off, rows, cols, bt.elem, staged=parity is None)


def check_operands(op, a, bt) -> None:
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
            note="the tensor cores take bf16, f16, fp8 (f8e4m3, f8e5m2) or f32 (as tf32) operands: convert them "
                 "before storing A and B, or compile with target='cpu'")
    m, kdim = a.shape
    n = bt.shape[1]
    if m > MAX_DOT_M:
        raise CompilationError(f"dot tile M={m} must be at most {MAX_DOT_M}", loc,
                               note=f"choose BLOCK_M of at most {MAX_DOT_M}: the output tile is stored, and an "
                                    f"epilogue's operands loaded, by copies of at most {MAX_DOT_M} rows")
    if n > MAX_DOT_N or n % 8 or any(w > hopper.WGMMA_MAX_N for _, w in n_chunks(bt)):
        raise CompilationError(f"dot tile N={n} must be a multiple of 8 and at most {MAX_DOT_N}", loc,
                               note=f"choose BLOCK_N in 8..{MAX_DOT_N}, a multiple of 8 (wgmma computes N = 8..256 "
                                    f"columns per instruction, a wider tile two; every 64-row slab of the "
                                    f"accumulator takes N / 2 registers a thread)")
    if a.elem not in _TRANSPOSABLE and not bt.transposed:
        kind = "an f32 (tf32)" if a.elem == "f32" else "an fp8"
        raise CompilationError(
            f"{kind} dot needs a K-major B operand", loc,
            note="store B as [N, K] (K contiguous), load [BLOCK_N, BLOCK_K] tiles and use b.T in the dot (as "
                 "examples/gemm_fp8.tawa does): the tensor cores read these types K-major only")
    ksz = k_step(a.elem)
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
    ctx.schedule.before_dot(ctx, op)
    layout = L.parse(attrs.LAYOUT.get(op))     # checks M against the warps (assign-layouts built it)
    frags = ctx.schedule.a_fragments(ctx, op)
    if frags is not None:           # the schedule computed A in registers itself (`ws_register_a_loop`)
        return _lower_dot_given_fragments(ctx, op, frags, layout)
    a, bt, acc = (ctx.get(v) for v in op.operands)
    if isinstance(bt, Tile):
        bt = stage_b(ctx, op, bt)
    check_operands(op, a, bt)
    if _register_a(a):
        return _lower_dot_register_a(ctx, op, a, bt, acc, layout)
    acc = convert(ctx, acc, layout)
    scale_d = ctx.schedule.scale_d(ctx, op)
    ctx.schedule.before_dot_issue(ctx, op)
    regs = issue_shared(ctx, a, bt, list(acc.regs), scale_d)
    _finish(ctx, op, regs, layout, staged_b=bt.staged)


def _slab_rows(ctx: Ctx, m: int, s: int):
    """First row of slab `s` of this thread's warp group: 64 * (s * groups + group); 0 for a 64-row tile over two
    warp groups, which both compute it (copies; see `layouts.mma`)."""
    b = ctx.b
    groups = max(ctx.num_warps // 4, 1)
    if groups == 1:
        return L.WGMMA_M * s
    if m < L.WGMMA_M * groups:
        return 0
    return b.mul(b.add(ctx.warp_group(), s * groups), L.WGMMA_M)


def issue_shared(ctx: Ctx, a: SmemTile, bt: SmemTile, regs: list, scale_d) -> list:
    """Issue the wgmmas of `acc + a @ bt` and commit them as one group (no wait): `wgmma.fence`, then per 64-row
    slab of each warp group and per k-step one wgmma. Returns the new accumulator registers, which are in flight
    until a `wgmma.wait_group` covers the group. An A that wgmma must take from registers (`_register_a`) is read
    from shared memory first, after every earlier wgmma group has completed (their register operands may share
    physical registers with the fragments written here)."""
    m, kdim = a.shape
    n = bt.shape[1]
    if _register_a(a):
        sync.wgmma_wait(ctx.b, 0)
        frags = a_fragments(ctx, a)
        return issue_register_a(ctx, frags, bt, regs, scale_d, m, kdim, n, a.elem)
    ksz = k_step(a.elem)
    b = ctx.b
    groups = max(ctx.num_warps // 4, 1)
    slabs = max(m // (L.WGMMA_M * groups), 1)
    per_slab = n // 2
    sync.wgmma_fence(b)
    regs = list(regs)
    descs = Descriptors(ctx)
    for s in range(slabs):
        row0 = _slab_rows(ctx, m, s)
        chunk = regs[s * per_slab:(s + 1) * per_slab]
        for kk in range(kdim // ksz):
            da = _operand_a(descs, a, row0, kk)
            chunk = _issue_n_chunks(b, descs, bt, kk, chunk, da, scale_d if kk == 0 else b.i32(1), ksz, a.elem,
                                    a.transposed)
        regs[s * per_slab:(s + 1) * per_slab] = chunk
    sync.wgmma_commit(b)
    return regs


def _issue_n_chunks(b: Builder, descs: Descriptors, bt: SmemTile, kk: int, acc: list, da, scale_d: V, ksz: int,
                    elem: str, trans_a: bool = False) -> list:
    """The wgmmas of one 64-row slab's k-step `kk`: one per chunk of N (`n_chunks`), each on its registers."""
    acc = list(acc)
    for col0, width in n_chunks(bt):
        db, trans_b = _operand_b(descs, bt, kk, col0)
        acc[col0 // 2:(col0 + width) // 2] = wgmma(b, acc[col0 // 2:(col0 + width) // 2], da, db, scale_d, width,
                                                   ksz, elem, trans_b, trans_a)
    return acc


def _finish(ctx: Ctx, op, regs: list, layout, register_a: bool = False, staged_b: bool = False) -> None:
    """The wgmma wait policy, written once (the group is committed): a dot the loop's schedule keeps in flight
    leaves one group pending (the schedule waits for it later), any other dot -- and every dot with A in registers,
    which the next iteration rewrites, or with B staged by the threads (`stage_b`), whose buffer the next
    iteration rewrites -- waits for completion and fences its accumulators so that nothing reads them early."""
    b = ctx.b
    ctx.schedule.after_dot_issue(ctx, op)
    pending = 1 if ctx.schedule.keeps_dot_async(op) and not register_a and not staged_b else 0
    sync.wgmma_wait(b, pending)
    ctx.schedule.after_dot_wait(ctx, op)
    if not pending:
        regs = sync.fence_registers(b, regs)
    ctx.set(op.results[0], Tile(regs, layout, "f32"))


def _fragments(ctx: Ctx, a: Tile) -> dict:
    """{(slab, k-step): four packed i32 registers} of a register tile in the `wgmma_a` layout."""
    b = ctx.b
    m, kdim = a.shape
    per = 4 // elem_bytes(a.elem)               # elements per register
    keys = fragment_keys(m, kdim, a.elem, ctx.num_warps)
    packed = []
    for i in range(len(keys)):
        r = a.regs[4 * per * i: 4 * per * (i + 1)]
        packed.extend(pack_word(b, r[per * j: per * (j + 1)]) for j in range(4))
    return {key: packed[4 * i: 4 * i + 4] for i, key in enumerate(keys)}


def fragment_keys(m: int, kdim: int, elem: str, num_warps: int) -> list:
    """(slab, k-step) of each wgmma A fragment (four i32 registers) of an m x kdim tile, in register order."""
    slabs = max(m // (L.WGMMA_M * max(num_warps // 4, 1)), 1)
    return [(s, kk) for s in range(slabs) for kk in range(kdim // k_step(elem))]


def fragment_registers(m: int, kdim: int, elem: str, num_warps: int) -> int:
    """i32 registers a thread holds for the wgmma A fragments of an m x kdim tile (`_fragments`)."""
    return 4 * len(fragment_keys(m, kdim, elem, num_warps))


def a_fragments(ctx: Ctx, a, copied: bool = False) -> dict:
    """wgmma A fragments of a register tile, or of a shared tile read into registers (the warps that hold copies
    of rows read the same rows), every register pinned before `wgmma.fence` -- or, `copied`, copied into new
    registers here (`sync.copy_registers`: fragments that replace ones a wgmma in flight until just before may
    still read)."""
    from .shape import convert, read_smem
    m, kdim = a.shape
    lay = L.wgmma_a(m, kdim, ctx.num_warps, elem_bytes(a.elem))
    a = read_smem(ctx, a, lay, sync_after=False) if isinstance(a, SmemTile) else convert(ctx, a, lay)
    frags = _fragments(ctx, a)
    keys = list(frags)
    flat = (sync.copy_registers if copied else sync.fence_registers)(ctx.b, [r for k in keys for r in frags[k]])
    return {k: flat[4 * i: 4 * i + 4] for i, k in enumerate(keys)}


def issue_register_a(ctx: Ctx, frags: dict, bt: SmemTile, regs: list, scale_d, m: int, kdim: int, n: int,
                      elem: str) -> list:
    b = ctx.b
    ksz = k_step(elem)
    slabs = max(m // (L.WGMMA_M * max(ctx.num_warps // 4, 1)), 1)
    per_slab = n // 2
    sync.wgmma_fence(b)
    regs = list(regs)
    descs = Descriptors(ctx)
    for s in range(slabs):
        chunk = regs[s * per_slab:(s + 1) * per_slab]
        for kk in range(kdim // ksz):
            chunk = _issue_n_chunks(b, descs, bt, kk, chunk, frags[(s, kk)], scale_d if kk == 0 else b.i32(1), ksz,
                                    elem)
        regs[s * per_slab:(s + 1) * per_slab] = chunk
    sync.wgmma_commit(b)
    return regs


def _lower_dot_given_fragments(ctx: Ctx, op, flat: list, layout) -> None:
    """A dot whose A fragments (packed i32 registers, `_fragments` order) the loop's schedule computed."""
    from .shape import convert
    dot = DotOp(op)
    bt, acc = ctx.get(dot.b), ctx.get(dot.acc)
    m, kdim = tile_shape(dot.a.type)
    elem = elem_type(dot.a.type)
    check_operands(op, SmemTile(ctx.b.i32(0), m, kdim, elem), bt)     # (A's shape and type stand in for it)
    n = bt.shape[1]
    keys = fragment_keys(m, kdim, elem, ctx.num_warps)
    frags = {key: flat[4 * i: 4 * i + 4] for i, key in enumerate(keys)}
    acc = convert(ctx, acc, layout)
    scale_d = ctx.schedule.scale_d(ctx, op)
    ctx.schedule.before_dot_issue(ctx, op)
    regs = issue_register_a(ctx, frags, bt, list(acc.regs), scale_d, m, kdim, n, elem)
    _finish(ctx, op, regs, layout, register_a=True)


def _lower_dot_register_a(ctx: Ctx, op, a, bt: SmemTile, acc, layout) -> None:
    """A from registers (e.g. attention's P, or a small or transposed A read from shared memory): the wgmma A
    fragment of thread (w, l) holds rows 16w + l/4 (+8) -- for 16-bit types the accumulator layout of a 16-column
    chunk, so an `mma<M x K>` tile feeds wgmma with no data movement.

    Every fragment is packed before `wgmma.fence` and passed through `fence_registers`: a register written
    between the fence and the wgmma that reads it makes ptxas insert a warp-group arrive there and serialize
    every wgmma of the kernel (note C7519), and LLVM would otherwise sink the packing next to its use."""
    from .shape import convert
    m, kdim = a.shape
    n = bt.shape[1]
    frags = a_fragments(ctx, a)
    acc = convert(ctx, acc, layout)
    scale_d = ctx.schedule.scale_d(ctx, op)
    ctx.schedule.before_dot_issue(ctx, op)
    regs = issue_register_a(ctx, frags, bt, list(acc.regs), scale_d, m, kdim, n, a.elem)
    _finish(ctx, op, regs, layout, register_a=True)     # (a staged B waits with it)
