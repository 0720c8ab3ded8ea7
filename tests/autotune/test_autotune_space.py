"""Where candidates come from (Python, the file's declaration, the default space), the key, shape pruning, and
the cached space record a machine without the compiler tunes from."""
from __future__ import annotations

import pathlib
import sys

import pytest

from tawa.autotune import AutotuneError, Config
from tawa.autotune import space

from autotune_support import SCALE, SCALE_DECLARED

#: What `space_info` gives for examples/gemm.tawa, minus the declaration.
GEMM_INFO = {"name": "gemm", "params": ["A", "B", "C"],
             "constants": {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "DTYPE": "bf16"},
             "symbols": [["M", 0, 0], ["K", 0, 1], ["N", 1, 1]],
             "tiles": [["BLOCK_M", "M"], ["BLOCK_N", "N"]], "grid_axes": 2,
             "operands": [[0, ["M", "K"]], [1, ["K", "N"]], [2, ["M", "N"]]], "has_dot": True, "dots": 1,
             "epilogue_loads": False, "declared": None}


def test_gemm_info_is_what_space_info_reads_from_the_example(own_cache):
    from tawa.frontend import read_source
    gemm = pathlib.Path(__file__).resolve().parents[2] / "examples" / "gemm.tawa"
    info = space.space_info(*read_source(str(gemm)))
    keys = [k for k in GEMM_INFO if k != "declared"]
    assert {k: info[k] for k in keys} == {k: GEMM_INFO[k] for k in keys}


def test_default_space_of_a_gemm_tries_the_hopper_tiles_best_guess_first():
    configs = space.default_configs(GEMM_INFO)
    tiles = [(c["BLOCK_M"], c["BLOCK_N"]) for c in configs]
    assert tiles[0] == (256, 128)
    assert {(128, 128), (128, 256), (256, 128), (64, 128)} <= set(tiles)
    assert all(c["BLOCK_K"] == 64 for c in configs)
    assert any(c.get("warp_specialize") is False for c in configs)          # the uniform-warp schedule too
    assert all("num_buffers" not in c for c in configs)                       # ring depth: the compiler's choice
    fp8 = dict(GEMM_INFO, constants=dict(GEMM_INFO["constants"], BLOCK_K=128))
    assert all(c["BLOCK_K"] == 128 for c in space.default_configs(fp8))      # never below the kernel's own


def test_default_space_of_other_kernels():
    assert space.default_configs(dict(GEMM_INFO, constants={"HEAD_DIM": 64})) == [{}, {"warp_specialize": False}]
    assert space.default_configs(dict(GEMM_INFO, has_dot=False)) == [{}]


def test_python_configs_win_over_the_declaration_which_wins_over_the_default():
    declared = dict(GEMM_INFO, declared={"key": None, "configs": [{"BLOCK_N": 256}, {"BLOCK_M": 256}]})
    python = [Config({"BLOCK_M": 64})]
    assert space.candidates(declared, python, {}) == (python, "python")
    assert space.candidates(declared, None, {}) == ([Config({"BLOCK_N": 256}), Config({"BLOCK_M": 256})],
                                                    "declared")
    assert space.candidates(GEMM_INFO, None, {})[1] == "default"


def test_fixed_arguments_apply_to_every_candidate_and_repeats_collapse():
    declared = dict(GEMM_INFO, declared={"key": None, "configs": [{"BLOCK_M": 64, "BLOCK_N": 128},
                                                                   {"BLOCK_M": 128, "BLOCK_N": 128},
                                                                   {"BLOCK_M": 64, "BLOCK_N": 256}]})
    got, _ = space.candidates(declared, None, {"BLOCK_M": 128, "DTYPE": "f16"})
    assert [c.as_dict() for c in got] == [{"BLOCK_M": 128, "BLOCK_N": 128, "DTYPE": "f16"},
                                          {"BLOCK_M": 128, "BLOCK_N": 256, "DTYPE": "f16"}]


