"""`tawa.frontend.tuning.tile_invariant`: whether a program computes the same thing whatever its tile constants,
which decides whether a launch may run a variant compiled with other tiles (launch defaults, the default tuning
space). A whitelist: tile constants and the indices that address their blocks may only size tiles, be block
offsets of their own blocks, be scaled into element indices (`pid * BLOCK + arange(0, BLOCK)`) or bound loops over
blocks; a GEMM-family program may not reduce a tile. Every unsafe case below gave a different result under the
tile the launch would pick (checked with the interpreter when the analysis was written)."""
import pathlib

import pytest

from tawa.frontend.tuning import space_info

ROOT = pathlib.Path(__file__).resolve().parents[2]
GEMM = """@grid(cdiv(M, BLOCK_M), cdiv(N, BLOCK_N))
def k(A: bf16[M, K], B: bf16[K, N], C: bf16[M, N], X: bf16[M, N2], P: f32[NB, M], Y: f32[M], kmax: i32,
      BLOCK_M: const = 128, BLOCK_N: const = 256, BLOCK_K: const = 64, AX: const = 1):
    pid_m = program_id(0)
    pid_n = program_id(1)
    acc = zeros((BLOCK_M, BLOCK_N), f32)
    for kk in range(cdiv(K, BLOCK_K)):
        acc = dot(load(A, (pid_m, kk), (BLOCK_M, BLOCK_K)), load(B, (kk, pid_n), (BLOCK_K, BLOCK_N)), acc)
"""

SAFE = {
    "gemm": "store(C, (pid_m, pid_n), acc.to(bf16))",
    "masked": "cols = pid_n * BLOCK_N + arange(0, BLOCK_N)\n    store(C, (pid_m, pid_n), where(cols[None, :] < N, acc, 0.0).to(bf16))",
    "inline program id": "store(C, (pid_m, program_id(1)), acc.to(bf16))",
    "residual": "store(C, (pid_m, pid_n), (acc + load(X, (pid_m, pid_n), (BLOCK_M, BLOCK_N)).to(f32)).to(bf16))",
}
UNSAFE = {
    "a row per tile": "store(P[pid_n], pid_m, max(acc, axis=1))",
    "a row per tile, 2-D": "store(P, (pid_n, pid_m), max(acc, axis=1)[None, :])",
    "a 1-D store by the N axis": "store(Y, pid_n, max(acc, axis=1))",
    "row softmax over one tile": "p = exp(acc - max(acc, axis=1)[:, None])\n    store(C, (pid_m, pid_n), (p / sum(p, axis=1)[:, None]).to(bf16))",
    "row sum of one tile": "store(C, (pid_m, pid_n), acc.to(bf16))\n    store(Y, pid_m, sum(acc, axis=1))",
    "row sum, axis given positionally": "store(C, (pid_m, pid_n), acc.to(bf16))\n    store(Y, pid_m, sum(acc, 1))",
    "row max, axis given positionally": "store(P[pid_n], pid_m, max(acc, 1))",
    "row sum over the last axis, -1": "store(Y, pid_m, sum(acc, -1))",
    "row sum over an axis named by a constant": "store(Y, pid_m, sum(acc, AX))",
    "the next tile": "store(C, (pid_m, pid_n), (acc + load(X, (pid_m, pid_n + 1), (BLOCK_M, BLOCK_N)).to(f32)).to(bf16))",
    "a shifted mask": "rows = (pid_m + 1) * BLOCK_M - arange(0, BLOCK_M)\n    store(C, (pid_m, pid_n), where(rows[:, None] < M, acc, 0.0).to(bf16))",
    "full tiles only": "if (pid_m + 1) * BLOCK_M <= M:\n        store(C, (pid_m, pid_n), acc.to(bf16))",
    "a tile constant as a value": "store(C, (pid_m, pid_n), (acc / BLOCK_N).to(bf16))",
    "local column indices": "store(C, (pid_m, pid_n), (acc + arange(0, BLOCK_N)[None, :].to(f32)).to(bf16))",
    "a count of tiles": "store(C, (pid_m, pid_n), (acc / cdiv(N, BLOCK_N)).to(bf16))",
    "num_programs": "store(C, (pid_m, pid_n), (acc * num_programs(1)).to(bf16))",
    "a program id times another constant": "store(C, (pid_m, pid_n), (acc * (pid_n * 64)).to(bf16))",
    "a block that is not the tile": "store(C, (pid_m, pid_n), acc.to(bf16) + load(C, (pid_m, pid_n), (BLOCK_M, 64)))",
    "program_id of a constant axis": "q = program_id(AX)\n    store(P[q], pid_m, max(acc, axis=1))",
    "K blocks counted": "if kmax > 0:\n        store(C, (pid_m, pid_n), acc.to(bf16))\n    store(Y, pid_m, load(Y, pid_m, BLOCK_M) * (kmax // BLOCK_K))",
}


