"""What a GEMM-family kernel compiled without tile constants launches per call (`tawa.autotune.launch_defaults`):
64-row tiles and split-K for small M; the tile, schedule, split-K or stream-K that fills the waves best; clusters
where B's rows sit off the 32-byte sector grid; and the options given that keep each rule out."""
from __future__ import annotations

import pytest
from types import SimpleNamespace

from tawa.autotune import launch_defaults

from autotune_support import GEMM_INFO

choose = launch_defaults.shape_defaults

PINGPONG = {"BLOCK_N": 192}            # (ping-pong: the compiler's choice for 128x192, shared where it spills)
NARROW = {"BLOCK_N": 128, "schedule": "persistent"}
SPLIT = {"BLOCK_N": 128, "split_k": 2}
THREE_GROUPS = {"BLOCK_M": 192, "BLOCK_N": 192, "schedule": "persistent"}


@pytest.mark.parametrize("extents, expected", [
    ({"M": 8, "N": 4096, "K": 4096}, {"BLOCK_M": 64, "BLOCK_N": 128, "split_k": 4}),   # 32 tiles: 4 splits
    ({"M": 1, "N": 8192, "K": 8192}, {"BLOCK_M": 64, "BLOCK_N": 128, "split_k": 2}),   # 64 tiles: 2 splits
    ({"M": 64, "N": 14336, "K": 4096}, {"BLOCK_M": 64, "BLOCK_N": 128}),               # 112 tiles: no split
    ({"M": 16, "N": 1024, "K": 8192}, {"BLOCK_M": 64, "BLOCK_N": 128, "split_k": 8}),  # 8 tiles: 8 splits
    ({"M": 64, "N": 2048, "K": 4096}, {"BLOCK_M": 64, "BLOCK_N": 128, "split_k": 8}),  # 16 tiles, 512 deep each
    ({"M": 64, "N": 2048, "K": 4000}, {"BLOCK_M": 64, "BLOCK_N": 128, "split_k": 4}),  # 8 splits too shallow
    # a few hundred rows and columns over a long K: 64-row tiles split while four splits fit a wave
    ({"M": 440, "N": 312, "K": 4800}, {"BLOCK_M": 64, "BLOCK_N": 128, "split_k": 4}),  # 21 tiles: 84 programs
    ({"M": 512, "N": 512, "K": 8192}, {"BLOCK_M": 64, "BLOCK_N": 128, "split_k": 4}),  # 32 tiles: 128
    ({"M": 200, "N": 1000, "K": 3000}, {"BLOCK_M": 64, "BLOCK_N": 128, "split_k": 4}),
    ({"M": 128, "N": 512, "K": 8192}, {"BLOCK_M": 64, "BLOCK_N": 128, "split_k": 8}),  # 8 tiles: 64 programs
    ({"M": 440, "N": 312, "K": 1024}, NARROW),                  # K too short for 4 splits: the rules below
    ({"M": 8, "N": 4096, "K": 512}, {"BLOCK_M": 64, "BLOCK_N": 128}),                  # K too short to split
    ({"M": 65, "N": 4096, "K": 4096}, SPLIT),       # not small M: 16 tiles of 128 x 256, 64 programs split in two
    ({"M": 4096, "N": 4096, "K": 4096}, {}),                                           # 3.9 waves of tiles
    ({"M": 2112, "N": 2048, "K": 8192}, THREE_GROUPS),          # 136 tiles: 1.03 waves; 121 of 192 x 192: 0.89
    ({"M": 1100, "N": 4096, "K": 4096}, THREE_GROUPS),                  # 144 tiles; 132 of 192 x 192: fill 0.93
    ({"M": 2200, "N": 2048, "K": 4096}, THREE_GROUPS),                  # 144 tiles; 132 of 192 x 192
    ({"M": 1100, "N": 2048, "K": 4096}, PINGPONG),          # 66 tiles of 192 x 192 fill half; 99 of 128 x 192
    ({"M": 1200, "N": 5120, "K": 5120}, {"schedule": "streamk"}),                      # 200 tiles: fill 0.71
    ({"M": 1280, "N": 10240, "K": 2048}, {"schedule": "streamk"}),                     # 400 tiles: fill 0.76
    ({"M": 2176, "N": 4096, "K": 1024}, PINGPONG),       # 272 tiles of 128 x 256 fill 0.69, 374 of 128 x 192 0.92
    ({"M": 2176, "N": 4096, "K": 1000}, PINGPONG),
    ({"M": 1536, "N": 6144, "K": 2048}, PINGPONG),                                     # fill 0.73 -> 0.97
    ({"M": 1024, "N": 1024, "K": 1024}, NARROW),                                # 32 tiles -> 64 of 128 x 128
    ({"M": 1024, "N": 2048, "K": 8192}, NARROW),                                # 64 -> 128 tiles: fill 0.97
    ({"M": 1024, "N": 1024, "K": 8192}, SPLIT),                 # 64 tiles of 128 x 128, 128 programs split in two
    ({"M": 2048, "N": 512, "K": 8192}, SPLIT),
    ({"M": 1024, "N": 1024, "K": 2048}, NARROW),                                # K too short to split
    ({"M": 1536, "N": 5120, "K": 5120}, {}),                                           # 240 tiles: fill 0.91
    ({"M": 2816, "N": 5120, "K": 3072}, PINGPONG),                 # fill 0.83; ping-pong 0.89, stream-K 0.87
    ({"M": 4096, "N": 11008, "K": 4096}, {}),                  # fill 0.95; ping-pong 0.93
    ({"M": 4096, "N": 4096, "K": 11008}, {}),                                          # fill 0.97 -> 0.86
    ({"M": 512, "N": 8192, "K": 8192}, {}),                                            # 128 tiles: one wave
    ({"M": 8, "K": 4096}, {}),                                                         # N unknown
])
def test_shape_defaults_pick_small_m_tiles_and_splits(extents, expected):
    assert choose(GEMM_INFO, extents) == expected


A_OFF, B_OFF, BOTH_OFF = (0,), (1,), (0, 1)


@pytest.mark.parametrize("extents, misaligned, expected", [
    # both off the grid: 192x192 pairs along M (fill 0.92) over 128x256 pairs (2.2 waves: 0.69); measured 539
    # against 457 TFLOP/s (H100)
    ({"M": 3000, "N": 3000, "K": 3000}, BOTH_OFF, dict(THREE_GROUPS, cluster="2x1")),
    # 55 rows of 128x256 tiles do not pair without a seventh wave, so 2x1 would have run unpaired (410): 192x192
    # pairs (524)
    ({"M": 7000, "N": 3000, "K": 3000}, BOTH_OFF, dict(THREE_GROUPS, cluster="2x1")),
    ({"M": 9000, "N": 3000, "K": 5000}, BOTH_OFF, dict(THREE_GROUPS, cluster="2x1")),
    ({"M": 2504, "N": 3496, "K": 4504}, BOTH_OFF, dict(PINGPONG, cluster="2x1")),
    ({"M": 5000, "N": 3000, "K": 1000}, BOTH_OFF, {"cluster": "2x1"}),
    # A alone off: 192x192 pairs along N share it (678 against 594 for ping-pong alone) ...
    ({"M": 3072, "N": 3072, "K": 7000}, A_OFF, dict(THREE_GROUPS, cluster="1x2")),
    # ... where the own tile fills as well, it stays (a pair sharing A: within 4% either way)
    ({"M": 2048, "N": 8192, "K": 5000}, A_OFF, {}),
    ({"M": 8192, "N": 4096, "K": 1000}, A_OFF, {}),
    # ... and 128x128, which reads A twice as often per output, is not taken with A off (393 against 490)
    ({"M": 3000, "N": 2048, "K": 1000}, A_OFF, PINGPONG),
    # B alone off
    ({"M": 4096, "N": 3000, "K": 4096}, B_OFF, {"cluster": "2x1"}),
    ({"M": 1100, "N": 5000, "K": 4096}, B_OFF, {"cluster": "2x1"}),
    ({"M": 3000, "N": 5000, "K": 2000}, B_OFF, dict(PINGPONG, cluster="2x1")),
])
def test_rows_off_the_sector_grid_weigh_tiles_and_clusters_together(extents, misaligned, expected):
    """A plain GEMM of a wave or more with A's or B's rows off the sector grid: each tile, alone and in the pairs
    that share the operand off the grid, weighed by its fill as the runtime launches it and what it computes per
    slot with the other unshared (`SECTOR_PENALTIES`); the 21 shapes measured all take their fastest variant."""
    assert choose(GEMM_INFO, extents, misaligned=misaligned) == expected


