"""The launch-time choices of a kernel compiled without tile constants (`tawa.autotune.launch_defaults`), on the
GPU: the ping-pong 128x192 tile where 128x256 tiles fill the waves badly, the cooperative 128x320 one where it
fills them better, 2x1 clusters where B's rows start
off the 32-byte sector grid (an odd tile-row count rounded up to pairs), for the GEMM, FP8 and linear-layer
examples, and 192-row query blocks for attention at head dim 64 on long sequences. Each case checks the variant
chosen and the cluster size launched, then the output: fresh random inputs, a NaN-poisoned output, two launches,
against float64."""
import pytest

from e2e_support import (EXAMPLES, PREFILL, bias_act_case, check_attention, check_launch, fp8_case, gemm_case,
                          linear_case, record_launches)

pytestmark = pytest.mark.gpu


class Shaped:
    """An argument's shape and its strides in bytes (a contiguous tensor), as numpy reports them."""

    def __init__(self, *shape, itemsize=2):
        self.shape = shape
        self.strides = tuple(itemsize * _product(shape[i + 1:]) for i in range(len(shape)))


def _product(extents) -> int:
    out = 1
    for e in extents:
        out *= e
    return out


#: (example, M, N, K) -> (BLOCK_N, schedule named in the notes, cluster size launched on 132 SMs); split-K where K
#: is 4096 or more and the tiles are few (SPLITS)
CASES = {
    # B's rows 10000 bytes apart and A's 1040: 128x256 in pairs along M sharing B (24 tile rows pair as they are)
    ("gemm.tawa", 3000, 5000, 520): (256, "persistent", 2),
    # B's rows 5392 bytes apart and A's 528: 192x192 in pairs along M (34 tile rows), where 51 rows of 128x192
    # would be rounded up to 26 pairs
    ("gemm.tawa", 6504, 2696, 264): (192, "persistent", 2),
    # aligned: 288 tiles of 128x256 fill 0.73 of 3 waves, 384 of 128x192 0.97
    ("gemm.tawa", 1536, 6144, 256): (192, "pingpong", 1),
    ("gemm_fp8.tawa", 1536, 6144, 512): (192, "pingpong", 1),
    # few tiles: 64 of 128x256 fill half the SMs, 128 of 128x128 all of them
    ("gemm.tawa", 1024, 2048, 512): (128, "persistent", 1),
    # fewer still and a long K: 64 tiles of 128x128, each K loop split in two
    ("gemm.tawa", 1000, 1024, 4104): (128, "persistent", 1),
    ("gemm_fp8.tawa", 512, 1024, 4096): (128, "persistent", 1),
    # GEMM + bias + GELU, own tile 128x128: 576 tiles fill 0.87 of 5 waves, 384 of 128x192 0.97 of 3
    ("gemm_bias_act.tawa", 1536, 6144, 512): (192, "pingpong", 1),
    # the linear layer: 176 tiles of its own 128x192 fill 0.65 of two waves, 128 of 128x256 0.97 of one
    ("linear_gelu_residual.tawa", 1024, 4096, 512): (256, "persistent", 1),
    # the linear layer's W [N, K] with rows 1424 bytes apart: its own 128x192 ping-pong tile, in pairs
    ("linear_gelu_residual.tawa", 1000, 3000, 712): (192, "pingpong", 2),
    # 144 tiles of 128x256 (two waves, the second sparse), 132 of 192x192 (three consumer warp groups): one wave
    # (A's rows 1040 bytes apart: in pairs along N, which share A)
    ("gemm.tawa", 1100, 4096, 520): (192, "persistent", 2),
    ("gemm_fp8.tawa", 1100, 4096, 512): (192, "persistent", 1),
    # the linear layer: 187 tiles of its own 128x192 fill 0.67 of two waves, 121 of 192x192 0.89 of one; W's rows
    # 528 bytes apart (off the sector grid): in pairs
    ("linear_gelu_residual.tawa", 2112, 2048, 264): (192, "persistent", 2),
    # 480 tiles of 128x256 fill 0.91 of 4 waves, 384 of 128x320 (two wgmmas a k-step) 0.97 of 3
    ("gemm.tawa", 6144, 2560, 256): (320, "persistent", 1),
    # ... and 1440 of them at an FFN's N = 14336, ragged by 64 columns (0.987 of 11 waves against 0.970 of 14)
    ("gemm.tawa", 4096, 14336, 2048): (320, "persistent", 1),
    # A's and B's rows both off the sector grid (1040 and 6000 bytes apart): 192x192 in pairs along M
    ("gemm.tawa", 3000, 3000, 520): (192, "persistent", 2),
    # ... where 55 rows of 128x256 tiles would not pair without another wave
    ("gemm.tawa", 7000, 3000, 1000): (192, "persistent", 2),
    # A's rows alone off the grid (2000 bytes apart): 192x192 in pairs along N, which share A
    ("gemm.tawa", 3072, 3072, 1000): (192, "persistent", 2),
    # a few hundred rows and columns over a long K: 21 tiles of 64x128 split 4 ways (B's rows 624 bytes apart)
    ("gemm.tawa", 440, 312, 4800): (128, "persistent", 1),
    ("gemm_fp8.tawa", 256, 1024, 8192): (128, "persistent", 1),
    ("linear_gelu_residual.tawa", 300, 600, 6000): (128, "persistent", 1),
    # 8 tiles of 64x128 split 8 ways
    ("gemm.tawa", 16, 1024, 8192): (128, "persistent", 1),
}
#: The cases whose variant has 192-row tiles.
BLOCK_M = {("gemm.tawa", 1100, 4096, 520): 192, ("gemm_fp8.tawa", 1100, 4096, 512): 192,
           ("linear_gelu_residual.tawa", 2112, 2048, 264): 192, ("gemm.tawa", 3000, 3000, 520): 192,
           ("gemm.tawa", 7000, 3000, 1000): 192, ("gemm.tawa", 3072, 3072, 1000): 192,
           ("gemm.tawa", 6504, 2696, 264): 192}


