"""Tiles loaded into registers: in an epilogue's mma layout one load per pair of adjacent columns where the pair
is inside the tensor and aligned, each element on its own otherwise (`to_nvvm.memory.lower_register_load`), in
chunks ahead of the store under every schedule (`to_nvvm.chunk_loads`: a uniform branch per chunk); a
consumer loop's register loads issued an iteration ahead (`loop-load-prefetch`); an attention bias that reaches
the second dot through a branch of the softmax, copied by the producer (`ws_analysis.feeds_dot`).

Each path is made to run: even and odd row pitches (an odd pitch misaligns every other row's pairs), tensors that
are views starting one element into their storage (every pair misaligned), extents that end mid-pair, and the
variant without TMA that an odd pitch of the output makes the launch take. NaN-poisoned outputs, float64
references; the interpreter agrees with the same references."""
import pathlib

import numpy as np
import pytest

import tawa
from e2e_support import PREFILL, compiled, poisoned

KERNELS = pathlib.Path(__file__).resolve().parent / "kernels"
PAIR_LOADS = str(KERNELS / "pair_loads.tawa")
ATTN_BIAS = str(KERNELS / "user" / "attn_bias.tawa")
BLOCK_SCALES = str(KERNELS / "gemm_block_scales.tawa")
TILES = {"BLOCK_M": 128, "BLOCK_N": 128}


def _operand(torch, rows, cols, dtype, offset: bool, scale=1.0, shift=0.0):
    """A random [rows, cols] tensor; with `offset`, a view one element into a wider one (misaligned pairs)."""
    if not offset:
        return (torch.randn(rows, cols, device="cuda") * scale + shift).to(dtype)
    wide = (torch.randn(rows, cols + 2, device="cuda") * scale + shift).to(dtype)
    return wide[:, 1:cols + 1]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(200, 136, 96), (200, 133, 96), (7, 9, 40)], ids=["even", "odd-pitch", "tiny"])
@pytest.mark.parametrize("offset", [False, True], ids=["contiguous", "offset-views"])
@pytest.mark.parametrize("options", [{}, {"schedule": "persistent"}, {"schedule": "tile"}, {"warp_specialize": False}],
                         ids=["ws", "persistent", "tile", "uniform"])
def test_epilogue_pairs(shape, offset, options):
    if PREFILL:
        # the variant an odd pitch or an offset view launches (without TMA: uniform warps, no schedule)
        tawa.compile(PAIR_LOADS, **TILES, **{k: v for k, v in options.items() if k != "schedule"}, tma=False)
    kernel = compiled(PAIR_LOADS, **TILES, **options)
    import torch
    m, n, k = shape
    torch.manual_seed(m * n + offset)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    s = _operand(torch, m, n, torch.float32, offset, shift=1.0)
    t = _operand(torch, m, n, torch.bfloat16, offset, scale=4.0)
    c = poisoned(torch, (m, n), torch.float32)
    kernel(a, b, s, t, c)
    torch.cuda.synchronize()
    assert not c.isnan().any()
    ref = (a.double() @ b.double()) * s.double() + t.double()
    assert ((c.double() - ref).norm() / ref.norm()).item() < 1e-5


def _softmax(s):
    e = (s - s.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(200, 136, 300), (333, 200, 64), (64, 48, 40), (1000, 1000, 1000)],
                         ids=["ragged", "one-k-block", "tiny", "square"])
@pytest.mark.parametrize("options", [{}, {"schedule": "tile"}, {"warp_specialize": False}],
                         ids=["auto", "tile", "uniform"])
