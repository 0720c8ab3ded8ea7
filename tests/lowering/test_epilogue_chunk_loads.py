"""An epilogue's register loads issued in chunks, a chunk ahead of the math that reads them (`to_nvvm/chunk_loads.py`),
checked in the PTX: the i32 mask of `gemm_mask` is read with unpredicated 8-byte loads in runs of a chunk (inside
a uniform branch taken where the tile is inside the tensor; element by element, predicated, on the other side),
two chunks before the first staging write, for the cooperative and the ping-pong schedule; a tile whose
accumulators leave no room for two chunks keeps its loads where the store needs them. ptxas assembles each
kernel without spills where the chunks are taken."""
import pathlib
import re

import pytest

import tawa
from ws_support import spill_bytes

ROOT = pathlib.Path(__file__).resolve().parents[2]
MASK = ROOT / "tests" / "e2e" / "kernels" / "user" / "gemm_mask.tawa"
PAIRS = ROOT / "tests" / "e2e" / "kernels" / "pair_loads.tawa"

#: Events of the PTX in order: an unpredicated 8-byte (pair) load, a staging write, a barrier.
EVENT = re.compile(r"^\s*(ld\.global\.nc\.v2\.b32|ld\.global\.nc\.b32|st\.shared|bar\.sync)", re.M)
PREDICATED_PAIR = re.compile(r"@\w+ ld\.global\.nc\.v2\.b32")


def _compile(source, **options):
    return tawa.compile(str(source), cache=False, **options)


def _runs(ptx: str, load: str) -> tuple:
    """(lengths of the runs of `load`s not separated by a staging write or barrier, loads before the first
    staging write)."""
    runs, current, before_first_write, seen_write = [], 0, 0, False
    for m in EVENT.finditer(ptx):
        if m.group(1) == load:
            current += 1
            if not seen_write:
                before_first_write += 1
            continue
        if m.group(1).startswith("ld."):
            continue
        if current:
            runs.append(current)
        current = 0
        if m.group(1) == "st.shared":
            seen_write = True
    if current:
        runs.append(current)
    return runs, before_first_write


@pytest.mark.parametrize("options,pairs_per_thread", [
    ({"BLOCK_N": 256}, 64),                             # cooperative 128x256: 64 rows and 128 mask words a thread
    # ping-pong 128x128: 128 rows a group, 64 pairs; each group's epilogue is a copy of its own in the PTX
    ({"BLOCK_N": 128, "schedule": "pingpong"}, 2 * 64),
], ids=["cooperative-128x256", "pingpong-128x128"])
def test_mask_loads_in_chunks(options, pairs_per_thread):
    kernel = _compile(MASK, **options)
    runs, before = _runs(kernel.compiled.ptx, "ld.global.nc.v2.b32")
    assert sum(runs) == pairs_per_thread, runs
    assert set(runs) == {16}, f"the mask's pair loads are not issued 16 at a time (32 registers): {runs}"
    assert before >= 32, f"only {before} pair loads precede the first staging write (two chunks expected)"
    assert not PREDICATED_PAIR.search(kernel.compiled.ptx), "the per-register paired loads are still emitted"
    assert spill_bytes(kernel) == 0


def test_no_chunks_beside_192_accumulators():
    """Ping-pong 128x192: 192 accumulator registers a thread leave no room for two chunks of mask words; the
    loads stay per register pair (predicated in place), as before."""
    kernel = _compile(MASK, BLOCK_N=192, schedule="pingpong")
    runs, _ = _runs(kernel.compiled.ptx, "ld.global.nc.v2.b32")
    assert not runs
    assert PREDICATED_PAIR.search(kernel.compiled.ptx)


#: An f32 output plus a bf16 operand: of another element size than the output, so the store cannot stage it.
F32_PLUS_BF16 = PAIRS.read_text().replace("S: f32[M, N], ", "") \
    .replace("    s = load(S, (pid_m, pid_n), (BLOCK_M, BLOCK_N))\n", "").replace("acc * s + t", "acc + t")


@pytest.mark.parametrize("schedule", ["persistent", "tile"])
def test_bf16_operand_in_word_loads(schedule):
    """A bf16 operand of an f32 output (128x128, two consumer groups of 64 rows): loaded in chunks, one 4-byte
    load per pair of columns, 32 a thread in runs of 16, for the persistent store (box by box) and the one-tile
    store (the whole tile at once)."""
    assert "acc + t" in F32_PLUS_BF16
    kernel = _compile(F32_PLUS_BF16, BLOCK_M=128, BLOCK_N=128, schedule=schedule)
    ptx = kernel.compiled.ptx
    words, before = _runs(ptx, "ld.global.nc.b32")
    assert sum(words) == 32 and set(words) == {16}, words
    assert before >= 16
    assert not re.search(r"@\w+ ld\.global\.nc\.b32 \w+, \[", ptx), "per-register paired loads remain"
    assert spill_bytes(kernel) == 0
