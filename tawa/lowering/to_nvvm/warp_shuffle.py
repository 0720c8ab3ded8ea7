"""Layout conversions of byte tiles inside each warp, by shuffles instead of through shared memory.

fp8 attention rounds P to e4m3 in the first dot's accumulator layout (`mma`: a thread holds column pairs 2q, 2q+1
of every 8 columns, q = lane % 4), while the second dot takes P as wgmma A fragments (`wgmma_a` of 1-byte
elements: four consecutive columns 4q .. 4q+3 of every 16). Both layouts give each warp the same rows and columns,
so only the four lanes of a quad trade values. `convert` in `shape.py` moves a tile between layouts through
shared memory with a barrier over every consumer thread on each side: inside a consumer loop that barrier runs
every iteration and joins the two consumer warp groups, so neither overlaps the other (an fp8 attention kernel
ran at a fifth of the bf16 one's speed). Here each destination register (four bytes, two column pairs) is put
together from two shuffles: in each, every lane sends one register holding two of its column pairs and the
reader keeps the half it needs.

`layouts.quad_shuffle_plan` derives the exchange from the two layouts; where it has none, the caller takes the
shared-memory path.
"""
from __future__ import annotations

from .. import layouts as L
from .builder import Builder, V
from .fp8 import from_storage, pack_word, storage_type


def convert_by_shuffles(ctx, tile, layout):
    """`tile` (1-byte elements) in `layout` through warp shuffles, or None where there is no plan."""
    from .context import Tile
    from .sync import shfl
    # (bytes of data only: an i1 mask, also one byte wide, is no i8 in the emitted code)
    if storage_type(tile.elem) != "i8" or tile.uniform or len(tile.regs) != len(tile.layout.regs):
        return None
    plan = L.quad_shuffle_plan(tile.layout, layout)
    if plan is None:
        return None
    b = ctx.b
    lane = ctx.lane()
    quad = b.op(f"arith.andi {lane}, {b.i32(3)} : i32", "i32")
    quad_base = b.op(f"arith.andi {lane}, {b.i32(~3)} : i32", "i32")
    quad_bits = b.op(f"arith.shli {quad}, {b.i32(3)} : i32", "i32")
    by_quad = {}

    def per_quad(table: tuple, scale: int) -> V:
        """table[lane % 4] * scale for this lane (one shift of a packed constant)."""
        if (table, scale) not in by_quad:
            packed = sum((v * scale) << (8 * q) for q, v in enumerate(table))
            value = b.op(f"arith.shrui {b.i32(packed)}, {quad_bits} : i32", "i32")
            by_quad[(table, scale)] = b.op(f"arith.andi {value}, {b.i32(255)} : i32", "i32")
        return by_quad[(table, scale)]

    sent_words = {}

    def sent(pairs: tuple) -> V:
        if pairs not in sent_words:
            regs = [tile.regs[2 * p + e] for p in pairs for e in (0, 1)]
            sent_words[pairs] = pack_word(b, regs)
        return sent_words[pairs]

    out = []
    for rounds in plan:
        halves = []
        for pairs, source, kept in rounds:
            from_lane = b.op(f"arith.ori {quad_base}, {per_quad(source, 1)} : i32", "i32")
            got = shfl(b, sent(pairs), from_lane, "idx")
            halves.append(b.op(f"arith.andi {b.op(f'arith.shrui {got}, {per_quad(kept, 16)} : i32', 'i32')}, "
                               f"{b.i32(0xFFFF)} : i32", "i32"))
        word = b.op(f"arith.ori {halves[0]}, {b.op(f'arith.shli {halves[1]}, {b.i32(16)} : i32', 'i32')} : i32",
                    "i32")
        out.extend(from_storage(b, byte, tile.elem) for byte in _unpack_bytes(b, word))
    return Tile(out, layout, tile.elem)


def _unpack_bytes(b: Builder, word: V) -> list:
    vec = b.op(f"llvm.bitcast {word} : i32 to vector<4xi8>", "vector<4xi8>")
    return [b.op(f"llvm.extractelement {vec}[{b.i32(i)} : i32] : vector<4xi8>", "i8") for i in range(4)]