def test_block_scales_prefetched(shape, options):
    """Row scales of A per K block, loaded an iteration ahead by `loop-load-prefetch` (the last one past the
    tensor's end); column scales of B in place."""
    m, n, k = shape
    kb = -(-k // 64)
    if PREFILL:     # the variant the launch picks for these shapes
        import ml_dtypes
        bf16 = [np.zeros(s, ml_dtypes.bfloat16) for s in ((m, k), (k, n))]
        tawa.compile(BLOCK_SCALES, **options).variant_for(
            *bf16, *[np.zeros(s, np.float32) for s in ((m, kb), (kb, n), (m, n))])
        tawa.compile(BLOCK_SCALES, **options, tma=False)    # the variant K = 300 (600-byte rows of A) launches
    kernel = compiled(BLOCK_SCALES, **options)
    import torch
    torch.manual_seed(m + n + k)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    sa = torch.rand(m, kb, device="cuda") + 0.5
    sb = torch.rand(kb, n, device="cuda") + 0.5
    c = poisoned(torch, (m, n), torch.float32)
    kernel(a, b, sa, sb, c)
    torch.cuda.synchronize()
    assert not c.isnan().any()
    ref = torch.zeros(m, n, device="cuda", dtype=torch.float64)
    for j in range(kb):
        blk = slice(64 * j, min(64 * (j + 1), k))
        ref += (a[:, blk].double() @ b[blk].double()) * sa[:, j:j + 1].double() * sb[j:j + 1].double()
    assert ((c.double() - ref).norm() / ref.norm()).item() < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("seq", [256, 333, 61], ids=["even", "odd-pitch", "one-block"])
@pytest.mark.parametrize("offset", [False, True], ids=["contiguous", "offset-view"])
def test_attention_bias_pairs(seq, offset):
    """The bias reaches the second dot through the softmax (behind the key mask's branch): the producer copies it
    into the ring by TMA; an odd S (a row pitch TMA cannot copy) takes the variant without TMA."""
    if PREFILL:
        tawa.compile(ATTN_BIAS, BLOCK_N=64, tma=False)      # the variant an odd pitch launches
    kernel = compiled(ATTN_BIAS, BLOCK_N=64)
    import torch
    torch.manual_seed(seq + offset)
    z, h, d, scale = 2, 3, 64, 0.125
    q, k, v = (torch.randn(z, h, seq, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    bias = _operand(torch, seq, seq, torch.float32, offset, scale=2.0)
    o = poisoned(torch, (z, h, seq, d), torch.bfloat16)
    kernel(q, k, v, bias, o, scale)
    torch.cuda.synchronize()
    assert not o.isnan().any()
    ref = _softmax((q.double() @ k.double().transpose(-1, -2)) * scale + bias.double()) @ v.double()
    assert ((o.double() - ref).norm() / ref.norm()).item() < 2e-2


@pytest.mark.parametrize("shape", [(40, 24, 40), (33, 17, 20)])
def test_epilogue_pairs_interpreter(shape):
    """The interpreter reads the program as the GPU test's reference does."""
    m, n, k = shape
    rng = np.random.default_rng(m * n)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    s, t = rng.standard_normal((m, n)).astype(np.float32), rng.standard_normal((m, n)).astype(np.float32)
    import ml_dtypes
    a16, b16, t16 = (x.astype(ml_dtypes.bfloat16) for x in (a, b, t))
    c = np.full((m, n), np.nan, np.float32)
    tawa.interpret(PAIR_LOADS, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)(a16, b16, s, t16, c)
    ref = (a16.astype(np.float64) @ b16.astype(np.float64)) * s + t16.astype(np.float64)
    assert np.abs(c - ref).max() / np.abs(ref).max() < 1e-5


SHIFTED_MASK = str(KERNELS / "shifted_mask.tawa")


def _shifted_mask_reference(torch, a, b, mask, block_n):
    """float64 C of `shifted_mask`: each tile's mask is the block one to the left, zeros before the tensor."""
    n = mask.shape[1]
    shifted = torch.zeros_like(mask)
    for j in range(block_n, n, block_n):
        width = min(block_n, n - j)
        shifted[:, j:j + width] = mask[:, j - block_n:j - block_n + width]
    return torch.where(shifted != 0, a.double() @ b.double(), 0.0)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(300, 520, 96), (128, 1024, 64), (40, 136, 40)], ids=["ragged", "exact", "small"])
@pytest.mark.parametrize("options", [{"BLOCK_N": 256}, {"BLOCK_N": 128}, {"BLOCK_N": 128, "schedule": "tile"}],
                         ids=["coop256", "pingpong128", "tile128"])
def test_epilogue_operand_before_the_tensor_reads_zeros(shape, options):
    """An epilogue operand loaded at block `pid_n - 1` (chunked loads, `to_nvvm.chunk_loads`): the first column of
    tiles is outside the tensor and must read zeros, not the elements before the tensor's start."""
    kernel = compiled(SHIFTED_MASK, **options)
    import torch
    m, n, k = shape
    torch.manual_seed(m + n + k)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    # the mask in the middle of a larger all-ones buffer: reading before its start would find ones, not zeros
    storage = torch.ones(m * n + 4 * 1024, device="cuda", dtype=torch.int32)
    mask = storage[2 * 1024:2 * 1024 + m * n].view(m, n)
    mask.copy_(torch.randint(-2, 3, (m, n), device="cuda", dtype=torch.int32))
    c = poisoned(torch, (m, n), torch.bfloat16)
    kernel(a, b, mask, c)
    torch.cuda.synchronize()
    assert not c.isnan().any()
    ref = _shifted_mask_reference(torch, a, b, mask, options["BLOCK_N"])
    # (with one column of tiles every element is masked: the reference is all zeros)
    assert ((c.double() - ref).norm() / max(ref.norm().item(), 1.0)).item() < 1e-2
    assert not c[:, :options["BLOCK_N"]].any(), "the first column of tiles read past the tensor's start"


RMSNORM = str(KERNELS / "user" / "rmsnorm.tawa")


@pytest.mark.gpu
@pytest.mark.parametrize("cols", [4096, 4000, 1001], ids=["full-rows", "ragged-rows", "odd-rows"])
@pytest.mark.parametrize("offset", [False, True], ids=["contiguous", "offset-views"])
def test_row_kernel_vector_accesses(cols, offset):
    """A kernel without dots (RMSNorm) loads and stores each thread's run of four bf16 in one access where every
    run is aligned and wholly inside or outside the rows (`to_nvvm.vector_access`): full rows, rows shorter than
    the tile (runs past the end skipped whole), odd rows and views one element into their storage (the element
    by element branch), input and output both."""
    kernel = compiled(RMSNORM)
    import torch
    torch.manual_seed(cols + offset)
    m = 37
    x = _operand(torch, m, cols, torch.bfloat16, offset, scale=2.0)
    w = torch.randn(cols, device="cuda").to(torch.bfloat16)
    y = poisoned(torch, (m, cols + 2), torch.bfloat16)[:, 1:cols + 1] if offset else \
        poisoned(torch, (m, cols), torch.bfloat16)
    kernel(x, w, y, 1e-5)
    torch.cuda.synchronize()
    assert not y.isnan().any()
    xd = x.double()
    ref = xd / (xd.pow(2).mean(-1, keepdim=True) + 1e-5).sqrt() * w.double()
    assert ((y.double() - ref).norm() / ref.norm()).item() < 1e-2


COPY_3D = str(KERNELS / "copy_3d.tawa")


@pytest.mark.gpu
@pytest.mark.parametrize("padded", [False, True], ids=["contiguous", "padded-rows"])
def test_3d_tile_vector_accesses_check_every_pitch(padded):
    """A [2, 4, 64] f32 tile: contiguous, its runs go in 16-byte vectors; as a view whose middle pitch is 66
    elements (every other row 8 bytes off a 16-byte boundary), element by element (the alignment test ignored
    that pitch, and a vector access there faults)."""
    kernel = compiled(COPY_3D)
    import torch
    torch.manual_seed(3 + padded)
    shape = (3, 6, 64)
    if padded:
        x = torch.randn(3, 6, 66, device="cuda")[:, :, :64]
        y = poisoned(torch, (3, 6, 66), torch.float32)[:, :, :64]
    else:
        x, y = torch.randn(*shape, device="cuda"), poisoned(torch, shape, torch.float32)
    kernel(x, y)
    torch.cuda.synchronize()
    assert torch.equal(y, x * 2.0)
