"""An epilogue operand read through the TMA store's own staging boxes (a residual added before the store).

An epilogue such as `y = gelu(acc + bias) + load(R, (pid_m, pid_n), (BM, BN))` loads a 2-D tile in the
accumulator's (wgmma) layout. Loaded element by element, each warp-wide load touches 8 rows of 8 bytes: 8 partly
used sectors, and a 128x256 tile issues 128 such loads per thread. ncu shows the epilogue then waiting on L1TEX
for most of its time, and the cooperative 128x256 linear layer ran at 62% of the plain GEMM.

When the stored value is computed lazily while it is staged (`memory.tma_store_tile`), such a tile is instead
copied by TMA into the very staging box the result is about to occupy: thread 0 issues the box's copy (coalesced,
zero-filled outside the tensor like the predicated loads), every thread waits on the box's mbarrier, reads its
elements of the box (paired 16-bit elements in one 4-byte shared load, at the swizzled positions the staging
writes use), computes its results, and writes them over what it read. The operand tile has the stored tile's
register mapping, so each thread overwrites exactly the elements it read itself, after reading all of them.

The box mbarriers are used once per staging box; after every thread's wait, thread 0 arrives once more (and waits
for that second phase, which its arrival completes) so that each use completes two phases and every wait for
the data is for parity 0: no phase to carry across a persistent tile loop.
"""
from __future__ import annotations

from mlir import ir

from tawa.ir.ops import LoadOp, StoreOp
from tawa.ir.types import elem_bytes, elem_type

from . import sync
from .builder import V
from .context import Ctx, LazyTile, SWIZZLE_BYTES, swizzled


class StagedOperand:
    """A lazy register load served from the staging boxes of one TMA store (see module docstring)."""

    def __init__(self, ctx: Ctx, value: ir.Value, rows: int, box_cols: int):
        load = LoadOp(value.owner)
        self.ctx = ctx
        self.tile = tile = ctx.get_lazy(value)
        self.rows, self.box_cols = rows, box_cols
        self.box_bytes = rows * SWIZZLE_BYTES
        self.offsets = [ctx.get(v) for v in load.offsets]
        src = load.src
        rank = ir.MemRefType(src.type).rank
        self.tmap = ctx.params.tensormap(ctx.params.arg_index(src), [1] * (rank - 2) + [rows, box_cols],
                                         SWIZZLE_BYTES)
        self._fallback = tile.redirect(self._serve)
        self._box = None                 # (box index, its staging offset) while a box is being staged
        es = elem_bytes(tile.elem)
        by_coord = {c: i for i, c in enumerate(tile.layout.regs)}
        #: registers by box, each with the register holding the next column when a 4-byte read can take both
        self._regs_of_box: dict = {}
        for i, (ro, co) in enumerate(tile.layout.regs):
            pair = by_coord.get((ro, co + 1)) if es == 2 and co % 2 == 0 else None
            if es == 2 and co % 2 == 1 and (ro, co - 1) in by_coord:
                continue                 # read with its even neighbour
            self._regs_of_box.setdefault((co - co % 8) * es // SWIZZLE_BYTES, []).append((i, pair))

    def issue(self, ctx: Ctx, box: int, dst: int, bar: V) -> None:
        """Copy the operand's column box `box` to the staging offset `dst` (caller: the thread issuing stores)."""
        b = ctx.b
        sync.mbarrier_expect_tx(b, bar, self.box_bytes)
        col = b.add(self.offsets[-1], box * self.box_cols) if box else self.offsets[-1]
        coords = [col, self.offsets[-2]] + list(reversed(self.offsets[:-2]))
        sync.tma_load(b, self.tmap, ctx.smem_ptr(b.i32(dst)), bar, coords)

    def read_box(self, ctx: Ctx, box: int, off: int, bar: V) -> None:
        """Wait for box `box` at staging offset `off`, then read all of this thread's elements of it (before any
        of them is overwritten by the result)."""
        b = ctx.b
        sync.mbarrier_wait(b, bar, b.i32(0))
        self._box = (box, off)
        for i, _ in self._regs_of_box.get(box, []):
            self.tile.reg(i)

    def finish_box(self) -> None:
        """The box is overwritten from here on: registers asked for later come from global memory."""
        self._box = None

    @staticmethod
    def release(ctx: Ctx, bar: V) -> None:
        """After every thread's wait (a barrier since): the second phase of this use (thread 0 only), which its
        own arrival completes; thread 0 observes it, so that no phase it arrived on goes unwaited."""
        sync.mbarrier_arrive(ctx.b, bar)
        sync.mbarrier_wait(ctx.b, bar, ctx.b.i32(1))

    def _serve(self, i: int) -> V:
        ro, co = self.tile.layout.regs[i]
        es = elem_bytes(self.tile.elem)
        box = (co - co % 8) * es // SWIZZLE_BYTES
        if self._box is None or self._box[0] != box:
            return self._fallback(i)     # needed outside the staging of its box: loaded from global memory
        ctx = self.ctx
        b = ctx.b
        base = ctx.base_coords(self.tile.layout)
        r = b.add(base[0], ro)
        byte = b.mul(b.add(base[1], co), es)
        ptr = ctx.smem_ptr(b.add(swizzled(b, r, byte), self._box[1]))
        pair = dict(self._regs_of_box[box]).get(i)
        elem = self.tile.elem
        if pair is None:
            return b.op(f"llvm.load {ptr} : !llvm.ptr<3> -> {elem}", elem)
        vec = f"vector<2x{elem}>"
        both = b.op(f"llvm.load {ptr} : !llvm.ptr<3> -> {vec}", vec)
        self.tile.provide(pair, b.op(f"llvm.extractelement {both}[{b.i32(1)} : i32] : {vec}", elem))
        return b.op(f"llvm.extractelement {both}[{b.i32(0)} : i32] : {vec}", elem)


def stored_by_kernel(tensor: ir.Value) -> bool:
    """Whether any `tawa.store` of the kernel writes `tensor` (a kernel argument)."""
    return any(use.owner.name == StoreOp.NAME and StoreOp(use.owner).dst == tensor for use in tensor.uses)


def candidate(ctx: Ctx, value: LazyTile, op):
    """The pending register load (its IR value) that the TMA store `op` of the lazy `value` can bring in through
    its staging boxes: an untouched 2-D tile of a tensor the kernel only reads, with `value`'s shape, register
    mapping and element size (16 or 32 bits); None when there is none."""
    dst = StoreOp(op).dst
    es = elem_bytes(elem_type(dst.type))
    if es not in (2, 4):
        return None
    for v in ctx.pending:
        tile = ctx.env.get(v)
        if not isinstance(tile, LazyTile) or not tile.loaded or tile.touched or v.owner.name != LoadOp.NAME:
            continue
        src = LoadOp(v.owner).src
        if src != dst and not stored_by_kernel(src) and elem_bytes(tile.elem) == es and tile.layout.rank == 2 \
                and tile.layout.same_mapping(value.layout):
            return v
    return None
