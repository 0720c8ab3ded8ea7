"""An epilogue's register loads, issued in chunks one chunk ahead of the math that reads them.

A TMA store of a lazy tile (`memory.tma_store_tile`) computes its value register by register, each with the
chain of ops that gives it (`LazyTile`). A register load in that chain (a mask, an operand of another element
type than the output: one the staging does not bring in) was then emitted right before the one result that
needs it, each pair of elements in a predicated load of its own registers, and ptxas issued them a few at a
time, each waiting on DRAM before the next went out: an i32 mask in a 128x256 epilogue cost 23 us per tile (ncu:
the consumers' samples on those loads' long scoreboard outnumbered their main loop's).

Here the store hands over the order in which it will compute its registers, cut into chunks of at most
`MAX_CHUNK` registers of each load; the loads of chunk c + 1 are emitted before the store computes the first
register of chunk c (chunk 0's before anything), so a chunk's loads are in flight together and under the
previous chunk's math, barriers and stores. Each chunk is loaded by `LazyTile.load_batch`: one unpredicated load
per pair of adjacent elements where the tile is inside the tensor (a uniform branch), element by element at its
edges. Two chunks are live at once: the chunk shrinks with the registers the accumulators leave, and there are
no chunks where too few are left (the loads stay where the store needs them, as before).

Which loads: the pending register loads the stored value is computed from, with the stored tile's register
mapping (register i of the load is at the coordinates of register i of the value).
"""
from __future__ import annotations

from mlir import ir

from tawa.ir.ops import LoadOp

from .context import Ctx, LazyTile

#: Registers (of each load, per thread) in one chunk: an i32 operand of a 128x256 cooperative tile's 64-column
#: box is 32.
MAX_CHUNK = 32
#: What an epilogue needs beside the accumulators and the two chunks in flight (addresses, predicates, the
#: staging's offsets), out of the thread's budget (`Ctx.register_budget`: 232 for two consumer groups, 160 for
#: three).
OTHER_REGISTERS = 40
#: Smaller chunks are not worth the branch, nor the registers: the loads then stay where the store needs them
#: (a 192-row tile's three groups, 160 registers each, spilled 170 bytes with chunks of 12).
MIN_CHUNK = 16


def _chain_loads(ctx: Ctx, value: ir.Value) -> list:
    """The lazy register loads (IR values) that `value` is computed from (depth first, last operand first)."""
    found, seen, stack = [], set(), [value]
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        lowered = ctx.env.get(v)
        if not isinstance(lowered, LazyTile):
            continue
        owner = v.owner
        if owner.name == LoadOp.NAME:
            if lowered.loaded:
                found.append(v)
            continue
        stack.extend(owner.operands)
    return found


def chunk_loads(ctx: Ctx, stored: ir.Value, tile: LazyTile, skip=None) -> list:
    """The register loads (lazy tiles) the stored value `stored` (lowered: `tile`) is computed from that are
    loaded in chunks: loads of the stored tile's register mapping that can load a batch, other than `skip` (the
    operand the staging brings in); none where the registers the accumulators leave hold no two chunks, or where
    the kernel is compiled without register overlaps."""
    if not ctx.register_overlap:
        return []
    loads = [ctx.env[v] for v in _chain_loads(ctx, stored)
             if not (skip is not None and v == skip) and ctx.env[v].load_batch is not None
             and ctx.env[v].layout.same_mapping(tile.layout)]
    return loads if _chunk_size(ctx, tile, len(loads)) >= MIN_CHUNK else []


def _chunk_size(ctx: Ctx, tile: LazyTile, loads: int) -> int:
    """Registers of each load in a chunk: two chunks of every load fit beside the accumulators (one register per
    element of the stored tile) in the thread's budget, an even number (pairs of columns stay together)."""
    spare = ctx.register_budget() - OTHER_REGISTERS - len(tile.layout.regs)
    return min(MAX_CHUNK, spare // (2 * max(loads, 1))) // 2 * 2


class ChunkLoads:
    """The register loads of a lazy stored tile, issued in chunks ahead of their use (see module docstring)."""

    def __init__(self, ctx: Ctx, stored: ir.Value, tile: LazyTile, order: list, skip=None):
        self.tiles = chunk_loads(ctx, stored, tile, skip)
        size = _chunk_size(ctx, tile, len(self.tiles))
        self.chunks = [order[k:k + size] for k in range(0, len(order), size)] if self.tiles else []
        self.starts = {chunk[0]: c for c, chunk in enumerate(self.chunks)}
        self.issued = set()
        if self.chunks:
            ctx.overlaps.add("epilogue loads in chunks")

    def __bool__(self) -> bool:
        return bool(self.chunks)

    def start(self) -> None:
        """Emit the first chunk's loads (before the store's first barrier)."""
        self._issue(0)

    def before(self, i: int) -> None:
        """The store is about to compute register `i`: at a chunk's first register, emit the next chunk's loads
        (and this one's, if not yet)."""
        c = self.starts.get(i)
        if c is not None:
            self._issue(c)
            self._issue(c + 1)

    def _issue(self, c: int) -> None:
        if c in self.issued or c >= len(self.chunks):
            return
        self.issued.add(c)
        for t in self.tiles:
            regs = [i for i in self.chunks[c] if not t.emitted(i)]
            if regs:
                for i, value in t.load_batch(regs).items():
                    t.provide(i, value)