def test_key_defaults_and_checks():
    assert space.resolve_key(GEMM_INFO, None) == ["M", "K", "N"]              # every symbol, declaration order
    assert space.resolve_key(dict(GEMM_INFO, declared={"key": ["M", "N"], "configs": None}), None) == ["M", "N"]
    assert space.resolve_key(GEMM_INFO, ["N", "M"]) == ["N", "M"]
    assert space.resolve_key(GEMM_INFO, "K") == ["K"]
    with pytest.raises(AutotuneError, match=r"key: 'BLOCK_M' is not a shape symbol of kernel 'gemm' \(shape "
                                            r"symbols: M, K, N\)"):
        space.resolve_key(GEMM_INFO, ["M", "BLOCK_M"])
    with pytest.raises(AutotuneError, match="appears twice"):
        space.resolve_key(GEMM_INFO, ["M", "M"])
    with pytest.raises(AutotuneError, match="list of shape symbol names"):
        space.resolve_key(GEMM_INFO, 3)


def _tiles(configs):
    return sorted({(c.get("BLOCK_M"), c.get("BLOCK_N")) for c in configs})


@pytest.mark.parametrize("extents, kept", [
    ({"M": 8, "N": 4096}, [(64, 128), (64, 256)]),                # decode: the 64-row tiles only
    ({"M": 100, "N": 4096}, [(64, 128), (64, 256), (128, 128), (128, 256)]),
    ({"M": 4096, "N": 100}, [(64, 128), (128, 128), (256, 128)]),
    ({"M": 4096, "N": 4096}, [(64, 128), (64, 256), (128, 128), (128, 256), (256, 128)]),   # nothing oversized
    ({"K": 16}, [(64, 128), (64, 256), (128, 128), (128, 256), (256, 128)]),                # K tiles no grid axis
])
def test_prune_by_shape_drops_tiles_larger_than_the_extent_needs(extents, kept):
    configs = [Config(c) for c in space.default_configs(GEMM_INFO) if "split_k" not in c and "cluster" not in c]
    got, pruned = space.prune_by_shape(GEMM_INFO, configs, extents)
    assert _tiles(got) == kept
    assert len(got) + len(pruned) == len(configs)
    for config, why in pruned:
        assert "is larger than" in why and "covers it" in why


@pytest.mark.parametrize("extents, splits", [
    ({"M": 8, "N": 4096}, [2, 4, 4]),               # 32 programs of 64 x 128 (64 of 64 x 64): split
    ({"M": 1, "N": 8192}, [2, 4]),                  # 64 of 64 x 128 split; 128 of 64 x 64 already fill the GPU
    ({"M": 512, "N": 8192}, []),                    # 512 programs: no split
    ({"K": 16}, [2, 4, 4]),                         # the grid is unknown without M and N: kept
])
def test_prune_by_shape_tries_split_k_only_for_small_grids(extents, splits):
    configs = [Config(c) for c in space.default_configs(GEMM_INFO)]
    got, pruned = space.prune_by_shape(GEMM_INFO, configs, extents)
    assert [c.get("split_k") for c in got if c.get("split_k")] == splits
    assert all("enough to fill the GPU" in why for c, why in pruned if c.get("split_k"))
    assert any(not c.get("split_k") for c in got)
    only_splits = [c for c in configs if c.get("split_k")]
    assert space.prune_by_shape(GEMM_INFO, only_splits, {"M": 4096, "N": 4096})[0]     # never nothing left


def test_prune_by_shape_counts_the_kernel_default_for_configs_that_do_not_set_the_tile():
    configs = [Config({}), Config({"BLOCK_M": 64})]                  # {} is BLOCK_M=128, the default
    got, pruned = space.prune_by_shape(GEMM_INFO, configs, {"M": 32})
    assert got == [Config({"BLOCK_M": 64})] and pruned[0][1].startswith("BLOCK_M=128 is larger than M=32")


