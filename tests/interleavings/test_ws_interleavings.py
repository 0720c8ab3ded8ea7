"""Warp-specialized kernels reach the numpy reference under many interleavings of their warp groups.

The CPU interpreter runs the producer and consumer regions as concurrent tasks, switching between them at random
(seeded) at every aref op, load and store, with bounded aref rings: a protocol bug shows up as a deadlock or a
read of a released slot. Covered: one-iteration loops, K smaller than one tile, K = 0, odd trip counts, ring
depth 1, 2 and larger than the trip count, and every example that specializes; and the persistent schedule (the
interpreter runs a persistent kernel as 3 programs looping over the grid's tiles, so the ring runs across tiles and
tile counts are not multiples of the programs); and split-K (a tile's programs meet in the workspace, the last
sums). The specialized kernel must also compute bit-for-bit what the sequential kernel computes.
"""
from __future__ import annotations

import pathlib
import re

import ml_dtypes
import numpy as np
import pytest
from mlir import ir

from tawa.ir.kernel_info import body_block, kernels
from tawa.ir.ops import warp_group_role
from tawa.ir.traversal import ops_of, walk
from tawa.errors import TawaError
from tawa.frontend import parse_and_lower
from tawa.ir.convert import to_python
from tawa.lowering import (aref_insertion, mask_elision, partition, persistent_tiles, protocol_check,
                           scalar_loads, split_k, stream_k)
from tawa.options import CompileOptions
from tawa.runtime.grid import bind_numpy_args, eval_grid
from tawa.runtime.interpreter import InterpreterDeadlock, run_kernel, run_with_interleavings
from tawa.tile_plan import shares_tail

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
USER = pathlib.Path(__file__).resolve().parents[1] / "e2e" / "kernels" / "user"
SEEDS = range(20)
BF16 = ml_dtypes.bfloat16
FP8 = ml_dtypes.float8_e4m3fn


def build(name: str, constants: dict, specialize: bool = True, persistent: bool = False, splits: int = 1,
          **options):
    path = EXAMPLES / f"{name}.tawa" if (EXAMPLES / f"{name}.tawa").exists() else USER / f"{name}.tawa"
    m = parse_and_lower(path.read_text(), str(path), constants)
    scalar_loads.run(m)         # (as in the pipeline: scalars read from memory are scalar control)
    if splits > 1:
        split_k.run(m, CompileOptions(split_k=splits))
    if specialize:
        options.setdefault("schedule", "persistent" if persistent else None)
        persistent = options["schedule"] in ("persistent", "pingpong", "streamk")
        opts = CompileOptions(warp_specialize=True, **options)
        # mask-elision first, as in the pipeline: attention's consumers then branch around the mask per key block.
        passes = (mask_elision, aref_insertion, partition, protocol_check) + ((persistent_tiles,) if persistent else ())
        if options["schedule"] == "streamk":
            passes += (stream_k,)
        for p in passes:
            p.run(m, opts)
        assert "warp_group = \"producer\"" in str(m)
        if name.endswith("attention"):
            # The elided mask: a branch yielding the f32 score tile, in the specialized consumer.
            assert re.search(r"scf\.if %\S+ -> \(tensor<\d+x\d+xf32>\)", str(m))
    return m


def grid_of(m, args):
    f = kernels(m)[0]
    params = to_python(f.attributes["tawa.params"])
    return eval_grid(to_python(f.attributes["tawa.grid"]), bind_numpy_args(params, args),
                     to_python(f.attributes["tawa.constants"]))


def run_all_seeds(name, constants, make_args, out_index, reference, tol, splits=1, grid=None, **options):
    """Specialized kernel under SEEDS interleavings: equal to the sequential kernel and close to `reference`
    (`grid`: for a kernel that declares none)."""
    plain = build(name, constants, specialize=False, splits=splits)
    expected = make_args()
    run_kernel(plain, expected, grid or grid_of(plain, expected))
    m = build(name, constants, splits=splits, **options)
    grid = grid or grid_of(m, make_args())
    ref = reference.astype(np.float32)

    def check(args):
        out = args[out_index]
        # (as f32: numpy compares NaNs of ml_dtypes' bf16 as unequal)
        np.testing.assert_array_equal(out.astype(np.float32), expected[out_index].astype(np.float32))
        # (NaN in the reference: elements the kernel must leave as they were, NaN-poisoned by make_args)
        keep = np.isnan(ref)
        assert np.isnan(out[keep].astype(np.float32)).all()
        err = np.abs(out[~keep].astype(np.float32) - ref[~keep]).max(initial=0.0)
        scale = max(1.0, np.abs(ref[~keep]).max(initial=0.0))
        assert err <= tol * scale, f"max error {err} vs reference (scale {scale})"

    run_with_interleavings(m, make_args, grid, seeds=SEEDS, check=check)
    return m


def gemm_case(M, N, K, bk, depth, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((M, K)).astype(dtype)
    B = rng.standard_normal((K, N)).astype(dtype)
    ref = A.astype(np.float32) @ B.astype(np.float32)
    consts = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": bk, "DTYPE": "f32" if dtype == np.float32 else "bf16"}
    return consts, (lambda: [A.copy(), B.copy(), np.zeros((M, N), dtype)]), ref


@pytest.mark.parametrize("M,N,K,bk,depth", [
    (45, 37, 16, 16, 2),     # one iteration, K == BLOCK_K
    (45, 37, 5, 16, 2),      # one iteration, K smaller than a tile
    (33, 40, 5, 16, 1),      # ... with a single slot
    (45, 37, 70, 16, 2),     # 5 iterations (odd trip count), ragged K
    (45, 37, 70, 16, 1),     # depth 1: producer and consumer strictly alternate
    (40, 33, 48, 16, 3),     # 3 iterations, depth equal to the trip count
    (45, 37, 40, 16, 8),     # depth larger than the trip count (3)
    (64, 64, 112, 16, 4),    # 7 iterations, exact tiles
])
def test_gemm_interleavings(M, N, K, bk, depth):
    consts, make_args, ref = gemm_case(M, N, K, bk, depth)
    run_all_seeds("gemm", consts, make_args, 2, ref, 1e-5, num_buffers=depth)


@pytest.mark.parametrize("Z,M,N,K,depth", [
    (3, 45, 37, 70, 2),      # 5 K iterations per batch: the ring runs across the batch loop's iterations
    (3, 45, 37, 70, 1),      # one slot: producer and consumers alternate, batch after batch
    (2, 40, 33, 40, 4),      # 3 K iterations, a deeper ring than one batch's loop
    (3, 33, 40, 0, 2),       # K = 0: no K iterations in any batch
])
def test_k_loop_nested_in_a_batch_loop(Z, M, N, K, depth):
    """A K loop nested in a loop the program writes (over the batch): the producer runs the batch loop too."""
    rng = np.random.default_rng(Z * M + K)
    A = rng.standard_normal((Z, M, K)).astype(BF16)
    B = rng.standard_normal((Z, K, N)).astype(BF16)
    ref = A.astype(np.float32) @ B.astype(np.float32)
    consts = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16}
    m = run_all_seeds("gemm_batch_loop", consts, lambda: [A.copy(), B.copy(), np.zeros((Z, M, N), BF16)], 2, ref,
                      2e-2, num_buffers=depth)
    producer = next(op for op in walk(kernels(m)[0]) if warp_group_role(op) == "producer")
    assert sum(op.name == "scf.for" for op in walk(producer)) == 2


