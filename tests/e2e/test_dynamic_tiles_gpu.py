"""Dynamic tiles on the GPU (`persistent_tiles`, "Dynamic tiles"): persistent CTAs that take their next tile from a
counter in device memory, which every launch must leave at zero for the next. Fresh random inputs, NaN-poisoned
outputs, float64 references: causal attention (the compiler's own choice there) over grids of many tiles per CTA,
ragged sequences, one key; launches of different grids back to back on one stream, on two streams at once, and
replayed from a CUDA graph; the same tiles computed bit for bit as by the static persistent loop; and a GEMM with
dynamic tiles asked for."""
import math

import pytest

import tawa
from e2e_support import EXAMPLES, check_attention, check_launch, compiled, gemm_case, poisoned, rel_err

pytestmark = pytest.mark.gpu

#: (batch, heads, S, head dim): 512 query blocks over the CTAs (several each), ragged S, S below one block, S = 1.
SHAPES = [(4, 16, 1000, 128), (8, 16, 512, 128), (1, 3, 77, 128), (2, 2, 1, 128), (2, 5, 700, 96)]


def _attention(causal=1, head_dim=128, **options):
    return compiled("flash_attention.tawa", CAUSAL=causal, HEAD_DIM=head_dim, **options)


def _inputs(torch, shape, seed):
    z, h, s, d = shape
    torch.manual_seed(seed)
    return [torch.randn(z, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3)]


def _reference(torch, q, k, v, causal):
    scale = 1 / math.sqrt(q.shape[-1])
    return torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                            is_causal=bool(causal), scale=scale)


def test_causal_attention_takes_dynamic_tiles():
    kernel = _attention()
    assert kernel.compiled.persistent and kernel.compiled.dynamic_tiles
    assert any("takes its tiles from a counter" in n for n in kernel.compiled.notes)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_dynamic_attention(shape):
    kernel = _attention(head_dim=shape[-1])
    assert kernel.compiled.dynamic_tiles
    import torch
    check_attention(torch, kernel, shape, 1, seed=41 + sum(shape))


def test_grouped_query_attention_dynamic():
    kernel = compiled("gqa_attention.tawa", CAUSAL=1, HEAD_DIM=128)
    assert kernel.compiled.dynamic_tiles
    import torch
    check_attention(torch, kernel, (2, 32, 900, 128), 1, seed=43, kv_heads=8)


def test_launches_back_to_back_leave_the_counter_at_zero():
    """Grids of 512, 4, 24 and 512 tiles launched on one stream without a wait between them: each launch starts
    from the counter the previous one left, so a counter not back at zero would skip tiles (NaN left)."""
    kernel = _attention()
    import torch
    shapes = [(4, 16, 1000, 128), (1, 2, 129, 128), (2, 3, 500, 128), (4, 16, 1000, 128)]
    runs = []
    for i, shape in enumerate(shapes):
        q, k, v = _inputs(torch, shape, seed=50 + i)
        o = poisoned(torch, shape, torch.bfloat16)
        kernel(q, k, v, o, 1 / math.sqrt(shape[-1]))
        runs.append((q, k, v, o))
    torch.cuda.synchronize()
    for q, k, v, o in runs:
        assert not o.isnan().any()
        assert rel_err(o, _reference(torch, q, k, v, 1)) < 2e-2


def test_two_streams_at_once():
    """Launches on two streams may overlap: each stream has a counter of its own (a shared one would hand one
    launch's tiles to the other's CTAs). Inputs are made first; the launches then go out with no wait between."""
    kernel = _attention()
    import torch
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    runs = []
    for round_ in range(3):
        for j, stream in enumerate(streams):
            shape = (4, 16, 1000, 128) if j == 0 else (2, 8, 2000, 128)
            q, k, v = _inputs(torch, shape, seed=60 + 2 * round_ + j)
            runs.append((stream, q, k, v, poisoned(torch, shape, torch.bfloat16)))
    torch.cuda.synchronize()
    for stream, q, k, v, o in runs:
        kernel(q, k, v, o, 1 / math.sqrt(q.shape[-1]), stream=stream)
    torch.cuda.synchronize()
    for _, q, k, v, o in runs:
        assert not o.isnan().any()
        assert rel_err(o, _reference(torch, q, k, v, 1)) < 2e-2


