"""The public API on the CPU target: tawa.compile / tawa.interpret, launch forms, options and errors."""
import pathlib
import ml_dtypes
import numpy as np
import pytest

import tawa
from tawa.errors import CompilationError, LaunchError

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"

BF16 = ml_dtypes.bfloat16
GEMM = str(EXAMPLES / "gemm.tawa")
SMALL = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16)


def _gemm_inputs(m, n, k, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(BF16)
    b = rng.standard_normal((k, n)).astype(BF16)
    c = np.full((m, n), np.nan, BF16)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    return a, b, c, ref


def _rel_err(out, ref):
    out = out.astype(np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


@pytest.mark.parametrize("shape", [(64, 64, 32), (70, 45, 37), (33, 100, 5)])
def test_interpret_gemm_ragged(shape):
    kernel = tawa.interpret(GEMM, **SMALL)
    a, b, c, ref = _gemm_inputs(*shape, seed=sum(shape))
    kernel(a, b, c)
    assert not np.isnan(c.astype(np.float32)).any()
    assert _rel_err(c, ref) < 1e-2


def test_explicit_grid_overrides_declared_grid():
    kernel = tawa.interpret(GEMM, **SMALL)
    a, b, c, ref = _gemm_inputs(64, 64, 32, seed=3)
    kernel[(1, 1)](a, b, c)                       # only the first tile
    out = c.astype(np.float64)
    assert _rel_err(out[:32, :32], ref[:32, :32]) < 1e-2
    assert np.isnan(out[32:, :]).all() and np.isnan(out[:, 32:]).all()


def test_compile_from_python_string():
    src = (
        "@grid(cdiv(N, BLOCK))\n"
        "def axpy(X: f32[N], Y: f32[N], alpha: f32, BLOCK: const = 16):\n"
        "    i = program_id(0)\n"
        "    x = load(X, (i,), (BLOCK,))\n"
        "    y = load(Y, (i,), (BLOCK,))\n"
        "    store(Y, (i,), alpha * x + y)\n")
    kernel = tawa.interpret(src)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(37).astype(np.float32), rng.standard_normal(37).astype(np.float32)
    expect = 2.5 * x + y
    kernel(x, y, 2.5)
    np.testing.assert_allclose(y, expect, rtol=1e-6)


def test_fp16_via_dtype_constant():
    kernel = tawa.interpret(GEMM, DTYPE="f16", **SMALL)
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((40, 24)).astype(np.float16), rng.standard_normal((24, 48)).astype(np.float16)
    c = np.full((40, 48), np.nan, np.float16)
    kernel(a, b, c)
    assert _rel_err(c, a.astype(np.float64) @ b.astype(np.float64)) < 2e-3


def test_warp_specialized_ir_runs_in_interpreter():
    kernel = tawa.interpret(GEMM, warp_specialize=True, num_buffers=2, **SMALL)
    assert "tawa.aref_put" in kernel.ir and "tawa.warp_group" in kernel.ir
    for seed in range(3):
        a, b, c, ref = _gemm_inputs(50, 40, 80, seed=seed)
        kernel(a, b, c, seed=seed)
        assert _rel_err(c, ref) < 1e-2


def test_wrong_argument_count_is_a_launch_error():
    kernel = tawa.interpret(GEMM, **SMALL)
    a, b, c, _ = _gemm_inputs(32, 32, 16, seed=1)
    with pytest.raises(LaunchError, match="takes 3 arguments"):
        kernel(a, b)


def test_mismatched_shape_symbol_is_a_launch_error():
    kernel = tawa.interpret(GEMM, **SMALL)
    a, _, c, _ = _gemm_inputs(32, 32, 16, seed=1)
    b = np.ones((17, 32), BF16)
    with pytest.raises(LaunchError, match="K"):
        kernel(a, b, c)


def test_unknown_constant_is_a_compile_error():
    with pytest.raises(CompilationError, match="NOT_A_CONST"):
        tawa.interpret(GEMM, NOT_A_CONST=3)


def test_forced_specialization_of_softmax_says_why():
    with pytest.raises(CompilationError, match="warp-specialize"):
        tawa.interpret(str(EXAMPLES / "softmax.tawa"), warp_specialize=True)


def test_num_buffers_warp_spec_alias():
    kernel = tawa.interpret(GEMM, warp_specialize=True, num_buffers_warp_spec=3, **SMALL)
    assert ", 3 : i32>" in kernel.ir


def test_read_source_has_one_home():
    from tawa import frontend, source
    assert tawa.read_source is source.read_source is frontend.read_source


def test_read_source_path_text_and_missing_file(tmp_path):
    src, name = tawa.read_source(GEMM)
    assert name == GEMM and "def gemm" in src
    assert tawa.read_source(pathlib.Path(GEMM)) == (src, GEMM)
    one_line = "@grid(1)"
    assert tawa.read_source(one_line) == (one_line, "<string>")
    with pytest.raises(CompilationError, match="no such kernel file: nope/missing.tawa"):
        tawa.read_source("nope/missing.tawa")
    with pytest.raises(CompilationError, match="no such kernel file"):
        tawa.read_source(tmp_path / "missing.tawa")
    with pytest.raises(CompilationError, match="no such kernel file"):
        tawa.interpret("nope/missing.tawa")
    other = tmp_path / "kernel.txt"                # any existing file is read, whatever its suffix
    other.write_text("x = 1\n")
    assert tawa.read_source(str(other)) == ("x = 1\n", str(other))


def test_non_utf8_file_is_a_compilation_error(tmp_path):
    bad = tmp_path / "bad.tawa"
    bad.write_bytes(b"# \xff\xfe\n")
    for call in (lambda: tawa.read_source(str(bad)), lambda: tawa.interpret(str(bad))):
        with pytest.raises(CompilationError, match=r"bad\.tawa is not UTF-8 text: byte 0xff at offset 2"):
            call()


def test_bad_option_is_checked_before_the_source():
    with pytest.raises(CompilationError, match="num_stages"):
        tawa.interpret("not a kernel (", num_stages=0)


@pytest.mark.parametrize("grid", [None, (1.5, 2), "8", (1, 2, 3, 4), (), (-1,), (True,)])
def test_explicit_grid_is_checked_when_given(grid):
    kernel = tawa.interpret(str(EXAMPLES / "gemm.tawa"), BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
    with pytest.raises(tawa.LaunchError, match="launch grid"):
        kernel[grid]


def test_explicit_grid_accepts_ints():
    kernel = tawa.interpret(str(EXAMPLES / "gemm.tawa"), BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
    assert callable(kernel[2]) and callable(kernel[(2, 3)]) and callable(kernel[[1, 1, 1]])
    assert callable(kernel[(np.int64(2), 3)])


def test_keyword_arguments_at_launch_are_a_clear_error():
    kernel = tawa.interpret(str(EXAMPLES / "gemm.tawa"), BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
    a = np.ones((16, 16), ml_dtypes.bfloat16)
    with pytest.raises(LaunchError, match="keyword argument 'C'.*positional"):
        kernel(a, a, C=a)
    with pytest.raises(LaunchError, match="keyword argument 'bogus'"):
        kernel[(1, 1)](a, a, a, bogus=1)


@pytest.mark.parametrize("keyword", ["grid", "args", "kw", "self"])
def test_keywords_named_like_the_launchers_own_are_a_clear_error(keyword):
    """`grid=` (a Triton habit) and names the launch functions use themselves reach the user as a LaunchError,
    not a clash of Python arguments."""
    kernel = tawa.interpret(str(EXAMPLES / "gemm.tawa"), BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
    a = np.ones((16, 16), ml_dtypes.bfloat16)
    with pytest.raises(LaunchError, match=f"keyword argument '{keyword}'"):
        kernel(a, a, a, **{keyword: (1, 1)})
    with pytest.raises(LaunchError, match=f"keyword argument '{keyword}'"):
        kernel[(1, 1)](a, a, a, **{keyword: (1, 1)})


def test_grid_keyword_says_where_the_grid_goes():
    kernel = tawa.interpret(str(EXAMPLES / "gemm.tawa"), BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
    a = np.ones((16, 16), ml_dtypes.bfloat16)
    with pytest.raises(LaunchError, match=r"kernel\[grid\]\(\.\.\.\)"):
        kernel(a, a, a, grid=(1, 1))


def test_requires_is_checked_at_launch():
    """softmax.tawa holds a whole row in one tile (`@requires(N <= BLOCK_N)`): a wider row is refused, naming the
    condition and the extent, instead of leaving its last columns unwritten."""
    kernel = tawa.interpret(str(EXAMPLES / "softmax.tawa"), BLOCK_N=256)
    assert kernel.compiled.requires == [{"condition": "N <= 256", "source": "@requires(N <= BLOCK_N)", "line": 7}]
    x = np.random.default_rng(0).standard_normal((3, 300)).astype(np.float32)
    with pytest.raises(LaunchError, match=r"requires N <= 256, but N = 300 \(the @requires on line 7\)"):
        kernel(x, np.empty_like(x))
    x = x[:, :200].copy()
    y = np.full_like(x, np.nan)
    kernel(x, y)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    assert np.allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_written_arguments_refuse_overlapping_views():
    """A written view whose steps along two dimensions meet (sliding windows, equal strides) is refused at launch;
    a transposed or strided view that owns its elements is written as given."""
    from numpy.lib.stride_tricks import as_strided
    kernel = tawa.interpret(str(EXAMPLES / "softmax.tawa"), BLOCK_N=256)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 100)).astype(np.float32)
    buf = np.zeros(400, np.float32)
    windows = as_strided(buf, (3, 100), (buf.itemsize * 50, buf.itemsize))     # rows 50 elements apart
    with pytest.raises(LaunchError, match=r"argument 'Y' is written by the kernel, but its elements overlap: "
                                          r"index 50 along dimension 1 \(stride 1\) and index 1 along dimension 0"):
        kernel(x, windows)
    same = as_strided(buf, (3, 100), (buf.itemsize, buf.itemsize))
    with pytest.raises(LaunchError, match=r"its elements overlap"):
        kernel(x, same)
    kernel(np.zeros((0, 100), np.float32), np.zeros((0, 100), np.float32))   # empty: nothing written, no refusal
    y = np.full((6, 100), np.nan, np.float32)[::2]                            # every other row: distinct
    kernel(x, y)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    assert np.allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_written_arguments_are_marked_and_refuse_broadcast_views():
    """`tawa.params` marks the tensors a kernel stores to; a broadcast (stride-0) view there is refused at launch,
    while a broadcast input is read as given."""
    kernel = tawa.interpret(str(EXAMPLES / "softmax.tawa"), BLOCK_N=256)
    assert [p.get("written", False) for p in kernel.compiled.params] == [False, True]
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 100)).astype(np.float32)
    with pytest.raises(LaunchError, match=r"argument 'Y' is written by the kernel, but its dimension 0 has stride 0"):
        kernel(x, np.broadcast_to(np.zeros((1, 100), np.float32), (3, 100)))
    row = np.broadcast_to(x[:1], (3, 100))
    y = np.full((3, 100), np.nan, np.float32)
    kernel(row, y)
    e = np.exp(x[0] - x[0].max())
    assert np.allclose(y, np.broadcast_to(e / e.sum(), (3, 100)), rtol=1e-5, atol=1e-6)