@pytest.mark.parametrize("programs,depth", [(3, 2), (2, 1), (5, 3)])
def test_hand_written_persistent_tile_loop(programs, depth):
    """A persistent GEMM written by hand (a tile loop from program_id(0) by num_programs(0)): tile counts that are
    not multiples of the programs, the ring running across each program's tiles."""
    rng = np.random.default_rng(programs)
    M, N, K = 70, 45, 50
    A = rng.standard_normal((M, K)).astype(BF16)
    B = rng.standard_normal((K, N)).astype(BF16)
    ref = A.astype(np.float32) @ B.astype(np.float32)
    consts = {"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16, "NUM_PROGRAMS": programs}
    run_all_seeds("gemm_user_persistent", consts, lambda: [A.copy(), B.copy(), np.zeros((M, N), BF16)], 2, ref,
                  2e-2, num_buffers=depth)


def test_attention_in_a_head_loop():
    """Attention whose programs loop over the heads: the consumers copy each head's Q block themselves, the K and V
    rings run on across heads."""
    rng = np.random.default_rng(7)
    Z, H, S, D = 1, 3, 37, 16
    q, k, v = (rng.standard_normal((Z, H, S, D)).astype(BF16) for _ in range(3))
    scale = D ** -0.5
    s = q.astype(np.float64) @ k.astype(np.float64).swapaxes(-1, -2) * scale
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)
    consts = {"D": D, "BLOCK_M": 16, "BLOCK_N": 16}
    m = run_all_seeds("attn_head_loop", consts, lambda: [q, k, v, np.zeros((Z, H, S, D), BF16), np.float32(scale)],
                      3, ref, 3e-2, num_buffers=2)
    consumer = next(op for op in walk(kernels(m)[0]) if warp_group_role(op) == "consumer")
    assert any(op.name == "tawa.load" for op in walk(consumer))          # Q, copied by the consumers


def _moe_counts(counts, depth, **options):
    """moe_counts (3 experts of capacity 45, `counts` valid rows each) under SEEDS interleavings against numpy."""
    rng = np.random.default_rng(sum(counts) + depth)
    E, CAP, N, K = 3, 45, 37, 40
    X = rng.standard_normal((E, CAP, K)).astype(BF16)
    W = rng.standard_normal((E, K, N)).astype(BF16)
    C = np.array(counts, np.int32)
    keep = np.arange(CAP)[None, :, None] < C[:, None, None]
    ref = np.where(keep, X.astype(np.float32) @ W.astype(np.float32), 0.0)
    consts = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16}
    return run_all_seeds("moe_counts", consts, lambda: [X, W, C, np.zeros((E, CAP, N), BF16)], 3, ref, 2e-2,
                         num_buffers=depth, **options)


@pytest.mark.parametrize("counts,depth", [((45, 0, 20), 2), ((45, 0, 20), 1), ((0, 0, 1), 3)])
def test_conditional_around_the_k_loop(counts, depth):
    """Tiles past an expert's row count skip the K loop (MoE in the capacity layout): the producer reads the count
    and takes the same branch; in some programs neither side touches the ring."""
    m = _moe_counts(counts, depth)
    producer = next(op for op in walk(kernels(m)[0]) if warp_group_role(op) == "producer")
    assert any(op.name == "tawa.load_scalar" for op in walk(producer))


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic-tiles"])
@pytest.mark.parametrize("counts,depth", [((45, 0, 20), 2), ((0, 33, 1), 1), ((45, 45, 0), 3), ((7, 0, 0), 4)])
def test_conditional_around_the_k_loop_persistent(counts, depth, dynamic):
    """The same in a persistent kernel: each CTA's tiles run the K loop or skip it in turn, the ring's use count
    carried through the branches from one tile to the next (tiles in a fixed order, or taken from a counter)."""
    m = _moe_counts(counts, depth, schedule="persistent", dynamic_tiles=dynamic)
    assert "tawa.persistent" in str(m) and ("tawa.next_tile" in str(m)) == dynamic


@pytest.mark.parametrize("depth", [1, 2, 4])
def test_conditional_inside_an_expert_loop(depth):
    """The experts in a loop the program writes, the K loop under an `if` on the expert's count: the ring's use
    count runs on through the branches not taken (2 K iterations where taken)."""
    rng = np.random.default_rng(depth)
    E, CAP, N, K = 4, 40, 20, 32
    X = rng.standard_normal((E, CAP, K)).astype(BF16)
    W = rng.standard_normal((E, K, N)).astype(BF16)
    C = np.array([40, 0, 17, 33], np.int32)
    keep = np.arange(CAP)[None, :, None] < C[:, None, None]
    ref = np.where(keep, X.astype(np.float32) @ W.astype(np.float32), 0.0)
    consts = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16}
    run_all_seeds("moe_expert_loop", consts, lambda: [X, W, C, np.zeros((E, CAP, N), BF16)], 3, ref, 2e-2,
                  num_buffers=depth)


