"""Where the backend reads a shared tile that TMA wrote (`to_nvvm.shape.smem_offset`), against a model of the copy
engine: a tile is written as column boxes of the swizzle width (box j after boxes 0..j-1, each `rows` lines of the
width), and the swizzle is a function of the address, as the hardware applies it: the 16-byte chunk at address a
moves to chunk (a >> 4) ^ ((a >> 7) & (width // 16 - 1)) of its line. Tiles of fewer than 8 rows (a [1, 64] i32
row of segment ids delivered through a ring slot) have boxes that do not start on a swizzle atom: read with the
rows' own phase, attention masked by such a row went wrong on the GPU (relative error 0.5)."""
import pytest

from tawa.ir.types import elem_bytes
from tawa.lowering.assign_layouts import smem_swizzle
from tawa.lowering.to_nvvm.context import SmemTile
from tawa.lowering.to_nvvm.shape import smem_offset


class _IntBuilder:
    """The builder calls smem_offset makes, on Python integers."""
    def add(self, a, b): return a + b
    def mul(self, a, b): return a * b
    def shr(self, a, b): return a >> b
    def shl(self, a, b): return a << b
    def and_(self, a, b): return a & b
    def xor(self, a, b): return a ^ b


class _Ctx:
    b = _IntBuilder()


def _tma_address(row, col, rows, cols, elem):
    """Where the copy engine puts element (row, col) of a rows x cols tile (tile base 1024-aligned)."""
    es = elem_bytes(elem)
    w = smem_swizzle(cols, elem)
    byte = col * es
    linear = (byte // w) * rows * w + row * w + byte % w
    return linear ^ (((linear >> 7) & (w // 16 - 1)) << 4)


@pytest.mark.parametrize("rows", [1, 2, 4, 8, 16, 24, 64])
@pytest.mark.parametrize("cols,elem", [(64, "i32"), (32, "i32"), (128, "bf16"), (64, "bf16"), (32, "bf16"),
                                       (16, "bf16"), (48, "bf16"), (96, "f32")])
def test_reads_find_what_tma_wrote(rows, cols, elem):
    tile = SmemTile(0, rows, cols, elem)
    for row in range(rows):
        for col in range(cols):
            assert smem_offset(_Ctx(), tile, row, col) == _tma_address(row, col, rows, cols, elem), (row, col)