@pytest.mark.parametrize("body", list(SAFE.values()), ids=list(SAFE))
def test_safe_gemm_programs(body):
    assert space_info(GEMM + "    " + body + "\n")["tile_invariant"] is True


@pytest.mark.parametrize("body", list(UNSAFE.values()), ids=list(UNSAFE))
def test_tile_dependent_gemm_programs(body):
    assert space_info(GEMM + "    " + body + "\n")["tile_invariant"] is False


def test_two_dots_over_a_grid_tiling_both_axes_is_the_gemm_family():
    """A GLU (two dots into two accumulators) tiles M and N like a GEMM: a row reduction of its tile depends on
    BLOCK_N (under BLOCK_N 256 its per-tile row sums came out different). Only a grid tiling one axis (attention's
    query blocks) makes two dots the attention family, whose online softmax combines key blocks of any size."""
    glu = """@grid(cdiv(M, BLOCK_M), cdiv(N, BLOCK_N))
def glu(A: bf16[M, K], B1: bf16[K, N], B2: bf16[K, N], H: bf16[M, N], P: f32[M, NB],
        BLOCK_M: const = 128, BLOCK_N: const = 128, BLOCK_K: const = 64):
    pid_m = program_id(0)
    pid_n = program_id(1)
    acc1 = zeros((BLOCK_M, BLOCK_N), f32)
    acc2 = zeros((BLOCK_M, BLOCK_N), f32)
    for k in range(cdiv(K, BLOCK_K)):
        a = load(A, (pid_m, k), (BLOCK_M, BLOCK_K))
        acc1 = dot(a, load(B1, (k, pid_n), (BLOCK_K, BLOCK_N)), acc1)
        acc2 = dot(a, load(B2, (k, pid_n), (BLOCK_K, BLOCK_N)), acc2)
    h = acc1 * sigmoid(acc2)
    store(H, (pid_m, pid_n), h.to(bf16))
"""
    assert space_info(glu)["tile_invariant"] is True
    assert space_info(glu + "    store(P, (pid_m, pid_n), sum(h, axis=1)[:, None])\n")["tile_invariant"] is False


def test_a_loop_variable_is_a_block_index_of_its_own_constant():
    """A scale per K block of 32 (`(pid_m, kk)` with extent 1): BLOCK_K is part of its meaning."""
    source = GEMM.replace("acc = dot(load(A, (pid_m, kk), (BLOCK_M, BLOCK_K)), load(B, (kk, pid_n), (BLOCK_K, BLOCK_N)), acc)",
                          "acc = acc + dot(load(A, (pid_m, kk), (BLOCK_M, BLOCK_K)), load(B, (kk, pid_n), (BLOCK_K, BLOCK_N))) * load(X, (pid_m, kk), (BLOCK_M, 1))")
    assert space_info(source + "    store(C, (pid_m, pid_n), acc.to(bf16))\n")["tile_invariant"] is False
    source = GEMM.replace("for kk in range(cdiv(K, BLOCK_K)):", "for kk in range(cdiv(K, BLOCK_K)):\n        if kk < kmax:")
    source = source.replace("        acc = dot(", "            acc = dot(")
    assert space_info(source + "    store(C, (pid_m, pid_n), acc.to(bf16))\n")["tile_invariant"] is False


@pytest.mark.parametrize("grid", ["cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)", "(M + BLOCK_M - 1) // BLOCK_M, cdiv(N, BLOCK_N)"])
def test_grids_tiled_other_than_by_cdiv_are_not_followed(grid):
    source = GEMM.replace("@grid(cdiv(M, BLOCK_M), cdiv(N, BLOCK_N))", f"@grid({grid})")
    assert space_info(source + "    store(C, (pid_m, pid_n), acc.to(bf16))\n")["tile_invariant"] is False


