"""User-style kernels on the GPU (`kernels/user/`): programs written the way a Triton or CUDA user would write them,
not by the compiler's authors: GEMM epilogues (alpha/beta, a run-time `if` around a load, a bias-initialised
accumulator, constexpr flags, an i32 mask, a second reduced output, an f16 residual, an f32 residual stored transposed), operand layouts (M-major A,
nn.Linear's [N, K] W, an A scaled in registers, tf32), fp8 in (e5m2) and out (e4m3), a weight-only fp8 GEMM (its B
converted in registers; also stored [N, K], as nn.Linear does), a hand-written grouped 1-D grid, a dual GEMM, a batched GEMM on a 3-D grid, six attention
variants (no scale, Triton-style causal at head dim 256 in f16, an additive bias, cross attention, a causal
sliding window, logit soft-capping), kernels that read scalars from memory into loop bounds, branches and tile
coordinates (MoE grouped GEMMs by tile expert and by expert row counts, an expert loop, variable-length attention,
paged decode, block-sparse attention from a block list, a GEMM with a K extent per batch), and row reductions and norms
(RMSNorm, LayerNorm, softmax, logsumexp), and a tiled transpose.

Each kernel is launched as a user would, `kernel(*args)` in its signature order, compiled with its own defaults
(for a GEMM-family kernel that is per-shape variants: small-M tiles, split-K, other tiles; prefill compiles the
variant each shape launches) and, for most, once more with another tile. Shapes are ragged (no extent a multiple of
a tile) plus one tiny one, every contiguous extent a multiple of 16 bytes (TMA's rule: no fallback compile at
launch). Inputs are numpy arrays (ml_dtypes for bf16 and fp8) copied to the GPU byte for byte; outputs start
poisoned (NaN; fp8 NaN 0x7F), so an element never written fails. References are float64 numpy from the same
(rounded) inputs, and each is checked against the CPU interpreter (`test_*_matches_interpreter`, no GPU needed),
so a GPU result that matches the reference matches the interpreter's reading of the program."""
import pathlib
import zlib

import numpy as np
import pytest

import tawa
from e2e_support import PREFILL, compiled

ml_dtypes = pytest.importorskip("ml_dtypes")

USER = pathlib.Path(__file__).resolve().parent / "kernels" / "user"
NUMPY = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32, "i32": np.int32,
         "f8e4m3": ml_dtypes.float8_e4m3fn, "f8e5m2": ml_dtypes.float8_e5m2}
FP8_NAN = 0x7F                              # NaN in both e4m3fn and e5m2

#: Relative error against float64 (|out - ref| / |ref|, Frobenius): a bf16 output rounds each element to 8 bits
#: (about 2e-3 in all); f16 to 11; an f32 output of 16-bit products is exact up to f32 accumulation; tf32 drops 13
#: mantissa bits of each operand; fp8 wgmma accumulates with fewer bits than f32 (about 2e-4, docs/language.md);
#: attention rounds P to 16 bits before its second dot (bf16 as check_attention allows; f16 keeps 3 more bits).
BF16, F16, F32, TF32, ATTENTION, ATTENTION_F16 = 1e-2, 5e-3, 1e-5, 5e-3, 2e-2, 1e-2


class Out:
    """An output argument: its dtype, the float64 reference of its contents and the tolerance (rel_err). Where the
    reference is NaN the kernel must leave the poison in place (rows outside every segment of a packed layout)."""

    def __init__(self, dtype, ref, tol):
        self.dtype, self.ref, self.tol = dtype, np.asarray(ref, dtype=np.float64), tol

    def poisoned(self):
        """A host buffer that no correct launch leaves any element of: NaN (fp8: its NaN byte)."""
        if self.dtype.startswith("f8"):
            return np.full(self.ref.shape, FP8_NAN, np.uint8).view(NUMPY[self.dtype])
        return np.full(self.ref.shape, np.nan, NUMPY[self.dtype])

    def check(self, out, what=""):
        out = np.asarray(out).astype(np.float64)
        keep = np.isnan(self.ref)
        assert np.isnan(out[keep]).all(), \
            f"{what}: {int((~np.isnan(out[keep])).sum())} elements written that must keep their poison"
        out, ref = out[~keep], self.ref[~keep]
        assert not np.isnan(out).any(), f"{what}: {int(np.isnan(out).sum())} of {out.size} elements not written"
        err = float(np.linalg.norm(out - ref) / np.linalg.norm(ref))
        assert err <= self.tol, f"{what}: relative error {err:.3g} > {self.tol}"


class Grid(tuple):
    """A launch grid, first in a builder's arguments, for a kernel that declares none (`kernel[grid](...)`)."""


# ---- inputs and float64 references ---------------------------------------------------------------------------------
def randn(rng, shape, dtype, scale=1.0, shift=0.0):
    return (rng.standard_normal(shape) * scale + shift).astype(np.float32).astype(NUMPY[dtype])


def f64(x):
    return np.asarray(x).astype(np.float64)


def silu(x):
    return x / (1 + np.exp(-x))


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))