SPLITS = {("gemm.tawa", 1000, 1024, 4104): 2, ("gemm_fp8.tawa", 512, 1024, 4096): 2, ("gemm.tawa", 440, 312, 4800): 4,
          ("gemm_fp8.tawa", 256, 1024, 8192): 4, ("linear_gelu_residual.tawa", 300, 600, 6000): 4,
          ("gemm.tawa", 16, 1024, 8192): 8}
for _case in list(SPLITS)[2:]:
    BLOCK_M[_case] = 64


def _arguments(example, m, n, k):
    if example == "gemm.tawa":
        return [Shaped(m, k), Shaped(k, n), Shaped(m, n)]
    if example == "gemm_fp8.tawa":
        return [Shaped(m, k, itemsize=1), Shaped(n, k, itemsize=1), Shaped(m, itemsize=4), Shaped(n, itemsize=4),
                Shaped(m, n)]
    if example == "gemm_bias_act.tawa":
        return [Shaped(m, k), Shaped(k, n), Shaped(n, itemsize=4), Shaped(m, n)]
    return [Shaped(m, k), Shaped(n, k), Shaped(n), Shaped(m, n), Shaped(m, n)]


@pytest.fixture
def clusters(monkeypatch):
    return record_launches(monkeypatch, lambda fn, grid, block, shared, cluster: cluster)


@pytest.mark.parametrize("case", list(CASES), ids=lambda c: f"{c[0][:-5]}-{c[1]}x{c[2]}x{c[3]}")
def test_default_kernel_launches_the_variant_its_shape_calls_for(case, clusters):
    import tawa
    example, m, n, k = case
    block_n, schedule, pairs = CASES[case]
    kernel = tawa.compile(str(EXAMPLES / example))
    variant = kernel.variant_for(*_arguments(example, m, n, k))
    assert variant is not kernel
    assert variant.compiled.constants["BLOCK_N"] == block_n
    assert variant.compiled.constants["BLOCK_M"] == BLOCK_M.get(case, 128)
    assert any(f"the {schedule} schedule" in note for note in variant.notes)
    assert variant.compiled.split_k == SPLITS.get(case, 1)
    if PREFILL:
        pytest.skip("kernels compiled into the cache; the check runs on a GPU")
    import torch
    make = {"gemm.tawa": gemm_case, "gemm_fp8.tawa": fp8_case, "linear_gelu_residual.tawa": linear_case,
            "gemm_bias_act.tawa": bias_act_case}[example]
    args, ref = make(torch, m, n, k, seed=m + n + k)
    check_launch(torch, kernel, args, ref, launches=2)
    if torch.cuda.get_device_properties(0).multi_processor_count == 132:
        assert clusters == [pairs] * 2


#: (Z, M, N, K) -> (BLOCK_N, schedule, cluster size on 132 SMs) for a batched GEMM (the batch is grid axis 2)
BATCHED = {(2, 1536, 6144, 256): (192, "pingpong", 1),          # 2 x 288 tiles fill 0.87 of 5 waves, 2 x 384 0.97
           (3, 1000, 3000, 136): (192, "pingpong", 2)}          # B's rows 6000 bytes apart: pairs along M