def test_attention_floor_divided_bounds_are_tile_dependent():
    """A Triton-tutorial-style causal bound `(pid_m + 1) * BLOCK_M // BLOCK_N` drops keys at 192 x 128."""
    source = (ROOT / "examples" / "flash_attention.tawa").read_text()
    assert space_info(source)["tile_invariant"] is True
    floor = source.replace("cdiv((pid_m + 1) * BLOCK_M, BLOCK_N)", "(pid_m + 1) * BLOCK_M // BLOCK_N")
    assert floor != source and space_info(floor)["tile_invariant"] is False


@pytest.mark.parametrize("bound", ["cdiv(S, 64)", "S // BLOCK_N", "cdiv(S, BLOCK_M)",
                                   "min(cdiv(S, BLOCK_N), nb)", "min(cdiv(S, BLOCK_N), nb2)"])
def test_a_key_loop_counted_in_blocks_of_another_size_is_tile_dependent(bound):
    """`range(cdiv(S, 64))` over blocks of BLOCK_N = 64 visits half the keys at BLOCK_N = 128 (a launch rule picks
    the key block per head dim); also through the name the bound is assigned to, and the names that one reads."""
    source = (ROOT / "examples" / "flash_attention.tawa").read_text()
    names = "nb = cdiv(S, 128)\n        nb2 = nb\n        "
    literal = source.replace("num_kv = cdiv(S, BLOCK_N)", f"{names}num_kv = {bound}")
    assert literal != source and space_info(literal)["tile_invariant"] is False
    # the same names beside a bound that does not read them: nothing refused
    unread = source.replace("num_kv = cdiv(S, BLOCK_N)", f"{names}num_kv = cdiv(S, BLOCK_N)")
    assert space_info(unread)["tile_invariant"] is True


def test_the_examples_and_the_user_style_kernels():
    for path in sorted((ROOT / "examples").glob("*.tawa")):
        assert space_info(path.read_text(), str(path))["tile_invariant"] is True, path.name
    # (the sliding window's first key block is `(...) // BLOCK_N`; the *_step kernels compare the K block index with
    # an argument; the hand-written persistent GEMM divides its tile index by a tile count)
    # the paged decode's grid tiles no axis (its PAGE is the cache's page size): it keeps its own tiles; the MoE
    # GEMM's expert table holds one entry per BLOCK_M rows (`load(EXPERT, pid_m, 1)`: a program id at the offset
    # of a block of another size), the varlen attention's sequences start at multiples of BLOCK_M, the block-sparse
    # attention's key blocks are listed in blocks of BLOCK_N. The capacity-layout MoE kernels read a count as a
    # scalar, `sum(load(COUNTS, e, 1))`, which reduces no tile; the ragged-K GEMM loops over cdiv(KLEN[z], BLOCK_K).
    # The packed varlen attentions declare no grid, so they are not read as the attention family, and their softmax
    # reduces tiles; a kernel without a grid keeps its tiles at launch anyway.)
    dependent = {"gemm_rowmax.tawa", "gemm_grouped_pid.tawa", "attn_window.tawa", "gemm_scale_step.tawa",
                 "gemm_fp8_step.tawa", "gemm_user_persistent.tawa", "attn_paged_decode.tawa", "attn_varlen.tawa",
                 "moe_gemm.tawa", "attn_block_sparse.tawa", "attn_varlen_packed.tawa", "attn_varlen_gqa.tawa"}
    for path in sorted((ROOT / "tests" / "e2e" / "kernels" / "user").glob("*.tawa")):
        assert space_info(path.read_text(), str(path))["tile_invariant"] is (path.name not in dependent), path.name


def test_a_scalar_read_is_not_a_reduction():
    """`sum(load(X, i, 1))` reads one element (a count): a GEMM reading it keeps its tile invariance; a block of
    more than one element reduced, or a program id addressing one-element blocks, does not."""
    source = (ROOT / "examples" / "gemm.tawa").read_text()
    anchor = "    acc = zeros("
    assert anchor in source

    def with_line(line):
        return source.replace(anchor, f"    {line}\n{anchor}", 1)
    assert space_info(with_line("n = sum(load(A[0], 0, 1))"))["tile_invariant"] is True
    assert space_info(with_line("n = sum(load(A[0], 0, 2))"))["tile_invariant"] is False
    assert space_info(with_line("n = max(load(A[0], pid_m, 1))"))["tile_invariant"] is False


