"""How much shared memory an epilogue's TMA store stages, for the ring sizing (tile level) and the conversion.

A tile stored with TMA goes registers -> shared staging -> global memory, in column boxes of 128 bytes (64 or 32
where the rows are not a multiple of 128 bytes: attention's O at head dims 96, 80 and 32;
`assign_layouts.swizzle_width`; a row of no such width is stored by each thread). One
program per CTA stages the whole tile, in the ring its main loop drained when that is large enough. A persistent
kernel's ring is never drained (the producer is already filling it for the next tile), so its staging is
separate memory taken from the ring: `STORE_BUFFERS` boxes used in turn, so that writing one box overlaps the
TMA store of the previous one while a 128x256 bf16 tile takes 32 KiB of staging instead of 64 (one more ring
slot).
"""
from __future__ import annotations

from mlir import ir

from tawa.ir.ops import DotOp, LoadOp, StoreOp, TransOp
from tawa.ir.traversal import walk
from tawa.ir.types import elem_bytes, elem_type, tile_shape
from tawa.lowering.assign_layouts import swizzle_width

#: Column boxes of staging a persistent kernel's store cycles through.
STORE_BUFFERS = 2


def staging_key(rows: int, nbox: int, width: int) -> tuple:
    """(box bytes, buffers) of a persistent store's staging for a `rows`-row tile of `nbox` column boxes of
    `width` bytes: what the prefetch that fills it and the store that uses it must agree on."""
    return rows * width, min(nbox, STORE_BUFFERS)


def staging_area(rows: int, cols: int, elem_bytes: int, persistent: bool) -> tuple:
    """(what identifies the area, its bytes) of a TMA store's staging. A persistent kernel keeps one area per
    geometry (`staging_key`), shared by its stores of that geometry,
    so stores of two geometries need both areas; one program per CTA stages in memory that is dead again after
    each store."""
    row_bytes = cols * elem_bytes
    width = swizzle_width(row_bytes)
    if not persistent or width is None:
        return ("whole", rows * row_bytes), rows * row_bytes
    key = staging_key(rows, row_bytes // width, width)
    return key, key[0] * key[1]


def stored_by_kernel(tensor) -> bool:
    """Whether any `tawa.store` of the kernel writes `tensor` (a kernel argument): an epilogue operand read from
    such a tensor is not read-only, and cannot be brought in through the store's staging boxes."""
    return any(use.owner.name == StoreOp.NAME and StoreOp(use.owner).dst == tensor for use in tensor.uses)


def stored_tiles(func_op) -> set:
    """(shape, element bytes) of every 2-D tile the kernel stores through TMA (a store through a view that ends
    writes from registers: `memory.lower_store`)."""
    out = set()
    for op in walk(func_op.operation):
        if op.name == StoreOp.NAME and not StoreOp(op).limits:
            t = StoreOp(op).value.type
            if len(tile_shape(t)) == 2:
                out.add((tuple(tile_shape(t)), elem_bytes(elem_type(t))))
    return out


def read_through_staging(load: LoadOp, stored: set) -> bool:
    """Whether `load` is an epilogue operand the backend can read through a store's staging boxes: a 2-D tile of
    a tensor the kernel never writes, with a stored tile's shape and element size (16 or 32 bits)."""
    t = load.result.type
    shape, es = tile_shape(t), elem_bytes(elem_type(t))
    if len(shape) != 2 or es not in (2, 4) or (tuple(shape), es) not in stored:
        return False
    if any(use.owner.name in (DotOp.NAME, TransOp.NAME) for use in load.result.uses):
        return False        # a dot operand: a shared tile of its own
    return not stored_by_kernel(load.src)


def broadcast_row(load: LoadOp) -> bool:
    """Whether `load` reads a 1-D block of a 1-D tensor the kernel never writes (a bias or a per-column scale,
    broadcast over an epilogue's tile): the backend can bring it in once per block, shared by the threads through
    shared memory, instead of each thread loading every element its registers replicate."""
    t = load.result.type
    return len(tile_shape(t)) == 1 and ir.MemRefType(load.src.type).rank == 1 and not stored_by_kernel(load.src)
