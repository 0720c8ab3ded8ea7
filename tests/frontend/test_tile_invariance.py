"""`tawa.frontend.tuning.tile_invariant`: whether a program computes the same thing whatever its grid's tile
constants, which decides whether a launch may run a variant compiled with other tiles (launch defaults, the
default tuning space). A program id of an axis tiled by `cdiv(SYMBOL, CONST)` may be a block offset whose block is
CONST, or be multiplied by CONST (after a shift); any other use makes the tile part of the program's meaning."""
import pytest

from tawa.frontend.tuning import space_info

HEADER = """@grid(cdiv(M, BLOCK_M), cdiv(N, BLOCK_N))
def k(A: bf16[M, K], B: bf16[K, N], C: bf16[M, N], P: f32[NB, M], BLOCK_M: const = 128, BLOCK_N: const = 128):
    pid_m = program_id(0)
    pid_n = program_id(1)
    acc = zeros((BLOCK_M, BLOCK_N), f32)
    for kk in range(cdiv(K, 64)):
        acc = dot(load(A, (pid_m, kk), (BLOCK_M, 64)), load(B, (kk, pid_n), (64, BLOCK_N)), acc)
"""

CASES = {
    # the GEMM: block offsets of its own tiles
    "store(C, (pid_m, pid_n), acc.to(bf16))": True,
    # element indices of the tile: shifted program ids times the tile
    "rows = (pid_m + 1) * BLOCK_M - arange(0, BLOCK_M)\n    store(C, (pid_m, pid_n), where(rows[:, None] < M, acc, 0.0).to(bf16))": True,
    "store(C, (pid_m, program_id(1)), acc.to(bf16))": True,
    # a row of P per BLOCK_N tile
    "store(C, (pid_m, pid_n), acc.to(bf16))\n    store(P[pid_n], pid_m, max(acc, axis=1))": False,
    # the count of tiles along N
    "store(C, (pid_m, pid_n), (acc * num_programs(1)).to(bf16))": False,
    # a program id times something other than its tile
    "store(C, (pid_m, pid_n), (acc * (pid_n * 64)).to(bf16))": False,
    # a block offset of a block that is not the tile
    "store(C, (pid_m, pid_n), acc.to(bf16) + load(C, (pid_m, pid_n), (BLOCK_M, 64)))": False,
}


@pytest.mark.parametrize("body,invariant", list(CASES.items()), ids=[f"case{i}" for i in range(len(CASES))])
def test_program_ids_as_blocks_of_their_tile(body, invariant):
    assert space_info(HEADER + "    " + body + "\n")["tile_invariant"] is invariant


def test_a_grid_tiled_in_a_product_is_not_followed():
    """A 1-D grid over `cdiv(M, BM) * cdiv(N, BN)` with program ids split by hand: not proved, kept."""
    source = """@grid(cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N))
def k(A: bf16[M, K], B: bf16[K, N], C: bf16[M, N], BLOCK_M: const = 128, BLOCK_N: const = 128):
    pid = program_id(0)
    pid_m = pid // cdiv(N, BLOCK_N)
    pid_n = pid % cdiv(N, BLOCK_N)
    acc = zeros((BLOCK_M, BLOCK_N), f32)
    for kk in range(cdiv(K, 64)):
        acc = dot(load(A, (pid_m, kk), (BLOCK_M, 64)), load(B, (kk, pid_n), (64, BLOCK_N)), acc)
    store(C, (pid_m, pid_n), acc.to(bf16))
"""
    assert space_info(source)["tile_invariant"] is False


def test_untiled_axes_index_freely():
    """Attention's head and batch axes (`@grid(cdiv(S, BLOCK_M), H, Z)`) select tensors by element: invariant."""
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[2]
    for name in ("flash_attention.tawa", "gqa_attention.tawa", "gemm.tawa", "linear_gelu_residual.tawa",
                 "swiglu.tawa", "gemm_fp8.tawa", "batched_gemm.tawa", "gemm_bias_act.tawa"):
        path = root / "examples" / name
        assert space_info(path.read_text(), str(path))["tile_invariant"] is True, name
