"""Stream-K on the GPU against float64 torch references: fresh random inputs, NaN-poisoned outputs, each kernel
launched twice (every boundary's counter must be back at zero). Shapes whose last wave is sparse enough to be
shared (just over one wave of 128x256 tiles, two waves and a bit; ragged M, N and K) and shapes where it is not
(a single tile, K of one tile, fewer tiles than SMs, full waves), so both the shared tail and the whole-tile path
run; the sum of a shared tile is the same bit for bit whichever CTA arrives second."""
import pytest

from e2e_support import check_launch, compiled, gemm_case, poisoned, same_bits_every_launch, swiglu_case

pytestmark = pytest.mark.gpu
#: (M, N, K) whose 128x256 tiles leave more than an eighth of the slots of their waves idle on an H100 / H200
#: (132 SMs): 136 tiles (17 x 8), 144 (9 x 16), 272 (17 x 16); ragged M, N and K.
SHARED = [(2112, 2048, 1000), (2100, 2000, 712), (1100, 4096, 520), (2176, 4096, 136)]
#: ... and shapes where every tile runs whole: a single tile, K of one tile, fewer tiles than SMs, 3.9 waves.
WHOLE = [(129, 200, 8), (300, 1000, 64), (1000, 3000, 712), (4096, 4096, 256)]


def _shares(m: int, n: int, k: int, sms: int) -> bool:
    """Whether the kernel's plan shares the tail of a 128x256-tile GEMM of this shape on `sms` CTAs."""
    from tawa.tile_plan import cdiv, shares_tail
    return shares_tail(cdiv(m, 128) * cdiv(n, 256), sms, cdiv(k, 64))


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
    assert same_bits_every_launch(torch, kernel, (a, b), (2112, 2048))


def test_default_kernel_launches_its_stream_k_variant_on_a_sparse_wave():
    """`tawa.compile` without tile constants: a shape whose 128x256 tiles make 3.03 waves launches the stream-K
    variant (`shape_defaults`), 3.9 waves the kernel itself; both correct."""
    import tawa
    from e2e_support import EXAMPLES, PREFILL, rel_err

    class Shaped:
        def __init__(self, *s):
            self.shape = s
    kernel = tawa.compile(str(EXAMPLES / "gemm.tawa"))
    shapes = [(1280, 10240, 2048), (4096, 4096, 1024)]
    variants = [kernel.variant_for(Shaped(m, k), Shaped(k, n), Shaped(m, n)) for m, n, k in shapes]
    if PREFILL:
        pytest.skip("kernels compiled into the cache; the check runs on a GPU")
    import torch
    if torch.cuda.get_device_properties(0).multi_processor_count == 132:
        assert variants[0].compiled.stream_k and variants[1] is kernel
    for (m, n, k) in shapes:
        (a, b), ref = gemm_case(torch, m, n, k, seed=m + k)
        c = poisoned(torch, (m, n), torch.bfloat16)
        kernel(a, b, c)
        torch.cuda.synchronize()
        assert not c.isnan().any() and rel_err(c, ref) < 1e-2
