"""The `assign-layouts` pass: give every register tile a distributed layout, written into the IR.

Takes a tawa kernel (docs/ir.md); gives the same kernel with
- `tawa.smem` on each `tawa.load` (and `tawa.trans` of one) whose value only feeds `tawa.dot` operands: that tile
  lives in shared memory (TMA, swizzled boxes of 32, 64 or 128 bytes: `smem_swizzle`) and has no register layout;
- `tawa.layout = "<layout>"` on every other op producing a tile, and `tawa.layouts = [...]` (one entry per
  result, "" for scalars) on `scf.for` / `scf.if` carrying tiles.

Why: the conversion to NVVM needs to know, for every tile, which thread holds which element. Dot results take
the wgmma accumulator layout (`mma<MxN,w=W>`); the layout a value's users want flows backwards (a bias added
to an accumulator is loaded straight into the accumulator's column slice, a loop's zero accumulator is born in
the accumulator layout) and what is left gets a generic `blocked` layout. Reductions produce slices of their
operand's layout, so row statistics of an accumulator stay in registers. Mismatches that remain become
shared-memory conversions in the lowering. Layout strings are parsed by `tawa.lowering.layouts.parse`.

Warp-specialized kernels: each consumer warp-group region is laid out on its own, over its 4 x
`tawa.num_warp_groups` warps (not the kernel's launch size, which includes the producer); the tiles an
`aref_get` returns (and transposes of them) are shared-memory tiles like `tawa.smem` loads; an op other than a dot
that uses one reads it into registers in the `blocked` layout (or straight into its result's layout); the producer
holds no register tiles (its `tawa.aref_load` loads are issued by the puts).

A register A operand of a dot takes wgmma's A fragment layout (`layouts.wgmma_a`: the accumulator layout for
16-bit operands, its own for tf32 and fp8). An fp8 A rounded from a dot's result (attention's P) is the exception:
the rounding keeps the accumulator layout, and its bytes move to the fragment layout by shuffles inside each warp
(`layouts.quad_shuffle_plan`), instead of the f32 math before it running in the fragment layout after a
shared-memory conversion of the scores.
"""
from __future__ import annotations

from contextlib import contextmanager

from mlir import ir
from mlir.dialects import arith

from tawa.errors import CompilationError, TawaError
from tawa import hopper
from tawa.ir import attrs
from tawa.ir.kernel_info import body_block, kernel_function, kernel_num_warps
from tawa.ir.location import source_location
from tawa.ir.ops import (BroadcastOp, DotOp, ExpandDimsOp, ForOp, ReduceOp, SplatOp, SplitKSumOp, TransOp,
                         warp_group_role, warp_groups)
from tawa.ir.traversal import defining_op as owner_op, feeds_dots_only, ops_of, parent_op, walk, walk_block
from tawa.ir.types import elem_bytes, elem_type, tile_bytes, tile_shape

from . import layouts as L

NAME = "assign-layouts"

#: Most values one thread may hold of a register tile. A 256x256 f32 accumulator over one warp group holds 512; a
#: LayerNorm's f32[128, 1024] row block over 4 warps (1024 a thread) took 23 s to compile and spilled 17 KiB, and
#: f32[512, 1024] did not finish in minutes.
MAX_TILE_REGISTERS = 512

#: A tile in shared memory carried out of its iteration or branch (only warp-specialized kernels have such tiles,
#: from arefs): the message, and what to do instead.
SMEM_TILE_MESSAGE = ("a tile loaded for a dot in a warp-specialized kernel cannot leave its loop iteration or "
                     "branch (`{op}`)")
SMEM_TILE_NOTE = ("the producer warps deliver it in a ring slot that is released within the iteration: carry a "
                  "value computed from it (x * 1.0 is a register copy), or compile with warp_specialize=False")


@contextmanager
def _at(op):
    """Errors raised while laying out `op` (an unsupported dot shape, say) point at its source."""
    try:
        yield
    except TawaError as e:
        if e.location is None:
            e.location = source_location(op)
        raise


#: TMA swizzle widths a dot operand's rows may take, narrowest first; wgmma descriptors have a mode for each.
SWIZZLES = (32, 64, hopper.SWIZZLE_BYTES)


