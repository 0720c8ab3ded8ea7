"""Register loads and stores of kernels without dots go in vectors (`to_nvvm/vector_access.py`): each thread's
run of consecutive elements along a row is one 4-, 8- or 16-byte access where a uniform test finds every run
aligned and wholly inside or outside the tensor, element by element otherwise; kernels with dots keep their own
paths (TMA, chunked epilogue loads)."""
import pathlib
import re

import pytest

import tawa
from ws_support import spill_bytes

ROOT = pathlib.Path(__file__).resolve().parents[2]
USER = ROOT / "tests" / "e2e" / "kernels" / "user"


def _accesses(ptx: str) -> dict:
    out = {}
    for m in re.finditer(r"\b(ld\.global(?:\.nc)?|st\.global)(\.v[24])?\.(b16|b32|u8)\b", ptx):
        out[m.group(0)] = out.get(m.group(0), 0) + 1
    return out


@pytest.mark.parametrize("kernel,vector", [("rmsnorm", "v2.b32"), ("softmax_temp", "v2.b32"),
                                           ("layernorm", "v4.b32")])
def test_row_kernels_load_and_store_runs_in_vectors(kernel, vector):
    """bf16/f16 rows: four elements a thread in one 8-byte access (`ld.global.nc.v2.b32`, `st.global.v2.b32`),
    layernorm's f32 weight and bias sixteen bytes a load; the element-by-element accesses remain for the
    unaligned branch (odd extents, views at odd offsets)."""
    kernel = tawa.compile(str(USER / f"{kernel}.tawa"), cache=False)
    acc = _accesses(kernel.ptx)
    assert acc.get(f"ld.global.nc.{vector}"), acc
    assert acc.get("st.global.v2.b32"), acc
    assert acc.get("ld.global.nc.b16") and acc.get("st.global.b16"), acc


def test_vector_runs_are_counted_per_thread():
    """A [4, 4096] bf16 tile over 128 threads: 128 elements a thread, 32 runs of four: 32 vector loads of X and 8
    of the [4096] weight, 32 vector stores of Y."""
    acc = _accesses(tawa.compile(str(USER / "rmsnorm.tawa"), cache=False).ptx)
    assert acc["ld.global.nc.v2.b32"] == 32 + 8 and acc["st.global.v2.b32"] == 32, acc


@pytest.mark.parametrize("kernel", ["softmax_temp", "layernorm", "logsumexp"])
def test_vector_accesses_do_not_spill(kernel):
    assert spill_bytes(tawa.compile(str(USER / f"{kernel}.tawa"), cache=False)) == 0


def test_kernels_with_dots_keep_their_accesses():
    """A GEMM's epilogue operand is not loaded through this path: its loads stay as `chunk_loads` makes them."""
    ptx = tawa.compile(str(USER / "gemm_f16_residual.tawa"), cache=False).ptx
    acc = _accesses(ptx)
    assert acc.get("ld.global.nc.b32") or acc.get("ld.global.nc.b16"), acc
    assert not any(".v2." in a or ".v4." in a for a in acc), acc


@pytest.mark.parametrize("options", [{}, {"BLOCK": 128}])
def test_a_transposed_tile_is_stored_along_its_rows(options):
    """`store(Y, ..., x.T)`: the registers run down the output's columns, so the tile is redistributed through
    shared memory into the blocked layout and stored in vectors along the rows (element stores each wrote 32 rows
    a warp: 541 against 1793 GB/s for an 8192x8192 bf16 transpose, H200)."""
    kernel = tawa.compile(str(USER / "transpose.tawa"), cache=False, **options)
    acc = _accesses(kernel.ptx)
    assert acc.get("st.global.v2.b32"), acc
    assert spill_bytes(kernel) == 0


def test_a_3d_tile_tests_every_pitch_it_spans(monkeypatch):
    """The alignment test of a [2, 4, 64] tile of a 3-D tensor reads both row pitches the tile spans (it read only
    the innermost one's, and a view with a 66-element middle pitch took 16-byte accesses 8 bytes off)."""
    from tawa.lowering.to_nvvm import vector_access
    from tawa.lowering.to_nvvm.context import Params
    read, inside = [], []
    stride, aligned = Params.stride, vector_access.runs_aligned

    def spy_stride(self, arg, d):
        if inside:
            read.append(d)
        return stride(self, arg, d)

    def spy_aligned(*args, **kw):
        inside.append(1)
        try:
            return aligned(*args, **kw)
        finally:
            inside.pop()
    monkeypatch.setattr(Params, "stride", spy_stride)
    monkeypatch.setattr(vector_access, "runs_aligned", spy_aligned)
    tawa.compile(str(ROOT / "tests" / "e2e" / "kernels" / "copy_3d.tawa"), cache=False)
    assert set(read) == {0, 1}, read


@pytest.mark.parametrize("source,options", [("transpose.tawa", {"BLOCK": 256}), ("transpose.tawa", {})])
def test_large_tiles_keep_element_accesses(source, options):
    """Tiles of more than MAX_REGISTERS registers a thread keep the element path (a 256x256 transpose: 512 a
    thread; loading them whole in vectors spilled kilobytes), and are not redistributed through shared memory;
    a 64x64 one is."""
    kernel = tawa.compile(str(USER / source), cache=False, **options)
    acc = _accesses(kernel.ptx)
    big = options.get("BLOCK") == 256
    assert bool(acc.get("st.global.v2.b32")) != big, acc
    assert (kernel.compiled.shared_bytes == 0) == big


def test_a_column_store_is_not_redistributed():
    """A [4, 1] column (a row reduction's result): its blocked layout has no runs either, so no shared-memory
    round trip (it added three barriers for nothing)."""
    source = ("@grid(cdiv(M, BM))\n"
              "def colstore(X: f32[M, N], R: f32[M, 1], BM: const = 4, BN: const = 1024):\n"
              "    x = load(X, (program_id(0), 0), (BM, BN))\n"
              "    store(R, (program_id(0), 0), max(x, axis=1)[:, None])\n")
    ptx = tawa.compile(source, cache=False).ptx
    assert len(re.findall(r"bar\.sync", ptx)) <= 3