@pytest.mark.parametrize("line,offsets", [
    # the expert of the tile's first row: its meaning follows BLOCK_M
    ("e = sum(load(T[0], pid_m * BLOCK_M, 1))", "(pid_m, k)"),
    # a work list's tile row, in blocks of BLOCK_M, read from memory or passed as an argument
    ("r = sum(load(T[0], 0, 1))", "(r, k)"),
    ("r = rr + 1", "(r, k)"),
])
def test_read_values_that_bring_the_tiles_into_a_program(line, offsets):
    source = f"""
@grid(cdiv(M, BLOCK_M), cdiv(N, BLOCK_N))
def g(A: bf16[M, K], B: bf16[K, N], T: i32[E, M], C: bf16[M, N], rr: i32, BLOCK_M: const = 128,
      BLOCK_N: const = 128, BLOCK_K: const = 64):
    pid_m = program_id(0)
    pid_n = program_id(1)
    {line}
    acc = zeros((BLOCK_M, BLOCK_N), f32)
    for k in range(cdiv(K, BLOCK_K)):
        acc = dot(load(A, {offsets}, (BLOCK_M, BLOCK_K)), load(B, (k, pid_n), (BLOCK_K, BLOCK_N)), acc)
    store(C, (pid_m, pid_n), acc.to(bf16))
"""
    assert space_info(source)["tile_invariant"] is False
    plain = source.replace(f"    {line}\n", "").replace(f"load(A, {offsets},", "load(A, (pid_m, k),")
    assert space_info(plain)["tile_invariant"] is True
    # a count read at an offset free of the tiles, compared with row indices: no tile in its meaning
    count = source.replace(f"    {line}\n", "    n = sum(load(T[0], 0, 1))\n").replace(
        f"load(A, {offsets},", "load(A, (pid_m, k),").replace("acc.to(bf16)", "where(pid_m * BLOCK_M < n, acc, 0.0).to(bf16)")
    assert space_info(count)["tile_invariant"] is True


def test_block_counts_read_from_memory_and_inline_reads():
    """`for j in range(nkb)` over key blocks, nkb read from memory or passed in: a count of blocks of the kernel's
    own size (the launch's 64-key variant would visit half the keys); `range(cdiv(n, BLOCK_N))` divides an element
    count right there. A scalar read written inline as a block offset counts as one assigned to a name."""
    source = """
@grid(cdiv(S, BLOCK_M), H, Z)
def att(Q: bf16[Z, H, S, D], K: bf16[Z, H, S, D], V: bf16[Z, H, S, D], NKB: i32[Z], O: bf16[Z, H, S, D],
        nb: i32, D: const = 64, BLOCK_M: const = 128, BLOCK_N: const = 128):
    pid_m = program_id(0)
    h = program_id(1)
    z = program_id(2)
    nkb = sum(load(NKB, z, 1))
    q = load(Q[z, h], (pid_m, 0), (BLOCK_M, D))
    m_i = full((BLOCK_M,), -inf, f32)
    l_i = zeros((BLOCK_M,), f32)
    acc = zeros((BLOCK_M, D), f32)
    for j in range(BOUND):
        s = dot(q, load(K[z, h], (j, 0), (BLOCK_N, D)).T)
        m_new = maximum(m_i, max(s, axis=1))
        p = exp(s - m_new[:, None])
        alpha = exp(m_i - m_new)
        l_i = l_i * alpha + sum(p, axis=1)
        acc = dot(p.to(bf16), load(V[z, h], (j, 0), (BLOCK_N, D)), acc * alpha[:, None])
        m_i = m_new
    store(O[z, h], (pid_m, 0), (acc / l_i[:, None]).to(bf16))
"""
    assert space_info(source.replace("BOUND", "nkb"))["tile_invariant"] is False
    assert space_info(source.replace("BOUND", "nb"))["tile_invariant"] is False
    assert space_info(source.replace("BOUND", "cdiv(nkb * 64, BLOCK_N)"))["tile_invariant"] is True
    gemm = (ROOT / "examples" / "gemm.tawa").read_text()
    assert "load(A, (pid_m, k)," in gemm
    inline = gemm.replace("load(A, (pid_m, k),", "load(A, (sum(load(I, 0, 1)), k),").replace(
        "C: DTYPE[M, N]", "I: i32[T], C: DTYPE[M, N]")
    assert inline.count("I: i32[T]") == 1 and space_info(inline)["tile_invariant"] is False
    assert space_info(inline.replace("(sum(load(I, 0, 1)), k)", "(pid_m, k)"))["tile_invariant"] is True
