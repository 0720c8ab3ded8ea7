"""Launch helpers (argument binding, grid evaluation) and the interpreter's user-facing errors."""
import ml_dtypes
import numpy as np
import pytest
from interp_kernels import gemm, parse, ring

from tawa.errors import LaunchError, TawaError
from tawa.runtime.grid import bind_numpy_args, eval_grid
from tawa.runtime.interpreter import InterpreterError, attr_to_python, kernel_function, run_kernel

PARAMS = [
    {"name": "A", "kind": "tensor", "dtype": "bf16", "shape": ["M", "K"]},
    {"name": "B", "kind": "tensor", "dtype": "bf16", "shape": ["K", "N"]},
    {"name": "C", "kind": "tensor", "dtype": "f32", "shape": ["M", "N"]},
    {"name": "alpha", "kind": "scalar", "dtype": "f32"},
    {"name": "steps", "kind": "scalar", "dtype": "i32"},
]


def arrays(m=256, k=512, n=128, k2=None):
    return [np.zeros((m, k), ml_dtypes.bfloat16), np.zeros((k2 or k, n), ml_dtypes.bfloat16),
            np.zeros((m, n), np.float32), 0.5, 3]


def test_bind_numpy_args_returns_symbols():
    assert bind_numpy_args(PARAMS, arrays()) == {"M": 256, "K": 512, "N": 128}


@pytest.mark.parametrize("args,pattern", [
    (arrays(k2=384), r"argument 'B' .*dimension 0 is 384 but K = 512 from argument 'A'"),
    ([np.zeros((4, 4), np.float16)] + arrays()[1:], r"argument 'A' .*dtype f16, expected bf16"),
    ([np.zeros((4,), ml_dtypes.bfloat16)] + arrays()[1:], r"argument 'A' .*1 dimensions"),
    (arrays()[:4] + [2.5], r"argument 'steps' .*i32 scalar"),
    (arrays()[:4] + [2**40], r"does not fit in i32"),
    (arrays()[:3] + [np.zeros(3, np.float32), 1], r"argument 'alpha' .*must be a scalar"),
    (arrays()[:2], r"takes 5 arguments"),
    ([5] + arrays()[1:], r"argument 'A' .*must be an array"),
])
def test_bind_numpy_args_errors(args, pattern):
    with pytest.raises(LaunchError, match=pattern):
        bind_numpy_args(PARAMS, args)


def test_bind_checks_fixed_extents_and_layout():
    params = [{"name": "X", "kind": "tensor", "dtype": "f32", "shape": [4, "N"]}]
    assert bind_numpy_args(params, [np.zeros((4, 9), np.float32)]) == {"N": 9}
    with pytest.raises(LaunchError, match="dimension 0 is 5, expected 4"):
        bind_numpy_args(params, [np.zeros((5, 9), np.float32)])
    with pytest.raises(LaunchError, match="row-major"):
        bind_numpy_args(params, [np.zeros((9, 4), np.float32).T])


def test_eval_grid():
    b = {"M": 1000, "N": 384, "K": 64}
    c = {"BM": 128, "BN": 64, "flag": True, "scale": 0.5}
    assert eval_grid(["cdiv(M, BM)", "N // BN", "max(1, min(K % 48, 3)) * (2 + 1)"], b, c) == (8, 6, 9)
    assert eval_grid(["-(-M // 7)"], b, c) == (143,)


@pytest.mark.parametrize("expr,pattern", [
    ("__import__('os')", "only integers"), ("M.real", "only integers"), ("M ** 2", "only integers"),
    ("P", "unknown name 'P'"), ("scale", "unknown name"), ("cdiv(M, 0)", "division by zero"),
    ("M +", "not a valid expression"), ("cdiv(M)", "cdiv takes 2"), ("M / 2", "only integers"),
])
def test_eval_grid_rejects(expr, pattern):
    with pytest.raises(LaunchError, match=pattern):
        eval_grid([expr], {"M": 10}, {"scale": 0.5})


def test_kernel_attributes_and_launch_from_them():
    module = parse(gemm())
    func = kernel_function(module)
    params = attr_to_python(func.attributes["tawa.params"])
    assert params[0] == {"name": "A", "kind": "tensor", "dtype": "bf16", "shape": ["M", "K"]}
    grid_exprs = attr_to_python(func.attributes["tawa.grid"])
    constants = attr_to_python(func.attributes["tawa.constants"])
    a = np.random.default_rng(0).standard_normal((70, 20)).astype(ml_dtypes.bfloat16)
    b = np.random.default_rng(1).standard_normal((20, 33)).astype(ml_dtypes.bfloat16)
    c = np.zeros((70, 33), np.float32)
    grid = eval_grid(grid_exprs, bind_numpy_args(params, [a, b, c]), constants)
    assert grid == (3, 2)
    run_kernel(module, [a, b, c], grid)
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-5, atol=1e-5)


def test_run_kernel_checks_arguments():
    with pytest.raises(LaunchError, match="argument 'B'"):
        run_kernel(parse(gemm()), arrays(m=32, k=16, n=32, k2=8)[:3], (1, 1))


def test_unsupported_op_is_named():
    text = gemm().replace("%om = arith.muli %pm, %cbm : i32",
                          '%om0 = arith.muli %pm, %cbm : i32\n  %om = "test.mystery"(%om0) : (i32) -> i32')
    from mlir import ir

    from tawa.ir.dialect import make_context
    ctx = make_context()
    ctx.allow_unregistered_dialects = True
    module = ir.Module.parse(text, ctx)
    with pytest.raises(InterpreterError, match="does not support the op 'test.mystery'"):
        run_kernel(module, arrays(m=32, k=16, n=32)[:3], (1, 1))


def test_errors_carry_source_locations(tmp_path):
    src = tmp_path / "k.tawa"
    src.write_text("line one\n    consumed(r)\n")
    text = ring(2, 2, [(2, ["consumed", "get", "acc"])]).replace(
        '"tawa.aref_consumed"(%ar) : (!tawa.aref<[tensor<4xf32>], 2 : i32>) -> ()',
        f'"tawa.aref_consumed"(%ar) : (!tawa.aref<[tensor<4xf32>], 2 : i32>) -> () loc("{src}":2:5)')
    with pytest.raises(TawaError) as info:
        run_kernel(parse(text), [np.ones(8, np.float32), np.zeros(4, np.float32)], (1,))
    message = str(info.value)
    assert f"{src}:2:5: error:" in message and "consumed(r)" in message