def test_replayed_from_a_cuda_graph():
    """A captured launch replays with the counter the previous replay left: at zero. The capture stream's counter
    is allocated (and zeroed) by an eager launch on it first, so the graph holds no zero fill of its own."""
    kernel = _attention()
    import torch
    shape = (4, 16, 1000, 128)
    q, k, v = _inputs(torch, shape, seed=70)
    o = poisoned(torch, shape, torch.bfloat16)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        kernel(q, k, v, o, 1 / math.sqrt(shape[-1]))
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        kernel(q, k, v, o, 1 / math.sqrt(shape[-1]))
    for i in range(3):
        for x, y in zip((q, k, v), _inputs(torch, shape, seed=71 + i)):
            x.copy_(y)
        o.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert not o.isnan().any(), f"replay {i}"
        assert rel_err(o, _reference(torch, q, k, v, 1)) < 2e-2, f"replay {i}"


@pytest.mark.parametrize("causal", [0, 1])
def test_same_bits_as_the_static_loop(causal):
    """A tile computes the same whichever CTA takes it: dynamic and static persistent kernels agree bit for bit."""
    # (the static kernel first and through tawa.compile: `compiled` ends a test when it prefills the cache)
    static = tawa.compile(str(EXAMPLES / "flash_attention.tawa"), CAUSAL=causal, HEAD_DIM=128, schedule="persistent",
                          dynamic_tiles=False)
    dynamic = _attention(causal, schedule="persistent", dynamic_tiles=True)
    assert dynamic.compiled.dynamic_tiles and not static.compiled.dynamic_tiles
    import torch
    shape = (4, 16, 1000, 128)
    q, k, v = _inputs(torch, shape, seed=80 + causal)
    outs = []
    for kernel in (dynamic, static, dynamic):
        o = poisoned(torch, shape, torch.bfloat16)
        kernel(q, k, v, o, 1 / math.sqrt(shape[-1]))
        outs.append(o)
    torch.cuda.synchronize()
    assert not outs[0].isnan().any()
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])
    assert rel_err(outs[0], _reference(torch, q, k, v, causal)) < 2e-2


#: A single tile, fewer tiles than SMs, exactly 132 tiles of 128x256 (as many as an H100's SMs: each CTA's first
#: fetch finds none), ragged M, N and K over several waves.
GEMM_SHAPES = [(129, 200, 8), (1000, 3000, 712), (1408, 3072, 320), (3000, 3000, 3000), (4096, 4096, 256)]


@pytest.mark.parametrize("shape", GEMM_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_dynamic_gemm(shape):
    kernel = compiled("gemm.tawa", BLOCK_M=128, BLOCK_N=256, schedule="persistent", dynamic_tiles=True)
    assert kernel.compiled.dynamic_tiles
    import torch
    check_launch(torch, kernel, *gemm_case(torch, *shape, seed=sum(shape)), launches=2)


@pytest.mark.parametrize("shape", [(1000, 3000, 712), (3000, 3000, 3000)], ids=lambda s: "x".join(map(str, s)))
def test_dynamic_gemm_three_consumer_groups(shape):
    """192x192 tiles on three consumer warp groups: the handover's empty barriers expect 384 threads."""
    kernel = compiled("gemm.tawa", BLOCK_M=192, BLOCK_N=192, dynamic_tiles=True)
    assert kernel.compiled.dynamic_tiles and kernel.compiled.num_threads == 512
    import torch
    check_launch(torch, kernel, *gemm_case(torch, *shape, seed=sum(shape)), launches=2)


@pytest.mark.parametrize("causal", [0, 1])
def test_dynamic_attention_two_ctas_per_sm(causal):
    """Head dim 64 at two CTAs per SM with dynamic tiles (264 CTAs share one counter)."""
    kernel = _attention(causal, head_dim=64, BLOCK_N=64, dynamic_tiles=True, ctas_per_sm=2)
    assert kernel.compiled.dynamic_tiles and kernel.compiled.ctas_per_sm == 2
    import torch
    check_attention(torch, kernel, (4, 16, 700, 64), causal, seed=90 + causal)
