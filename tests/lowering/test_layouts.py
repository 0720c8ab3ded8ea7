"""Layout math: the wgmma accumulator fragment, blocked layouts, slices/expansions, and the string form."""
import itertools

import pytest

from tawa.errors import CompilationError
from tawa.lowering import layouts as L


def _owned(lay):
    out = {}
    for w in range(lay.num_warps):
        for l in range(32):
            for c in L.coords_of(lay, l, w):
                out.setdefault(c, []).append((w, l))
    return out


@pytest.mark.parametrize("m,n,warps", [(64, 8, 4), (128, 128, 4), (128, 256, 8), (256, 128, 8)])
def test_mma_covers_every_element_once(m, n, warps):
    lay = L.mma(m, n, warps)
    owned = _owned(lay)
    assert len(owned) == m * n
    assert all(len(v) == 1 for v in owned.values())


def test_mma_matches_ptx_fragment():
    lay = L.mma(64, 16, 4)
    for w, l in itertools.product(range(4), range(32)):
        got = L.coords_of(lay, l, w)
        want = [(16 * w + l // 4 + 8 * ((i // 2) % 2), 8 * (i // 4) + 2 * (l % 4) + (i % 2)) for i in range(8)]
        assert got == want


def test_blocked_covers_and_replicates_small_tiles():
    lay = L.blocked((4, 1024), 4)
    owned = _owned(lay)
    assert len(owned) == 4 * 1024 and all(len(v) == 1 for v in owned.values())
    small = L.blocked((2, 8), 4)       # fewer elements than threads: replicated
    assert len(_owned(small)) == 16


def test_slice_and_expand_roundtrip_for_broadcast():
    acc = L.mma(128, 128, 4)
    col = L.slice_(acc, 0)              # a bias vector seen by the accumulator's threads
    assert col.shape == (128,)
    assert len(col.regs) == 32          # 16 column pairs... per thread: 8 groups x 2 columns x (no row dup)
    assert L.expand(col, 0).same_mapping(L.collapse(acc, (1, 128)))
    row = L.slice_(acc, 1)
    assert len(row.regs) == 4           # rows r, r+8, r+64, r+72


def test_parse_roundtrip():
    for lay in [L.mma(128, 256, 8), L.blocked((4, 1024), 4), L.slice_(L.mma(128, 128, 4), 1),
                L.expand(L.slice_(L.blocked((8, 64), 4), 0), 0), L.transpose(L.blocked((16, 32), 4))]:
        again = L.parse(lay.desc)
        assert again.same_mapping(lay) and again.desc == lay.desc


def test_bad_layouts_are_errors():
    with pytest.raises(CompilationError):
        L.mma(96, 128, 4)
    with pytest.raises(CompilationError):
        L.blocked((3, 64), 4)


def test_shared_read_runs_along_the_stored_rows():
    """A shared tile is read in the blocked layout of the tile as stored: a transposed use ([64, 128] as the `.T`
    of a stored [128, 64]) gives each thread four consecutive elements along the used tile's rows, its stored
    columns, as `vector_runs` along axis 0 finds them; an untransposed use, along axis 1."""
    plain = L.shared_read((64, 128), False, 4)
    trans = L.shared_read((64, 128), True, 4)
    assert trans.shape == plain.shape == (64, 128)
    assert L.vector_runs(trans, 0, 4) and not L.vector_runs(trans, 1, 2)
    assert L.vector_runs(plain, 1, 4) and not L.vector_runs(plain, 0, 2)
    for lay in (plain, trans):      # every element once
        seen = {tuple(c) for lane in range(32) for warp in range(4) for c in L.coords_of(lay, lane, warp)}
        assert len(seen) == 64 * 128


def test_vector_runs_need_aligned_starts_in_every_thread():
    """Runs of 8 along a blocked layout's 4-element vectors do not exist (lanes step by 4 columns); the mma
    accumulator has pairs along N but no runs of 4."""
    plain = L.blocked((64, 128), 4)
    assert L.vector_runs(plain, 1, 8) is None
    runs = L.vector_runs(plain, 1, 2)
    assert runs and all(len(r) == 2 for r in runs) and sorted(sum(runs, [])) == list(range(len(plain.regs)))
    acc = L.mma(128, 128, 8)
    assert L.vector_runs(acc, 1, 2) and L.vector_runs(acc, 1, 4) is None


def test_a_free_tile_of_a_non_power_of_two_extent_takes_the_accumulator_layout():
    """Zeros of a 128x192 output tile (stored where a branch skips the main loop) have no op to lay them out: they
    take the wgmma accumulator fragment, which covers any multiple of 8 columns; blocked layouts need powers of two,
    so a tile of 100 columns is still refused."""
    from tawa.errors import CompilationError
    from tawa.lowering.assign_layouts import _generic_layout
    assert _generic_layout((128, 192), 8).desc.startswith("mma<")
    assert _generic_layout((64, 96), 4).desc.startswith("mma<")
    assert not _generic_layout((128, 256), 8).desc.startswith("mma<")
    with pytest.raises(CompilationError, match="not a power of two"):
        _generic_layout((128, 100), 8)


@pytest.mark.parametrize("m,k,warps", [(64, 64, 4), (64, 128, 4), (128, 128, 8), (128, 64, 4), (192, 128, 12)])
def test_quad_shuffles_move_fp8_scores_into_a_fragments(m, k, warps):
    # Play the plan's shuffles: in each, every lane sends two of its register pairs; the reader takes the lane and
    # half its quad position says. Each reader must end up with the bytes of its wgmma A fragment, in order.
    src, dst = L.mma(m, k, warps), L.wgmma_a(m, k, warps, 1)
    plan = L.quad_shuffle_plan(src, dst)
    assert plan is not None and len(plan) == len(dst.regs) // 4
    for warp in range(warps):
        held = [L.coords_of(src, lane, warp) for lane in range(32)]
        for lane in range(32):
            q, quad = lane % 4, lane - lane % 4
            got = []
            for rounds in plan:
                for pairs, source, kept in rounds:
                    sender, pair = held[quad + source[q]], pairs[kept[q]]
                    got += [sender[2 * pair], sender[2 * pair + 1]]
            assert got == L.coords_of(dst, lane, warp)


def test_quad_shuffles_only_where_quads_trade_register_pairs():
    # a generic layout spreads a row over more than a quad; a transposed one puts columns on the lanes' row bits
    assert L.quad_shuffle_plan(L.blocked((64, 64), 4), L.wgmma_a(64, 64, 4, 1)) is None
    assert L.quad_shuffle_plan(L.mma(64, 64, 4), L.transpose(L.mma(64, 64, 4))) is None
    assert L.quad_shuffle_plan(L.mma(64, 64, 4), L.mma(128, 64, 8)) is None