@pytest.mark.parametrize("case", list(BATCHED), ids=lambda c: "x".join(map(str, c)))
def test_a_batched_grid_launches_the_variant_its_waves_call_for(case, clusters):
    import tawa
    z, m, n, k = case
    block_n, schedule, pairs = BATCHED[case]
    kernel = tawa.compile(str(EXAMPLES / "batched_gemm.tawa"))
    variant = kernel.variant_for(Shaped(z, m, k), Shaped(z, k, n), Shaped(z, m, n))
    assert variant is not kernel and variant.compiled.constants["BLOCK_N"] == block_n
    assert any(f"the {schedule} schedule" in note for note in variant.notes)
    if PREFILL:
        pytest.skip("kernels compiled into the cache; the check runs on a GPU")
    import torch
    torch.manual_seed(z + m + n + k)
    a = torch.randn(z, m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(z, k, n, device="cuda", dtype=torch.bfloat16)
    check_launch(torch, kernel, [a, b], a.double() @ b.double(), launches=2)
    if torch.cuda.get_device_properties(0).multi_processor_count == 132:
        assert clusters == [pairs] * 2


#: (example, causal, Z, H, S, key/value heads) -> BLOCK_M launched at head dim 64: 192-row query blocks from 16
#: key blocks of 128 with loops of one length (S = 2048), from 48 with causal loops (S = 6144), on grids of two
#: waves of them or more; ragged S.
ATTENTION = {("flash_attention.tawa", 0, 2, 16, 2100, None): 192,
             ("flash_attention.tawa", 0, 1, 3, 2100, None): 128,          # 33 CTAs of 192 rows: under a wave
             ("flash_attention.tawa", 0, 2, 2, 1000, None): 128,
             ("flash_attention.tawa", 1, 2, 16, 2100, None): 128,
             ("flash_attention.tawa", 1, 1, 16, 6200, None): 192,
             ("gqa_attention.tawa", 0, 2, 16, 2100, 4): 192,
             ("gqa_attention.tawa", 1, 1, 16, 6200, 2): 192}


@pytest.mark.parametrize("case", list(ATTENTION), ids=lambda c: f"{c[0][:-5]}-c{c[1]}-{c[2]}x{c[3]}x{c[4]}-kv{c[5]}")
def test_attention_at_head_dim_64_launches_192_row_blocks_on_long_sequences(case):
    import tawa
    example, causal, z, h, s, kv_heads = case
    kernel = tawa.compile(str(EXAMPLES / example), HEAD_DIM=64, CAUSAL=causal)
    q, kv = Shaped(z, h, s, 64), Shaped(z, kv_heads or h, s, 64)
    variant = kernel.variant_for(q, kv, kv, q, 0.125)
    assert variant.compiled.constants["BLOCK_M"] == ATTENTION[case]
    assert (variant is kernel) == (ATTENTION[case] == 128)
    if PREFILL:
        pytest.skip("kernels compiled into the cache; the check runs on a GPU")
    import torch
    for seed in (s, s + 1):                     # twice: the variant is looked up again on the second launch
        check_attention(torch, kernel, (z, h, s, 64), causal, seed=seed, kv_heads=kv_heads)


#: (example, causal, Z, H, S, key/value heads, head dim) -> BLOCK_N launched: above head dim 128 the largest key
#: block with two K and V slots beside Q (112 at 192, 80 at 256) from 16 key blocks of 128 on, 64 below; ragged S
#: (2100 and 3000 are not multiples of 80 or 112: the last key block is masked).
WIDE_HEADS = {("flash_attention.tawa", 0, 2, 4, 3000, None, 256): 80,
              ("flash_attention.tawa", 1, 2, 4, 2100, None, 256): 80,
              ("flash_attention.tawa", 0, 2, 4, 2100, None, 192): 112,
              ("flash_attention.tawa", 1, 1, 4, 1000, None, 192): 64,
              ("gqa_attention.tawa", 1, 1, 8, 3000, 2, 256): 80}


@pytest.mark.parametrize("case", list(WIDE_HEADS),
                         ids=lambda c: f"{c[0][:-5]}-c{c[1]}-{c[2]}x{c[3]}x{c[4]}x{c[6]}-kv{c[5]}")
def test_attention_above_head_dim_128_launches_key_blocks_with_two_slots(case):
    import tawa
    example, causal, z, h, s, kv_heads, d = case
    kernel = tawa.compile(str(EXAMPLES / example), HEAD_DIM=d, CAUSAL=causal)
    q, kv = Shaped(z, h, s, d), Shaped(z, kv_heads or h, s, d)
    variant = kernel.variant_for(q, kv, kv, q, 0.125)
    assert variant.compiled.constants["BLOCK_N"] == WIDE_HEADS[case]
    assert variant is not kernel
    if PREFILL:
        pytest.skip("kernels compiled into the cache; the check runs on a GPU")
    import torch
    for seed in (s, s + 1):
        check_attention(torch, kernel, (z, h, s, d), causal, seed=seed, kv_heads=kv_heads)
