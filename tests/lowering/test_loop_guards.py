"""`loop-guards` keeps results: kernels whose loop body runs under a bound on the loop index, run by the CPU
interpreter (which executes the tile IR after the pass), against the blocks the condition selects evaluated in
Python, over starts and bounds that include negative values and i32 sentinels (2^31 - 1, -2^31): the new bounds
are computed in 64 bits and clamped, so a sentinel never wraps. Each kernel also checks that the pass did narrow
its loop (no `scf.if` left), so the test exercises the rewrite and not the `if`."""
import numpy as np
import pytest

import tawa

BIG, SMALL = 2 ** 31 - 1, -2 ** 31
#: condition on the block index j (s, e: kernel arguments) -> the same in Python
CONDITIONS = {
    "j < e": lambda j, s, e: j < e,
    "j <= e": lambda j, s, e: j <= e,
    "j > s": lambda j, s, e: j > s,
    "j >= s and j < e": lambda j, s, e: s <= j < e,
    "3 * j < e": lambda j, s, e: 3 * j < e,
    "2 * j + 1 <= e": lambda j, s, e: 2 * j + 1 <= e,
    "e > j * 4": lambda j, s, e: e > 4 * j,
    "s - j < 2": lambda j, s, e: s - j < 2,
    "j + s >= 3 and 2 * j <= e": lambda j, s, e: j + s >= 3 and 2 * j <= e,
}
VALUES = [(-5, 3), (0, 0), (2, 7), (1, 1), (-3, -1), (4, 100), (SMALL, BIG), (BIG, SMALL), (5, BIG), (SMALL, 2)]
BLOCKS = 9


def _kernel(cond: str, start: str):
    source = f"""
@grid(1)
def guarded(X: f32[R, N], Y: f32[R, 16], s: i32, e: i32, j0: i32):
    acc = zeros((R, 16), f32)
    for j in range({start}cdiv(N, 16)):
        if {cond}:
            acc = acc + load(X, (0, j), (R, 16))
    store(Y, (0, 0), acc)
"""
    return tawa.compile(source.replace("R", "8").replace("X: f32[8, N]", "X: f32[8, N]"), target="cpu")


@pytest.mark.parametrize("cond", list(CONDITIONS))
@pytest.mark.parametrize("start", ["", "j0, "], ids=["from0", "from-j0"])
def test_narrowed_loops_add_the_blocks_the_condition_selects(cond, start):
    kernel = _kernel(cond, start)
    assert "scf.if" not in kernel.compiled.ir
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 16 * BLOCKS)).astype(np.float32)
    for j0 in ([0] if not start else [-4, 0, 3]):
        for s, e in VALUES:
            y = np.full((8, 16), np.nan, dtype=np.float32)
            kernel(x, y, s, e, j0)
            want = np.zeros((8, 16))
            for j in range(j0 if start else 0, BLOCKS):
                if CONDITIONS[cond](j, s, e):
                    want += x[:, 16 * j:16 * (j + 1)] if j >= 0 else 0.0
            np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5, err_msg=f"j0={j0} s={s} e={e}")
