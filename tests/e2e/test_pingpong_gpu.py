"""The ping-pong schedule on the GPU (each consumer warp group computes every other tile of its CTA) against
float64 torch references: fresh random inputs, NaN-poisoned outputs, ragged shapes (tiles that do not divide M, N
or K, K smaller than BLOCK_K, a single tile, tile counts that are not a multiple of the SM count), every fused
epilogue of the examples."""
import pytest

from e2e_support import bias_act_case, check_launch, compiled, fp8_case, gemm_case, linear_case, swiglu_case
from test_examples_gpu import GEMM_SHAPES

pytestmark = pytest.mark.gpu
PINGPONG = {"schedule": "pingpong"}


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("shape", GEMM_SHAPES + [(8, 4096, 4096), (1000, 33000, 64)],
                         ids=lambda s: "x".join(map(str, s)))
def test_gemm(shape, dtype):
    kernel = compiled("gemm.tawa", DTYPE=dtype, BLOCK_N=128, **PINGPONG)
    import torch
    tdt = {"bf16": torch.bfloat16, "f16": torch.float16}[dtype]
    check_launch(torch, kernel, *gemm_case(torch, *shape, seed=sum(shape) + 1, dtype=tdt), dtype=tdt, launches=2)


@pytest.mark.parametrize("shape", [(333, 520, 200), (1000, 3000, 712), (64, 72, 40), (2048, 4096, 1024)],
                         ids=lambda s: "x".join(map(str, s)))
def test_linear_gelu_residual(shape):
    kernel = compiled("linear_gelu_residual.tawa", BLOCK_N=128, **PINGPONG)
    import torch
    check_launch(torch, kernel, *linear_case(torch, *shape, seed=sum(shape)))


@pytest.mark.parametrize("shape", GEMM_SHAPES + [(8448, 2304, 520), (300, 1104, 64)],
                         ids=lambda s: "x".join(map(str, s)))
def test_gemm_128x192(shape):
    """128x192 tiles (192 accumulator registers per consumer group, a tile width that is not a power of two)."""
    kernel = compiled("gemm.tawa", DTYPE="bf16", BLOCK_N=192, **PINGPONG)
    import torch
    check_launch(torch, kernel, *gemm_case(torch, *shape, seed=sum(shape) + 2), launches=2)


@pytest.mark.parametrize("shape", [(333, 520, 200), (1000, 3000, 712), (64, 72, 40), (2048, 4096, 1024),
                                   (129, 200, 8)], ids=lambda s: "x".join(map(str, s)))
def test_linear_gelu_residual_128x192(shape):
    """The residual's third 64-column box waits for a staging buffer here (no room for it in registers), and
    the staged reads interleave with the results' writes."""
    kernel = compiled("linear_gelu_residual.tawa", BLOCK_N=192, **PINGPONG)
    import torch
    check_launch(torch, kernel, *linear_case(torch, *shape, seed=sum(shape) + 4), launches=2)


def test_gemm_bias_act():
    kernel = compiled("gemm_bias_act.tawa", BLOCK_N=128, **PINGPONG)
    import torch
    check_launch(torch, kernel, *bias_act_case(torch, 1333, 520, 200, seed=5))


def test_swiglu():
    kernel = compiled("swiglu.tawa", BLOCK_N=64, **PINGPONG)
    import torch
    check_launch(torch, kernel, *swiglu_case(torch, 1300, 696, 264, seed=6))


def test_gemm_fp8():
    kernel = compiled("gemm_fp8.tawa", BLOCK_N=128, **PINGPONG)
    import torch
    check_launch(torch, kernel, *fp8_case(torch, 1500, 296, 400, seed=7))
