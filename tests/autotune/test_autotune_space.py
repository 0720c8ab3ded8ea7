"""Where candidates come from (Python, the file's declaration, the default space), the key, shape pruning, and
the cached space record a machine without the compiler tunes from."""
from __future__ import annotations

import pathlib
import sys

import pytest

from tawa.autotune import AutotuneError, Config
from tawa.autotune import space

from autotune_support import GEMM_INFO, SCALE, SCALE_DECLARED

def test_gemm_info_is_what_space_info_reads_from_the_example(own_cache):
    from tawa.frontend import read_source
    gemm = pathlib.Path(__file__).resolve().parents[2] / "examples" / "gemm.tawa"
    info = space.space_info(*read_source(str(gemm)))
    keys = [k for k in GEMM_INFO if k != "declared"]
    assert {k: info[k] for k in keys} == {k: GEMM_INFO[k] for k in keys}


@pytest.mark.parametrize("b, computed", [
    ("b", False), ("b.T", False), ("trans(b)", False), ("w", False), ("u", False), ("v", True),
    ("b.to(bf16)", True), ("w.to(bf16)", True), ("(b * 2.0).to(bf16)", True)])
def test_space_info_says_whether_a_dot_computes_its_b(b, computed):
    """`computed_b`: a dot's B operand is not, through names and transposes, a `load` (the launch weighs tiles for
    it: `launch_defaults.COMPUTED_B_RATES`)."""
    from tawa.frontend.tuning import space_info
    source = ("@grid(cdiv(M, BLOCK_M), cdiv(N, BLOCK_N))\n"
              "def k(A: bf16[M, K], B: f8e4m3[K, N], C: bf16[M, N], BLOCK_M: const = 128, BLOCK_N: const = 128,\n"
              "      BLOCK_K: const = 64):\n"
              "    acc = zeros((BLOCK_M, BLOCK_N), f32)\n"
              "    for k in range(cdiv(K, BLOCK_K)):\n"
              "        a = load(A, (program_id(0), k), (BLOCK_M, BLOCK_K))\n"
              "        b = load(B, (k, program_id(1)), (BLOCK_K, BLOCK_N))\n"
              "        w = b.T.T\n"
              "        u = b\n"
              "        u = u.T.T\n"
              "        v = b.to(bf16)\n"
              "        v = v.T.T\n"
              f"        acc = dot(a, {b}, acc)\n"
              "    store(C, (program_id(0), program_id(1)), acc.to(bf16))\n")
    assert space_info(source)["computed_b"] is computed


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


def test_default_space_keeps_the_tiles_of_a_tile_dependent_program():
    """A program whose results depend on its tile constants (`partial[pid_n]`) is tuned over schedules only."""
    from tawa.autotune.space import default_configs
    info = {"has_dot": True, "constants": {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}}
    assert any("BLOCK_N" in c for c in default_configs(info))
    assert default_configs(dict(info, tile_invariant=False)) == [{}, {"warp_specialize": False}]
