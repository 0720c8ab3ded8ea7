"""Register tiles moved between layouts (`to_nvvm.shape.convert`): what the PTX shows of it (the GPU checks are
tests/e2e/test_layout_conversions_gpu.py)."""
import pathlib

from tawa.compiler import compile_source
from tawa.options import CompileOptions


def test_a_tile_of_one_register_a_thread_is_moved_between_layouts():
    # A row vector reduced from a [8, 16] tile holds one register a thread, repeated in no other slot; broadcast onto
    # the [8, 256] tiles of the loop it must go through shared memory (it was taken for a splat: every row read the
    # row of the thread that held it).
    path = pathlib.Path(__file__).resolve().parents[1] / "e2e" / "kernels" / "row_vector_across_layouts.tawa"
    k = compile_source(path.read_text(), str(path), CompileOptions())
    assert "st.shared" in k.ptx and "ld.shared" in k.ptx