def smem_swizzle(cols: int, elem: str) -> int | None:
    """The swizzle width (bytes) of a shared tile whose rows hold `cols` elements, None when no mode fits.

    Rows are cut into column boxes of the widest swizzle that divides them: 128 bytes where they are a multiple of
    128 bytes; else 64 or 32 bytes (BLOCK_K of 16 or 32 for 16-bit operands, one box; head dims of 96 or 80,
    three 64-byte or five 32-byte boxes). wgmma reads all of them: the width only changes the row pitch, the
    boxes' distance and the descriptor's mode (the narrower swizzles conflict more on shared-memory banks)."""
    return swizzle_width(cols * elem_bytes(elem))


def swizzle_width(row_bytes: int) -> int | None:
    """The widest swizzle (bytes) that divides rows of `row_bytes`, None when none does: a dot operand's shared
    tile (`smem_swizzle`) and a TMA store's staging boxes (`epilogue.staging_area`, `to_nvvm.memory`) alike."""
    return next((w for w in reversed(SWIZZLES) if row_bytes % w == 0), None)


#: Rows one TMA copy moves at most ...
COPY_ROWS = hopper.TMA_BOX_MAX
#: ... and a tile read by a dot: a taller one (a K-major B of a 128x320 tile) is copied in equal row blocks.
MAX_DOT_TILE_ROWS = 384


