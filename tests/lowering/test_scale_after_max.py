"""scale-after-max keeps each program's meaning: the tile IR after the passes the GPU runs (mask-elision through
divide-by-row) computes in the interpreter what the program as written computes, on masks the pass looks
through (two masks in a row, a masked tile read elsewhere, a tile reached twice) and on the user attention
kernels; and a scale it cannot prove positive, or a product that stays anyway, is left alone (no assumption)."""
import pathlib

import ml_dtypes
import numpy as np
import pytest

pytest.importorskip("mlir")

from tawa.ir import attrs                          # noqa: E402
from tawa.ir.kernel_info import kernels            # noqa: E402
from tawa.opt import _run                          # noqa: E402
from tawa.options import CompileOptions            # noqa: E402
from tawa.runtime.interpreter import run_kernel    # noqa: E402

GPU_PASSES = ["canonicalize", "mask-elision", "lazy-rescale", "scale-after-max", "exp-base2", "divide-by-row"]
USER = pathlib.Path(__file__).resolve().parents[1] / "e2e" / "kernels" / "user"

ATTENTION = """
def attn(Q: bf16[S, 64], K: bf16[S, 64], B: f32[S, S], O: f32[S, 64], sm_scale: f32, BLOCK: const = 64):
    q = load(Q, (program_id(0), 0), (BLOCK, 64))
    m_i = full((BLOCK,), -inf, f32)
    acc = zeros((BLOCK, 64), f32)
    rows = program_id(0) * BLOCK + arange(0, BLOCK)
    for j in range(cdiv(S, BLOCK)):
        k = load(K, (j, 0), (BLOCK, 64))
        s = dot(q, k.T) * sm_scale
        cols = j * BLOCK + arange(0, BLOCK)
{body}
        m_i = m_new
    store(O, (program_id(0), 0), acc)
"""
BODIES = {
    # causal and bound masks one after the other: mask-elision nests one branch in the other
    "two_masks": """        s = where(cols[None, :] < S, s, -inf)
        s = where(rows[:, None] >= cols[None, :], s, -inf)
        m_new = maximum(m_i, max(s, axis=1))
        acc = acc + exp(s - m_new[:, None])""",
    # the exponentials read the bound-masked scores, the maximum a further mask of them
    "masked_read_elsewhere": """        s = where(cols[None, :] < S, s, -inf)
        keep = load(B, (program_id(0), j), (BLOCK, BLOCK)) > 0.0
        s2 = where(keep, s, -inf)
        m_new = maximum(m_i, max(s2, axis=1))
        acc = acc + exp(s - m_new[:, None])""",
    # one masked tile read by both arms of another mask
    "diamond": """        s = where(cols[None, :] < S, s, -inf)
        keep = load(B, (program_id(0), j), (BLOCK, BLOCK))
        s2 = where(keep > 0.5, s, where(keep > -0.5, s, -inf))
        m_new = maximum(m_i, max(s2, axis=1))
        acc = acc + exp2(s2 - m_new[:, None])""",
}


def _module(source: str, passes, **options):
    return _run(source, "test.tawa", passes, CompileOptions.from_kwargs(dict(options, target="cuda")))


def _same_outputs(source, args, grid, outs, norm_tol=None, **options):
    """Run the program as written and after the GPU's passes; `norm_tol`: compare by ‖new - ref‖ / ‖ref‖ (where P
    goes to the second dot in bf16, the exponentials' rounding moves single elements by a bf16 ulp), else
    elementwise to f32 rounding."""
    ref, new = _module(source, ["canonicalize"], **options), _module(source, GPU_PASSES, **options)
    a, b = [x.copy() if isinstance(x, np.ndarray) else x for x in args], \
        [x.copy() if isinstance(x, np.ndarray) else x for x in args]
    run_kernel(ref, a, grid)
    run_kernel(new, b, grid)
    for i in outs:
        x, y = np.asarray(a[i], np.float64), np.asarray(b[i], np.float64)
        assert not np.isnan(x).any(), "the reference left outputs unwritten"
        if norm_tol is None:
            np.testing.assert_allclose(y, x, rtol=2e-5, atol=1e-5, err_msg=f"output {i}")
        else:
            assert np.linalg.norm(y - x) / np.linalg.norm(x) < norm_tol, f"output {i}"
    return new


def _assumed(module) -> list:
    return [list(attrs.POSITIVE_PARAMS.get(f)) for f in kernels(module)]


