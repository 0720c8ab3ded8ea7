"""Stream-K on the GPU against float64 torch references: fresh random inputs, NaN-poisoned outputs, each kernel
launched twice (every boundary's counter must be back at zero). Shapes whose last wave is sparse enough to be
shared (just over one wave of 128x256 tiles, two waves and a bit; ragged M, N and K) and shapes where it is not
(a single tile, K of one tile, fewer tiles than SMs, full waves), so both the shared tail and the whole-tile path
run; the sum of a shared tile is the same bit for bit whichever CTA arrives second."""
import pytest

from e2e_support import check_launch, compiled, gemm_case, poisoned, swiglu_case

pytestmark = pytest.mark.gpu
#: (M, N, K) whose 128x256 tiles leave more than an eighth of the slots of their waves idle on an H100 / H200
#: (132 SMs): 136 tiles (17 x 8), 144 (9 x 16), 272 (17 x 16); ragged M, N and K.
SHARED = [(2112, 2048, 1000), (2100, 2000, 712), (1100, 4096, 520), (2176, 4096, 136)]
#: ... and shapes where every tile runs whole: a single tile, K of one tile, fewer tiles than SMs, 3.9 waves.
WHOLE = [(129, 200, 8), (300, 1000, 64), (1000, 3000, 712), (4096, 4096, 256)]


def _shares(m: int, n: int, k: int, sms: int) -> bool:
    from tawa.lowering.stream_k import IDLE_SHARE
    tiles, trips = -(-m // 128) * -(-n // 256), -(-k // 64)
    waves = -(-tiles // sms)
    return tiles > sms and trips > 1 and (waves * sms - tiles) * IDLE_SHARE > waves * sms


@pytest.mark.parametrize("shape", SHARED + WHOLE, ids=lambda s: "x".join(map(str, s)))
def test_stream_k_gemm(shape):
    kernel = compiled("gemm.tawa", schedule="streamk")
    import torch
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    if shape in SHARED and sms == 132:
        assert _shares(*shape, sms), "the shape no longer exercises the shared tail"
    check_launch(torch, kernel, *gemm_case(torch, *shape, seed=sum(shape)), launches=2)


def test_stream_k_128x128_tiles():
    kernel = compiled("gemm.tawa", schedule="streamk", BLOCK_N=128)
    import torch
    check_launch(torch, kernel, *gemm_case(torch, 2176, 2000, 1000, seed=5), launches=2)


def test_stream_k_swiglu():
    kernel = compiled("swiglu.tawa", schedule="streamk", BLOCK_N=64)
    import torch
    check_launch(torch, kernel, *swiglu_case(torch, 2112, 4096, 1000, seed=6), launches=2)


def test_stream_k_is_deterministic():
    """A shared tile's two partials are added as a + b by whichever CTA arrives second: launches agree bit for bit."""
    kernel = compiled("gemm.tawa", schedule="streamk")
    import torch
    (a, b), _ = gemm_case(torch, 2112, 2048, 2000, seed=7)
    outs = []
    for _ in range(4):
        c = poisoned(torch, (2112, 2048), torch.bfloat16)
        kernel(a, b, c)
        outs.append(c)
    torch.cuda.synchronize()
    assert all(torch.equal(outs[0], o) for o in outs[1:])