def test_space_record_is_cached_and_read_without_the_compiler(own_cache, monkeypatch):
    info = space.space_info(SCALE_DECLARED, "<string>")
    assert info["declared"]["key"] == ["M"] and len(info["declared"]["configs"]) == 4
    assert info["symbols"] == [["M", 0, 0], ["N", 0, 1]]
    assert info["tiles"] == [["BLOCK_M", "M"], ["BLOCK_N", "N"]] and info["has_dot"] is False
    # Without the frontend (as on a GPU machine without Lark and MLIR) the cached record still serves ...
    monkeypatch.setitem(sys.modules, "tawa.frontend.tuning", None)
    assert space.space_info(SCALE_DECLARED, "<string>") == info
    # ... and a source never read here is a clean error saying how to get one.
    with pytest.raises(AutotuneError) as e:
        space.space_info(SCALE, "scale.tawa")
    assert "the tuning space of scale.tawa is not in the kernel cache" in e.value.message
    assert "--autotune-space" in e.value.note


PINGPONG = {"BLOCK_N": 192, "schedule": "pingpong"}
NARROW = {"BLOCK_N": 128, "schedule": "persistent"}
SPLIT = {"BLOCK_N": 128, "split_k": 2}


@pytest.mark.parametrize("extents, expected", [
    ({"M": 8, "N": 4096, "K": 4096}, {"BLOCK_M": 64, "BLOCK_N": 128, "split_k": 4}),   # 32 tiles: 4 splits
    ({"M": 1, "N": 8192, "K": 8192}, {"BLOCK_M": 64, "BLOCK_N": 128, "split_k": 2}),   # 64 tiles: 2 splits
    ({"M": 64, "N": 14336, "K": 4096}, {"BLOCK_M": 64, "BLOCK_N": 128}),               # 112 tiles: no split
    ({"M": 8, "N": 4096, "K": 512}, {"BLOCK_M": 64, "BLOCK_N": 128}),                  # K too short to split
    ({"M": 65, "N": 4096, "K": 4096}, SPLIT),       # not small M: 16 tiles of 128 x 256, 64 programs split in two
    ({"M": 4096, "N": 4096, "K": 4096}, {}),                                           # 3.9 waves of tiles
    ({"M": 2112, "N": 2048, "K": 8192}, {"schedule": "streamk"}),                      # 136 tiles: 1.03 waves
    ({"M": 1100, "N": 4096, "K": 4096}, {"schedule": "streamk"}),                      # 144 tiles
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
    assert space.shape_defaults(GEMM_INFO, extents) == expected


def test_shape_defaults_leave_other_kernels_alone():
    assert space.shape_defaults(dict(GEMM_INFO, has_dot=False), {"M": 8, "N": 4096, "K": 4096}) == {}
    attention = dict(GEMM_INFO, tiles=[["BLOCK_M", "S"]], symbols=[["S", 0, 2]])
    assert space.shape_defaults(attention, {"S": 8}) == {}
    small_default = dict(GEMM_INFO, constants=dict(GEMM_INFO["constants"], BLOCK_M=64))
    assert space.shape_defaults(small_default, {"M": 8, "N": 4096, "K": 4096}) == {}
    # With fewer SMs, fewer splits fit.
    assert space.shape_defaults(GEMM_INFO, {"M": 8, "N": 4096, "K": 4096}, sms=100)["split_k"] == 2
    # Stream-K for one dot only (SwiGLU's two accumulators stay with the kernel's own schedule), and by the SMs
    # the GPU has: 136 tiles are 1.03 waves on 132 SMs, 1.06 on 128, exactly one on 136 (not shared).
    sparse = {"M": 2112, "N": 2048, "K": 8192}
    assert space.shape_defaults(dict(GEMM_INFO, dots=2), sparse) == {}
    assert space.shape_defaults(dict(GEMM_INFO, dots=None), sparse) == {}      # a record from before the count
    assert space.shape_defaults(GEMM_INFO, sparse, sms=136) == {}
    assert space.shape_defaults(GEMM_INFO, sparse, sms=128) == {"schedule": "streamk"}


def test_an_operand_off_the_sector_grid_takes_clusters_that_load_it_once():
    """B (argument 1) with rows 10000 bytes apart: pairs along M share its tiles (2x1), whatever tile the waves
    choose; stream-K, which cannot run in clusters, is not taken then. A and C off the grid change nothing."""
    b_off = (1,)
    assert space.shape_defaults(GEMM_INFO, {"M": 8192, "N": 5000, "K": 4096}, misaligned=b_off) == {"cluster": "2x1"}
    assert space.shape_defaults(GEMM_INFO, {"M": 3000, "N": 5000, "K": 2000}, misaligned=b_off) == \
        dict(PINGPONG, cluster="2x1")                                  # fill 0.87 -> 0.93
    assert space.shape_defaults(GEMM_INFO, {"M": 2112, "N": 2048, "K": 8192}, misaligned=b_off) == \
        dict(PINGPONG, cluster="2x1")                                  # stream-K otherwise
    assert space.shape_defaults(GEMM_INFO, {"M": 8192, "N": 5000, "K": 4096}, misaligned=(0, 2)) == {}
    # one tile row: no pairs to form, so split-K stays a choice
    assert space.shape_defaults(GEMM_INFO, {"M": 100, "N": 5000, "K": 4096}, misaligned=b_off) == SPLIT
    # few tiles: 128 x 128 in pairs rather than split (split-K cannot run in clusters)
    assert space.shape_defaults(GEMM_INFO, {"M": 1000, "N": 1000, "K": 8192}, misaligned=b_off) == \
        dict(NARROW, cluster="2x1")
    # options given explicitly: clusters asked for (or stream-K) are kept; a given schedule still pairs
    big = {"M": 8192, "N": 5000, "K": 4096}
    assert space.shape_defaults(GEMM_INFO, big, misaligned=b_off, fixed={"cluster": "1x1"}) == {}
    assert space.shape_defaults(GEMM_INFO, big, misaligned=b_off, fixed={"schedule": "streamk"}) == {}
    assert space.shape_defaults(GEMM_INFO, big, misaligned=b_off, fixed={"schedule": "persistent"}) == \
        {"cluster": "2x1"}
    # a linear layer's weight W[N, K] is the operand every tile row reads
    linear = dict(GEMM_INFO, operands=[[0, ["M", "K"]], [1, ["N", "K"]], [2, ["M", "N"]]])
    assert space.shape_defaults(linear, {"M": 8192, "N": 4096, "K": 4104}, misaligned=(0, 1)) == {"cluster": "2x1"}


def test_the_pairs_run_along_the_grid_axis_of_m_and_nothing_is_chosen_for_an_empty_output():
    n_first = dict(GEMM_INFO, tiles=[["BLOCK_N", "N"], ["BLOCK_M", "M"]])
    assert space.shape_defaults(n_first, {"M": 8192, "N": 5000, "K": 4096}, misaligned=(1,)) == {"cluster": "1x2"}
    assert space.shape_defaults(GEMM_INFO, {"M": 1536, "N": 0, "K": 2048}) == {}
    assert space.shape_defaults(GEMM_INFO, {"M": 8192, "N": 5000, "K": 4096}, misaligned=(1,),
                                fixed={"tma": False}) == {}


def test_tile_switches_need_one_dot_over_a_grid_of_tiles_and_a_free_schedule():
    few = {"M": 1536, "N": 6144, "K": 2048}
    assert space.shape_defaults(GEMM_INFO, few) == PINGPONG
    assert space.shape_defaults(dict(GEMM_INFO, grid_axes=3), few) == {}          # a batch axis in the grid
    assert space.shape_defaults(dict(GEMM_INFO, dots=2), few) == {}
    for given in ({"schedule": "persistent"}, {"BLOCK_N": 256}, {"warp_specialize": True}, {"cluster": "2x1"}):
        assert space.shape_defaults(GEMM_INFO, few, fixed=given) == {}
    assert space.shape_defaults(GEMM_INFO, few, fixed={"cluster": "1x1"}) == PINGPONG
    # a kernel whose own tile is 128 x 128 switches too, and takes stream-K where that shares best
    own_128 = dict(GEMM_INFO, constants=dict(GEMM_INFO["constants"], BLOCK_N=128))
    assert space.shape_defaults(own_128, few) == PINGPONG
    assert space.shape_defaults(own_128, {"M": 1100, "N": 2048, "K": 4096}) == {"schedule": "streamk"}
    # ... but another own tile keeps it
    own_64 = dict(GEMM_INFO, constants=dict(GEMM_INFO["constants"], BLOCK_N=64))
    assert space.shape_defaults(own_64, few) == {}


def test_a_fused_epilogue_over_a_short_k_weighs_cooperative_tiles_less():
    """Below K = 2048 a cooperative tile's epilogue is exposed: a kernel whose epilogue loads (bias, residual) does
    not switch to one there for a few percent of fill (GEMM + bias + GELU at 16384x4096x1024 ran 535 cooperative
    against 582 for its own ping-pong 128x128), while at K = 4096 it does (4096x4096x4096: 655 against 630), and
    for a whole wave it still does (1024x4096x512: 128 tiles of 128x256 fill 0.97 of one wave, 256 of 128x128 0.97
    of two)."""
    fused = dict(GEMM_INFO, constants=dict(GEMM_INFO["constants"], BLOCK_N=128), epilogue_loads=True)
    assert space.shape_defaults(fused, {"M": 16384, "N": 4096, "K": 1024}) == {}
    assert space.shape_defaults(fused, {"M": 4096, "N": 4096, "K": 4096}) == {"BLOCK_N": 256, "schedule": "persistent"}
    assert space.shape_defaults(dict(fused, epilogue_loads=False), {"M": 16384, "N": 4096, "K": 1024}) == \
        {"BLOCK_N": 256, "schedule": "persistent"}
    linear = dict(fused, constants=dict(GEMM_INFO["constants"], BLOCK_N=192))
    assert space.shape_defaults(linear, {"M": 1024, "N": 4096, "K": 512}) == {"BLOCK_N": 256, "schedule": "persistent"}


@pytest.mark.parametrize("extents, tried", [
    ({"M": 4096, "N": 4096}, True),         # 512 programs of 128 x 256: the pairs' shared tiles matter
    ({"M": 512, "N": 1024}, False),         # 16 programs: too few
])
def test_clustered_candidates_only_where_the_grid_fills_the_gpu(extents, tried):
    configs = [Config(c) for c in space.default_configs(GEMM_INFO)]
    assert sum(c.get("cluster") == "2x1" for c in configs) == 1
    got, pruned = space.prune_by_shape(GEMM_INFO, configs, extents)
    assert any(c.get("cluster") for c in got) == tried
    assert all("too few" in why for c, why in pruned if c.get("cluster"))
    # Never with split-K (the compiler refuses the pair).
    mixed = Config({"BLOCK_M": 128, "BLOCK_N": 256, "split_k": 2, "cluster": [2, 1]})
    got, pruned = space.prune_by_shape(GEMM_INFO, [mixed, Config({"BLOCK_M": 128, "BLOCK_N": 256})],
                                       {"M": 4096, "N": 256})
    assert got == [Config({"BLOCK_M": 128, "BLOCK_N": 256})] and "do not split K" in pruned[0][1]


@pytest.mark.parametrize("extents, tried", [
    ({"M": 2112, "N": 2048, "K": 8192}, True),     # 136 tiles of 128 x 256: 1.03 waves on 132 SMs
    ({"M": 4096, "N": 4096, "K": 4096}, False),    # 512: 3.9 waves, nothing worth sharing
    ({"M": 2112, "N": 2048, "K": 64}, False),      # one K iteration per tile: nothing to share it by
    ({"M": 2112, "N": 2048}, True),                # K unknown: kept
])
def test_stream_k_candidates_only_where_they_share(extents, tried):
    streamk = Config({"schedule": "streamk"})
    plain = Config({"BLOCK_M": 128, "BLOCK_N": 256})
    got, pruned = space.prune_by_shape(GEMM_INFO, [plain, streamk], extents)
    assert (streamk in got) == tried and plain in got
    assert all("no sparse last wave" in why for c, why in pruned if c == streamk)
    # on a GPU whose SMs make the tiles exactly one wave, not even 136 tiles are shared
    assert streamk not in space.prune_by_shape(GEMM_INFO, [plain, streamk], {"M": 2112, "N": 2048, "K": 8192},
                                               sms=136)[0]