def softmax(s, axis=-1):
    e = np.exp(s - s.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _ab(rng, m, n, k, dtype="bf16"):
    return randn(rng, (m, k), dtype), randn(rng, (k, n), dtype)


def gemm_alpha_beta(rng, shape, **_):
    m, n, k = shape
    a, b = _ab(rng, m, n, k)
    c = randn(rng, (m, n), "bf16")
    alpha, beta = 0.75, -1.5
    return [a, b, c, Out("bf16", alpha * (f64(a) @ f64(b)) + beta * f64(c), BF16), alpha, beta]


def gemm_beta_if(rng, shape, beta=0.5, **_):
    m, n, k = shape
    a, b = _ab(rng, m, n, k)
    if beta == 0.0:     # C is never read: NaN there must not reach D
        c = np.full((m, n), np.nan, NUMPY["bf16"])
        ref = 1.25 * (f64(a) @ f64(b))
    else:
        c = randn(rng, (m, n), "bf16")
        ref = 1.25 * (f64(a) @ f64(b)) + beta * f64(c)
    return [a, b, c, Out("bf16", ref, BF16), 1.25, beta]


def gemm_bias_init(rng, shape, **_):
    m, n, k = shape
    a, b = _ab(rng, m, n, k)
    bias = randn(rng, (n,), "f32", scale=4.0)
    return [a, b, bias, Out("bf16", f64(a) @ f64(b) + f64(bias), BF16)]


def gemm_hasbias(rng, shape, HAS_BIAS=1, ACT=2, **_):
    m, n, k = shape
    a, b = _ab(rng, m, n, k)
    bias = randn(rng, (n,), "bf16", scale=4.0)
    h = f64(a) @ f64(b) + (f64(bias) if HAS_BIAS else 0.0)
    ref = {0: h, 1: np.maximum(h, 0.0), 2: silu(h)}[ACT]
    return [a, b, bias, Out("bf16", ref, BF16)]


def gemm_mask(rng, shape, **_):
    m, n, k = shape
    a, b = _ab(rng, m, n, k)
    mask = rng.integers(-2, 3, size=(m, n), dtype=np.int32)        # 0 in about a fifth, any other value keeps
    return [a, b, mask, Out("bf16", np.where(mask != 0, f64(a) @ f64(b), 0.0), BF16)]


def gemm_tril_a(rng, shape, **_):
    m, n, k = shape
    a, b = _ab(rng, m, n, k)
    return [a, b, Out("bf16", np.tril(f64(a)) @ f64(b), BF16)]


def gemm_mask_b(rng, shape, **_):
    m, n, k = shape
    a, b = _ab(rng, m, n, k)
    kv = (2 * k) // 3 + 1                          # not a multiple of BLOCK_K: one K block is partly kept
    return [a, b, Out("bf16", f64(a)[:, :kv] @ f64(b)[:kv], BF16), kv]


def gemm_act_if(rng, shape, act=2, **_):
    m, n, k = shape
    a, b = _ab(rng, m, n, k)
    h = f64(a) @ f64(b)
    ref = {0: h, 1: np.maximum(h, 0.0), 2: 1.0 / (1.0 + np.exp(-h))}[act]
    return [a, b, Out("bf16", ref, BF16), act]


def gemm_act_if_epilogue(rng, shape, act=1, **_):
    m, n, k = shape
    a, b = _ab(rng, m, n, k)
    s = rng.uniform(0.25, 2.0, size=m).astype(np.float32)
    r = rng.standard_normal((m, n)).astype(NUMPY["bf16"])
    h = f64(a) @ f64(b)
    y = np.maximum(h, 0.0) if act == 1 else 2.0 * h
    return [a, b, s, r, Out("bf16", y * f64(s)[:, None] + f64(r), BF16), act]


def gemm_scale_step(rng, shape, BLOCK_K=64, **_):
    m, n, k = shape
    a, b = _ab(rng, m, n, k)
    nk = -(-k // BLOCK_K)
    sel_a, sel_b = nk // 2, nk - 1                 # the same block when K has one or two blocks
    a2, b2 = f64(a), f64(b)
    a2[:, sel_a * BLOCK_K:(sel_a + 1) * BLOCK_K] *= 2.0
    b2[sel_b * BLOCK_K:(sel_b + 1) * BLOCK_K] *= 2.0
    return [a, b, Out("bf16", a2 @ b2, BF16), sel_a, sel_b]


def gemm_fp8_step(rng, shape, BLOCK_K=128, **_):
    m, n, k = shape
    a, bt = randn(rng, (m, k), "f8e4m3"), randn(rng, (n, k), "f8e4m3")
    sel = (-(-k // BLOCK_K)) // 2
    a2 = f64(a)
    a2[:, sel * BLOCK_K:(sel + 1) * BLOCK_K] *= 2.0            # exact in e4m3 at these magnitudes
    return [a, bt, Out("bf16", a2 @ f64(bt).T, BF16), sel]


def gemm_batch_loop(rng, shape, **_):
    m, n, k = shape
    z = 3
    a, b = randn(rng, (z, m, k), "bf16"), randn(rng, (z, k, n), "bf16")
    return [a, b, Out("bf16", f64(a) @ f64(b), BF16)]


def gemm_batch_epilogue(rng, shape, **_):
    m, n, k = shape
    z = 3
    a, b = randn(rng, (z, m, k), "bf16"), randn(rng, (z, k, n), "bf16")
    bias, r = randn(rng, (n,), "f32"), randn(rng, (z, m, n), "bf16")
    return [a, b, bias, r, Out("bf16", f64(a) @ f64(b) + f64(bias) + f64(r), BF16)]


def attn_head_loop(rng, shape, D=128, **_):
    return attn_additive_mask(rng, shape, D=D)        # (the same arguments: plain scaled attention)


def attn_keypad(rng, shape, D=64, **_):
    z, h, s = shape
    q, k, v = _qkv(rng, z, h, s, D, "bf16")
    km = (rng.random((z, s)) < 0.7).astype(np.int32)
    if z > 1:
        km[-1] = 0                              # a fully padded batch: its rows output 0
    scale = D ** -0.5
    scores = np.where((km != 0)[:, None, None, :], f64(q) @ f64(k).swapaxes(-1, -2) * scale, -np.inf)
    top = scores.max(-1, keepdims=True)
    e = np.exp(scores - np.where(np.isinf(top), 0.0, top))
    den = e.sum(-1, keepdims=True)
    ref = (e / np.where(den == 0.0, 1.0, den)) @ f64(v)
    return [q, k, v, km, Out("bf16", ref, ATTENTION), scale]


def attn_paged_decode(rng, shape, D=128, PAGE=64, **_):
    """(kv heads, query heads per kv head, sequence lengths...): the pages of all sequences scattered over the
    cache in a fixed pseudo-random order."""
    hkv, g, lens = shape[0], shape[1], list(shape[2:])
    npg = [-(-n // PAGE) for n in lens]
    npages, maxp = sum(npg) + 3, max(max(npg), 1)
    perm = [(i * 7919 + 3) % npages for i in range(npages)]
    rows, used = [], 0
    for n in npg:
        rows.append(perm[used:used + n] + [0] * (maxp - n))
        used += n
    bt = np.array(rows, np.int32)
    q = randn(rng, (len(lens), hkv, g, D), "bf16")
    kc, vc = randn(rng, (npages, hkv, PAGE, D), "bf16"), randn(rng, (npages, hkv, PAGE, D), "bf16")
    scale = D ** -0.5
    ref = np.zeros((len(lens), hkv, g, D))
    for b, n in enumerate(lens):
        keys = np.concatenate([f64(kc[p]) for p in rows[b][:npg[b]]], axis=1)[:, :n]      # [HKV, n, D]
        vals = np.concatenate([f64(vc[p]) for p in rows[b][:npg[b]]], axis=1)[:, :n]
        ref[b] = softmax(f64(q[b]) @ keys.swapaxes(-1, -2) * scale) @ vals
    return [q, kc, vc, bt, np.array(lens, np.int32), Out("bf16", ref, ATTENTION), scale]


def attn_fp8(rng, shape, D=128, **_):
    z, h, s = shape
    q, k, v = (randn(rng, (z, h, s, D), "f8e4m3") for _ in range(3))
    scale = D ** -0.5
    ref = softmax(f64(q) @ f64(k).swapaxes(-1, -2) * scale) @ f64(v)
    # P is rounded to e4m3 (3 mantissa bits) before the second dot
    return [q, k, np.ascontiguousarray(v.swapaxes(-1, -2)), Out("bf16", ref, 5e-2), scale, 1.0]


def attn_varlen(rng, shape, D=128, CAUSAL=0, BLOCK_M=128, **_):
    """(heads, sequence lengths...): sequences packed along T, each padded to a multiple of BLOCK_M (the padded rows
    are queries too: each attends to its sequence's keys)."""
    h, lens = shape[0], list(shape[1:])
    padded = [-(-n // BLOCK_M) * BLOCK_M for n in lens]
    t = sum(padded)
    q, k, v = (randn(rng, (h, t, D), "bf16") for _ in range(3))
    scale = D ** -0.5
    ref, start = np.zeros((h, t, D)), 0
    for n, pn in zip(lens, padded):
        if not pn:
            continue
        part = slice(start, start + pn)
        keep = np.arange(pn)[None, :] < n
        if CAUSAL:
            keep = keep & (np.arange(pn)[None, :] <= np.arange(pn)[:, None])
        s = np.where(keep, f64(q[:, part]) @ f64(k[:, part]).swapaxes(-1, -2) * scale, -np.inf)
        ref[:, part] = softmax(s) @ f64(v[:, part])
        start += pn
    cu = np.array([0] + list(np.cumsum(padded)), np.int32)
    grid = Grid((max(-(-n // BLOCK_M) for n in lens), h, len(lens)))
    return [grid, q, k, v, Out("bf16", ref, ATTENTION), cu, np.array(lens, np.int32), scale]


def packed_lengths(lens, tail):
    """cu_seqlens of sequences of `lens` packed back to back, and the packed extent with `tail` rows after them."""
    cu = np.array([0] + list(np.cumsum(lens)), np.int32)
    return cu, int(cu[-1]) + tail


def attn_varlen_packed(rng, shape, D=128, CAUSAL=0, **_):
    """(heads, sequence lengths...): sequences packed back to back at any offsets (FlashAttention's cu_seqlens),
    7 rows after the last that belong to no sequence and must stay unwritten."""
    h, lens = shape[0], list(shape[1:])
    cu, t = packed_lengths(lens, 7)
    q, k, v = (randn(rng, (h, t, D), "bf16") for _ in range(3))
    scale = D ** -0.5
    ref = np.full((h, t, D), np.nan)
    for b, n in enumerate(lens):
        if not n:
            continue
        part = slice(cu[b], cu[b + 1])
        keep = np.ones((n, n), bool) if not CAUSAL else np.arange(n)[None, :] <= np.arange(n)[:, None]
        s = np.where(keep, f64(q[:, part]) @ f64(k[:, part]).swapaxes(-1, -2) * scale, -np.inf)
        ref[:, part] = softmax(s) @ f64(v[:, part])
    grid = Grid((max(1, -(-max(lens) // 128)) * 2, h, len(lens)))    # (also query blocks past every sequence)
    return [grid, q, k, v, Out("bf16", ref, ATTENTION), cu, scale]


def attn_varlen_gqa(rng, shape, D=128, CAUSAL=0, GROUP=4, **_):
    """(key/value heads, (query length, key length) of each sequence...): queries and keys packed back to back at
    offsets of their own, GROUP query heads per key/value head; causal masking aligned to the last key (each
    sequence has at least as many keys as queries, so every query sees one). 5 rows after the last query belong to
    no sequence and stay unwritten."""
    hk, pairs = shape[0], [(shape[i], shape[i + 1]) for i in range(1, len(shape), 2)]
    nqs, nks = [p[0] for p in pairs], [p[1] for p in pairs]
    cu_q, tq = packed_lengths(nqs, 5)
    cu_k, tk = packed_lengths(nks, 0)
    h = hk * GROUP
    q = randn(rng, (h, tq, D), "bf16")
    k, v = (randn(rng, (hk, tk, D), "bf16") for _ in range(2))
    scale = D ** -0.5
    ref = np.full((h, tq, D), np.nan)
    for b, (nq, nk) in enumerate(pairs):
        if not nq:
            continue
        kk, vv = (np.repeat(f64(x[:, cu_k[b]:cu_k[b + 1]]), GROUP, axis=0) for x in (k, v))
        keep = np.ones((nq, nk), bool) if not CAUSAL else \
            np.arange(nk)[None, :] <= np.arange(nq)[:, None] + (nk - nq)
        s = np.where(keep, f64(q[:, cu_q[b]:cu_q[b + 1]]) @ kk.swapaxes(-1, -2) * scale, -np.inf)
        ref[:, cu_q[b]:cu_q[b + 1]] = softmax(s) @ vv
    grid = Grid((max(1, -(-max(nqs) // 128)), h, len(pairs)))
    return [grid, q, k, v, Out("bf16", ref, ATTENTION), cu_q, cu_k, scale]


def grouped_wgrad(rng, shape, BLOCK_M=128, BLOCK_N=128, **_):
    """(K, N, rows per group...): groups packed back to back at any offsets (empty ones included), then rows of
    no group, large, that the views must keep out of every sum."""
    k, n, counts = shape[0], shape[1], list(shape[2:])
    cu, t = packed_lengths(counts, 40)
    x, dy = randn(rng, (t, k), "bf16"), randn(rng, (t, n), "bf16")
    x[cu[-1]:], dy[cu[-1]:] = 1e4, 1e4
    ref = np.stack([f64(x[cu[g]:cu[g + 1]]).T @ f64(dy[cu[g]:cu[g + 1]]) for g in range(len(counts))])
    grid = Grid((-(-k // BLOCK_M), -(-n // BLOCK_N), len(counts)))
    return [grid, x, dy, Out("f32", ref, F32), cu]


def segment_rows(rng, shape, D=64, BLOCK_M=32, **_):
    """(segments as start, end pairs...): rows of X at any offsets, with gaps (left unwritten) between them."""
    pairs = [(shape[i], shape[i + 1]) for i in range(0, len(shape), 2)]
    t = max(e for _, e in pairs) + 5
    nblk = max(1, -(-max(e - s for s, e in pairs) // BLOCK_M))
    x = randn(rng, (t, D), "f32")
    y, p = np.full((t, D), np.nan), np.zeros((len(pairs), nblk, D))
    for b, (s, e) in enumerate(pairs):
        y[s:e] = 2 * f64(x[s:e]) + 1
        for i in range(nblk):
            p[b, i] = f64(x[s + i * BLOCK_M:min(e, s + (i + 1) * BLOCK_M)]).sum(0)
    starts, ends = (np.array(v, np.int32) for v in zip(*pairs))
    return [Grid((nblk, len(pairs))), x, Out("f32", y, F32), Out("f32", p, F32), starts, ends]


def moe_gemm(rng, shape, BLOCK_M=128, **_):
    """(experts, N, K, rows per expert...): each expert's rows padded to a multiple of BLOCK_M; the experts' row
    groups appear in a shuffled order."""
    e, n, k, counts = shape[0], shape[1], shape[2], list(shape[3:])
    order = [(3 * i + 1) % e for i in range(e)]
    tiles = [-(-counts[x] // BLOCK_M) for x in order]
    m = sum(tiles) * BLOCK_M
    x, w = randn(rng, (m, k), "bf16"), randn(rng, (e, k, n), "bf16")
    expert = np.repeat(np.array(order, np.int32), tiles)
    ref = np.concatenate([f64(x[t * BLOCK_M:(t + 1) * BLOCK_M]) @ f64(w[g]) for t, g in enumerate(expert)] or
                         [np.zeros((0, n))])
    return [x, w, expert, Out("bf16", ref, BF16)]


def moe_expert_loop(rng, shape, **_):
    return moe_counts(rng, shape)


def moe_counts(rng, shape, **_):
    """(E, CAP, N, K, count per expert...): rows past an expert's count (and whole tiles past it) are zeros."""
    e, cap, n, k, counts = shape[0], shape[1], shape[2], shape[3], list(shape[4:])
    x, w = randn(rng, (e, cap, k), "bf16"), randn(rng, (e, k, n), "bf16")
    keep = np.arange(cap)[None, :, None] < np.array(counts)[:, None, None]
    ref = np.where(keep, f64(x) @ f64(w), 0.0)
    return [x, w, np.array(counts, np.int32), Out("bf16", ref, BF16)]


def attn_block_sparse(rng, shape, D=128, BLOCK_N=128, **_):
    """(heads, S): each 128-row query block attends to a random nonempty set of key blocks, listed in random
    order."""
    h, s = shape
    nqb, nkb = -(-s // 128), -(-s // BLOCK_N)
    cnt = rng.integers(1, nkb + 1, nqb).astype(np.int32)
    idx = np.zeros((nqb, nkb), np.int32)
    keep = np.zeros((s, s), bool)
    for i in range(nqb):
        idx[i, :cnt[i]] = rng.permutation(nkb)[:cnt[i]]
        for kb in idx[i, :cnt[i]]:
            keep[i * 128:(i + 1) * 128, kb * BLOCK_N:(kb + 1) * BLOCK_N] = True
    q, k, v = (randn(rng, (h, s, D), "bf16") for _ in range(3))
    scale = D ** -0.5
    ref = softmax(np.where(keep, f64(q) @ f64(k).swapaxes(-1, -2) * scale, -np.inf)) @ f64(v)
    return [q, k, v, cnt, idx, Out("bf16", ref, ATTENTION), scale]


def gemm_ragged_k(rng, shape, **_):
    """(Z, M, N, K, K of each batch...): batch z multiplies only its first KLEN[z] columns of A / rows of B."""
    z, m, n, k, klen = shape[0], shape[1], shape[2], shape[3], list(shape[4:])
    a, b = randn(rng, (z, m, k), "bf16"), randn(rng, (z, k, n), "bf16")
    bias = randn(rng, (z, n), "f32")
    ref = np.stack([f64(a[i, :, :kl]) @ f64(b[i, :kl]) for i, kl in enumerate(klen)]) + f64(bias)[:, None]
    return [a, b, np.array(klen, np.int32), bias, Out("bf16", ref, BF16)]


def gemm_ragged_k_ab(rng, shape, **_):
    """(Z, M, N, K, K of each batch...): as gemm_ragged_k, both operands masked, no bias."""
    z, m, n, k, klen = shape[0], shape[1], shape[2], shape[3], list(shape[4:])
    a, b = randn(rng, (z, m, k), "bf16"), randn(rng, (z, k, n), "bf16")
    ref = np.stack([f64(a[i, :, :kl]) @ f64(b[i, :kl]) for i, kl in enumerate(klen)])
    return [a, b, np.array(klen, np.int32), Out("bf16", ref, BF16)]


def gemm_user_persistent(rng, shape, **_):
    m, n, k = shape
    a, b = _ab(rng, m, n, k)
    return [a, b, Out("bf16", f64(a) @ f64(b), BF16)]


def gemm_rowmax(rng, shape, BLOCK_N=128, **_):
    m, n, k = shape
    a, b = _ab(rng, m, n, k)
    c = f64(a) @ f64(b)
    nb = -(-n // BLOCK_N)
    padded = np.zeros((m, nb * BLOCK_N))
    padded[:, :n] = np.abs(c)
    partial = padded.reshape(m, nb, BLOCK_N).max(axis=2).T          # [NB, M]
    return [a, b, Out("bf16", c, BF16), Out("f32", partial, F32)]


def gemm_f16_residual(rng, shape, **_):
    m, n, k = shape
    a, b = _ab(rng, m, n, k, "f16")
    r = randn(rng, (m, n), "f16", scale=4.0)
    return [a, b, r, Out("f16", f64(a) @ f64(b) + f64(r), F16)]


def linear_silu(rng, shape, **_):
    m, n, k = shape
    x, w = randn(rng, (m, k), "bf16"), randn(rng, (n, k), "bf16")
    bias = randn(rng, (n,), "bf16", scale=4.0)
    return [x, w, bias, Out("bf16", silu(f64(x) @ f64(w).T + f64(bias)), BF16)]


def gemm_at(rng, shape, **_):
    m, n, k = shape
    at, b = randn(rng, (k, m), "bf16"), randn(rng, (k, n), "bf16")
    return [at, b, Out("bf16", f64(at).T @ f64(b), BF16)]


def gemm_scale_a(rng, shape, **_):
    m, n, k = shape
    a, b = _ab(rng, m, n, k)
    s = rng.uniform(0.25, 2.0, size=m).astype(np.float32).astype(NUMPY["bf16"])
    # a * s is a bf16 product (exact in f32, rounded to bf16) that then enters the dot
    scaled = (f64(a) * f64(s)[:, None]).astype(np.float32).astype(NUMPY["bf16"])
    return [a, b, s, Out("bf16", f64(scaled) @ f64(b), BF16)]


def gemm_tf32(rng, shape, **_):
    m, n, k = shape
    a, b = randn(rng, (m, k), "f32"), randn(rng, (n, k), "f32")
    return [a, b, Out("f32", f64(a) @ f64(b).T, TF32)]


def gemm_fp8_weight(rng, shape, bits=False, **_):
    """With `bits`: A is the identity (M = K) and W holds every e4m3 bit pattern but NaN, unscaled, so C is W
    converted to bf16, which holds every e4m3 value exactly (subnormals, -0 and +-448 included)."""
    m, n, k = shape
    if bits:
        w = rng.choice(np.setdiff1d(np.arange(256), [0x7F, 0xFF]), size=(k, n)).astype(np.uint8)
        w = w.view(NUMPY["f8e4m3"])
        a, scale = np.eye(m, k, dtype=np.float32).astype(NUMPY["bf16"]), np.ones(n, np.float32)
        return [a, w, scale, Out("bf16", f64(w), 0.0)]
    a, w = randn(rng, (m, k), "bf16"), randn(rng, (k, n), "f8e4m3")
    scale = rng.uniform(0.5, 2.0, size=n).astype(np.float32)
    return [a, w, scale, Out("bf16", (f64(a) @ f64(w)) * f64(scale), BF16)]


def gemm_fp8_a(rng, shape, **_):
    m, n, k = shape
    a, b = randn(rng, (m, k), "f8e4m3"), randn(rng, (k, n), "bf16")
    return [a, b, Out("bf16", f64(a) @ f64(b), BF16)]


def gemm_residual_t(rng, shape, **_):
    m, n, k = shape
    a, b = _ab(rng, m, n, k)
    rt = randn(rng, (n, m), "f32")
    return [a, b, rt, Out("bf16", f64(a) @ f64(b) + f64(rt).T, BF16)]


def gemm_fp8_weight_nk(rng, shape, **kw):
    """gemm_fp8_weight with W stored [N, K] (nn.Linear's layout)."""
    a, w, scale, out = gemm_fp8_weight(rng, shape, **kw)
    return [a, np.ascontiguousarray(w.T), scale, out]


def gemm_e5m2(rng, shape, **_):
    m, n, k = shape
    a, b = randn(rng, (m, k), "f8e5m2"), randn(rng, (n, k), "f8e5m2")
    return [a, b, Out("f16", 0.25 * (f64(a) @ f64(b).T), 2e-3), 0.25]


def gemm_fp8_out(rng, shape, **_):
    m, n, k = shape
    a, b = _ab(rng, m, n, k)
    inv_scale = 200.0 / k ** 0.5           # outputs of about 200: a few percent clamp at +-448
    y = np.clip(inv_scale * (f64(a) @ f64(b)), -448.0, 448.0)
    # against the reference rounded to e4m3 (round to nearest even, as the GPU and the interpreter do)
    return [a, b, Out("f8e4m3", f64(y.astype(NUMPY["f8e4m3"])), 1e-3), inv_scale]


def gemm_grouped_pid(rng, shape, **_):
    m, n, k = shape
    a, b = _ab(rng, m, n, k)
    return [a, b, Out("bf16", f64(a) @ f64(b), BF16)]


def geglu(rng, shape, **_):
    m, n, k = shape
    a, b1 = _ab(rng, m, n, k)
    b2 = randn(rng, (k, n), "bf16")
    return [a, b1, b2, Out("bf16", gelu_tanh(f64(a) @ f64(b1)) * (f64(a) @ f64(b2)), BF16)]


def batched_gemm_epi(rng, shape, **_):
    z, m, n, k = shape
    a, b = randn(rng, (z, m, k), "bf16"), randn(rng, (z, k, n), "bf16")
    bias = randn(rng, (z, n), "f32", scale=4.0)
    return [a, b, bias, Out("bf16", 0.5 * (f64(a) @ f64(b)) + f64(bias)[:, None, :], BF16), 0.5]


def _qkv(rng, z, h, s, d, dtype, q_scale=1.0):
    return randn(rng, (z, h, s, d), dtype, scale=q_scale), randn(rng, (z, h, s, d), dtype), \
        randn(rng, (z, h, s, d), dtype)


def attn_noscale(rng, shape, HEAD_DIM=96, **_):
    z, h, s = shape
    q, k, v = _qkv(rng, z, h, s, HEAD_DIM, "bf16", q_scale=HEAD_DIM ** -0.5)     # the caller scales Q
    ref = softmax(f64(q) @ f64(k).swapaxes(-1, -2)) @ f64(v)
    return [q, k, v, Out("bf16", ref, ATTENTION)]


def attn_causal_scale(rng, shape, D=256, **_):
    z, h, s = shape
    q, k, v = _qkv(rng, z, h, s, D, "f16")
    scale = D ** -0.5
    scores = f64(q) @ f64(k).swapaxes(-1, -2) * scale
    scores = np.where(np.tril(np.ones((s, s), bool)), scores, -np.inf)
    return [q, k, v, Out("f16", softmax(scores) @ f64(v), ATTENTION_F16), scale]


def attn_bias(rng, shape, D=64, **_):
    z, h, s = shape
    q, k, v = _qkv(rng, z, h, s, D, "bf16")
    bias = randn(rng, (s, s), "f32")
    bias[rng.random((s, s)) < 0.25] = -10000.0                  # an additive mask, finite as such masks are
    np.fill_diagonal(bias, 0.0)
    scale = D ** -0.5
    ref = softmax(f64(q) @ f64(k).swapaxes(-1, -2) * scale + f64(bias)) @ f64(v)
    return [q, k, v, bias, Out("bf16", ref, ATTENTION), scale]


def attn_additive_mask(rng, shape, D=64, **_):
    z, h, s = shape
    q, k, v = _qkv(rng, z, h, s, D, "bf16")
    scale = D ** -0.5
    ref = softmax(f64(q) @ f64(k).swapaxes(-1, -2) * scale) @ f64(v)
    return [q, k, v, Out("bf16", ref, ATTENTION), scale]


def attn_cross(rng, shape, D=128, scale_factor=1.0, **_):
    z, h, sq, sk = shape
    q = randn(rng, (z, h, sq, D), "bf16")
    k, v = randn(rng, (z, h, sk, D), "bf16"), randn(rng, (z, h, sk, D), "bf16")
    # (a scale that is not positive launches the kernel's variant compiled with positive_scales=False)
    scale = scale_factor * D ** -0.5
    ref = softmax(f64(q) @ f64(k).swapaxes(-1, -2) * scale) @ f64(v)
    return [q, k, v, Out("bf16", ref, ATTENTION), scale]


def attn_window(rng, shape, D=128, **_):
    z, h, s, window = shape
    q, k, v = _qkv(rng, z, h, s, D, "bf16")
    scale = D ** -0.5
    i, j = np.arange(s)[:, None], np.arange(s)[None, :]
    scores = np.where((j <= i) & (j > i - window), f64(q) @ f64(k).swapaxes(-1, -2) * scale, -np.inf)
    return [q, k, v, Out("bf16", softmax(scores) @ f64(v), ATTENTION), scale, window]


def attn_segments(rng, shape, D=64, **_):
    """(Z, H, S): documents of random lengths packed along S, the same for every head of a batch."""
    z, h, s = shape
    q, k, v = _qkv(rng, z, h, s, D, "bf16")
    seg = np.cumsum(rng.random((z, s)) < 0.01, axis=1).astype(np.int32)      # documents of about 100 tokens
    scale = D ** -0.5
    same = seg[:, None, :, None] == seg[:, None, None, :]
    scores = np.where(same, f64(q) @ f64(k).swapaxes(-1, -2) * scale, -np.inf)
    return [q, k, v, seg.reshape(z, s, 1), seg.reshape(z, 1, s), Out("bf16", softmax(scores) @ f64(v), ATTENTION),
            scale]


def attn_softcap(rng, shape, D=128, **_):
    z, h, s = shape
    q, k, v = _qkv(rng, z, h, s, D, "bf16", q_scale=3.0)        # scores well past the cap, so it bites
    scale, cap = D ** -0.5, 20.0
    scores = cap * np.tanh(f64(q) @ f64(k).swapaxes(-1, -2) * scale / cap)
    return [q, k, v, Out("bf16", softmax(scores) @ f64(v), ATTENTION), scale, cap]


def attn_head_pad(rng, shape, BLOCK_D=48, **_):
    """(Z, H, S) at head dim BLOCK_D - 8 (40 in tiles of 48, 72 in tiles of 80)."""
    z, h, s = shape
    d = BLOCK_D - 8
    q, k, v = _qkv(rng, z, h, s, d, "bf16")
    scale = d ** -0.5
    scores = f64(q) @ f64(k).swapaxes(-1, -2) * scale
    return [q, k, v, Out("bf16", softmax(scores) @ f64(v), ATTENTION), scale]


def rmsnorm(rng, shape, **_):
    m, n = shape
    x, w = randn(rng, (m, n), "bf16", scale=2.0), randn(rng, (n,), "bf16")
    eps = 1e-5
    ref = f64(x) / np.sqrt((f64(x) ** 2).mean(axis=1, keepdims=True) + eps) * f64(w)
    return [x, w, Out("bf16", ref, BF16), eps]


def layernorm(rng, shape, **_):
    m, n = shape
    x = randn(rng, (m, n), "f16", scale=2.0, shift=0.5)
    w, b = randn(rng, (n,), "f32"), randn(rng, (n,), "f32")
    eps = 1e-5
    xc = f64(x) - f64(x).mean(axis=1, keepdims=True)
    ref = xc / np.sqrt((xc ** 2).mean(axis=1, keepdims=True) + eps) * f64(w) + f64(b)
    return [x, w, b, Out("f16", ref, F16), eps]


def softmax_temp(rng, shape, **_):
    m, n = shape
    x = randn(rng, (m, n), "bf16", scale=3.0)
    return [x, Out("bf16", softmax(f64(x) / 0.7), BF16), 0.7]


def logsumexp(rng, shape, **_):
    m, n = shape
    x = randn(rng, (m, n), "bf16", scale=3.0)
    mx = f64(x).max(axis=1)
    return [x, Out("f32", mx + np.log(np.exp(f64(x) - mx[:, None]).sum(axis=1)), F32)]


def transpose(rng, shape, **_):
    x = randn(rng, shape, "bf16")
    return [x, Out("bf16", f64(x).T, 0.0)]


# ---- the cases -----------------------------------------------------------------------------------------------------
#: (M, N, K): a tiny one (all below one tile), ragged, and ragged with more tiles than SMs at 128x128 (a persistent
#: CTA takes a second tile); M is ragged (only N and K are contiguous extents); N, K multiples of 16 elements.
GEMM = [(8, 48, 32), (333, 528, 208), (1100, 3008, 720)]
#: ... with M a multiple of 8 too, for kernels that store an M-contiguous operand (AT [K, M], partial [NB, M]).
GEMM_M8 = [(8, 48, 32), (336, 528, 208), (1096, 3008, 720)]
#: a small M with a long K: the default kernel launches split-K there (`launch_defaults`), epilogue and all.
SPLIT = (40, 264, 2064)
#: (Z, H, S): a tiny one, ragged, and a longer ragged one (144 query blocks of 128: more than the SMs, so a
#: persistent CTA takes a second one).
ATTN = [(1, 1, 24), (2, 3, 333), (2, 8, 1100)]
ATTN_S4 = [(1, 1, 24), (2, 3, 332), (2, 8, 1100)]       # Bias [S, S] in f32: rows 16-byte aligned
#: (M, N) of row kernels: tiny and ragged; each case adds rows of exactly its BLOCK_N (logsumexp: a vocabulary).
ROWS = [(3, 16), (333, 1000)]


class Case:
    """A kernel under test: its file, input/reference builder, shapes on the GPU, the option sets it is compiled
    with on the GPU (the first is its own defaults unless the kernel needs a fixed tile), a smaller set of shapes
    and option sets for the interpreter, and keyword arguments of the builder."""

    def __init__(self, kernel, shapes, options=({},), interpret_shapes=None, interpret_options=None, name=None,
                 **build_kw):
        self.kernel, self.shapes, self.options = kernel, list(shapes), list(options)
        self.build = globals()[kernel]
        self.interpret_shapes = interpret_shapes or self.shapes[:2]
        self.interpret_options = interpret_options or self.options[:1]
        self.name, self.build_kw = name or kernel, build_kw

    @property
    def path(self) -> str:
        return str(USER / f"{self.kernel}.tawa")

    def arguments(self, shape, options):
        rng = np.random.default_rng(zlib.crc32(f"{self.name} {shape}".encode()))
        return self.build(rng, shape, **options, **self.build_kw)


CASES = [
    Case("gemm_alpha_beta", GEMM + [SPLIT], [{}, {"BLOCK_M": 64, "BLOCK_N": 128}]),
    Case("gemm_beta_if", GEMM[1:], interpret_shapes=GEMM[:2], name="gemm_beta_if-beta0.5", beta=0.5),
    Case("gemm_beta_if", GEMM[:2], name="gemm_beta_if-beta0", beta=0.0),
    Case("gemm_bias_init", GEMM + [SPLIT], [{}, {"BLOCK_N": 256}]),
    Case("gemm_hasbias", GEMM, [{}, {"ACT": 1, "BLOCK_N": 192}], interpret_options=[{}, {"ACT": 1}]),
    Case("gemm_mask", GEMM, [{}, {"BLOCK_N": 256}, {"BLOCK_N": 128, "schedule": "pingpong"}]),
    Case("gemm_tril_a", GEMM, [{}, {"BLOCK_N": 256}, {"warp_specialize": False}, {"schedule": "tile"}]),
    Case("gemm_act_if", GEMM, [{}, {"BLOCK_N": 256}], name="gemm_act_if-sigmoid", act=2),
    Case("gemm_act_if", GEMM[1:], [{}], name="gemm_act_if-relu", act=1),
    Case("gemm_act_if", GEMM[1:], [{}], name="gemm_act_if-identity", act=0),
    # the epilogue reads a row scale and a residual after the `if`: they are read in the accumulator's layout
    Case("gemm_act_if_epilogue", GEMM, [{}, {"BLOCK_N": 256}], name="gemm_act_if_epilogue-relu", act=1),
    Case("gemm_act_if_epilogue", GEMM[1:], [{}], name="gemm_act_if_epilogue-double", act=0),
    # a run-time `if` passes the loaded operand through in one branch and computes it in the other
    Case("gemm_scale_step", GEMM, [{}, {"BLOCK_N": 256}, {"schedule": "tile"}, {"warp_specialize": False}]),
    Case("gemm_fp8_step", GEMM + [(130, 272, 400)], [{}, {"BLOCK_N": 256}, {"warp_specialize": False}]),
    # the K loop nested in a loop the program writes (a batch; persistent tiles as in Triton's tutorial): the
    # uniform-warp pipeline restarts its ring each time the K loop runs
    Case("gemm_batch_loop", GEMM, [{}, {"BLOCK_N": 256}, {"warp_specialize": False},
                                   {"warp_specialize": False, "BLOCK_N": 256, "num_stages": 4}]),
    Case("gemm_batch_epilogue", GEMM, [{}, {"warp_specialize": False}]),
    Case("attn_head_loop", ATTN, [{}, {"warp_specialize": False}]),
    # a paged KV cache: the page of each key block read from a block table in the loop (the producer reads it;
    # on the uniform path the loop is not pipelined)
    Case("attn_paged_decode", [(2, 4, 1, 64, 333), (1, 8, 1000, 77)], [{}, {"PAGE": 32}]),
    # fp8 attention: P rounded to e4m3 in the scores' layout, its bytes shuffled into wgmma A fragments (2x8x2048:
    # more tiles than SMs, where 64-key blocks under the persistent schedule once raced: the epilogue's staging lay
    # over P's conversion scratch, when P went through shared memory)
    Case("attn_fp8", [(1, 1, 16), (2, 3, 336), (1, 2, 1008), (2, 8, 2048)],
         [{}, {"BLOCK_N": 64}, {"BLOCK_N": 64, "num_buffers": 2}, {"BLOCK_N": 64, "dynamic_tiles": True}],
         interpret_shapes=[(1, 1, 16), (2, 3, 336)]),
    # a 1-D key-padding mask row loaded in the key loop: the consumers load it into registers
    Case("attn_keypad", ATTN, [{}, {"BLOCK_N": 64}, {"warp_specialize": False}]),
    Case("gemm_user_persistent", GEMM + [(2000, 2096, 304)], [{}, {"NUM_PROGRAMS": 7}, {"warp_specialize": False}]),
    # scalars read from memory (`sum(load(X, i, 1))`) in tile coordinates and loop bounds, and a conditional around
    # the K loop: warp-specialized (the producer reads the scalars and takes the branch itself)
    Case("attn_varlen", [(1, 24), (3, 333, 0, 1, 1100), (2, 2048, 130)],
         [{}, {"CAUSAL": 1}, {"D": 64, "BLOCK_N": 64}, {"CAUSAL": 1, "warp_specialize": False}],
         interpret_shapes=[(1, 24), (2, 200, 0, 130)]),
    # FlashAttention's packed layout (cu_seqlens at any offsets): loads through views from a sequence's first row,
    # the store through a view that ends with it
    Case("attn_varlen_packed", [(1, 24), (3, 333, 0, 1, 1100), (2, 2048, 130, 77)],
         [{}, {"CAUSAL": 1}, {"D": 64, "BLOCK_N": 64}, {"D": 64}, {"CAUSAL": 1, "warp_specialize": False}],
         interpret_shapes=[(1, 24), (2, 200, 0, 130)]),
    # ... with queries and keys of their own lengths and offsets (cross attention, a prefill over a cached prefix),
    # grouped-query heads
    Case("attn_varlen_gqa", [(1, 24, 24), (2, 333, 1000, 0, 5, 1, 1, 700, 700), (1, 130, 2048, 2048, 2048)],
         [{}, {"CAUSAL": 1}, {"D": 64, "GROUP": 8}, {"CAUSAL": 1, "warp_specialize": False}],
         interpret_shapes=[(1, 24, 24), (2, 40, 100, 0, 5, 17, 17)], interpret_options=[{}, {"CAUSAL": 1}]),
    # dots on tiles loaded through views that end (rows past a group's end read as 0): masked on the last block
    Case("grouped_wgrad", [(64, 128, 40), (192, 320, 333, 0, 65, 1000), (256, 128, 4096, 7)],
         [{}, {"BLOCK_T": 32}, {"warp_specialize": False}], interpret_shapes=[(64, 128, 40), (128, 128, 70, 0, 33)]),
    # register loads and stores through views that end, with gaps between the segments
    Case("segment_rows", [(0, 5), (3, 70, 100, 100, 101, 200, 230, 1000)], [{}, {"BLOCK_M": 64}]),
    Case("moe_gemm", [(1, 48, 32, 8), (4, 528, 208, 333, 0, 129, 17), (8, 1056, 720, 700, 900, 3, 1000, 0, 256,
                                                                          520, 64)],
         [{}, {"BLOCK_M": 64, "BLOCK_N": 256}, {"schedule": "tile"}, {"warp_specialize": False}]),
    # (BLOCK_N = 192: the zeros of the skipped tiles in the accumulator's layout, 192 not being a power of two)
    Case("moe_counts", [(1, 8, 48, 32, 5), (4, 333, 528, 208, 333, 0, 129, 17), (3, 1100, 1056, 720, 1100, 700, 1)],
         [{}, {"BLOCK_M": 64}, {"BLOCK_N": 192}, {"BLOCK_N": 320}, {"warp_specialize": False},
          {"warp_specialize": False, "BLOCK_N": 192}, {"schedule": "tile"}, {"schedule": "persistent"},
          {"schedule": "persistent", "BLOCK_N": 256}, {"dynamic_tiles": True}, {"cluster": "1x2"}]),
    # a block-sparse layout read from memory: each key block's index read in the loop (the producer reads it)
    Case("attn_block_sparse", [(1, 24), (2, 333), (3, 1100)], [{}, {"BLOCK_N": 64}, {"schedule": "tile"},
                                                               {"warp_specialize": False}]),
    # a K extent per batch read from memory (the loop bound), zero included
    Case("gemm_ragged_k", [(1, 8, 48, 32, 32), (3, 333, 528, 208, 208, 100, 0), (2, 1100, 1056, 720, 17, 720),
                           (2, 200, 320, 400, 256, 400)],
         [{}, {"BLOCK_N": 256}, {"schedule": "tile"}, {"warp_specialize": False},
          {"schedule": "persistent", "dynamic_tiles": False}]),
    # the same with both operands masked (one branch under both tests)
    Case("gemm_ragged_k_ab", [(1, 8, 48, 32, 32), (3, 333, 528, 208, 208, 100, 0), (2, 200, 320, 400, 256, 400)],
         [{}, {"BLOCK_N": 256}, {"warp_specialize": False}]),
    # segment ids as a column loaded before the key loop (persistent at head dim 128, the column a register load)
    # and a [1, BLOCK_N] row per key block (delivered through the ring slot: boxes of one row)
    Case("attn_segments", [(1, 1, 1), (2, 3, 332), (1, 2, 1100)],
         [{}, {"D": 128, "BLOCK_N": 128}, {"D": 128, "BLOCK_N": 128, "dynamic_tiles": True}]),
    # the same with the experts in a loop: the conditional around the K loop inside it, on the loop's index
    Case("moe_expert_loop", [(1, 8, 48, 32, 5), (4, 333, 528, 208, 333, 0, 129, 17)],
         [{}, {"BLOCK_M": 64, "BLOCK_N": 256}, {"warp_specialize": False}]),
    Case("gemm_mask_b", GEMM, [{}, {"BLOCK_N": 256}, {"schedule": "tile"}, {"warp_specialize": False}]),
    # partial's rows are per BLOCK_N tile: the tile is part of the program's meaning, so the launch keeps the
    # kernel's own on every shape (`tuning.tile_invariant`; it used to switch tiles on some shapes)
    Case("gemm_rowmax", GEMM_M8, [{}, {"BLOCK_M": 64, "BLOCK_N": 256}],
         interpret_options=[{"BLOCK_N": 128}, {"BLOCK_M": 64, "BLOCK_N": 256}]),
    Case("gemm_f16_residual", GEMM, [{}, {"BLOCK_N": 128}]),
    Case("linear_silu", GEMM + [SPLIT], [{}, {"BLOCK_N": 256}]),
    Case("gemm_at", GEMM_M8, [{}, {"BLOCK_M": 64, "BLOCK_N": 128}]),
    Case("gemm_scale_a", GEMM, [{}, {"BLOCK_N": 256}]),
    Case("gemm_tf32", GEMM, [{}, {"BLOCK_N": 64}]),
    Case("gemm_e5m2", GEMM, [{}, {"BLOCK_N": 256, "BLOCK_K": 64}]),
    # the B operand computed in registers (fp8 weight converted to bf16), staged by the threads into shared memory
    Case("gemm_fp8_weight", GEMM, [{}, {"BLOCK_N": 256}, {"schedule": "tile"}, {"warp_specialize": False},
                                   {"BLOCK_M": 192}, {"register_overlap": False}]),
    # every e4m3 bit pattern but NaN through the conversion, exactly (A the identity)
    Case("gemm_fp8_weight", [(320, 1056, 320)], [{}, {"BLOCK_N": 256}], name="gemm_fp8_weight-bits", bits=True),
    # nn.Linear's [N, K] weight: its transpose converted in registers and staged K-major
    Case("gemm_fp8_weight_nk", GEMM, [{}, {"BLOCK_N": 256}, {"schedule": "tile"}, {"warp_specialize": False},
                                      {"BLOCK_M": 192}, {"BLOCK_K": 128}]),
    Case("gemm_fp8_weight_nk", [(320, 1056, 320)], [{}], name="gemm_fp8_weight_nk-bits", bits=True),
    # an fp8 A converted in registers (read two bytes a load along K, in wgmma's A layout)
    Case("gemm_fp8_a", GEMM, [{}, {"BLOCK_N": 256}, {"schedule": "tile"}, {"warp_specialize": False}]),
    Case("gemm_fp8_out", GEMM, [{}]),
    # a residual kept transposed (RT [N, M], f32): transposed in registers through scratch shared memory
    Case("gemm_residual_t", GEMM_M8, [{}, {"schedule": "tile"}, {"BLOCK_N": 256}]),
    # 3 tile rows of 128 in groups of 8 (one short group) and 9 (the last group of one row); GROUP_M 3 splits 9 evenly
    Case("gemm_grouped_pid", GEMM, [{}, {"BLOCK_N": 128, "GROUP_M": 3}]),
    Case("geglu", GEMM + [SPLIT], [{}, {"BLOCK_M": 64, "BLOCK_N": 128}]),
    Case("batched_gemm_epi", [(1, 8, 48, 32), (3, 333, 528, 208), (2, 1100, 1504, 720)], [{}, {"BLOCK_N": 256}]),
    # (S = 256 and 1152, multiples of 128: the launch takes 128-key blocks for the kernel's own 64 at head dim 96)
    # (HEAD_DIM=64: its own 64-key blocks, two specialized CTAs per SM; on S = 256 and 1152 the launch takes
    # 128-key blocks, which the compiler runs on uniform warps)
    Case("attn_noscale", ATTN + [(2, 3, 256), (1, 2, 1152)], [{}, {"HEAD_DIM": 128, "BLOCK_N": 128},
                                                              {"HEAD_DIM": 64}]),
    Case("attn_causal_scale", ATTN, [{}, {"D": 128, "BLOCK_N": 128}]),
    # (S = 512: the launch asks for 128-key blocks for the uniform-warp path, which ptxas's registers refuse
    # (`launch_defaults.keeps_variant`): the kernel's own blocks run)
    Case("attn_bias", ATTN_S4 + [(2, 3, 512)], [{}, {"D": 128, "BLOCK_N": 128}]),
    Case("attn_additive_mask", ATTN + [(2, 3, 512)], [{}, {"D": 128, "BLOCK_N": 128}]),
    # (Z, H, SQ, SK): queries shorter and longer than the keys, ragged both ways
    # (D=64 alone: the compiler runs the kernel's own 128-key blocks on uniform warps, which the launch keeps)
    Case("attn_cross", [(1, 1, 24, 40), (2, 3, 333, 1100), (2, 8, 1100, 200)], [{}, {"D": 64, "BLOCK_N": 64},
                                                                                 {"D": 64}]),
    Case("attn_cross", [(2, 3, 333, 1100)], [{}, {"D": 64}], name="attn_cross-negative-scale", scale_factor=-1.0),
    Case("attn_cross", [(2, 3, 333, 1100)], [{}], name="attn_cross-zero-scale", scale_factor=0.0),
    # (Z, H, S, WINDOW): a window inside one block, one not a multiple of the blocks, one past the sequence
    Case("attn_window", [(1, 1, 24, 8), (2, 3, 1100, 300), (2, 8, 1100, 2000)], [{}, {"D": 64, "BLOCK_N": 64}],
         interpret_shapes=[(1, 1, 24, 8), (1, 2, 333, 150)]),
    Case("attn_softcap", ATTN, [{}, {"D": 64, "BLOCK_N": 64}]),
    # head dims of 40 and 72 in tiles of 48 and 80 (docs/language.md: a dim that is not a tile size)
    Case("attn_head_pad", ATTN, [{}, {"BLOCK_D": 80}, {"BLOCK_D": 80, "BLOCK_N": 64}]),
    # (odd row lengths take the element-by-element branch of the vector accesses: these kernels have no TMA)
    Case("rmsnorm", ROWS + [(70, 4096), (5, 1001)], [{}, {"BLOCK_M": 1, "BLOCK_N": 8192}]),
    Case("layernorm", ROWS + [(71, 1024), (6, 1023)]),
    Case("softmax_temp", ROWS + [(65, 2048), (9, 2047)]),
    Case("logsumexp", ROWS + [(37, 50264)], interpret_shapes=[(3, 16), (37, 2104)]),
    Case("transpose", [(8, 16), (336, 1000), (1000, 2008)], [{}, {"BLOCK": 128}]),
]


def _label(options) -> str:
    return "-".join(f"{k}{v}" for k, v in options.items()) or "defaults"


GPU_CASES = [pytest.param(case, options, shape, id=f"{case.name}-{_label(options)}-{'x'.join(map(str, shape))}")
             for case in CASES for options in case.options for shape in case.shapes]
INTERPRETER_CASES = [pytest.param(case, options, shape,
                                  id=f"{case.name}-{_label(options)}-{'x'.join(map(str, shape))}")
                     for case in CASES for options in case.interpret_options for shape in case.interpret_shapes]


def host_arguments(args):
    """The launch arguments on the host: each Out replaced by its poisoned buffer (a leading Grid dropped)."""
    return [a.poisoned() if isinstance(a, Out) else a for a in args if not isinstance(a, Grid)]


def launcher(kernel, args):
    """`kernel`, or `kernel[grid]` where the builder gave the grid."""
    return kernel[args[0]] if args and isinstance(args[0], Grid) else kernel


# ---- the GPU -------------------------------------------------------------------------------------------------------
def torch_dtype(torch, dtype):
    return {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32, "i32": torch.int32,
            "f8e4m3": torch.float8_e4m3fn, "f8e5m2": torch.float8_e5m2}[dtype]


def to_device(torch, x):
    """A numpy array (ml_dtypes included) as a CUDA tensor of the matching dtype, with the same bytes."""
    if x.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(x.view(np.int16)).cuda().view(torch.bfloat16)
    if x.dtype.itemsize == 1:
        name = {ml_dtypes.float8_e4m3fn: "f8e4m3", ml_dtypes.float8_e5m2: "f8e5m2"}[x.dtype.type]
        return torch.from_numpy(x.view(np.uint8)).cuda().view(torch_dtype(torch, name))
    return torch.from_numpy(np.ascontiguousarray(x)).cuda()


def from_device(torch, x, dtype):
    """A CUDA tensor's bytes as a numpy array of `dtype` (a Tawa dtype name)."""
    if dtype == "bf16":
        return x.view(torch.int16).cpu().numpy().view(NUMPY[dtype])
    if dtype.startswith("f8"):
        return x.view(torch.uint8).cpu().numpy().view(NUMPY[dtype])
    return x.cpu().numpy()


def gpu_kernel(case, options, args):
    """`compiled(...)` for the case; in prefill mode the variant these arguments launch (a kernel compiled without
    tile constants picks one per shape) is compiled into the cache first."""
    if PREFILL:
        try:
            kernel = tawa.compile(case.path, **options)
        except tawa.CompilationError:
            pass                        # compiled() below reports it (an expected failure, or an error)
        else:
            kernel.variant_for(*host_arguments(args))
    return compiled(case.path, **options)


@pytest.mark.gpu
@pytest.mark.parametrize("case,options,shape", GPU_CASES)
def test_user_kernel(case, options, shape):
    args = case.arguments(shape, options)
    kernel = gpu_kernel(case, options, args)
    import torch
    device = [to_device(torch, a) if isinstance(a, np.ndarray) else a for a in host_arguments(args)]
    launcher(kernel, args)(*device)
    torch.cuda.synchronize()
    outs = [(a, d) for a, d in zip([a for a in args if not isinstance(a, Grid)], device) if isinstance(a, Out)]
    for i, (out, buffer) in enumerate(outs):
        out.check(from_device(torch, buffer, out.dtype), f"output {i}")


# ---- the references against the CPU interpreter --------------------------------------------------------------------
@pytest.mark.parametrize("case,options,shape", INTERPRETER_CASES)
def test_reference_matches_interpreter(case, options, shape):
    args = case.arguments(shape, options)
    host = host_arguments(args)
    launcher(tawa.interpret(case.path, **options), args)(*host)
    outs = [a for a in args if not isinstance(a, Grid)]
    for i, (out, buffer) in enumerate((a, h) for a, h in zip(outs, host) if isinstance(a, Out)):
        out.check(buffer, f"output {i}")
