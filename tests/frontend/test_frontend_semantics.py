"""Lowering rules that need Python: errors and their locations, and the loop-carried value rule. The IR each
rule produces (loop-carried values, if results, compile-time folding, broadcasting, casts, reductions, tensor
indexing) is checked by the FileCheck tests in tests/passes/frontend/ (loops, conditionals, if-on-constant,
shapes, arith)."""
from __future__ import annotations

import pytest

from tawa.errors import CompilationError
from tawa.frontend import parse_and_lower


def ir_of(body: str, params: str = "X: f32[M, N], Y: f32[M, N], n: i32, alpha: f32", **constants) -> str:
    src = f"@grid(1)\ndef k({params}):\n" + "\n".join("    " + line for line in body.strip("\n").splitlines())
    m = parse_and_lower(src, constants=constants or None)
    m.operation.verify()
    return str(m)


def error_of(body: str, params: str = "X: f32[M, N], Y: f32[M, N], n: i32, alpha: f32") -> CompilationError:
    src = f"@grid(1)\ndef k({params}):\n" + "\n".join("    " + line for line in body.strip("\n").splitlines())
    with pytest.raises(CompilationError) as info:
        parse_and_lower(src)
    return info.value


def test_read_before_assign_in_body_is_carried_even_if_dead_after():
    text = ir_of("""
x = zeros((16,), f32)
for i in range(n):
    x = x + 1.0
""")
    assert "iter_args" in text


def test_loop_variable_is_not_available_after_the_loop():
    err = error_of("""
for i in range(n):
    pass
store(Y, (i, 0), zeros((16, 16), f32))
""")
    assert "only defined inside the loop" in err.message and err.location.line == 5


def test_scalar_params_must_be_i32_or_f32_and_tensors_not_bool():
    with pytest.raises(CompilationError, match="must be i32 or f32"):
        parse_and_lower("def k(x: bf16):\n    pass\n")
    with pytest.raises(CompilationError, match="cannot have dtype bool"):
        parse_and_lower("def k(x: bool[N]):\n    pass\n")


def test_return_only_at_the_end():
    with pytest.raises(CompilationError, match="return is only allowed as the last statement"):
        parse_and_lower("def k(n: i32):\n    if n > 1:\n        return\n    pass\n")


def test_names_read_only_in_view_bounds_are_reads():
    """A name read only in a view's bounds (`X[s:e]`) is a read: a loop carries it, a branch's assignment reaches
    the view after the `if`, and a shape symbol there is bound from the tensor (each was lost once)."""
    import numpy as np
    import tawa
    loop = """
def loopview(X: f32[T], Y: f32[NS, B], CU: i32[NS1], NSEG: const = 3, B: const = 16):
    s = sum(load(CU, 0, 1))
    for i in range(NSEG):
        e = sum(load(CU, i + 1, 1))
        x = load(X[s:e], 0, B)
        store(Y[i], 0, x)
        s = e
"""
    x, cu = np.arange(100, dtype=np.float32), np.array([0, 5, 30, 40], np.int32)
    y = np.full((3, 16), np.nan, np.float32)
    tawa.interpret(loop)[(1,)](x, y, cu)
    expected = np.zeros((3, 16), np.float32)
    for i in range(3):
        n = min(16, cu[i + 1] - cu[i])
        expected[i, :n] = x[cu[i]:cu[i] + n]
    np.testing.assert_array_equal(y, expected)
    branch = """
def ifview(X: f32[T, D], Y: f32[B, D], a: i32, b: i32, B: const = 16, D: const = 16):
    if a > b:
        s = a
    else:
        s = b
    store(Y, (0, 0), load(X[s:T], (0, 0), (B, D)))
"""
    x2 = np.arange(40 * 16, dtype=np.float32).reshape(40, 16)
    y2 = np.full((16, 16), np.nan, np.float32)
    tawa.interpret(branch)[(1,)](x2, y2, 3, 30)
    np.testing.assert_array_equal(y2, np.concatenate([x2[30:], np.zeros((6, 16), np.float32)]))