@pytest.mark.parametrize("depth", [1, 2])
def test_block_sparse_attention(depth):
    """Each key block's index read from a list in the loop: the producer reads it for itself, ahead of the
    consumers, and issues the copy of that block."""
    rng = np.random.default_rng(depth)
    H, S, D, B = 2, 70, 16, 16
    nqb = nkb = -(-S // B)
    cnt = rng.integers(1, nkb + 1, nqb).astype(np.int32)
    idx = np.zeros((nqb, nkb), np.int32)
    keep = np.zeros((S, S), bool)
    for i in range(nqb):
        idx[i, :cnt[i]] = rng.permutation(nkb)[:cnt[i]]
        for kb in idx[i, :cnt[i]]:
            keep[i * B:(i + 1) * B, kb * B:(kb + 1) * B] = True
    q, k, v = (rng.standard_normal((H, S, D)).astype(BF16) for _ in range(3))
    scale = D ** -0.5
    s = np.where(keep, q.astype(np.float64) @ k.astype(np.float64).swapaxes(-1, -2) * scale, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)
    consts = {"D": D, "BLOCK_M": B, "BLOCK_N": B}
    m = run_all_seeds("attn_block_sparse", consts, lambda: [q, k, v, cnt, idx, np.zeros((H, S, D), BF16),
                                                            np.float32(scale)], 5, ref, 3e-2, num_buffers=depth)
    producer = next(op for op in walk(kernels(m)[0]) if warp_group_role(op) == "producer")
    loop = next(op for op in walk(producer) if op.name == "scf.for")
    assert any(op.name == "tawa.load_scalar" for op in walk(loop))


def test_varlen_attention():
    """Variable-length attention: sequence starts and lengths read from memory, query blocks past a sequence's end
    skip the key loop (a zero-length sequence among them)."""
    rng = np.random.default_rng(3)
    H, D, BM = 2, 16, 16
    lens = [37, 0, 5, 16]
    padded = [-(-n // BM) * BM for n in lens]
    T = sum(padded)
    q, k, v = (rng.standard_normal((H, T, D)).astype(BF16) for _ in range(3))
    scale = D ** -0.5
    ref, start = np.zeros((H, T, D)), 0
    for n, pn in zip(lens, padded):
        if pn:
            part = slice(start, start + pn)
            s = q[:, part].astype(np.float64) @ k[:, part].astype(np.float64).swapaxes(-1, -2) * scale
            s = np.where(np.arange(pn)[None, :] < n, s, -np.inf)
            p = np.exp(s - s.max(-1, keepdims=True))
            ref[:, part] = (p / p.sum(-1, keepdims=True)) @ v[:, part].astype(np.float64)
        start += pn
    cu = np.array([0] + list(np.cumsum(padded)), np.int32)
    consts = {"D": D, "BLOCK_M": BM, "BLOCK_N": BM}
    grid = (max(padded) // BM, H, len(lens))
    run_all_seeds("attn_varlen", consts, lambda: [q, k, v, np.zeros((H, T, D), BF16), cu,
                                                  np.array(lens, np.int32), np.float32(scale)],
                  3, ref, 3e-2, grid=grid, num_buffers=2)


def test_varlen_attention_packed():
    """Variable-length attention over sequences packed back to back (cu_seqlens at any offsets): loads through
    views from each sequence's first row, the store through a view that ends with it; rows after the last sequence
    stay unwritten."""
    rng = np.random.default_rng(4)
    H, D, BM = 2, 16, 16
    lens = [37, 0, 5, 16, 3]
    cu = np.array([0] + list(np.cumsum(lens)), np.int32)
    T = int(cu[-1]) + 5
    q, k, v = (rng.standard_normal((H, T, D)).astype(BF16) for _ in range(3))
    scale = D ** -0.5
    ref = np.full((H, T, D), np.nan)
    for b, n in enumerate(lens):
        if n:
            part = slice(cu[b], cu[b + 1])
            s = q[:, part].astype(np.float64) @ k[:, part].astype(np.float64).swapaxes(-1, -2) * scale
            p = np.exp(s - s.max(-1, keepdims=True))
            ref[:, part] = (p / p.sum(-1, keepdims=True)) @ v[:, part].astype(np.float64)
    consts = {"D": D, "BLOCK_M": BM, "BLOCK_N": BM}
    grid = (-(-max(lens) // BM), H, len(lens))
    run_all_seeds("attn_varlen_packed", consts, lambda: [q, k, v, np.full((H, T, D), np.nan, BF16), cu,
                                                         np.float32(scale)],
                  3, ref, 3e-2, grid=grid, num_buffers=2)


def test_gemm_zero_trip_count():
    # K = 0: neither warp group iterates; the result is the zero accumulator.
    consts, make_args, ref = gemm_case(40, 33, 0, 16, 2)
    run_all_seeds("gemm", consts, make_args, 2, ref, 0.0, num_buffers=2)


def test_gemm_bf16_two_consumer_groups():
    consts, make_args, ref = gemm_case(70, 45, 50, 16, 3, dtype=BF16, seed=1)
    consts.update(BLOCK_M=128, BLOCK_N=16)
    m = run_all_seeds("gemm", consts, make_args, 2, ref, 2e-2, num_buffers=3)
    assert "tawa.num_warp_groups = 2" in str(m)


@pytest.mark.parametrize("persistent", [False, True])
def test_gemm_bf16_three_consumer_groups(persistent):
    """192-row tiles: three consumer warp groups of one 64-row slab each take every ring slot together."""
    consts, make_args, ref = gemm_case(250, 45, 50, 16, 2, dtype=BF16, seed=3)
    consts.update(BLOCK_M=192, BLOCK_N=16)
    m = run_all_seeds("gemm", consts, make_args, 2, ref, 2e-2, num_buffers=2, persistent=persistent)
    assert "tawa.num_warp_groups = 3" in str(m)


def test_interleavings_differ_between_seeds():
    consts, make_args, _ = gemm_case(32, 32, 96, 16, 3)
    m = build("gemm", consts, num_buffers=3)
    traces = set()
    for seed in range(8):
        trace: list = []
        args = make_args()
        run_kernel(m, args, grid_of(m, args), seed=seed, trace=trace)
        traces.add(tuple(trace))
    assert len(traces) > 1


def test_broken_trip_count_deadlocks_and_is_rejected_statically():
    consts, make_args, _ = gemm_case(32, 32, 64, 16, 2)
    m = build("gemm", consts, num_buffers=2)
    producer = [op for op in ops_of(body_block(kernels(m)[0]))
                if warp_group_role(op) == "producer"][0]
    loop = [op for op in walk(producer) if op.name == "scf.for"][0]
    # the producer stops one iteration early: the consumer's last get waits forever
    from mlir import ir
    from mlir.dialects import arith
    with m.context, loop.location:
        one = arith.ConstantOp(ir.IntegerType.get_signless(32), 1, ip=ir.InsertionPoint(loop))
        ub = arith.SubIOp(loop.operands[1], one.result, ip=ir.InsertionPoint(loop))
    loop.operands[1] = ub.result
    with pytest.raises(TawaError, match="upper bounds differ"):
        protocol_check.run(m)
    args = make_args()
    with pytest.raises(InterpreterDeadlock):
        run_kernel(m, args, grid_of(m, args), seed=0)


def swiglu_case(M, N, K, seed):
    """(make_args, reference) of swiglu.tawa: A [M, K], B1 and B2 [K, N] in bf16, a NaN-poisoned output."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((M, K)).astype(BF16)
    B1 = rng.standard_normal((K, N)).astype(BF16)
    B2 = rng.standard_normal((K, N)).astype(BF16)
    g = A.astype(np.float32) @ B1.astype(np.float32)
    u = A.astype(np.float32) @ B2.astype(np.float32)
    return (lambda: [A.copy(), B1.copy(), B2.copy(), np.full((M, N), np.nan, BF16)]), g / (1 + np.exp(-g)) * u


def bias_act_case(M, N, K, seed):
    """(make_args, reference) of gemm_bias_act.tawa: bf16 A and B, an f32 bias, a NaN-poisoned output."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((M, K)).astype(BF16)
    B = rng.standard_normal((K, N)).astype(BF16)
    bias = rng.standard_normal(N).astype(np.float32)
    x = A.astype(np.float32) @ B.astype(np.float32) + bias[None, :]
    ref = 0.5 * x * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))
    return (lambda: [A.copy(), B.copy(), bias.copy(), np.full((M, N), np.nan, BF16)]), ref


def fp8_case(M, N, K, seed):
    """(make_args, reference) of gemm_fp8.tawa: e4m3 A [M, K] and B [N, K], row and column scales."""
    rng = np.random.default_rng(seed)
    A = (rng.standard_normal((M, K)) * 2).astype(FP8)
    B = (rng.standard_normal((N, K)) * 2).astype(FP8)
    sa = rng.uniform(0.5, 1.5, M).astype(np.float32)
    sb = rng.uniform(0.5, 1.5, N).astype(np.float32)
    ref = (A.astype(np.float32) @ B.astype(np.float32).T) * sa[:, None] * sb[None, :]
    return (lambda: [A.copy(), B.copy(), sa.copy(), sb.copy(), np.zeros((M, N), BF16)]), ref


@pytest.mark.parametrize("M,seed,depth,persistent", [(45, 2, 2, False), (70, 12, 3, True)],
                         ids=["tile", "persistent"])
def test_swiglu_interleavings(M, seed, depth, persistent):
    N, K = (37, 40) if not persistent else (45, 40)
    make_args, ref = swiglu_case(M, N, K, seed)
    run_all_seeds("swiglu", {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16}, make_args, 3, ref, 2e-2,
                  num_buffers=depth, persistent=persistent)


def test_gemm_bias_act_interleavings():
    make_args, ref = bias_act_case(40, 45, 24, 3)
    run_all_seeds("gemm_bias_act", {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16}, make_args, 3, ref, 2e-2,
                  num_buffers=1)


def test_gemm_fp8_interleavings():
    make_args, ref = fp8_case(45, 40, 80, 4)
    run_all_seeds("gemm_fp8", {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}, make_args, 4, ref, 2e-2,
                  num_buffers=2)


def attention_case(Z, H, S, D, causal, seed, HKV=None):
    """Q, K, V (bf16, K and V with `HKV` heads) and the float32 softmax(Q K^T / sqrt(D)) V reference."""
    HKV = HKV or H
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((Z, H, S, D)).astype(BF16)
    k, v = (rng.standard_normal((Z, HKV, S, D)).astype(BF16) for _ in range(2))
    scale = np.float32(1.0 / np.sqrt(D))
    kk, vv = (np.repeat(x.astype(np.float32), H // HKV, axis=1) for x in (k, v))
    s = np.einsum("zhqd,zhkd->zhqk", q.astype(np.float32), kk) * scale
    if causal:
        s = np.where(np.tril(np.ones((S, S), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = np.einsum("zhqk,zhkd->zhqd", p / p.sum(-1, keepdims=True), vv)
    return (lambda: [q.copy(), k.copy(), v.copy(), np.zeros((Z, H, S, D), BF16), scale]), ref


@pytest.mark.parametrize("causal,S,depth,block_n", [(0, 45, 2, 16), (1, 45, 3, 16), (0, 10, 1, 16), (1, 100, 2, 48)])
def test_flash_attention_interleavings(causal, S, depth, block_n):
    """Depth 2 gives K and V rings of their own (`aref_insertion.release_groups`), 1 and 3 one ring; 48-key
    blocks (not a power of two) over 32-row query blocks leave partial diagonal and last blocks."""
    make_args, ref = attention_case(1, 2, S, 32, causal, 5 + causal)
    m = run_all_seeds("flash_attention", {"HEAD_DIM": 32, "BLOCK_M": 32, "BLOCK_N": block_n, "CAUSAL": causal},
                      make_args, 3, ref, 3e-2, num_buffers=depth)
    assert str(m).count('"tawa.aref_create"') == (2 if depth == 2 else 1)


@pytest.mark.parametrize("name,causal,S,heads,depth,q_slots", [
    ("flash_attention", 0, 45, 2, 2, 2),     # 2 x 2 x 2 = 8 tiles over 3 CTAs, K and V rings of their own
    ("flash_attention", 1, 70, 2, 3, 2),     # causal: tiles of 1 to 5 key blocks, one K/V ring
    ("flash_attention", 1, 70, 2, 2, 1),     # ... with one slot for Q: the next tile's waits for this one's
    ("flash_attention", 0, 10, 2, 1, 1),     # one key block per tile, one slot each
    ("gqa_attention", 1, 37, 2, 2, 2),       # grouped-query heads
    # causal over 2 x 5 heads: 20 tiles of 1 or 2 key blocks over 3 CTAs, odd heads walked backwards
    ("flash_attention", 1, 45, 5, 2, 2),
])
def test_persistent_attention_interleavings(name, causal, S, heads, depth, q_slots, monkeypatch):
    """The persistent attention schedule: each CTA loops over query blocks, Q comes through a ring of its own
    (`aref_insertion.prologue_loads`) that the producer fills for the next block while the consumers finish
    this one, and the K/V rings run across blocks."""
    monkeypatch.setattr(aref_insertion, "prologue_depth", lambda *args: q_slots)
    Z, H, D, block_n = 2, heads, 32, 16
    make_args, ref = attention_case(Z, H * (2 if name == "gqa_attention" else 1), S, D, causal, 21 + causal,
                                    HKV=H if name == "gqa_attention" else None)
    m = run_all_seeds(name, {"HEAD_DIM": D, "BLOCK_M": 32, "BLOCK_N": block_n, "CAUSAL": causal}, make_args, 3,
                      ref, 3e-2, num_buffers=depth, persistent=True)
    text = str(m)
    assert "tawa.persistent" in text
    # causal tiles are unequal: the CTAs take them from the launch's counter
    assert ("tawa.dynamic_tiles" in text) == bool(causal)
    # Q's ring: put in the producer's tile loop, taken in the consumer's, released after the key loop
    q_ring = re.search(r'"tawa.aref_create"\(\) : \(\) -> !tawa.aref<\[tensor<32x32xbf16>\], (\d) : i32>', text)
    assert q_ring and int(q_ring.group(1)) == q_slots, text


@pytest.mark.parametrize("causal,persistent", [(0, False), (1, False), (0, True)])
def test_attention_three_consumer_groups_interleavings(causal, persistent):
    """192-row query blocks over three consumer warp groups (ragged S over two blocks), one block per CTA and
    persistent."""
    make_args, ref = attention_case(1, 2, 250, 32, causal, 31 + causal)
    m = run_all_seeds("flash_attention", {"HEAD_DIM": 32, "BLOCK_M": 192, "BLOCK_N": 64, "CAUSAL": causal},
                      make_args, 3, ref, 3e-2, num_buffers=2, persistent=persistent)
    assert "tawa.num_warp_groups = 3" in str(m)


@pytest.mark.parametrize("causal", [0, 1])
def test_gqa_attention_interleavings(causal):
    """Grouped-query attention (8 query heads over 2 key/value heads), specialized, under random interleavings."""
    make_args, ref = attention_case(1, 8, 37, 32, causal, 11 + causal, HKV=2)
    run_all_seeds("gqa_attention", {"HEAD_DIM": 32, "BLOCK_M": 32, "BLOCK_N": 16, "CAUSAL": causal}, make_args, 3,
                  ref, 3e-2, num_buffers=2)


# ---- the persistent schedule: every warp group loops over tiles, the ring runs across tile boundaries ------------
@pytest.mark.parametrize("M,N,K,bk,depth", [
    (45, 37, 70, 16, 2),     # 2 x 2 tiles over 3 programs, 5 iterations per tile (odd), ragged everything
    (100, 37, 40, 16, 3),    # 4 x 2 tiles: the ring's phase flips at different points of different tiles
    (45, 37, 5, 16, 1),      # K smaller than a tile, a single slot
    (20, 20, 48, 16, 4),     # a single tile (one program does everything, two idle)
    (96, 96, 32, 16, 5),     # 3 x 3 tiles, 2 iterations per tile, depth 5 (not a divisor of the uses)
])
def test_persistent_gemm_interleavings(M, N, K, bk, depth):
    consts, make_args, ref = gemm_case(M, N, K, bk, depth)
    m = run_all_seeds("gemm", consts, make_args, 2, ref, 1e-5, num_buffers=depth, persistent=True)
    assert "tawa.persistent" in str(m) and "tawa.grid_extent" in str(m)


def test_persistent_gemm_zero_trip_count():
    consts, make_args, ref = gemm_case(70, 33, 0, 16, 2)
    run_all_seeds("gemm", consts, make_args, 2, ref, 0.0, num_buffers=2, persistent=True)


def test_persistent_gemm_fp8_interleavings():
    make_args, ref = fp8_case(70, 40, 80, 13)
    run_all_seeds("gemm_fp8", {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}, make_args, 4, ref, 2e-2,
                  num_buffers=2, persistent=True)


@pytest.mark.parametrize("group_m", [None, 1, 3, 16])
def test_persistent_tiles_visit_every_tile_once(group_m):
    """Every program of the grid (4 x 3) is computed exactly once, for any number of CTAs and any group of the
    grouped order, including groups that do not divide the grid and groups larger than it."""
    consts, make_args, ref = gemm_case(100, 70, 16, 16, 2)
    m = build("gemm", consts, num_buffers=2, persistent=True, group_m=group_m)
    if group_m:
        assert f"tawa.tile_group = {group_m}" in str(m)
    from tawa.runtime.interpreter import compile_kernel
    program = compile_kernel(m)
    for ctas in (1, 2, 3, 7, 12, 40):
        args = make_args()
        args[2][:] = np.nan
        program.run(args, grid_of(m, args), seed=ctas, ctas=ctas)
        np.testing.assert_allclose(args[2], ref, rtol=1e-5, atol=1e-5)


# ---- dynamic tiles: persistent CTAs take their next tile from the launch's counter --------------------------------
@pytest.mark.parametrize("M,N,K,bk,depth", [
    (45, 37, 70, 16, 2),     # 2 x 2 tiles over 3 CTAs, ragged everything
    (100, 70, 40, 16, 3),    # 4 x 3 tiles: the CTA run first takes most of them
    (20, 20, 48, 16, 4),     # a single tile: one CTA, whose fetch finds none
    (45, 37, 0, 16, 2),      # K = 0
])
def test_dynamic_tiles_gemm_interleavings(M, N, K, bk, depth):
    consts, make_args, ref = gemm_case(M, N, K, bk, depth)
    m = run_all_seeds("gemm", consts, make_args, 2, ref, 1e-5, num_buffers=depth, persistent=True,
                      dynamic_tiles=True)
    text = str(m)
    assert "tawa.dynamic_tiles" in text and text.count('"tawa.next_tile"') == 1 and "tawa.tile_get" in text


@pytest.mark.parametrize("ctas", [1, 2, 3, 7, 12, 40])
def test_dynamic_tiles_visit_every_tile_once(ctas):
    """Every program of the grid (4 x 3) is computed exactly once whichever CTA takes it, for any number of CTAs
    (the interpreter runs them one after another, so the first takes what the others leave), and each launch
    leaves the counter at zero (the interpreter checks it): launched twice in a row."""
    consts, make_args, ref = gemm_case(100, 70, 16, 16, 2)
    m = build("gemm", consts, num_buffers=2, persistent=True, dynamic_tiles=True)
    from tawa.runtime.interpreter import compile_kernel
    program = compile_kernel(m)
    for launch in range(2):
        args = make_args()
        args[2][:] = np.nan
        program.run(args, grid_of(m, args), seed=ctas + launch, ctas=ctas)
        np.testing.assert_allclose(args[2], ref, rtol=1e-5, atol=1e-5)


def test_dynamic_tiles_without_a_put_deadlock():
    """The consumers wait for tile indices the producer hands over: without its `tile_put` they wait forever."""
    consts, make_args, ref = gemm_case(45, 37, 70, 16, 2)
    m = build("gemm", consts, num_buffers=2, persistent=True, dynamic_tiles=True)
    text = re.sub(r'\n\s*"tawa.tile_put"\(%\w+\) : \(i32\) -> \(\)', "", str(m))
    assert '"tawa.tile_put"' not in text
    with m.context:
        broken = ir.Module.parse(text)
    args = make_args()
    with pytest.raises(InterpreterDeadlock, match="tawa.tile_get"):
        run_kernel(broken, args, grid_of(broken, args))


@pytest.mark.parametrize("M,N,K,bk,depth,splits,persistent", [
    (45, 37, 70, 16, 2, 2, False),      # 5 iterations over 2 splits (2 + 3), ragged everything
    (45, 37, 70, 16, 2, 3, True),       # ... over 3 splits, 3 CTAs looping over 2 x 2 x 3 programs
    (45, 37, 16, 16, 1, 4, False),      # 1 iteration over 4 splits: three of them sum nothing
    (40, 33, 0, 16, 2, 2, True),        # K = 0: every split's partial is zero
    (100, 37, 112, 16, 3, 5, True),     # 7 iterations over 5 splits, 4 x 2 tiles
])
def test_split_k_gemm_interleavings(M, N, K, bk, depth, splits, persistent):
    consts, make_args, ref = gemm_case(M, N, K, bk, depth)
    m = run_all_seeds("gemm", consts, make_args, 2, ref, 1e-5, splits=splits, num_buffers=depth,
                      persistent=persistent)
    text = str(m)
    assert f"tawa.split_k = {splits}" in text and text.count("tawa.split_k_sum") == 1
    # The sum and the epilogue run in the consumer; the producer only loads its split's share.
    consumer = [op for op in ops_of(body_block(kernels(m)[0])) if warp_group_role(op) == "consumer"][0]
    assert any(op.name == "tawa.split_k_arrive" for op in walk(consumer))


def test_split_k_swiglu_interleavings():
    """Two accumulators: both partials are kept and summed by the same (last) program."""
    make_args, ref = swiglu_case(45, 37, 72, 21)
    m = run_all_seeds("swiglu", {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16}, make_args, 3, ref, 2e-2,
                      splits=3, num_buffers=2, persistent=True)
    assert str(m).count("tawa.split_k_store") == 2


def test_split_k_gemm_bias_act_interleavings():
    """The epilogue's own loads (the bias) run once, in the program that sums."""
    make_args, ref = bias_act_case(40, 45, 56, 5)
    run_all_seeds("gemm_bias_act", {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16}, make_args, 3, ref, 2e-2,
                  splits=2, num_buffers=2)


@pytest.mark.parametrize("M,N,K,bk,depth", [
    (45, 37, 70, 16, 2),     # 2 x 2 tiles over 3 CTAs, 5 iterations per tile: more than a lap of the ring
    (100, 37, 40, 16, 3),    # 4 x 2 tiles: both groups of a CTA busy, turns passed across tiles
    (45, 37, 5, 16, 1),      # K smaller than a tile, a single slot
    (20, 20, 48, 16, 4),     # a single tile: group 1 idle
    (130, 70, 64, 16, 2),    # 5 x 3 tiles: groups take turns several times
    (40, 33, 0, 16, 2),      # K = 0: the turns pass without a slot taken
])
def test_pingpong_gemm_interleavings(M, N, K, bk, depth):
    """Two consumer groups each on every other tile of their CTA, sharing one ring (the interpreter waits on
    slots by parity, as the GPU does: a group more than a lap ahead would fail)."""
    consts, make_args, ref = gemm_case(M, N, K, bk, depth)
    m = run_all_seeds("gemm", consts, make_args, 2, ref, 1e-5, num_buffers=depth, schedule="pingpong")
    text = str(m)
    assert text.count("tawa.tile_share") == 2 and "tawa.persistent" in text


def test_pingpong_gemm_with_tiles_not_a_power_of_two_wide():
    """Each group on whole 32x48 tiles (a width like the GPU's 128x192 ping-pong tile), ragged in M and N."""
    consts, make_args, ref = gemm_case(70, 100, 40, 16, 3)
    consts["BLOCK_N"] = 48
    m = run_all_seeds("gemm", consts, make_args, 2, ref, 1e-5, num_buffers=3, schedule="pingpong")
    assert str(m).count("tawa.tile_share") == 2


def test_pingpong_without_turns_reads_a_stale_slot(monkeypatch):
    """The main loops' order is what keeps each group within a lap of the producer: without it, a group runs a
    lap ahead and its parity wait passes on the previous lap's phase."""
    from tawa.runtime.interp import scf_ops
    monkeypatch.setattr(scf_ops.TurnWait, "ready", lambda self: True)
    consts, make_args, ref = gemm_case(45, 37, 70, 16, 2)
    m = build("gemm", consts, num_buffers=2, schedule="pingpong")
    from tawa.runtime.interp.errors import ArefProtocolError
    failures = 0
    for seed in range(20):
        args = make_args()
        try:
            run_kernel(m, args, grid_of(m, args), seed=seed)
        except (ArefProtocolError, InterpreterDeadlock):
            failures += 1
    assert failures > 0


def test_pingpong_linear_interleavings():
    """Ping-pong with a fused epilogue (bias, GELU, a loaded residual)."""
    M, N, K = 70, 45, 40
    rng = np.random.default_rng(8)
    X = rng.standard_normal((M, K)).astype(BF16)
    W = rng.standard_normal((N, K)).astype(BF16)
    bias = rng.standard_normal(N).astype(BF16)
    R = rng.standard_normal((M, N)).astype(BF16)
    h = X.astype(np.float32) @ W.astype(np.float32).T + bias.astype(np.float32)
    with np.errstate(over="ignore"):        # exp(-z) of very negative z: the GELU is 0 there
        ref = h / (1 + np.exp(-1.5957691216057308 * (h + 0.044715 * h ** 3))) + R.astype(np.float32)
    run_all_seeds("linear_gelu_residual", {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16},
                  lambda: [X.copy(), W.copy(), bias.copy(), R.copy(), np.full((M, N), np.nan, BF16)], 4, ref, 2e-2,
                  num_buffers=2, schedule="pingpong")


# ---- clusters: pairs of CTAs walk pairs of neighbouring tiles (the multicast itself is below the tile IR) ---------
@pytest.mark.parametrize("M,N,K,dims,schedule", [
    (100, 37, 70, "2x1", "persistent"),    # 4 x 2 tiles: 2 CTAs in one cluster, pairs along M, 5 iterations
    (45, 70, 40, "1x2", "persistent"),     # 2 x 3 tiles: 3 tile columns do not pair, 3 CTAs without clusters
    (64, 64, 5, "1x2", "persistent"),      # 2 x 2 tiles, K smaller than a tile
    (130, 70, 64, "2x1", "pingpong"),      # 5 x 3 tiles: odd rows, no clusters; groups take turns
    (128, 70, 48, "2x1", "pingpong"),      # 4 x 3 tiles in pairs, both consumer groups of both CTAs busy
    (40, 33, 0, "2x1", "persistent"),      # K = 0
])
def test_cluster_gemm_interleavings(M, N, K, dims, schedule):
    consts, make_args, ref = gemm_case(M, N, K, 16, 2)
    m = run_all_seeds("gemm", consts, make_args, 2, ref, 1e-5, num_buffers=2, schedule=schedule, cluster=dims)
    text = str(m)
    assert "tawa.cluster_size" in text and text.count("tawa.multicast") == 1


def test_cluster_tiles_visit_every_tile_once():
    """Every program of the grid computed exactly once, for any number of CTAs, grids that pair and grids that do
    not, along either axis."""
    from tawa.runtime.interpreter import compile_kernel
    for dims in ("2x1", "1x2"):
        for M, N in ((100, 70), (128, 64), (45, 37), (64, 96), (20, 20)):
            consts, make_args, ref = gemm_case(M, N, 16, 16, 2)
            program = compile_kernel(build("gemm", consts, num_buffers=2, persistent=True, cluster=dims))
            for ctas in (1, 2, 3, 7, 12, 40):
                args = make_args()
                args[2][:] = np.nan
                program.run(args, grid_of(build("gemm", consts, specialize=False), args), seed=ctas, ctas=ctas)
                np.testing.assert_allclose(args[2], ref, rtol=1e-5, atol=1e-5, err_msg=f"{dims} {M}x{N} {ctas}")


@pytest.mark.parametrize("name,dims,schedule", [
    ("gemm", "2x1", "persistent"), ("gemm", "1x2", "pingpong"), ("linear_gelu_residual", "2x1", "pingpong"),
    ("gemm_fp8", "2x1", "persistent")])
def test_clusters_round_an_odd_grid_up(name, dims, schedule):
    """5 x 3 tiles on 20 CTAs: the runtime rounds the paired axis up (6 x 3 or 5 x 4 tiles, still one wave), so the
    last pair's second CTA computes a tile past the output. Its loads read zeros (the linear layer's bias and
    residual too, and the FP8 GEMM's row scales) and its stores are clipped away: the output is the sequential
    kernel's, under interleavings."""
    from tawa.runtime.grid import persistent_launch
    from tawa.runtime.interpreter import compile_kernel
    M, N, K = 130, 70, 40
    rng = np.random.default_rng(3)
    if name == "gemm":
        consts, make_args, ref = gemm_case(M, N, K, 16, 2)
        out = 2
    elif name == "gemm_fp8":
        (make_args, _), consts, out = fp8_case(M, N, K, 4), {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}, 4
    else:
        X, W = rng.standard_normal((M, K)).astype(BF16), rng.standard_normal((N, K)).astype(BF16)
        bias, R = rng.standard_normal(N).astype(BF16), rng.standard_normal((M, N)).astype(BF16)
        consts, out = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16}, 4
        make_args = lambda: [X.copy(), W.copy(), bias.copy(), R.copy(), np.full((M, N), np.nan, BF16)]
    plain = build(name, consts, specialize=False)
    expected = make_args()
    run_kernel(plain, expected, grid_of(plain, expected))
    m = build(name, consts, num_buffers=2, schedule=schedule, cluster=dims)
    grid = grid_of(m, make_args())
    assert persistent_launch([int(d) for d in dims.split("x")], grid + (1,) * (3 - len(grid)), 20)[1] == 2
    program = compile_kernel(m)
    for seed in range(8):
        args = make_args()
        args[out][:] = np.nan
        program.run(args, grid, seed=seed, ctas=20)
        np.testing.assert_array_equal(args[out], expected[out], err_msg=f"seed {seed}")


def test_cluster_swiglu_interleavings():
    """1x2: the pair shares A; each of B1 and B2 is its own."""
    make_args, ref = swiglu_case(45, 64, 140, 22)
    m = run_all_seeds("swiglu", {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 64}, make_args, 3, ref, 2e-2,
                      num_buffers=2, persistent=True, cluster="1x2")
    assert str(m).count("tawa.multicast") == 1


# ---- stream-K: the CTAs share the tiles of a sparse last wave by K iterations, two meeting in the workspace -------
def integer_gemm_case(M, N, K, seed=0):
    """Small integers: every f32 sum is exact, so a tile summed in two parts equals the sequential kernel's."""
    rng = np.random.default_rng(seed)
    A = rng.integers(-2, 3, (M, K)).astype(np.float32)
    B = rng.integers(-2, 3, (K, N)).astype(np.float32)
    consts = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "DTYPE": "f32"}
    return consts, (lambda: [A.copy(), B.copy(), np.zeros((M, N), np.float32)]), A @ B


@pytest.mark.parametrize("M,N,K,depth", [
    (45, 37, 70, 2),      # 4 tiles on the interpreter's 3 CTAs: all shared, 5 iterations each (ragged K)
    (130, 70, 33, 1),     # 15 tiles: 3 iterations per tile, a single slot
    (100, 70, 112, 3),    # 12 tiles: a whole multiple of 3 CTAs, nothing shared (the persistent kernel)
])
def test_stream_k_gemm_interleavings(M, N, K, depth):
    consts, make_args, ref = integer_gemm_case(M, N, K)
    m = run_all_seeds("gemm", consts, make_args, 2, ref, 0.0, num_buffers=depth, schedule="streamk")
    text = str(m)
    assert "tawa.stream_k" in text and text.count("tawa.split_k_sum") == 1


@pytest.mark.parametrize("M,N,K", [(100, 70, 112), (130, 70, 33), (45, 37, 70), (100, 70, 16), (70, 70, 0)])
def test_stream_k_visits_every_tile_once(M, N, K):
    """Every output tile is stored once, whole, for any number of CTAs: with tails shared (5, 7, 9 CTAs for 12 tiles)
    or not (one K iteration per tile, K = 0, tiles a multiple of the CTAs or fewer than them); every boundary's
    counter is back at zero after the launch."""
    consts, make_args, ref = integer_gemm_case(M, N, K, seed=M + K)
    m = build("gemm", consts, num_buffers=2, schedule="streamk")
    from tawa.runtime.interpreter import compile_kernel
    program = compile_kernel(m)
    shared = []
    for ctas in (1, 2, 3, 5, 7, 9, 12, 40):
        args = make_args()
        args[2][:] = np.nan
        program.run(args, grid_of(m, args), seed=ctas, ctas=ctas)
        np.testing.assert_array_equal(args[2], ref)
        assert all(v == 0 for v in program.rt.arrived.values())
        if program.rt.partials:
            shared.append(ctas)
    tiles = -(-M // 32) * -(-N // 32)
    trips = -(-K // 16)
    expect = [c for c in (1, 2, 3, 5, 7, 9, 12, 40) if shares_tail(tiles, c, trips)]
    assert shared == expect


def test_stream_k_two_consumer_groups_interleavings():
    """A 128-row tile split between two consumer warp groups (bf16): 4 tiles shared over 3 CTAs."""
    consts, make_args, ref = integer_gemm_case(200, 30, 100, seed=4)
    A, B, _ = make_args()
    consts.update(BLOCK_M=128, BLOCK_N=16, DTYPE="bf16")
    A, B = A.astype(BF16), B.astype(BF16)
    m = run_all_seeds("gemm", consts, lambda: [A.copy(), B.copy(), np.zeros((200, 30), BF16)], 2, ref, 0.0,
                      num_buffers=3, schedule="streamk")
    assert "tawa.num_warp_groups = 2" in str(m) and "tawa.stream_k" in str(m)


def test_stream_k_swiglu_interleavings():
    """Two accumulators, each kept and summed in its own slot of the boundary's record: 4 tiles over 3 CTAs."""
    rng = np.random.default_rng(5)
    M, N, K = 45, 50, 70
    a, b1, b2 = (rng.integers(-2, 3, s).astype(np.float32) for s in ((M, K), (K, N), (K, N)))
    g = a @ b1
    ref = g / (1 + np.exp(-g)) * (a @ b2)
    args = [x.astype(BF16) for x in (a, b1, b2)]
    m = run_all_seeds("swiglu", {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16},
                      lambda: [x.copy() for x in args] + [np.zeros((M, N), BF16)], 3, ref, 2e-2, num_buffers=2,
                      schedule="streamk")
    text = str(m)
    assert "tawa.stream_k" in text and text.count("tawa.split_k_sum") == 2


@pytest.mark.parametrize("M,N,K,persistent", [(45, 40, 100, False), (70, 33, 130, True), (20, 16, 10, False)])
def test_prefetched_block_scales_interleavings(M, N, K, persistent):
    """Block-wise scales: `loop-load-prefetch` loads each K block's row scales an iteration ahead (the first
    before the loop, the one past the end outside the tensor); bit-for-bit the sequential kernel."""
    from tawa.lowering import loop_load_prefetch
    path = pathlib.Path(__file__).resolve().parents[1] / "e2e" / "kernels" / "gemm_block_scales.tawa"
    consts = {"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16}
    rng = np.random.default_rng(M + K)
    kb = -(-K // 16)
    a, b = rng.standard_normal((M, K)).astype(BF16), rng.standard_normal((K, N)).astype(BF16)
    sa = rng.uniform(0.5, 1.5, (M, kb)).astype(np.float32)
    sb = rng.uniform(0.5, 1.5, (kb, N)).astype(np.float32)
    ref = sum((a[:, 16 * j:16 * j + 16].astype(np.float32) @ b[16 * j:16 * j + 16].astype(np.float32))
              * sa[:, j:j + 1] * sb[j:j + 1] for j in range(kb))

    def make_args():
        return [a.copy(), b.copy(), sa.copy(), sb.copy(), np.zeros((M, N), np.float32)]

    plain = parse_and_lower(path.read_text(), str(path), consts)
    expected = make_args()
    run_kernel(plain, expected, grid_of(plain, expected))
    m = parse_and_lower(path.read_text(), str(path), consts)
    opts = CompileOptions(warp_specialize=True, schedule="persistent" if persistent else None)
    for p_ in (aref_insertion, partition, protocol_check, loop_load_prefetch) + \
            ((persistent_tiles,) if persistent else ()):
        p_.run(m, opts)
    assert re.search(r"iter_args\(.*\) -> \(tensor<32x16xf32>, tensor<32x1xf32>", str(m)), \
        "the row scales are not carried by the K loop"

    def check(args):
        np.testing.assert_array_equal(args[4], expected[4])
        assert np.abs(args[4] - ref).max() <= 1e-3 * max(1.0, np.abs(ref).max())

    run_with_interleavings(m, make_args, grid_of(m, make_args()), seeds=SEEDS, check=check)


@pytest.mark.parametrize("ctas", [4, 5])
def test_stream_k_keeps_register_loads_in_place(ctas):
    """Under stream-K the K loop's index is remapped after `loop-load-prefetch` would run (a share of it, walked
    backwards in a shared tile), so the pass leaves such kernels alone: with 4 and 5 CTAs the last tiles are
    shared, and a tile prefetched at the loop's own bounds was another iteration's (a review found it)."""
    from tawa.lowering import loop_load_prefetch
    from tawa.runtime.interpreter import compile_kernel
    path = pathlib.Path(__file__).resolve().parents[1] / "e2e" / "kernels" / "gemm_row_scale_reduced.tawa"
    M, N, K = 45, 40, 100
    kb = -(-K // 16)
    rng = np.random.default_rng(0)
    a, b = rng.integers(-2, 3, (M, K)).astype(BF16), rng.integers(-2, 3, (K, N)).astype(BF16)
    sa = rng.integers(1, 4, (M, 2 * kb)).astype(np.float32)
    ref = sum((a[:, 16 * j:16 * j + 16].astype(np.float64) * sa[:, 2 * j:2 * j + 2].max(1, keepdims=True))
              @ b[16 * j:16 * j + 16].astype(np.float64) for j in range(kb))
    m = parse_and_lower(path.read_text(), str(path), {"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16})
    opts = CompileOptions(warp_specialize=True, schedule="streamk")
    for p_ in (mask_elision, aref_insertion, partition, protocol_check, loop_load_prefetch, persistent_tiles,
               stream_k):
        p_.run(m, opts)
    prog = compile_kernel(m)
    args = [a.copy(), b.copy(), sa.copy(), np.full((M, N), np.nan, np.float32)]
    prog.run(args, grid_of(m, args), seed=ctas, ctas=ctas)
    assert prog.rt.partials, "no tile is shared"
    np.testing.assert_array_equal(args[3], ref.astype(np.float32))


@pytest.mark.parametrize("M,N,K,schedule", [(45, 40, 100, "persistent"), (70, 33, 130, "persistent"),
                                            (70, 33, 130, None), (20, 16, 10, "persistent")])
def test_row_scaled_a_interleavings(M, N, K, schedule):
    """`gemm_scale_a`: A scaled per row in the K loop (`dot(a * s[:, None], b)`), the 1-D scale block loaded by the
    consumers once per tile, before the loop. Persistent, the tile loop loads it again for each tile (it used to
    refuse persistence); bit-for-bit the sequential kernel."""
    path = pathlib.Path(__file__).resolve().parents[1] / "e2e" / "kernels" / "user" / "gemm_scale_a.tawa"
    consts = {"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16}
    rng = np.random.default_rng(M + K)
    a, b = rng.standard_normal((M, K)).astype(BF16), rng.standard_normal((K, N)).astype(BF16)
    s = rng.uniform(0.5, 1.5, M).astype(BF16)
    ref = (a.astype(np.float32) * s.astype(np.float32)[:, None]).astype(BF16).astype(np.float32) \
        @ b.astype(np.float32)

    def make_args():
        return [a.copy(), b.copy(), s.copy(), np.zeros((M, N), BF16)]

    plain = parse_and_lower(path.read_text(), str(path), consts)
    expected = make_args()
    run_kernel(plain, expected, grid_of(plain, expected))
    m = parse_and_lower(path.read_text(), str(path), consts)
    opts = CompileOptions(warp_specialize=True, schedule=schedule)
    for p_ in (aref_insertion, partition, protocol_check) + ((persistent_tiles,) if schedule else ()):
        p_.run(m, opts)
    if schedule:
        assert "tawa.persistent" in str(m)

    def check(args):
        np.testing.assert_array_equal(args[3], expected[3])
        out = args[3].astype(np.float32)
        assert np.abs(out - ref).max() <= 2e-2 * max(1.0, np.abs(ref).max())

    run_with_interleavings(m, make_args, grid_of(m, make_args()), seeds=SEEDS, check=check)