@pytest.mark.parametrize("name", list(BODIES))
@pytest.mark.parametrize("scale", [0.125, 1.5])
def test_masks_the_pass_looks_through(name, scale):
    S = 100
    rng = np.random.default_rng(7)
    q = rng.standard_normal((S, 64)).astype(ml_dtypes.bfloat16)
    k = rng.standard_normal((S, 64)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((S, S)).astype(np.float32)
    b[:, 0] = b[:, 64] = 1.0                         # (every row keeps a key in each block)
    source = ATTENTION.format(body=BODIES[name])
    new = _same_outputs(source, [q, k, b, np.full((S, 64), np.nan, np.float32), np.float32(scale)], (2,), [3])
    assert _assumed(new) == [[4]]                    # the rewrite happened: the scale is assumed positive
    assert "arith.mulf %" in str(new)


@pytest.mark.parametrize("kernel,args", [
    ("attn_cross", lambda rng: [*(rng.standard_normal((1, 2, s, 64)).astype(ml_dtypes.bfloat16)
                                  for s in (70, 150, 150)), np.full((1, 2, 70, 64), np.nan, np.float32)]),
    ("attn_window", lambda rng: [*(rng.standard_normal((1, 2, 150, 64)).astype(ml_dtypes.bfloat16)
                                   for _ in range(3)), np.full((1, 2, 150, 64), np.nan, np.float32)]),
    ("attn_softcap", lambda rng: [*(rng.standard_normal((1, 2, 150, 64)).astype(ml_dtypes.bfloat16)
                                    for _ in range(3)), np.full((1, 2, 150, 64), np.nan, np.float32)]),
])
def test_user_attention_kernels(kernel, args):
    source = (USER / f"{kernel}.tawa").read_text().replace("O: bf16", "O: f32").replace(
        "(acc / l_i[:, None]).to(bf16)", "acc / l_i[:, None]")
    extra = {"attn_cross": [np.float32(0.125)], "attn_window": [np.float32(0.125), 40],
             "attn_softcap": [np.float32(0.4), np.float32(5.0)]}[kernel]
    rng = np.random.default_rng(3)
    a = args(rng) + extra
    grid = (-(-a[0].shape[2] // 64), 2, 1)
    new = _same_outputs(source, a, grid, [3], norm_tol=5e-3, D=64, BLOCK_M=64, BLOCK_N=64)
    assert _assumed(new) != [[]]


def test_products_that_stay_are_not_assumed():
    """A scaled tile that is stored as well keeps its multiply: its scale (a GEMM's alpha, possibly negative) is
    not assumed positive; nor is a scale whose product on the way leaves the normal floats."""
    stored = """
def k(X: f32[M, N], O: f32[M, N], R: f32[M], alpha: f32, BLOCK: const = 16):
    x = load(X, (program_id(0), 0), (BLOCK, BLOCK))
    s = x * alpha
    store(O, (program_id(0), 0), s)
    store(R, (program_id(0),), max(s, axis=1))
"""
    tiny = """
def k(X: f32[M, N], R: f32[M], c: f32, BLOCK: const = 16):
    x = load(X, (program_id(0), 0), (BLOCK, BLOCK))
    store(R, (program_id(0),), max(x * ((c * 1e-30) * 1e30), axis=1))
"""
    from tawa.ir.traversal import defining_op, walk
    for source in (stored, tiny):
        module = _module(source, GPU_PASSES)
        assert _assumed(module) == [[]]
        reduces = [op for f in kernels(module) for op in walk(f) if op.name == "tawa.reduce"]
        assert [defining_op(op.operands[0]).name for op in reduces] == ["arith.mulf"]      # (as written)


def test_two_results_of_one_branch():
    """A mask choosing between two scaled results of one `scf.if` changes each result (a branch reached twice
    through different results once kept the scale in the second)."""
    source = """
def k(X: f32[M, N], Y: f32[M, N], O: f32[M], P: f32[M, N], c: f32, BLOCK: const = 16):
    x = load(X, (program_id(0), 0), (BLOCK, BLOCK))
    y = load(Y, (program_id(0), 0), (BLOCK, BLOCK))
    if program_id(0) == 0:
        a = x * c
        b = y * c
    else:
        a = where(x > 0.0, x * c, -inf)
        b = y * c
    s = where(x > y, a, b)
    m = max(s, axis=1)
    store(O, (program_id(0),), m)
    store(P, (program_id(0), 0), exp(s - m[:, None]))
"""
    rng = np.random.default_rng(5)
    x, y = (rng.standard_normal((32, 16)).astype(np.float32) for _ in range(2))
    x[:, 0] = 1.0
    for c in (0.3, 2.0):
        new = _same_outputs(source, [x, y, np.full(32, np.nan, np.float32), np.full((32, 16), np.nan, np.float32),
                                     np.float32(c)], (2,), [2, 3])
        assert _assumed(new) == [[4]]
