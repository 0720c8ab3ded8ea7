"""Split-K on the GPU against float64 torch references: fresh random inputs, NaN-poisoned outputs, ragged shapes
(M, N and K not multiples of the tile, K shorter than one tile per split, K of one tile), every schedule, decode
shapes (M = 1 and 8), fused epilogues (bias + GELU, SwiGLU's two accumulators), repeated launches (each tile's
counter is back at zero after a launch) and a CUDA-graph replay."""
import pytest

from e2e_support import (bias_act_case, check_launch, compiled, gemm_case, poisoned, rel_err, same_bits_every_launch,
                         swiglu_case)

pytestmark = pytest.mark.gpu
SCHEDULES = [pytest.param({}, id="auto"), pytest.param({"schedule": "tile"}, id="ws-tile"),
             pytest.param({"warp_specialize": False}, id="uniform")]
# (M, N, K): decode shapes, ragged everything, K of one BLOCK_K (most splits sum nothing), K below one tile,
# and enough tiles that a persistent CTA loops over several (4 x 12 x 3 programs on 132 SMs).
SHAPES = [(8, 4096, 4096), (1, 1000, 2056), (100, 1000, 712), (64, 136, 64), (37, 200, 8), (256, 1536, 1024)]


@pytest.mark.parametrize("ws", SCHEDULES)
@pytest.mark.parametrize("splits", [2, 3, 4])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_split_k_gemm(shape, splits, ws):
    kernel = compiled("gemm.tawa", BLOCK_M=64, BLOCK_N=128, split_k=splits, **ws)
    import torch
    # the second launch finds every counter back at zero
    check_launch(torch, kernel, *gemm_case(torch, *shape, seed=sum(shape) + splits), launches=2)


def test_split_k_is_deterministic():
    """The last program adds the partials in split order, whichever finishes last: launches agree bit for bit."""
    kernel = compiled("gemm.tawa", BLOCK_M=64, BLOCK_N=128, split_k=4)
    import torch
    (a, b), _ = gemm_case(torch, 8, 4096, 4096, seed=7)
    assert same_bits_every_launch(torch, kernel, (a, b), (8, 4096), launches=5)


@pytest.mark.parametrize("ws", SCHEDULES)
def test_split_k_bias_act(ws):
    kernel = compiled("gemm_bias_act.tawa", BLOCK_M=64, BLOCK_N=128, split_k=3, **ws)
    import torch
    check_launch(torch, kernel, *bias_act_case(torch, 33, 520, 1000, seed=11))


@pytest.mark.parametrize("ws", SCHEDULES)
def test_split_k_swiglu(ws):
    kernel = compiled("swiglu.tawa", BLOCK_M=64, BLOCK_N=64, split_k=4, **ws)
    import torch
    check_launch(torch, kernel, *swiglu_case(torch, 16, 696, 2000, seed=12))


def test_split_k_in_a_cuda_graph():
    kernel = compiled("gemm.tawa", BLOCK_M=64, BLOCK_N=128, split_k=4)
    import torch
    (a, b), _ = gemm_case(torch, 8, 2048, 3000, seed=13)
    c = poisoned(torch, (8, 2048), torch.bfloat16)
    kernel(a, b, c)                               # the workspace is allocated outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kernel(a, b, c)
    for seed in (1, 2):
        torch.manual_seed(seed)
        a.copy_(torch.randn_like(a))
        b.copy_(torch.randn_like(b))
        c.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert rel_err(c, a.double() @ b.double()) < 1e-2


@pytest.mark.parametrize("example,shape", [("gemm.tawa", (8, 4096, 4096)), ("gemm.tawa", (33, 1000, 3000)),
                                           ("swiglu.tawa", (8, 2048, 4096)), ("gemm.tawa", (300, 1000, 712))],
                         ids=["gemm-8x4096x4096", "gemm-33x1000x3000", "swiglu-8x2048x4096", "gemm-300x1000x712"])
def test_default_kernel_picks_its_small_m_variant(example, shape):
    """`tawa.compile` without tile constants: small M launches the 64-row (split) variant; larger M keeps 128-row
    tiles (their width follows the waves: tests/e2e/test_launch_defaults_gpu.py)."""
    import tawa
    from e2e_support import EXAMPLES, PREFILL
    kernel = tawa.compile(str(EXAMPLES / example))
    m, n, k = shape

    class Shaped:
        def __init__(self, *s):
            self.shape = s
    shaped = [Shaped(m, k), Shaped(k, n)] + ([Shaped(k, n)] if example == "swiglu.tawa" else []) + [Shaped(m, n)]
    variant = kernel.variant_for(*shaped)          # compiles the variant (and reads the kernel's symbols)
    if PREFILL:
        pytest.skip("kernels compiled into the cache; the check runs on a GPU")
    assert variant.compiled.constants["BLOCK_M"] == (64 if m <= 64 else 128)
    import torch
    torch.manual_seed(m + n)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    bs = [torch.randn(k, n, device="cuda", dtype=torch.bfloat16) for _ in range(len(shaped) - 2)]
    c = poisoned(torch, (m, n), torch.bfloat16)
    kernel(a, *bs, c)
    torch.cuda.synchronize()
    g = a.double() @ bs[0].double()
    ref = g if len(bs) == 1 else torch.nn.functional.silu(g) * (a.double() @ bs[1].double())
    assert not c.isnan().any() and rel_err(c, ref) < 1e-2
