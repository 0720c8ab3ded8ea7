"""Thread-block clusters on the GPU (`cluster="2x1"` / `"1x2"`: pairs of CTAs share an operand tile through TMA
multicast) against float64 torch references: fresh random inputs, NaN-poisoned outputs, ragged shapes (tiles that
do not divide M, N or K, K smaller than BLOCK_K, a single tile, tile counts that are not a multiple of the SM
count), grids that do not divide into pairs (rounded up where that costs no wave, the extra CTA computing a tile
past the output; else launched without clusters, each CTA copying the whole tile itself),
both persistent schedules and every fused epilogue of the examples. Each test also checks which cluster size the
runtime launched with."""
import pytest

from e2e_support import (bias_act_case, check_launch, compiled, fp8_case, gemm_case, linear_case, record_launches,
                         swiglu_case)

pytestmark = pytest.mark.gpu

#: (M, N, K) -> with 128x256 tiles: tile rows / columns even or odd, ragged, K < BLOCK_K, one tile, 594 tiles;
#: 33 x 16 tiles, whose odd rows would cost a fifth wave to round up (launched without clusters).
SHAPES = [(4096, 4096, 4096), (1000, 6000, 712), (129, 72, 88), (64, 200, 8), (100, 120, 40), (2176, 2304, 256),
          (8448, 2304, 520), (300, 1104, 64), (4224, 4096, 136)]


@pytest.fixture
def clusters(monkeypatch):
    """The cluster size of every launch made through the driver."""
    return record_launches(monkeypatch, lambda fn, grid, block, shared, cluster: cluster)


def _pairs(shape, tile, dims) -> int:
    """The cluster size the runtime should pick: 2 where the tile grid divides into pairs along the axis, or where
    one more row (column) of tiles fits in the idle slots of the last wave; else 1."""
    import torch
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    tiles = (-(-shape[0] // tile[0]), -(-shape[1] // tile[1]))
    axis = 0 if dims == "2x1" else 1
    if tiles[axis] % 2 == 0:
        return 2
    total, padded = tiles[0] * tiles[1], (tiles[axis] + 1) * tiles[1 - axis]
    return 2 if -(-padded // (min(padded, sms) // 2 * 2)) == -(-total // min(total, sms)) else 1


@pytest.mark.parametrize("schedule,tile", [("persistent", (128, 256)), ("pingpong", (128, 128)),
                                           ("pingpong", (128, 192))])
@pytest.mark.parametrize("dims", ["2x1", "1x2"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gemm(shape, dims, schedule, tile, clusters):
    kernel = compiled("gemm.tawa", DTYPE="bf16", BLOCK_N=tile[1], schedule=schedule, cluster=dims)
    import torch
    check_launch(torch, kernel, *gemm_case(torch, *shape, seed=sum(shape) + 3), launches=2)
    assert clusters == [_pairs(shape, tile, dims)] * 2


@pytest.mark.parametrize("shape", [(333, 520, 200), (1000, 3000, 712), (2048, 4096, 1024)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("options", [{"BLOCK_N": 256, "schedule": "persistent"},
                                     {"BLOCK_N": 128, "schedule": "pingpong"},
                                     {"BLOCK_N": 192, "schedule": "pingpong"}],
                         ids=["persistent", "pingpong", "pingpong_n192"])
def test_linear_gelu_residual(shape, options, clusters):
    kernel = compiled("linear_gelu_residual.tawa", cluster="2x1", **options)
    import torch
    check_launch(torch, kernel, *linear_case(torch, *shape, seed=sum(shape)))
    assert clusters == [_pairs(shape, (128, options["BLOCK_N"]), "2x1")]


def test_gemm_bias_act(clusters):
    kernel = compiled("gemm_bias_act.tawa", cluster="1x2")
    import torch
    check_launch(torch, kernel, *bias_act_case(torch, 1333, 1016, 200, seed=5))
    assert clusters == [2]


@pytest.mark.parametrize("dims", ["2x1", "1x2"])
def test_swiglu(dims, clusters):
    kernel = compiled("swiglu.tawa", BLOCK_N=128, cluster=dims)
    import torch
    check_launch(torch, kernel, *swiglu_case(torch, 1300, 696, 264, seed=6))
    assert clusters == [_pairs((1300, 696), (128, 128), dims)]


@pytest.mark.parametrize("dims", ["2x1", "1x2"])
def test_gemm_fp8(dims, clusters):
    kernel = compiled("gemm_fp8.tawa", cluster=dims)
    import torch
    check_launch(torch, kernel, *fp8_case(torch, 1500, 600, 400, seed=7))
    assert clusters == [_pairs((1500, 600), (128, 256), dims)]