def test_off_grid_clusters_are_ones_the_runtime_pairs():
    """Every cluster the off-grid rule picks for a plain GEMM is launched in pairs (`tawa.runtime.grid`): the
    runtime runs a cluster alone where rounding its axis to whole pairs would cost a wave, and a rule that picked
    such a cluster paid B's unshared reads without knowing (7000x3000x3000: 2x1 ran unpaired at 410 TFLOP/s)."""
    from tawa.runtime.grid import cluster_size_for
    picked = 0
    for m in (1000, 1100, 2000, 3000, 4500, 7000, 9000):
        for n in (1000, 3000, 5000, 7000, 14336):
            for misaligned in (A_OFF, B_OFF, BOTH_OFF):
                config = choose(GEMM_INFO, {"M": m, "N": n, "K": 3000}, misaligned=misaligned)
                if "cluster" not in config or -(-m // 128) * -(-n // 256) < 132:
                    continue
                bm, bn = config.get("BLOCK_M", 128), config.get("BLOCK_N", 256)
                dims = [int(d) for d in config["cluster"].split("x")]
                grid = (-(-m // bm), -(-n // bn), 1)
                assert cluster_size_for(dims, grid, 132) == 2, (m, n, misaligned, config)
                picked += 1
    assert picked > 20


def test_clustered_fill_matches_the_runtime_walk():
    fill = launch_defaults.clustered_fill
    # alone: the wave fill
    assert fill(3000, 3000, (128, 256), 1, 132, None, 0) == (pytest.approx(0.6936, abs=1e-4), False)
    # 24 tile rows pair as they are; 55 do not without another wave: the launch runs unpaired
    assert fill(3000, 3000, (128, 256), 1, 132, "2x1", 0)[1] is True
    assert fill(7000, 3000, (128, 256), 1, 132, "2x1", 0) == (fill(7000, 3000, (128, 256), 1, 132, None, 0)[0],
                                                               False)
    assert fill(7000, 3000, (128, 256), 1, 132, "1x2", 0)[1] is True
    # the rule does not count a single tile along the paired axis as paired (the runtime could pair it with one
    # past the output)
    assert fill(100, 8192, (128, 256), 1, 132, "2x1", 0)[1] is False
    assert fill(3000, 3000, (128, 256), 1, 0, "2x1", 0) == (0.0, False)            # no SMs: nothing to fill


def test_off_grid_weighing_is_for_plain_gemms_of_a_wave_or_more():
    """Fused epilogues, batched grids and grids of fewer tiles than SMs keep the rule measured for them: their
    own choice, paired along M where B's rows are off the grid."""
    linear = dict(GEMM_INFO, epilogue_loads=True)
    assert choose(linear, {"M": 3000, "N": 3000, "K": 3000}, misaligned=BOTH_OFF).get("BLOCK_M") is None
    assert choose(linear, {"M": 3000, "N": 3000, "K": 3000}, misaligned=A_OFF).get("cluster") is None
    assert choose(GEMM_INFO, {"M": 1000, "N": 1000, "K": 8192}, misaligned=B_OFF) == dict(NARROW, cluster="2x1")
    # an own tile the rule has no off-grid weights for keeps its pairs along M
    tall = dict(GEMM_INFO, constants=dict(GEMM_INFO["constants"], BLOCK_M=256, BLOCK_N=128))
    assert choose(tall, {"M": 4096, "N": 3000, "K": 4096}, misaligned=B_OFF) == {"cluster": "2x1"}


def test_shape_defaults_leave_other_kernels_alone():
    assert choose(dict(GEMM_INFO, has_dot=False), {"M": 8, "N": 4096, "K": 4096}) == {}
    attention = dict(GEMM_INFO, tiles=[["BLOCK_M", "S"]], symbols=[["S", 0, 2]])
    assert choose(attention, {"S": 8}) == {}
    small_default = dict(GEMM_INFO, constants=dict(GEMM_INFO["constants"], BLOCK_M=64))
    assert choose(small_default, {"M": 8, "N": 4096, "K": 4096}) == {}
    # With fewer SMs, fewer splits fit.
    assert choose(GEMM_INFO, {"M": 8, "N": 4096, "K": 4096}, sms=100)["split_k"] == 2
    # Stream-K for one dot only (SwiGLU's two accumulators stay with the kernel's own schedule), and by the SMs
    # the GPU has: 136 tiles are 1.03 waves on 132 SMs, 1.06 on 128, exactly one on 136 (not shared).
    sparse = {"M": 2112, "N": 2048, "K": 8192}
    assert choose(dict(GEMM_INFO, dots=2), sparse) == {}
    assert choose(dict(GEMM_INFO, dots=None), sparse) == {}      # a record from before the count
    assert choose(GEMM_INFO, sparse, sms=136) == {}
    assert choose(GEMM_INFO, sparse, sms=128) == THREE_GROUPS          # 121 tiles of 192 x 192 in one wave
    assert choose(GEMM_INFO, {"M": 1280, "N": 10240, "K": 2048}, sms=128) == {"schedule": "streamk"}


def test_an_operand_off_the_sector_grid_takes_clusters_that_load_it_once():
    """B (argument 1) with rows 10000 bytes apart: pairs along M share its tiles (2x1), whatever tile the waves
    choose; stream-K, which cannot run in clusters, is not taken then. A and C off the grid change nothing."""
    b_off = (1,)
    assert choose(GEMM_INFO, {"M": 8192, "N": 5000, "K": 4096}, misaligned=b_off) == {"cluster": "2x1"}
    assert choose(GEMM_INFO, {"M": 3000, "N": 5000, "K": 2000}, misaligned=b_off) == \
        dict(PINGPONG, cluster="2x1")                                  # fill 0.87 -> 0.93
    assert choose(GEMM_INFO, {"M": 2112, "N": 2048, "K": 8192}, misaligned=b_off) == \
        dict(THREE_GROUPS, cluster="2x1")
    assert choose(GEMM_INFO, {"M": 1200, "N": 5120, "K": 5120}, misaligned=b_off) == {"cluster": "2x1"}
    assert choose(GEMM_INFO, {"M": 8192, "N": 5000, "K": 4096}, misaligned=(0, 2)) == {}
    # one tile row: no pairs to form, so split-K stays a choice
    assert choose(GEMM_INFO, {"M": 100, "N": 5000, "K": 4096}, misaligned=b_off) == SPLIT
    # few tiles: 128 x 128 in pairs rather than split (split-K cannot run in clusters)
    assert choose(GEMM_INFO, {"M": 1000, "N": 1000, "K": 8192}, misaligned=b_off) == \
        dict(NARROW, cluster="2x1")
    # options given explicitly: clusters asked for (or stream-K) are kept; a given schedule still pairs
    big = {"M": 8192, "N": 5000, "K": 4096}
    assert choose(GEMM_INFO, big, misaligned=b_off, fixed={"cluster": "1x1"}) == {}
    assert choose(GEMM_INFO, big, misaligned=b_off, fixed={"schedule": "streamk"}) == {}
    assert choose(GEMM_INFO, big, misaligned=b_off, fixed={"schedule": "persistent"}) == \
        {"cluster": "2x1"}
    # a linear layer's weight W[N, K] is the operand every tile row reads
    linear = dict(GEMM_INFO, operands=[[0, ["M", "K"]], [1, ["N", "K"]], [2, ["M", "N"]]])
    assert choose(linear, {"M": 8192, "N": 4096, "K": 4104}, misaligned=(0, 1)) == {"cluster": "2x1"}


def test_the_pairs_run_along_the_grid_axis_of_m_and_nothing_is_chosen_for_an_empty_output():
    n_first = dict(GEMM_INFO, tiles=[["BLOCK_N", "N"], ["BLOCK_M", "M"]])
    assert choose(n_first, {"M": 8192, "N": 5000, "K": 4096}, misaligned=(1,)) == {"cluster": "1x2"}
    assert choose(GEMM_INFO, {"M": 1536, "N": 0, "K": 2048}) == {}
    assert choose(GEMM_INFO, {"M": 8192, "N": 5000, "K": 4096}, misaligned=(1,),
                                fixed={"tma": False}) == {}


def test_tile_switches_need_one_dot_over_a_grid_of_tiles_and_a_free_schedule():
    few = {"M": 1536, "N": 6144, "K": 2048}
    assert choose(GEMM_INFO, few) == PINGPONG
    assert choose(dict(GEMM_INFO, grid_symbols=[None, None, None]), few) == {}   # a third axis, not a batch
    assert choose(dict(GEMM_INFO, dots=2), few) == {}
    for given in ({"schedule": "persistent"}, {"BLOCK_N": 256}, {"warp_specialize": True}, {"cluster": "2x1"}):
        assert choose(GEMM_INFO, few, fixed=given) == {}
    assert choose(GEMM_INFO, few, fixed={"cluster": "1x1"}) == PINGPONG
    # a kernel whose own tile is 128 x 128 switches too, and takes stream-K where that shares best
    own_128 = dict(GEMM_INFO, constants=dict(GEMM_INFO["constants"], BLOCK_N=128))
    assert choose(own_128, few) == PINGPONG
    assert choose(own_128, {"M": 1100, "N": 2048, "K": 4096}) == {"schedule": "streamk"}
    # ... but another own tile keeps it
    own_64 = dict(GEMM_INFO, constants=dict(GEMM_INFO["constants"], BLOCK_N=64))
    assert choose(own_64, few) == {}


def test_a_kernel_whose_own_tile_has_192_rows_switches_to_128_row_tiles_whole():
    """A switch spells out the tile's rows where they differ from the kernel's own: a 192x192 kernel switching to
    ping-pong 128x192 or cooperative 128x256 gets BLOCK_M 128 with them (not a 192-row ping-pong, which cannot
    run)."""
    own_192 = dict(GEMM_INFO, constants=dict(GEMM_INFO["constants"], BLOCK_M=192, BLOCK_N=192))
    assert choose(own_192, {"M": 2176, "N": 4096, "K": 1024}) == dict(PINGPONG, BLOCK_M=128)
    assert choose(own_192, {"M": 4096, "N": 4096, "K": 4096}) == {"BLOCK_M": 128, "BLOCK_N": 256,
                                                                   "schedule": "persistent"}
    assert choose(own_192, {"M": 1100, "N": 4096, "K": 4096}) == {}


def test_a_computed_b_takes_wide_tiles_and_never_192_wide_ones():
    """A kernel whose dot's B is computed in registers (`computed_b`: a weight-only fp8 GEMM, own tile 128x128)
    switches to the cooperative 128x256 where the two fill the waves alike (its 128x128 ping-pong computed 0.78-0.83
    of 128x256 per slot, H200: 3072x5120x2560 446 against 534 TFLOP/s), and never to a tile 192 wide, which holds
    no register tile (the converted B is one): its 128x192 variant failed to compile at launch and the kernel ran its
    own tile. The same kernel without a computed B takes ping-pong 128x192 there."""
    own_128 = dict(GEMM_INFO, constants=dict(GEMM_INFO["constants"], BLOCK_N=128))
    weight = dict(own_128, computed_b=True)
    wide = {"BLOCK_N": 256, "schedule": "persistent"}
    assert choose(own_128, {"M": 3072, "N": 5120, "K": 2560}) == PINGPONG
    assert choose(weight, {"M": 3072, "N": 5120, "K": 2560}) == wide
    for extents in ({"M": 1100, "N": 4096, "K": 4096}, {"M": 1536, "N": 6144, "K": 2048},
                    {"M": 2176, "N": 4096, "K": 1024}, {"M": 2112, "N": 2048, "K": 8192}):
        config = choose(weight, extents)
        assert 192 not in (config.get("BLOCK_M"), config.get("BLOCK_N")), (extents, config)
        assert choose(own_128, extents), extents      # (where the plain kernel switches to a 192-wide tile)


WIDE = {"BLOCK_N": 320, "schedule": "persistent"}


@pytest.mark.parametrize("extents, expected", [
    # 1792 tiles of 128x256 fill 0.970 of 14 waves, 1440 of 128x320 0.987 of 11: above the 1% peers need
    # (H200: 690 against 679 TFLOP/s; cuBLAS runs its own 320-wide tile there)
    ({"M": 4096, "N": 14336, "K": 4096}, WIDE),
    ({"M": 8192, "N": 14336, "K": 4096}, WIDE),
    ({"M": 4096, "N": 28672, "K": 4096}, WIDE),
    ({"M": 6144, "N": 2560, "K": 5120}, WIDE),          # 3.6 waves of 128x256 (0.91), 2.9 of 128x320 (0.97)
    ({"M": 16384, "N": 14336, "K": 4096}, {}),          # both fill 0.987: the own tile
    ({"M": 4096, "N": 4096, "K": 4096}, {}),            # 416 tiles of 128x320 take 3.2 waves
    ({"M": 2816, "N": 5120, "K": 3072}, PINGPONG),      # 128x320 only ties ping-pong's fill: it stays
    ({"M": 3328, "N": 3328, "K": 3328}, {}),            # stream-K (fill 0.87 against 0.85) still needs 5%
])
def test_n_heavy_grids_take_the_320_wide_cooperative_tile(extents, expected):
    """128x320 tiles (two wgmmas a k-step) weigh as a peer of the own cooperative 128x256: the two switch for a fill
    1% better (PEER_MARGIN), any other tile or schedule for 5% (SWITCH_MARGIN)."""
    assert choose(GEMM_INFO, extents) == expected


def test_the_320_wide_tile_is_for_kernels_without_a_converted_b_or_epilogue_operands():
    """A converted B is a register tile as wide as the tile, an epilogue's loaded operands did not gain from it, and
    rows off the sector grid were not measured with it: none of these kernels switches to 128x320 where the plain
    GEMM does. A B stored [N, K] (nn.Linear's weight, copied in two blocks of 160 rows) does."""
    extents = {"M": 4096, "N": 14336, "K": 4096}
    b_k_major = dict(GEMM_INFO, operands=[[0, ["M", "K"]], [1, ["N", "K"]], [2, ["M", "N"]]])
    assert choose(b_k_major, extents) == WIDE
    for info in (dict(GEMM_INFO, epilogue_loads=True), dict(GEMM_INFO, computed_b=True)):
        assert choose(info, extents).get("BLOCK_N") != 320
    assert choose(GEMM_INFO, extents, misaligned=(1,)).get("BLOCK_N") != 320
    assert choose(GEMM_INFO, dict(extents, K=4104), misaligned=(0,)).get("BLOCK_N") != 320
    assert choose(GEMM_INFO, extents, fixed={"BLOCK_N": 256}) == {}


def test_the_320_wide_tile_needs_three_ring_slots_of_its_k_step():
    """128 + 320 rows of a K step's tiles in three slots beside the epilogue's staging: bf16 with BLOCK_K = 64, tf32
    with 32, fp8 with 128; BLOCK_K = 128 of bf16 (given at compile time or in the source) would leave two slots and
    failed to compile. A kernel whose operands' dtypes are not known (a record from before they were) keeps off it."""
    extents = {"M": 4096, "N": 14336, "K": 4096}
    assert choose(GEMM_INFO, extents, fixed={"BLOCK_K": 128}).get("BLOCK_N") != 320
    wide_k = dict(GEMM_INFO, constants=dict(GEMM_INFO["constants"], BLOCK_K=128))
    assert choose(wide_k, extents).get("BLOCK_N") != 320
    tf32 = dict(GEMM_INFO, operand_dtypes=[[0, "f32"], [1, "f32"], [2, "f32"]])
    assert choose(dict(tf32, constants=dict(GEMM_INFO["constants"], BLOCK_K=32)), extents) == WIDE
    assert choose(tf32, extents).get("BLOCK_N") != 320
    fp8 = dict(GEMM_INFO, operand_dtypes=[[0, "f8e4m3"], [1, "f8e4m3"], [2, "bf16"]])
    assert choose(dict(fp8, constants=dict(GEMM_INFO["constants"], BLOCK_K=128)), extents) == WIDE
    unknown = {k: v for k, v in GEMM_INFO.items() if k != "operand_dtypes"}
    assert choose(unknown, extents).get("BLOCK_N") != 320
    # BLOCK_K = 64 * KS: its source value no longer holds once KS is given
    derived = dict(GEMM_INFO, constants=dict(GEMM_INFO["constants"], KS=1), derived_constants=["BLOCK_K"])
    assert choose(derived, extents) == WIDE
    assert choose(derived, extents, fixed={"KS": 2}).get("BLOCK_N") != 320
    ir_spelling = dict(fp8, operand_dtypes=[[0, "DTYPE"], [1, "DTYPE"], [2, "bf16"]],
                       constants=dict(GEMM_INFO["constants"], BLOCK_K=128, DTYPE="f8E4M3FN"))
    assert choose(ir_spelling, extents) == WIDE


@pytest.mark.parametrize("extents", [{"M": 5120, "N": 11008, "K": 4096}, {"M": 4096, "N": 14336, "K": 1024}])
def test_a_peer_that_clears_its_margin_does_not_win_over_a_tile_scored_higher(extents):
    """Ping-pong 128x192 scores highest here but misses its 5%; 128x320 clears its 1% with a lower score: the rule
    keeps the own tile rather than take the tile it scores lower."""
    assert choose(GEMM_INFO, extents) == {}


def test_a_fused_epilogue_over_a_short_k_weighs_cooperative_tiles_less():
    """Below K = 2048 a cooperative tile's epilogue is exposed: a kernel whose epilogue loads (bias, residual) does
    not switch to one there for a few percent of fill (GEMM + bias + GELU at 16384x4096x1024 ran 535 cooperative
    against 582 for its own ping-pong 128x128), while at K = 4096 it does (4096x4096x4096: 655 against 630), and
    for a whole wave it still does (1024x4096x512: 128 tiles of 128x256 fill 0.97 of one wave, 256 of 128x128 0.97
    of two)."""
    fused = dict(GEMM_INFO, constants=dict(GEMM_INFO["constants"], BLOCK_N=128), epilogue_loads=True)
    assert choose(fused, {"M": 16384, "N": 4096, "K": 1024}) == {}
    assert choose(fused, {"M": 4096, "N": 4096, "K": 4096}) == {"BLOCK_N": 256, "schedule": "persistent"}
    assert choose(dict(fused, epilogue_loads=False), {"M": 16384, "N": 4096, "K": 2048}) == \
        {"BLOCK_N": 256, "schedule": "persistent"}
    linear = dict(fused, constants=dict(GEMM_INFO["constants"], BLOCK_N=192))
    assert choose(linear, {"M": 1024, "N": 4096, "K": 512}) == {"BLOCK_N": 256, "schedule": "persistent"}


def test_a_plain_gemm_over_a_short_k_takes_ping_pong_where_a_is_on_the_sector_grid():
    """Below K = 2048 the cooperative 128x256 tile computes 0.95 of ping-pong 128x192's per slot (its epilogue is
    exposed): 8192x8192x1024 switches (640 against 607 TFLOP/s, H200), unless A's rows sit off the sector grid,
    where ping-pong's narrower tile reads A once per 192 columns instead of 256 (6000x6000x1000: 513 against
    554); at K = 2048, or where ping-pong fills the waves worse (4096x4096x1024: 704 tiles of 128x192 fill 0.89 of
    six waves), the own tile stays."""
    assert choose(GEMM_INFO, {"M": 8192, "N": 8192, "K": 1024}) == PINGPONG
    assert choose(GEMM_INFO, {"M": 16384, "N": 8192, "K": 512}) == PINGPONG
    assert choose(GEMM_INFO, {"M": 8192, "N": 8192, "K": 1024}, misaligned=(0,)) == {}
    assert choose(GEMM_INFO, {"M": 6000, "N": 6000, "K": 1000}, misaligned=(0,)) == {}
    assert choose(GEMM_INFO, {"M": 8192, "N": 8192, "K": 2048}) == {}
    assert choose(GEMM_INFO, {"M": 4096, "N": 4096, "K": 1024}) == {}
    assert launch_defaults.watched_operands(GEMM_INFO) == (1, 0)
    assert launch_defaults.watched_operands(dict(GEMM_INFO, dots=2)) == (1,)        # (A read by one-dot rules only)
    # batched grids were not measured at such K: unchanged
    assert choose(BATCHED, {"Z": 2, "M": 8192, "N": 8192, "K": 1024}) == {}


def test_fp8_over_a_short_k_takes_ping_pong_where_a_is_on_the_sector_grid():
    """gemm_fp8.tawa (own cooperative 128x256; its epilogue loads the row and column scales): below K = 2048 its own
    tile weighs 0.85 against ping-pong where A's rows are on the sector grid (8192x8192x1024: ping-pong 128x192
    1080 against 996 TFLOP/s, H200); with A's rows off the grid (K = 1000) the own tile stays."""
    fp8_path = EXAMPLES / "gemm_fp8.tawa"
    from tawa.frontend.tuning import space_info
    fp8 = space_info(fp8_path.read_text(), str(fp8_path))
    assert launch_defaults.tile_column_operands(fp8) == (0,)
    assert choose(fp8, {"M": 8192, "N": 8192, "K": 1024}) == PINGPONG
    assert choose(fp8, {"M": 16384, "N": 8192, "K": 512}) == PINGPONG
    assert choose(fp8, {"M": 8192, "N": 8192, "K": 1008}, misaligned=(0,)) == {}
    assert choose(fp8, {"M": 8192, "N": 8192, "K": 4096}) == {}


BATCHED = dict(GEMM_INFO, symbols=[["Z", 0, 0], ["M", 0, 1], ["K", 0, 2], ["N", 1, 2]],
               grid_symbols=[None, None, "Z"],
               operands=[[0, ["Z", "M", "K"]], [1, ["Z", "K", "N"]], [2, ["Z", "M", "N"]]])


def test_a_batched_grid_counts_its_batch_in_the_waves():
    """`@grid(cdiv(M, BLOCK_M), cdiv(N, BLOCK_N), Z)`: Z outputs fill the waves together (2 x 288 tiles of 128x256
    fill 0.87 of 5 waves, 2 x 384 of 128x192 0.97 of 6); split-K and stream-K, which would take grid axis 2, are not
    chosen; a third axis that is not a symbol alone leaves the waves unknown."""
    assert choose(BATCHED, {"Z": 2, "M": 1536, "N": 6144, "K": 2048}) == PINGPONG
    assert choose(BATCHED, {"Z": 4, "M": 4096, "N": 4096, "K": 4096}) == {}
    assert choose(BATCHED, {"Z": 1, "M": 1024, "N": 1024, "K": 8192}) == NARROW      # not split: axis 2 is Z
    assert choose(BATCHED, {"Z": 1, "M": 2112, "N": 2048, "K": 8192}) != {"schedule": "streamk"}
    assert choose(BATCHED, {"Z": 3, "M": 8192, "N": 5000, "K": 4096}, misaligned=(1,)) == {"cluster": "2x1"}
    assert choose(BATCHED, {"Z": 8, "M": 8, "N": 4096, "K": 4096}) == {"BLOCK_M": 64, "BLOCK_N": 128}
    unknown = dict(BATCHED, grid_symbols=[None, None, None])
    assert choose(unknown, {"Z": 2, "M": 1536, "N": 6144, "K": 2048}) == {}


# -- attention ---------------------------------------------------------------------------------------------------

EXAMPLES = __import__("pathlib").Path(__file__).resolve().parents[2] / "examples"
M192 = {"BLOCK_M": 192, "BLOCK_N": 128, "schedule": "tile"}


def attention_info(example="flash_attention.tawa", source=None):
    from tawa.frontend.tuning import space_info
    path = EXAMPLES / example
    return space_info(source or path.read_text(), str(path))


def own(head_dim=64, uneven=False, chained=True, ctas_per_sm=2, dynamic_tiles=False, uniform_by_choice=None,
        **constants):
    """What the attention rule reads of the kernel's own compiled configuration (a `CompiledKernel`'s fields); by
    default the examples': 128-key blocks from head dim 32 on, on uniform warps at 32 and 64 (two CTAs per SM)."""
    from types import SimpleNamespace
    constants = {"HEAD_DIM": head_dim, "BLOCK_M": 128, "BLOCK_N": 64 + 64 * (head_dim >= 32), **constants}
    if uniform_by_choice is None:
        uniform_by_choice = head_dim in (32, 64) and constants["BLOCK_N"] == 128 and ctas_per_sm == 2
    return SimpleNamespace(constants=constants,
                           uneven_programs=uneven, chained_dots=chained, ctas_per_sm=ctas_per_sm,
                           dynamic_tiles=dynamic_tiles, uniform_by_choice=uniform_by_choice)


def heads(s, z=8, h=16):
    return {"Z": z, "H": h, "S": s}


@pytest.mark.parametrize("example", ["flash_attention.tawa", "gqa_attention.tawa"])
def test_attention_at_head_dim_64_takes_192_row_blocks_on_long_sequences(example):
    """Loops of one length for every program: from 16 key blocks of 128 on (S = 2048); loops that grow with the
    query block (causal): from 48 (S = 6144). The head dim and loop traits are the compiled kernel's."""
    info = attention_info(example)
    if example == "gqa_attention.tawa":
        heads_of = lambda s: dict(heads(s), HKV=4)       # noqa: E731
    else:
        heads_of = heads
    assert launch_defaults.is_attention_family(info) and launch_defaults.has_shape_defaults(info)
    assert choose(info, heads_of(2048), own=own()) == M192
    assert choose(info, heads_of(16384), own=own()) == M192
    assert choose(info, heads_of(2047), own=own()) == {}
    assert choose(info, heads_of(4096), own=own(uneven=True)) == {}
    assert choose(info, heads_of(6144), own=own(uneven=True)) == M192
    assert choose(info, heads_of(16384)) == {}                                       # no compiled kernel at hand


def test_attention_keeps_its_own_blocks_where_192_rows_do_not_pay_or_were_ruled_out():
    info = attention_info()
    long = heads(16384, z=2)
    assert choose(info, long, own=own(128, ctas_per_sm=1)) == {}
    assert choose(info, long, own=own(96, ctas_per_sm=1)) == {}                     # 192 rows spill there
    assert choose(info, long, own=own(48, ctas_per_sm=1)) == M192
    assert choose(info, long, own=own(32)) == {}         # the uniform 128-row kernel was level or ahead at 32
    assert choose(info, long, own=own(32, BLOCK_N=64)) == {"BLOCK_N": 128}          # raised to it, and kept
    # a kernel that stayed specialized at head dim 32 is weighed against 192 rows as before
    assert choose(info, long, own=own(32, ctas_per_sm=1, uniform_by_choice=False)) == M192
    assert choose(info, long, own=own(chained=False)) == {}       # two dots, but not attention's (X @ A @ B)
    for option in ({"BLOCK_M": 64}, {"schedule": "persistent"}, {"warp_specialize": False}, {"ctas_per_sm": 2},
                   {"num_consumer_groups": 2}, {"consumer_pingpong": True}, {"consumer_registers": 232}):
        assert choose(info, long, fixed=option, own=own()) == {}, option
    assert choose(info, long, own=own(BLOCK_M=256)) == {}
    assert choose(info, {"Z": 2, "H": 16}, own=own()) == {}                          # S unknown
    assert choose(info, {"S": 16384}, own=own()) == {}                                # heads unknown
    # A GEMM is not of the family; nor is a kernel of two dots over a grid of two tiled symbols (SwiGLU).
    assert not launch_defaults.is_attention_family(GEMM_INFO)
    swiglu = (EXAMPLES / "swiglu.tawa")
    from tawa.frontend.tuning import space_info
    assert not launch_defaults.is_attention_family(space_info(swiglu.read_text(), str(swiglu)))


def test_the_head_dim_is_the_compiled_one_derived_constants_included():
    """A tensor dim given by a constant derived from another (`D: const = HEAD_DIM`) takes the compiled value:
    compiled at head dim 128 from a source whose default is 64, the kernel keeps its own blocks."""
    source = (EXAMPLES / "flash_attention.tawa").read_text()
    source = source.replace("HEAD_DIM: const = 128,", "HEAD_DIM: const = 64, D: const = HEAD_DIM,")
    source = source.replace("bf16[Z, H, S, HEAD_DIM]", "bf16[Z, H, S, D]")
    info = attention_info(source=source)
    assert choose(info, heads(16384), own=own(64, D=64)) == M192
    assert choose(info, heads(16384), own=own(128, D=128, ctas_per_sm=1)) == {}


def test_attention_weighs_the_waves_of_both_grids():
    """1 x 16 x 2048: 176 CTAs of 192 rows, under two waves on 132 SMs, against 256 of 128 rows at two per SM in
    one: the own blocks stay. 8 x 16 x 2048: 11 waves of 192-row CTAs, each 0.68 of an own wave, against 8."""
    info = attention_info()
    assert choose(info, heads(2048, z=1), own=own()) == {}
    assert choose(info, heads(2048, z=8), own=own()) == M192
    # 40 heads: 880 CTAs in 7 waves (4.8 own waves) against 1280 in 5
    assert choose(info, {"Z": 1, "H": 40, "S": 4096}, own=own()) == M192
    # fewer SMs, more waves: 176 CTAs make two of 88
    assert choose(info, heads(2048, z=1), sms=88, own=own()) == M192


@pytest.mark.parametrize("example", ["flash_attention.tawa", "gqa_attention.tawa"])
def test_attention_with_dynamic_tiles_runs_one_block_per_cta_on_long_sequences(example):
    """Causal attention at head dim 128 (persistent CTAs taking query blocks from a counter) switches to one block
    per CTA from 20 key blocks of 128 on (S = 2560), at any head count; not where options fix the schedule."""
    info = attention_info(example)
    extra = {"HKV": 4} if example == "gqa_attention.tawa" else {}
    dyn = own(128, uneven=True, ctas_per_sm=1, dynamic_tiles=True)
    tile = {"schedule": "tile"}
    assert choose(info, dict(heads(2560), **extra), own=dyn) == tile
    assert choose(info, dict(heads(16384, z=1, h=2), **extra), own=dyn) == tile
    assert choose(info, dict(heads(2559), **extra), own=dyn) == {}
    assert choose(info, dict(heads(512, z=64), **extra), own=dyn) == {}
    # the same kernel without dynamic tiles (compiled with dynamic_tiles=False: one block per CTA already)
    assert choose(info, dict(heads(8192), **extra), own=own(128, uneven=True, ctas_per_sm=1)) == {}
    for option in ({"schedule": "persistent"}, {"dynamic_tiles": True}, {"BLOCK_N": 64}):
        assert choose(info, dict(heads(8192), **extra), fixed=option, own=dyn) == {}, option


def test_dynamic_tiles_asked_for_keep_the_persistent_schedule_and_false_changes_nothing():
    """`dynamic_tiles=True` needs the persistent schedule without clusters or split-K: no rule switches the
    schedule, adds clusters or splits K; `dynamic_tiles=False` leaves every rule as it is."""
    for m, n, k in ((3000, 3000, 3000), (32, 8192, 8192), (7000, 3000, 3000), (1100, 4096, 4096)):
        extents = {"M": m, "N": n, "K": k}
        plain = choose(GEMM_INFO, extents, misaligned={0, 1} if m % 16 else ())
        assert plain, (m, n, k)                        # the shapes have launch rules to turn off
        asked = choose(GEMM_INFO, extents, misaligned={0, 1} if m % 16 else (), fixed={"dynamic_tiles": True})
        assert not {"schedule", "cluster", "split_k"} & set(asked), (m, n, k, asked)
        assert choose(GEMM_INFO, extents, misaligned={0, 1} if m % 16 else (),
                      fixed={"dynamic_tiles": False}) == plain


def test_attention_takes_the_key_block_its_head_dim_wants():
    """A kernel whose own BLOCK_N is not ATTENTION_KEY_BLOCKS' for its head dim launches that one: 64 keys up to head
    dim 64, 128 up to 128 (above: `test_attention_above_head_dim_128_keeps_two_key_slots`); where options were given
    the kernel keeps its own."""
    info = attention_info()
    short = heads(512)
    assert choose(info, short, own=own(96, ctas_per_sm=1, BLOCK_N=64)) == {"BLOCK_N": 128}
    assert choose(info, short, own=own(128, ctas_per_sm=1, BLOCK_N=64)) == {"BLOCK_N": 128}
    assert choose(info, short, own=own(64, ctas_per_sm=1, BLOCK_N=128)) == {"BLOCK_N": 64}
    assert choose(info, short, own=own(256, ctas_per_sm=1, BLOCK_N=64)) == {}
    assert choose(info, short, own=own(96, ctas_per_sm=1)) == {}                   # already 128
    assert choose(info, short, fixed={"BLOCK_N": 64}, own=own(96, ctas_per_sm=1, BLOCK_N=64)) == {}
    # with the other rules: one block per CTA on long causal sequences, 192 rows on long ones at head dim 64
    dyn = own(128, uneven=True, ctas_per_sm=1, dynamic_tiles=True, BLOCK_N=64)
    assert choose(info, heads(8192), own=dyn) == {"schedule": "tile", "BLOCK_N": 128}
    assert choose(info, heads(16384, z=2), own=own(64, ctas_per_sm=1, BLOCK_N=128)) == M192
    # small grids compare 192-row CTAs against the 64-key blocks at two CTAs per SM: those stay
    assert choose(info, heads(2048, z=1), own=own(64, ctas_per_sm=1, BLOCK_N=128)) == {"BLOCK_N": 64}


def test_wide_head_key_block_is_the_largest_with_two_slots_beside_q():
    """Two slots of K and V and a 128-row Q tile fit in the shared memory left for tiles; one step (16 keys) more
    would not. At 16 bits: 128 keys at head dim 160, 112 at 192, 80 at 256; at 8 bits 128 keys at 256."""
    from tawa import hopper
    expected = {(160, 2): 128, (192, 2): 112, (224, 2): 96, (256, 2): 80, (256, 1): 128, (136, 2): 128}
    for (d, size), block in expected.items():
        assert launch_defaults.wide_head_key_block(d, size) == block, (d, size)
        used = lambda n: 128 * d * size + 4 * n * d * size          # noqa: E731
        assert used(block) <= hopper.SMEM_FOR_TILES
        assert block == 128 or used(block + 16) > hopper.SMEM_FOR_TILES
    assert launch_defaults.wide_head_key_block(1024, 2) == 64           # none fits: the short sequences' block


def test_attention_above_head_dim_128_keeps_two_key_slots():
    """Above head dim 128 the example's own 128-key blocks leave one K and V slot beside Q (192, 256 at 16 bits):
    long sequences (from 16 blocks of 128 keys) launch the largest block with two slots, shorter ones 64-key blocks;
    at head dim 160 two 128-key slots fit and the own blocks stay. A block that does not divide the own one needs
    the keys masked or divided by it, as a larger one does."""
    info = attention_info()
    assert choose(info, heads(4096, z=4), own=own(256, ctas_per_sm=1)) == {"BLOCK_N": 80}
    assert choose(info, heads(2048), own=own(192, ctas_per_sm=1)) == {"BLOCK_N": 112}
    assert choose(info, heads(2047), own=own(192, ctas_per_sm=1)) == {"BLOCK_N": 64}
    assert choose(info, heads(1024, z=16), own=own(256, ctas_per_sm=1)) == {"BLOCK_N": 64}
    assert choose(info, heads(4096), own=own(160, ctas_per_sm=1)) == {}
    assert choose(info, heads(1024), own=own(160, ctas_per_sm=1)) == {}          # (two 128-key slots fit)
    assert choose(info, heads(4096), own=own(256, ctas_per_sm=1, BLOCK_N=80)) == {}
    # given options keep the own blocks
    assert choose(info, heads(4096), fixed={"BLOCK_N": 128}, own=own(256, ctas_per_sm=1)) == {}
    # keys not masked: 80 must divide them (4000 = 50 x 80; 4096 is not a multiple)
    unmasked = dict(info, compared_symbols=[])
    assert choose(unmasked, heads(4096), own=own(256, ctas_per_sm=1)) == {}
    assert choose(unmasked, heads(4000), own=own(256, ctas_per_sm=1)) == {"BLOCK_N": 80}
    # 8-bit tensors: two 128-key slots fit at head dim 256
    fp8 = dict(info, operand_dtypes=[[i, "f8e4m3"] for i, _ in info["operand_dtypes"]])
    assert choose(fp8, heads(4096), own=own(256, ctas_per_sm=1)) == {}
    # element sizes unknown (a dtype the launch cannot read): the own blocks
    unknown = dict(info, operand_dtypes=[[i, "SOMETHING"] for i, _ in info["operand_dtypes"]])
    assert choose(unknown, heads(4096), own=own(256, ctas_per_sm=1)) == {}


#: Attention kernels, exact at their own 128x128 blocks, whose results change with other block sizes (the key
#: loop's mask line of the example replaced): each must keep its own blocks.
BLOCK_DEPENDENT = {
    # key block j wholly below the diagonal: exact only while BLOCK_N divides BLOCK_M
    "offsets compared": ("mask = mask & ((cols[None, :] <= rows[:, None]) | (j * BLOCK_N < pid_m * BLOCK_M))", ""),
    # the same through a name, and with <=, where BLOCK_M must divide BLOCK_N
    "through a name": ("mask = mask & ((cols[None, :] <= rows[:, None]) | (start_n < pid_m * BLOCK_M))",
                       "        start_n = j * BLOCK_N\n"),
    "less or equal": ("mask = mask & ((cols[None, :] <= rows[:, None]) | (j * BLOCK_N <= pid_m * BLOCK_M))", ""),
    # only the diagonal block masked
    "diagonal only": ("mask = mask & ((cols[None, :] <= rows[:, None]) | (j * BLOCK_N != pid_m * BLOCK_M))", ""),
    # element indices folded into a block offset by a reduction
    "reduced indices": ("mask = mask & ((cols[None, :] <= rows[:, None]) | (max(cols) < min(rows)))", ""),
}


@pytest.mark.parametrize("case", list(BLOCK_DEPENDENT))
def test_kernels_whose_results_depend_on_block_sizes_keep_their_own(case):
    """`j * BLOCK_N < pid_m * BLOCK_M` (key block j wholly below the diagonal, its causal test skipped) is exact
    only while BLOCK_N divides BLOCK_M: with 80-key blocks row 128 would see keys 129 to 159 (interpreter: errors of
    0.2 to 3.5 against float64, found in review). Such kernels (`space_info`'s `block_sizes_free` False) launch
    neither other key blocks (80 at head dim 256, 64, 128) nor 192-row blocks; the schedule rule still applies."""
    source = (EXAMPLES / "flash_attention.tawa").read_text()
    old = "            mask = mask & (cols[None, :] <= rows[:, None])"
    assert old in source
    line, before = BLOCK_DEPENDENT[case]
    changed = source.replace(old, "            " + line)
    if before:
        changed = changed.replace("        k = load(K[z, h], (j, 0), (BLOCK_N, HEAD_DIM))",
                                  before + "        k = load(K[z, h], (j, 0), (BLOCK_N, HEAD_DIM))")
    info, plain = attention_info(source=changed), attention_info()
    assert info["tile_invariant"] and not info["block_sizes_free"] and plain["block_sizes_free"]
    assert choose(info, heads(4096, z=4), own=own(256, ctas_per_sm=1)) == {}
    assert choose(plain, heads(4096, z=4), own=own(256, ctas_per_sm=1)) == {"BLOCK_N": 80}
    assert choose(info, heads(16384, z=2), own=own(64, ctas_per_sm=1, BLOCK_N=128)) == {}
    assert choose(plain, heads(16384, z=2), own=own(64, ctas_per_sm=1, BLOCK_N=128)) == M192
    assert choose(info, heads(512), own=own(96, ctas_per_sm=1, BLOCK_N=64)) == {}
    dyn = own(128, uneven=True, ctas_per_sm=1, dynamic_tiles=True, BLOCK_N=64)
    assert choose(info, heads(8192), own=dyn) == {"schedule": "tile"}


def test_loop_bounds_must_count_whole_blocks():
    """A key loop of `cdiv(E, BLOCK_N)` blocks (or the min of such counts) visits the same keys for any block;
    one more block, or a loop starting at a block count, does not."""
    from tawa.frontend.tuning import space_info
    source = (EXAMPLES / "flash_attention.tawa").read_text()
    old = "num_kv = min(cdiv(S, BLOCK_N), cdiv((pid_m + 1) * BLOCK_M, BLOCK_N))"
    assert old in source
    for bound, free in ((old, True), ("num_kv = cdiv(pid_m * BLOCK_M, BLOCK_N) + 1", False),
                        ("num_kv = min(cdiv(S, BLOCK_N), cdiv((pid_m + 1) * BLOCK_M, BLOCK_N) + 1)", False)):
        assert space_info(source.replace(old, bound), "k.tawa")["block_sizes_free"] is free, bound
    started = source.replace("for j in range(num_kv):", "for j in range(cdiv(pid_m * BLOCK_M, BLOCK_N), num_kv):")
    assert not space_info(started, "k.tawa")["block_sizes_free"]
    zero = source.replace("for j in range(num_kv):", "for j in range(0, num_kv):")
    assert space_info(zero, "k.tawa")["block_sizes_free"]
    # data compared is no block offset: a key padding mask loaded per block, a row maximum that stayed -inf
    for name in ("attn_keypad", "attn_segments"):
        path = EXAMPLES.parent / "tests" / "e2e" / "kernels" / "user" / f"{name}.tawa"
        assert space_info(path.read_text(), str(path))["block_sizes_free"], name


def test_attention_at_head_dim_64_takes_128_key_blocks_for_the_uniform_warp_path():
    """A kernel of 64-key specialized blocks at head dim 32 or 64 launches 128-key blocks where they visit the same
    keys (the compiler runs those on uniform warps, two CTAs per SM); `keeps_variant` launches that variant only
    where the compiler did take the uniform path. At head dim 16, or with options given, the kernel keeps its own."""
    info = attention_info()
    keys64 = own(64, BLOCK_N=64)
    raised = {"BLOCK_N": 128}
    assert choose(info, heads(512), own=keys64) == raised
    assert choose(info, heads(4096), own=own(64, uneven=True, BLOCK_N=64)) == raised
    assert choose(info, heads(1000), own=keys64) == {}              # 1000 keys are not whole 128-key blocks
    assert choose(info, heads(512), own=own(32, BLOCK_N=64)) == raised
    assert choose(info, heads(512), own=own(16, BLOCK_N=64)) == {}
    assert choose(info, heads(512), fixed={"warp_specialize": True}, own=keys64) == {}
    assert choose(info, heads(16384, z=2), own=keys64) == M192
    uniform, specialized = SimpleNamespace(uniform_by_choice=True), SimpleNamespace(uniform_by_choice=False)
    assert launch_defaults.keeps_variant(info, raised, keys64, uniform)
    assert not launch_defaults.keeps_variant(info, raised, keys64, specialized)
    # other variants are launched as compiled: 192 rows; the key block a head dim of 96 wants
    assert launch_defaults.keeps_variant(info, M192, keys64, specialized)
    assert launch_defaults.keeps_variant(info, raised, own(96, ctas_per_sm=1, BLOCK_N=64), specialized)
    assert launch_defaults.keeps_variant(info, raised, None, specialized)


def test_attention_keeps_the_128_key_blocks_the_compiler_put_on_uniform_warps():
    """At head dims 32 and 64 a 128-key kernel the compiler ran on uniform warps (`uniform_by_choice`, two CTAs per
    SM, as the examples compile by default) keeps its key block: it beat the 64-key specialized blocks on every shape
    measured. It still takes 192-row blocks on long sequences, weighed against its two CTAs per SM."""
    info = attention_info()
    uni = own(64, BLOCK_N=128, uniform_by_choice=True)
    for s in (512, 1024, 2047):
        assert choose(info, heads(s), own=uni) == {}
    assert choose(info, heads(2048, z=1), own=uni) == {}
    assert choose(info, heads(4096), own=own(64, uneven=True, BLOCK_N=128, uniform_by_choice=True)) == {}
    assert choose(info, heads(2048), own=uni) == M192
    assert choose(info, heads(16384, z=2), own=uni) == M192
    # the same block specialized at one CTA per SM (ptxas left the uniform kernel too many registers) goes to 64
    assert choose(info, heads(512), own=own(64, ctas_per_sm=1, BLOCK_N=128)) == {"BLOCK_N": 64}
    # at head dim 32 too (measured: 1.04-1.10x the 64-key blocks); at 16 (not measured) the rule for the head dim
    assert choose(info, heads(512), own=own(32, BLOCK_N=128, uniform_by_choice=True)) == {}
    assert choose(info, heads(512), own=own(16, BLOCK_N=128, uniform_by_choice=True)) == {"BLOCK_N": 64}


def test_attention_takes_a_larger_key_block_only_where_it_visits_the_same_keys():
    """A kernel may leave the keys past the sequence's end unmasked where its own block divides it, or mask them in
    a branch dead at its constants (Triton's EVEN_N): the head dim's larger key block needs the keys' length both
    compared against in the kernel and a multiple of the block; the 192-row configuration's 128 either (the
    examples mask `cols < S` and take it on ragged sequences)."""
    masked = attention_info()
    assert masked["compared_symbols"] == ["S"]
    unmasked = dict(masked, compared_symbols=[])
    keys64 = own(96, ctas_per_sm=1, BLOCK_N=64)
    assert choose(masked, heads(1152), own=keys64) == {"BLOCK_N": 128}
    assert choose(masked, heads(1088), own=keys64) == {}                              # 1088 = 17 x 64
    assert choose(unmasked, heads(1152), own=keys64) == {}
    assert choose(unmasked, heads(1088), own=own(64, ctas_per_sm=1, BLOCK_N=128)) == {"BLOCK_N": 64}   # smaller
    keys64 = own(64, BLOCK_N=64)                    # (specialized, two CTAs per SM)
    assert choose(masked, heads(16384 + 64, z=2), own=keys64) == M192
    assert choose(unmasked, heads(16384, z=2), own=keys64) == M192
    assert choose(unmasked, heads(16384 + 64, z=2), own=keys64) == {}
    # cross attention: the keys' length decides, the queries' (tiled by BLOCK_M, stored masked) does not
    from tawa.frontend.tuning import space_info
    cross = EXAMPLES.parent / "tests" / "e2e" / "kernels" / "user" / "attn_cross.tawa"
    cross_info = space_info(cross.read_text(), str(cross))
    assert cross_info["compared_symbols"] == ["SK"]
    keys64 = own(96, ctas_per_sm=1, BLOCK_N=64, D=96)
    assert choose(cross_info, {"Z": 2, "H": 16, "SQ": 1000, "SK": 4096}, own=keys64) == {"BLOCK_N": 128}
    assert choose(cross_info, {"Z": 2, "H": 16, "SQ": 1024, "SK": 4000}, own=keys64) == {}
    # a table of positions beside the keys (rows MAXPOS, not compared) and keys of a constant length: no
    posemb = dict(masked, operands=masked["operands"] + [[5, ["MAXPOS", None]]])
    assert choose(posemb, dict(heads(1152), MAXPOS=4096), own=keys64) == {}
    constant = dict(masked, operands=[[0, ["Z", "H", "S", None]], [1, ["Z", "H", None, None]]])
    assert choose(constant, heads(1152), own=keys64) == {}


@pytest.mark.parametrize("fixed", [{"schedule": "persistent"}, {"split_k": 2}, {"cluster": "2x1"},
                                   {"BLOCK_N": 256}, {"dynamic_tiles": True}])
def test_few_rows_split_never_overrides_a_given_option(fixed):
    got = choose(GEMM_INFO, {"M": 512, "N": 512, "K": 8192}, fixed=fixed)
    assert got.get("BLOCK_M") != 64 and not (set(got) & set(fixed)), got


def test_programs_that_skip_their_k_loop_keep_one_program_per_cta():
    """A kernel some of whose programs skip the K loop (`skipping_programs`: MoE tiles past an expert's rows) takes
    the rules' tile on one program per CTA, where the hardware balances the skipped tiles; clusters and split-K go.
    A K loop of varying length (`uneven_programs`, a K per batch) keeps the rules' choice."""
    rule = choose(GEMM_INFO, {"M": 1100, "N": 4096, "K": 4096})
    assert rule["schedule"] == "persistent"
    skipping = SimpleNamespace(skipping_programs=True)
    assert choose(GEMM_INFO, {"M": 1100, "N": 4096, "K": 4096}, own=skipping) == dict(rule, schedule="tile")
    assert choose(GEMM_INFO, {"M": 1100, "N": 4096, "K": 4096},
                  own=SimpleNamespace(uneven_programs=True, skipping_programs=False)) == rule
    assert launch_defaults._balanced({"BLOCK_N": 256, "schedule": "persistent", "cluster": "2x1"}, skipping) == \
        {"BLOCK_N": 256, "schedule": "tile"}
    # (split-K and clusters, which such a kernel refuses or which need a persistent schedule, are left out too)
    assert launch_defaults._balanced({"BLOCK_M": 64, "split_k": 4}, skipping) == {"BLOCK_M": 64}
    assert launch_defaults._balanced({"BLOCK_N": 192, "cluster": "2x1"}, skipping) == {"BLOCK_N": 192}
    assert launch_defaults._balanced({"BLOCK_M": 64, "split_k": 4}, None) == {"BLOCK_M": 64, "split_k": 4}