def copy_blocks(rows: int) -> int:
    """In how many copies of equal rows (each at most COPY_ROWS, a multiple of the swizzle's 8-row atom, which the
    swizzle's address bits then keep in step) a tile of `rows` is copied; 0 where it cannot be."""
    blocks = -(-rows // COPY_ROWS)
    if blocks == 1 or (rows % blocks == 0 and (rows // blocks) % 8 == 0):
        return blocks
    return 0


def check_dot_tile(t, location) -> None:
    """Refuse a 2-D tile of type `t` that TMA cannot copy into shared memory for a dot: rows are written as
    swizzled boxes of 32, 64 or 128 bytes, one copy moves at most 256 rows (a taller tile, up to 384 rows, is
    copied in equal blocks of a multiple of 8 rows), and the tile must fit in shared memory. Called here for every
    load feeding dots (both schedules) and by the NVVM conversion for every TMA load it emits (an aref ring's slots
    hold tiles in the same swizzled form)."""
    rows, cols = tile_shape(t)
    elem = elem_type(t)
    box_cols = hopper.SWIZZLE_BYTES // elem_bytes(elem)
    width = smem_swizzle(cols, elem)
    if width is None:
        raise CompilationError(
            f"a tile read by a dot needs rows of a multiple of 32 bytes, got {cols} {elem} elements "
            f"({cols * elem_bytes(elem)} bytes)", location,
            note=f"make the loaded tile's last dimension a multiple of {32 // elem_bytes(elem)} ({box_cols} or more "
                 f"for the widest swizzle): the copy engine writes swizzled boxes of 32, 64 or 128 bytes (a B tile "
                 f"narrower than that can be loaded as [BLOCK_N, BLOCK_K] from a K-major tensor and used as b.T)")
    if rows > MAX_DOT_TILE_ROWS or not copy_blocks(rows):
        raise CompilationError(
            f"a tile read by a dot may have at most {MAX_DOT_TILE_ROWS} rows, copied in equal blocks of at most "
            f"{COPY_ROWS} rows and a multiple of 8, got {rows}", location,
            note=f"one copy moves at most {COPY_ROWS} rows: make the tile's first dimension at most {COPY_ROWS} "
                 f"(BLOCK_M for A, BLOCK_K for a [BLOCK_K, BLOCK_N] B tile), or up to {MAX_DOT_TILE_ROWS} as two "
                 f"equal blocks of a multiple of 8 (BLOCK_N = 320 for a [BLOCK_N, BLOCK_K] B tile)")
    if tile_bytes(t) > hopper.SMEM_FOR_TILES:
        raise CompilationError(
            f"a tile read by a dot takes {tile_bytes(t) // 1024} KiB of shared memory, more than the "
            f"{hopper.SMEM_FOR_TILES // 1024} KiB a block can use", location,
            note="use smaller tiles (BLOCK_M, BLOCK_N or BLOCK_K)")


#: The widest dot tile over one wgmma (`hopper.WGMMA_MAX_N`) whose A a group feeds from registers: 384 columns'
#: 192 accumulator registers and the A fragments beside them serialize the wgmmas (ptxas C7512).
WIDE_REGISTER_A_N = 320


def _check_wide_dot(op, m: int, n: int, warps: int, smem: set) -> None:
    """Refuse a dot tile wider than one wgmma that cannot keep its accumulator in registers: each consumer warp
    group holds N / 2 registers a thread per 64-row slab, so a tile over 256 columns needs one slab per group of at
    most two groups (a 128x320 tile on two groups: 160 registers each; 256x320 spilled 2256 bytes, 192x320 on
    three groups of 160 registers 3332), and an A fed from registers at most 320 columns."""
    if n <= hopper.WGMMA_MAX_N:
        return
    groups = max(warps // 4, 1)
    if groups > 2 or m > L.WGMMA_M * groups:
        raise CompilationError(
            f"a dot tile {n} columns wide needs one 64-row slab per consumer warp group, of at most two groups "
            f"(got {m} rows on {groups})",
            note=f"each warp group holds N / 2 = {n // 2} accumulator registers a thread per 64-row slab: use "
                 f"BLOCK_M = 128 with two consumer groups (or 64), or BLOCK_N of at most {hopper.WGMMA_MAX_N}")
    # (as `to_nvvm.dot._register_a` decides: computed, fewer rows than one wgmma, or a transposed f32 / fp8 tile)
    a = op.operands[0]
    register_a = a not in smem or m < L.WGMMA_M or (_transposed(a) and elem_bytes(elem_type(a.type)) != 2)
    if register_a and n > WIDE_REGISTER_A_N:
        raise CompilationError(
            f"a dot tile {n} columns wide cannot take its A from registers (computed, of fewer than 64 rows, or a "
            f"transposed f32 or fp8 tile): at most {WIDE_REGISTER_A_N}",
            note=f"the {n // 2} accumulator registers and A's fragments beside them do not fit: choose BLOCK_N of "
                 f"at most {WIDE_REGISTER_A_N}")


def _check_smem_uses(ops: list, smem: set) -> None:
    """Shared-memory tiles feed dot operands, directly or through `tawa.trans`; any other use reads the tile into
    registers where it happens (only warp-specialized consumers have such uses: every tile an aref delivers lives
    in shared memory). Refuse, where they happen, a shared tile carried out of a loop iteration or a branch (the
    slot it lives in is released within the iteration) and a dot whose shared-memory operands cannot fit in
    shared memory at all."""
    for op in ops:
        if op.name == "tawa.dot":
            need = sum(tile_bytes(op.operands[i].type) for i in (0, 1) if op.operands[i] in smem)
            if need > hopper.SMEM_FOR_TILES:
                raise CompilationError(
                    f"the operand tiles of this dot take {need // 1024} KiB of shared memory, more than the "
                    f"{hopper.SMEM_FOR_TILES // 1024} KiB a block can use", source_location(op),
                    note="use smaller tiles: the dot reads its [BLOCK_M, BLOCK_K] and [BLOCK_K, BLOCK_N] operand "
                         "tiles from shared memory (reduce BLOCK_K first)")
        elif op.name in ("scf.yield", "scf.for") and any(v in smem for v in op.operands):
            raise CompilationError(SMEM_TILE_MESSAGE.format(op=op.name), source_location(op), note=SMEM_TILE_NOTE)


def _is_tile(v) -> bool:
    return isinstance(v.type, ir.RankedTensorType)


def _shape(v):
    return tuple(ir.RankedTensorType(v.type).shape)


def _generic_layout(shape, num_warps: int):
    """The layout of a register tile no op constrains: blocked; a 2-D tile with an extent that is not a power of
    two (zeros of a 128x192 output tile, stored in a branch that skips the main loop) in the wgmma accumulator
    fragment instead, which covers any multiple of 8 columns, as the accumulator it stands beside."""
    pow2 = all(x > 0 and not x & (x - 1) for x in shape)
    if not pow2 and len(shape) == 2 and shape[1] % 8 == 0 and num_warps % 4 == 0 and \
            (shape[0] % L.WGMMA_M == 0 or shape[0] in (16, 32)):
        try:
            return L.mma(shape[0], shape[1], num_warps)
        except CompilationError:
            pass
    return L.blocked(shape, num_warps)


def _elementwise(op) -> bool:
    return (op.name.startswith("arith.") or op.name.startswith("math.")) and op.results and \
        _is_tile(op.results[0])


def _shuffled_bytes(op, wanted, anchor: dict):
    """For a rounding to 1-byte elements (`.to(f8e4m3)`) whose result is wanted in `wanted`: the layout its
    operand is anchored in, where the bytes can move from it to `wanted` by shuffles inside each warp
    (`layouts.quad_shuffle_plan`: fp8 attention's P, from the scores' accumulator layout to wgmma A fragments);
    else None. The rounding then runs in the operand's layout and its bytes are converted, rather than the f32
    values converted through shared memory before it (a barrier over the consumer threads every iteration)."""
    if wanted is None or op.name != "arith.truncf" or elem_bytes(elem_type(op.results[0].type)) != 1:
        return None
    src = op.operands[0]
    lay = anchor.get(src)
    if lay is None or lay.shape != wanted.shape:
        return None
    return lay if L.quad_shuffle_plan(lay, wanted) is not None else None


#: Accumulator registers per thread a uniform-warp kernel may carry through a loop before it is given a second warp
#: group (above it, 4 warps spill and ptxas serializes the wgmmas).
ACCUMULATOR_REGISTER_LIMIT = 160


def _uniform_num_warps(func, options) -> int:
    """Warps of a uniform-warp kernel: as declared (`@num_warps`, `num_warps=`), else one warp group, or two when
    the f32 dot results live in one loop iteration would take more than ACCUMULATOR_REGISTER_LIMIT registers per
    thread of one warp group (attention's scores plus output accumulator with 128x128 tiles). Recorded on the
    kernel, so the conversion launches as many."""
    if attrs.NUM_WARPS.get(func) is not None or getattr(options, "num_warps", None):
        return kernel_num_warps(func, options)
    for loop in walk(func):
        if loop.name != "scf.for":
            continue
        elems = sum(_shape(op.results[0])[0] * _shape(op.results[0])[1] for op in ops_of(loop.regions[0].blocks[0])
                    if op.name == "tawa.dot" and len(_shape(op.results[0])) == 2)
        if elems // hopper.THREADS_PER_WARP_GROUP > ACCUMULATOR_REGISTER_LIMIT:
            attrs.NUM_WARPS.set(func, 2 * hopper.WARPS_PER_GROUP)
            return 2 * hopper.WARPS_PER_GROUP
    return kernel_num_warps(func, options)


def run(module: ir.Module, options=None) -> ir.Module:
    func = kernel_function(module)
    body = body_block(func)
    groups = warp_groups(func)
    if not groups:
        num_warps = _uniform_num_warps(func, options)
        with _at(func):
            L.blocked((1,), num_warps)    # refuses, at the kernel, a warp count no layout can use
        _assign(walk_block(body), num_warps, module.context)
        return module
    # Warp-specialized: each consumer region is laid out over its own warps; the producer holds no register
    # tiles (its loads are issued by the aref puts, as TMA copies).
    for op in walk_block(body):
        if op.name == "tawa.load" and attrs.AREF_LOAD.get(op) and len(tile_shape(op.results[0].type)) == 2:
            check_dot_tile(op.results[0].type, source_location(op))
    for g in groups:
        if warp_group_role(g) == attrs.CONSUMER:
            _copy_slot_tiles_out_of_branches(g.regions[0].blocks[0])
            _assign(walk_block(g.regions[0].blocks[0]), hopper.WARPS_PER_GROUP * attrs.NUM_WARP_GROUPS.get(g),
                    module.context)
    return module


def _copy_slot_tiles_out_of_branches(block) -> None:
    """A branch that yields a tile of an aref slot as it was delivered, while the other branch computes the value
    (`if k == s: a = a * 2.0` before a dot), yields a register copy of it instead (x * 1.0, or fp8 through f32
    and back: exact): an `if` result is one kind of tile, and a slot is released within its iteration, so the
    shared tile cannot be its result. The dot then reads that operand from registers."""
    slot = set()
    for op in walk_block(block):
        if op.name == "tawa.aref_get":
            slot.update(r for r in op.results if _is_tile(r))
        elif op.name == TransOp.NAME and TransOp(op).src in slot:
            slot.add(op.results[0])
        elif op.name == "scf.yield" and parent_op(op) is not None and parent_op(op).name == "scf.if":
            for i, v in enumerate(op.operands):
                if v not in slot:
                    continue
                with op.location, ir.InsertionPoint(op):
                    if elem_type(v.type).startswith("f8"):       # fp8 has no arithmetic: through f32 and back
                        wide = ir.RankedTensorType.get(tile_shape(v.type), ir.F32Type.get())
                        op.operands[i] = arith.TruncFOp(v.type, arith.ExtFOp(wide, v).result).result
                    else:
                        one = arith.ConstantOp(v.type.element_type, 1.0).result
                        splat = ir.Operation.create(SplatOp.NAME, results=[v.type], operands=[one]).result
                        op.operands[i] = arith.MulFOp(v, splat).result


def _transposed(value) -> bool:
    """Whether a shared tile is used transposed from how it is stored: an odd number of `tawa.trans` back to its
    load or slot (as `to_nvvm.shape.lower_trans` flips `SmemTile.transposed`; `x.T.T` is read as stored)."""
    odd = False
    src = owner_op(value)
    while src is not None and src.name == TransOp.NAME:
        odd = not odd
        src = owner_op(TransOp(src).src)
    return odd


def _is_splat(value) -> bool:
    op = owner_op(value)
    return op is not None and op.name == SplatOp.NAME


def _branch_values(if_op) -> list:
    """(result, value the then-branch yields for it, value the else-branch yields) of an `scf.if` with results
    (which always has both branches)."""
    yields = [ops_of(region.blocks[0])[-1].operands for region in if_op.regions]
    return list(zip(if_op.results, yields[0], yields[1]))


def _yielding_dot(value):
    """The dot whose result `value` is, directly or through the branches of `scf.if`s (a dot on a masked operand
    in one branch and on the loaded one in the other: `mask_elision`), or None."""
    op = owner_op(value)
    if op is None:
        return None
    if op.name == DotOp.NAME:
        return op
    if op.name == "scf.if":
        index = next(i for i, r in enumerate(op.results) if r == value)
        for region in op.regions:
            if len(region.blocks):
                dot = _yielding_dot(ops_of(region.blocks[0])[-1].operands[index])
                if dot is not None:
                    return dot
    return None


def _assign(ops: list, W: int, ctx) -> None:
    """Layouts for the tiles produced by `ops` (one kernel body or one warp-group region) over W warps."""
    smem = set()
    for op in ops:
        if op.name == "tawa.aref_get":
            # A slot's tiles are in shared memory as the producer's TMA copies wrote them.
            smem.update(r for r in op.results if _is_tile(r))
        elif op.name == "tawa.load" and not attrs.AREF_LOAD.get(op) and feeds_dots_only(op.results[0]):
            attrs.SMEM.set(op)
            smem.add(op.results[0])
            check_dot_tile(op.results[0].type, source_location(op))
    for op in ops:
        if op.name == TransOp.NAME and TransOp(op).src in smem:
            attrs.SMEM.set(op)
            smem.add(op.results[0])
    _check_smem_uses(ops, smem)

    def mma_for(op):
        m, n = _shape(op.results[0])
        with _at(op):
            _check_wide_dot(op, m, n, W, smem)
            return L.mma(m, n, W)

    # Forward: layouts forced by dots, carried through loops, elementwise ops, reductions and expansions.
    anchor: dict = {}
    for op in ops:
        name = op.name
        if name == "tawa.dot":
            anchor[op.results[0]] = mma_for(op)
        elif _elementwise(op):
            for v in op.operands:
                if v in anchor and _is_tile(v) and anchor[v].shape == _shape(op.results[0]):
                    anchor[op.results[0]] = anchor[v]
                    break
            else:
                # math on a shared tile is done in the layout it is read in (`shared_read`): the other operands
                # (a broadcast scale) are wanted in it, not converted to it every iteration
                for v in op.operands:
                    if v in smem and _shape(v) == _shape(op.results[0]):
                        try:
                            anchor[op.results[0]] = L.shared_read(_shape(v), _transposed(v), W)
                        except CompilationError:
                            pass      # (192 rows hold no blocked layout: a dot's A fragments decide there)
                        break
        elif name == ReduceOp.NAME and ReduceOp(op).src in anchor and _shape(ReduceOp(op).src) and \
                len(_shape(ReduceOp(op).src)) > 1:
            anchor[op.results[0]] = L.slice_(anchor[ReduceOp(op).src], ReduceOp(op).axis)
        elif name == ExpandDimsOp.NAME and ExpandDimsOp(op).src in anchor:
            anchor[op.results[0]] = L.expand(anchor[ExpandDimsOp(op).src], ExpandDimsOp(op).axis)
        elif name == SplitKSumOp.NAME and SplitKSumOp(op).value in anchor:
            anchor[op.results[0]] = anchor[SplitKSumOp(op).value]
        elif name == "scf.if" and op.results:
            # (before its branches: a value either yields from outside, as stream-K's accumulator, anchors it)
            for res, v, w in _branch_values(op):
                if _is_tile(res) and (v in anchor or w in anchor):
                    anchor[res] = anchor.get(v) or anchor[w]
        elif name == "scf.yield" and parent_op(op) is not None and parent_op(op).name == "scf.if":
            # (after its branch, before the ops after the `if`) a result both branches compute is anchored by
            # what a branch yields, so that an epilogue operand read after the `if` (a row scale, a residual) is
            # wanted in that layout too rather than converted through shared memory
            for res, v in zip(parent_op(op).results, op.operands):
                if _is_tile(res) and res not in anchor and v in anchor and anchor[v].shape == _shape(res):
                    anchor[res] = anchor[v]
        elif name == ForOp.NAME:
            loop = ForOp(op)
            for j, res in enumerate(op.results):
                producer = _yielding_dot(loop.yield_op.operands[j])
                if producer is not None:
                    anchor[res] = anchor[loop.iter_args[j]] = mma_for(producer)

    # Backward: what layout do users want?
    want: dict = {}
    for op in reversed(ops):
        name = op.name
        if name == DotOp.NAME:
            dot = DotOp(op)
            want.setdefault(dot.acc, mma_for(op))
            if dot.a not in smem:      # A from registers: wgmma's A fragment layout
                m, k = _shape(dot.a)
                with _at(op):
                    want.setdefault(dot.a, L.wgmma_a(m, k, W, elem_bytes(elem_type(dot.a.type))))
        elif _elementwise(op):
            w = want.get(op.results[0]) or anchor.get(op.results[0])
            if w is not None and _shuffled_bytes(op, want.get(op.results[0]), anchor) is None:
                for v in op.operands:
                    if _is_tile(v) and _shape(v) == w.shape:
                        want.setdefault(v, w)
        elif name == "tawa.broadcast":
            w = want.get(op.results[0])
            if w is not None:
                want.setdefault(BroadcastOp(op).src, L.collapse(w, _shape(BroadcastOp(op).src)))
        elif name == "tawa.expand_dims":
            w = want.get(op.results[0])
            if w is not None:
                want.setdefault(ExpandDimsOp(op).src, L.slice_(w, ExpandDimsOp(op).axis))
        elif name == "scf.yield":
            # (met before the rest of its branch, walking backwards) an `scf.if`'s branch yields what its result
            # is wanted in: an elided mask's select, else converted at the yield through shared memory
            parent = parent_op(op)
            if parent is not None and parent.name == "scf.if":
                for res, v in zip(parent.results, op.operands):
                    w = want.get(res)
                    if w is not None and _is_tile(v) and _shape(v) == w.shape:
                        want.setdefault(v, w)
        elif name == "scf.for":
            body = op.regions[0].blocks[0]
            yield_op = ops_of(body)[-1]
            for j, (res, barg, init) in enumerate(zip(op.results, ForOp(op).iter_args, ForOp(op).inits)):
                w = want.get(barg) or want.get(res)
                if w is None and _is_tile(res):
                    # The loop-carried value's producer inside the body decides (a dot's accumulator).
                    producer = _yielding_dot(yield_op.operands[j])
                    if producer is not None:
                        w = mma_for(producer)
                if w is not None:
                    want.setdefault(init, w)
                    want.setdefault(barg, w)
                    want.setdefault(res, w)
                    want.setdefault(yield_op.operands[j], w)

    layout: dict = {}

    def lay_of(v):
        if v in smem:     # read into registers by the op that uses it (`shape.register_tile`)
            return L.shared_read(_shape(v), _transposed(v), W)
        lay = layout.get(v)
        if lay is None:
            lay = branch_result(v)
        return lay

    def branch_result(v):
        """The layout of an `scf.if` result that its visit left open (both branches compute it: a run-time
        `if act == 1: y = relu(acc) else: ...`), once a branch's value has one; kept, so that the ops after the
        `if` read it in that layout instead of converting it from the generic one."""
        op = owner_op(v)
        if op is None or op.name != "scf.if":
            return None
        for res, then_v, else_v in _branch_values(op):
            if res == v:
                lay = layout.get(then_v) or lay_of(else_v) or lay_of(then_v)
                if lay is not None:
                    layout[v] = lay
                return lay
        return None

    def default(v):
        return want.get(v) or anchor.get(v) or _generic_layout(_shape(v), W)

    def put(op, lay):
        if len(lay.regs) > MAX_TILE_REGISTERS:
            raise CompilationError(
                f"a register tile of {'x'.join(map(str, _shape(op.results[0])))} holds {len(lay.regs)} values per "
                f"thread over {W} warps, more than {MAX_TILE_REGISTERS}: a thread has 255 registers, and code this "
                f"size would take minutes to compile and spill most of it",
                note="use smaller tiles (fewer rows per program, or a loop over column blocks)")
        layout[op.results[0]] = lay
        attrs.LAYOUT.set(op, lay.desc)

    def visit(op):
        name = op.name
        if not op.results:
            return
        res = op.results[0]
        if name == "scf.for":
            descs = []
            for res_j, barg, init in zip(op.results, ForOp(op).iter_args, ForOp(op).inits):
                if _is_tile(res_j):
                    lay = want.get(barg) or lay_of(init) or default(res_j)
                    layout[barg] = layout[res_j] = lay
                    descs.append(lay.desc)
                else:
                    descs.append("")
            attrs.LAYOUTS.set(op, descs)
            return
        if name == "scf.if":
            # Before its branches (and the ops after it) are visited: a value a branch yields from outside
            # decides, the then-branch's first (an elided mask yields the unmasked tile; a stream-K epilogue's
            # else-branch the accumulator), else the branches' own values, later.
            for res_j, v, w in _branch_values(op):
                if _is_tile(res_j):
                    lay = want.get(res_j) or lay_of(v) or lay_of(w)
                    if lay is not None:
                        layout[res_j] = lay
            return
        if not _is_tile(res):
            return
        if res in smem:
            return
        if name == "tawa.dot":
            put(op, mma_for(op))
        elif name == "tawa.reduce":
            src = lay_of(ReduceOp(op).src)
            put(op, L.slice_(src, ReduceOp(op).axis))
        elif name == ExpandDimsOp.NAME:
            put(op, L.expand(lay_of(ExpandDimsOp(op).src), ExpandDimsOp(op).axis))
        elif name == TransOp.NAME:
            put(op, L.transpose(lay_of(TransOp(op).src)))
        elif name == SplitKSumOp.NAME:      # the partials are summed as the threads hold them
            put(op, lay_of(SplitKSumOp(op).value))
        elif _elementwise(op) and name != "arith.constant":
            w = _shuffled_bytes(op, want.get(res), anchor) or want.get(res)
            if w is None:
                # Take the layout of an operand that holds data rather than of a splatted constant: the
                # constant costs nothing in any layout, the data would need a conversion through shared memory.
                candidates = [v for v in op.operands if _is_tile(v) and lay_of(v) is not None
                              and lay_of(v).shape == _shape(res)]
                data = [v for v in candidates if not _is_splat(v)]
                if data or candidates:
                    w = lay_of((data or candidates)[0])
            put(op, w or default(res))
        else:  # load, splat, arange, broadcast, constant
            put(op, default(res))

    for op in ops:
        with _at(op):     # a tile that no layout can hold is refused at its op
            visit(op)

    for op in ops:
        if op.name == "scf.if" and op.results:
            descs = []
            for res, v, w in _branch_values(op):
                if _is_tile(res):
                    # either branch's value decides: the then-branch's may be a nested scf.if's, not laid out yet
                    lay = layout.get(res) or want.get(res) or lay_of(v) or lay_of(w) or default(res)
                    layout[res] = lay
                    descs.append(lay.desc)
                else:
                    descs.append("")
            attrs.LAYOUTS.set(op, descs)
