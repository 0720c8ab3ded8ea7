"""Three consumer warp groups: dot tiles of 192 rows, one 64-row wgmma slab per group.

Layouts over 12 warps address the warp group by a coordinate step (`layouts.Layout.group`) rather than by warp
bits; the consumer region runs on 3 groups (512 threads with the producer) at register budgets of 24 + 3 x 160;
the ring's empty barriers expect three arrivals; and the schedules that split tiles between groups refuse.
"""
from __future__ import annotations

import pathlib
import re

import pytest

from tawa.compiler import compile_source
from tawa.errors import CompilationError
from tawa.lowering import emit_ptx, layouts as L
from tawa.options import CompileOptions

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
needs_ptxas = pytest.mark.skipif(emit_ptx.find_ptxas() is None, reason="ptxas not installed")


from test_layouts import _owned  # noqa: E402  (the threads holding each element)


@pytest.mark.parametrize("m,n", [(192, 192), (192, 128), (192, 64), (384, 64)])
def test_the_accumulator_of_three_groups_covers_every_element_once(m, n):
    lay = L.mma(m, n, 12)
    assert lay.num_warps == 12 and lay.groups == 3
    owned = _owned(lay)
    assert len(owned) == m * n and all(len(v) == 1 for v in owned.values())
    # warp group g holds the rows of slabs g, g + 3, ...: 64-row slabs in turn
    for (r, _), [(w, _)] in owned.items():
        assert (r // 64) % 3 == w // 4


def test_slices_of_three_groups_keep_the_group_step_and_blocked_tiles_are_copied_per_group():
    acc = L.mma(192, 128, 12)
    rows = L.slice_(acc, 1)                       # a row statistic (softmax's max): one owner quad per row
    assert rows.groups == 3 and rows.group == (64,)
    assert sorted(_owned(rows)) == [(r,) for r in range(192)]
    cols = L.slice_(acc, 0)                       # a bias seen by the accumulator: every group holds all columns
    assert cols.replicated and not any(cols.group)
    assert L.parse(L.expand(rows, 1).desc).same_mapping(L.expand(rows, 1))
    assert L.parse(acc.desc).same_mapping(acc)
    blocked = L.blocked((64, 128), 12)
    assert blocked.replicated and len(_owned(blocked)) == 64 * 128
    assert all(len(v) == 3 for v in _owned(blocked).values())     # one copy per warp group
    a = L.wgmma_a(192, 64, 12, 1)                 # an fp8 A fragment in registers
    assert len(_owned(a)) == 192 * 64


def test_rows_that_three_groups_cannot_split_are_refused_with_a_note():
    with pytest.raises(CompilationError, match="M=256 is not supported by 3 warp groups") as e:
        L.mma(256, 64, 12)
    assert "192" in e.value.note
    with pytest.raises(CompilationError, match="M=192 is not supported by 2 warp groups") as e:
        L.mma(192, 64, 8)
    assert "three consumer warp groups" in e.value.note


def build(name, constants, **options):
    path = EXAMPLES / f"{name}.tawa"
    return compile_source(path.read_text(), str(path), CompileOptions(constants=dict(constants), **options))


@needs_ptxas
@pytest.mark.parametrize("schedule", ["persistent", "tile"])
def test_gemm_192x192_runs_three_consumer_groups_without_spills(schedule):
    k = build("gemm", {"BLOCK_M": 192, "BLOCK_N": 192}, schedule=schedule)
    assert k.num_threads == 512
    ptx = k.ptx
    # CHECK: the producer gives registers back, each consumer group takes 160 (24 + 3 x 160 <= 512 x 128)
    assert re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+24;", ptx)
    assert re.search(r"setmaxnreg\.inc\.sync\.aligned\.u32\s+160;", ptx)
    # CHECK: one m64n192 wgmma per k-step of 16 per group (4 per 64-deep K block), never serialized
    assert ptx.count("wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16") >= 4
    # CHECK: the consumer region's barrier spans its 384 threads; a ring slot is released by all three groups
    assert re.search(r"bar\.sync\s+2, 384;", ptx)
    inits = re.findall(r"mbarrier\.init\.shared\.b64\s+\[[^\]]+\], (%r\d+);", ptx)
    values = {reg: int(v) for reg, v in re.findall(r"mov\.b32\s+(%r\d+), (\d+);", ptx)}
    assert sorted({values[r] for r in inits}) == [1, 3]        # full: the producer's one; empty: three groups
    notes = [n for n in k.notes if n.startswith("ptxas")]
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", notes[0]), notes
    assert not [n for n in notes[1:] if "C75" in n], notes


@needs_ptxas
@pytest.mark.parametrize("name,constants", [
    ("flash_attention", {"BLOCK_M": 192, "HEAD_DIM": 64, "BLOCK_N": 128}),
    ("flash_attention", {"BLOCK_M": 192, "HEAD_DIM": 64, "BLOCK_N": 128, "CAUSAL": 1}),
    ("swiglu", {"BLOCK_M": 192, "BLOCK_N": 128}),
    ("linear_gelu_residual", {"BLOCK_M": 192, "BLOCK_N": 192}),
    ("gemm_fp8", {"BLOCK_M": 192, "BLOCK_N": 192}),
])
def test_other_kernels_take_192_row_tiles(name, constants):
    k = build(name, constants)
    assert k.num_threads == 512
    notes = [n for n in k.notes if n.startswith("ptxas")]
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", notes[0]), notes
    assert not [n for n in notes[1:] if "C7519" in n or "C7510" in n], notes


def test_schedules_that_split_tiles_between_groups_refuse_192_rows():
    with pytest.raises(CompilationError, match="three consumer warp groups together"):
        build("gemm", {"BLOCK_M": 192, "BLOCK_N": 64}, schedule="pingpong")
    # the compiler's own choice for a tile one group could hold (192 x 64) is not ping-pong
    k = build("swiglu", {"BLOCK_M": 192, "BLOCK_N": 64})
    assert "pingpong" not in " ".join(k.notes) and k.num_threads == 512
    with pytest.raises(CompilationError, match="num_consumer_groups=3 needs dots of 192 rows"):
        build("gemm", {"BLOCK_M": 128}, num_consumer_groups=3)
    # three groups never take ping-pong turns: with a tile one group could hold, the compiler does not choose it
    # (and the 128-row tile is then refused as above), and asking for it is refused with the reason
    with pytest.raises(CompilationError, match="num_consumer_groups=3 needs dots of 192 rows"):
        build("gemm", {"BLOCK_M": 128, "BLOCK_N": 128}, num_consumer_groups=3)
    with pytest.raises(CompilationError, match="turns between two consumer warp groups"):
        build("gemm", {"BLOCK_M": 128, "BLOCK_N": 128}, num_consumer_groups=3, schedule="pingpong")


def test_warp_specialization_off_says_192_rows_need_it():
    with pytest.raises(CompilationError) as e:
        build("gemm", {"BLOCK_M": 192, "BLOCK_N": 128}, warp_specialize=False, num_warps=8)
    assert "three consumer warp groups" in e.value.note


def test_a_dead_row_index_tile_is_not_laid_out():
    """Non-causal attention computes `rows` (a 192-row index tile only the causal mask reads): canonicalize erases
    it, or its blocked layout over 12 warps would be refused (192 is not a power of two)."""
    from tawa.frontend import parse_and_lower
    from tawa.lowering import canonicalize
    path = EXAMPLES / "flash_attention.tawa"
    m = parse_and_lower(path.read_text(), str(path), {"BLOCK_M": 192, "HEAD_DIM": 64})
    assert "tawa.arange" in str(m)
    canonicalize.run(m, CompileOptions())
    assert str(m).count("tawa.arange") == 1          # the key columns' indices stay; the dead row indices go
