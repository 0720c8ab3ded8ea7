"""Lowering rules: loop-carried values, if results, compile-time folding, broadcasting, casts, reductions,
tensor indexing."""
from __future__ import annotations

import pytest

from tawa.errors import CompilationError
from tawa.frontend import parse_and_lower

from frontend_checks import check_not, check_order, count


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


def test_loop_carries_only_what_is_needed():
    text = ir_of("""
acc = zeros((64, 64), f32)
unused = zeros((64, 64), f32)
count = 0
for i in range(n):
    t = load(X, (i, 0), (64, 64))       # body-local
    acc = acc + t
    unused = t * 2.0                    # assigned, but never read afterwards
    count += 1
store(Y, (count, 0), acc)
""")
    check_order(text, [r"scf.for %\w+ = %c0_i32 to %arg2 step %c1_i32 iter_args\(%\w+ = %\w+, %\w+ = %c0_i32\) "
                       r"-> \(tensor<64x64xf32>, i32\)"])


def test_loop_with_start_stop_step_and_nested_loops():
    text = ir_of("""
s = 0.0
for i in range(2, n, 4):
    for j in range(i):
        s = s + alpha
store(Y, (0, 0), full((16, 16), s, f32))
""")
    check_order(text, [r"scf.for %\w+ = %c2_i32 to %arg2 step %c4_i32 iter_args\(%\w+ = %cst\) -> \(f32\)",
                       r"scf.for %\w+ = %c0_i32 to %\w+ step %c1_i32 iter_args.* -> \(f32\)",
                       r"arith.addf .* : f32", r"scf.yield", r"scf.yield", r'"tawa.splat"'])


def test_read_before_assign_in_body_is_carried_even_if_dead_after():
    text = ir_of("""
x = zeros((16,), f32)
for i in range(n):
    x = x + 1.0
""")
    assert "iter_args" in text


def test_dynamic_if_yields_assigned_values():
    text = ir_of("""
x = zeros((16,), f32)
y = 1
pid = program_id(0)
if pid < n:
    x = x + alpha
    y = 2
else:
    z = 5                              # one branch only, never read: no result
store(X, (pid, 0), x[None, :] * y)
""")
    check_order(text, [r"arith.cmpi slt", r"scf.if %\w+ -> \(tensor<16xf32>, i32\)", r"arith.addf",
                       r"scf.yield %\w+, %c2_i32", r"\} else \{", r"scf.yield %\w+, %c1_i32"])


def test_if_defining_in_both_branches():
    text = ir_of("""
pid = program_id(0)
if pid == 0:
    v = alpha
elif pid == 1:
    v = 2.0
else:
    v = alpha * alpha
store(X, (0, 0), full((16, 16), v, f32))
""")
    assert count(text, r"scf.if") == 2
    check_order(text, [r"scf.if .* -> \(f32\)", r"scf.if .* -> \(f32\)"])


def test_if_on_constant_is_resolved_at_compile_time():
    body = """
x = zeros((16, 16), f32)
if FLAG and n > 0:
    x = x + 1.0
else:
    x = x - 1.0
store(X, (0, 0), x)
"""
    params = "X: f32[M, N], n: i32, FLAG: const = 0"
    off = ir_of(body, params)
    check_not(off, [r"scf.if", r"arith.addf"])
    assert "arith.subf" in off
    on = ir_of(body, params, FLAG=1)
    assert "scf.if" in on and "arith.addf" in on and "arith.subf" in on


def test_broadcasting_and_splat():
    text = ir_of("""
r = arange(0, 64)
c = arange(0, 32)
m = r[:, None] < c[None, :]
t = where(m, 1.0, alpha)
store(Y, (0, 0), t + r[:, None].to(f32))
""")
    check_order(text, [r'"tawa.expand_dims".*\{axis = 1 : i32\}.*-> tensor<64x1xi32>',
                       r'"tawa.expand_dims".*\{axis = 0 : i32\}.*-> tensor<1x32xi32>',
                       r'"tawa.broadcast".*-> tensor<64x32xi32>', r'"tawa.broadcast".*-> tensor<64x32xi32>',
                       r"arith.cmpi slt, .* : tensor<64x32xi32>", r'"tawa.splat"\(%arg3\)',
                       r"arith.select .* : tensor<64x32xi1>, tensor<64x32xf32>",
                       r"arith.sitofp .* tensor<64x1xi32> to tensor<64x1xf32>",
                       r'"tawa.broadcast".*tensor<64x1xf32>.*-> tensor<64x32xf32>', r"arith.addf"])


def test_numpy_style_rank_promotion():
    text = ir_of("""
a = zeros((8, 16), f32)
b = zeros((16,), f32)
store(Y, (0, 0), a * b)
""")
    check_order(text, [r'"tawa.expand_dims".*-> tensor<1x16xf32>', r'"tawa.broadcast".*-> tensor<8x16xf32>',
                       r"arith.mulf .* : tensor<8x16xf32>"])


def test_casts():
    text = ir_of("""
x = load(X, (0, 0), (16, 16))
b = x.to(bf16)
h = b.to(f16)
i = x.to(i32)
f = (x > 0.0).to(f32)
store(Y, (0, 0), h.to(f32) + i.to(f32) + f + b.to(f8e5m2).to(f32))
""")
    check_order(text, [r"arith.truncf .* to tensor<16x16xbf16>", r"arith.extf .*bf16> to tensor<16x16xf32>",
                       r"arith.truncf .* to tensor<16x16xf16>", r"arith.fptosi", r"arith.uitofp",
                       r"to tensor<16x16xf8E5M2>"])


def test_reductions_and_scalar_results():
    text = ir_of("""
x = load(X, (0, 0), (16, 32))
rows = sum(x, axis=1)
cols = min(x, 0)
total = max(rows)
store(Y, (0, 0), (rows[:, None] + cols[None, :]) * total)
""")
    check_order(text, [r'kind = "sum".*-> tensor<16xf32>', r'\{axis = 0 : i32, kind = "min"\}.*-> tensor<32xf32>',
                       r'kind = "max".*\(tensor<16xf32>\) -> f32'])


def test_tensor_index_selects_leading_dims():
    text = ir_of("""
z = program_id(2)
q = load(Q[z, 3], (1, 0), (64, 32))
store(Q[z][1], (0, 0), q)
""", params="Q: bf16[Z, H, S, D]")
    check_order(text, [r'"tawa.load"\(%arg0, %\w+, %c3_i32, %c64_i32, %c0_i32\) .* -> tensor<64x32xbf16>',
                       r'"tawa.store"\(%arg0, %\w+, %\w+, %c1_i32, %c0_i32, %c0_i32\)'])


def test_dot_without_acc_and_transposes():
    text = ir_of("""
a = load(X, (0, 0), (64, 32))
b = load(X, (0, 0), (64, 32))
c = dot(a, b.T) + dot(a, trans(b))
store(Y, (0, 0), c)
""")
    assert count(text, r'"tawa.trans"') == 2 and count(text, r'"tawa.dot"') == 2


def test_scalar_arithmetic_folds_and_emits():
    text = ir_of("""
a = 7 // 2 + 7 % 3 + cdiv(10, 4) + min(3, 9) + max(2, 5)     # folds to 3 + 1 + 3 + 3 + 5 = 15
b = n // 4 - n % 4 + cdiv(n, 8)
c = n / 2
d = -n + (n > 3 and n < 9).to(i32)
store(Y, (a, b), full((16, 16), c + d.to(f32) + alpha, f32))
""")
    check_order(text, [r"%c240_i32 = arith.constant 240", r"arith.divsi", r"arith.remsi", r"arith.sitofp",
                       r"arith.divf", r"arith.subi", r"arith.andi", r"arith.extui"])


def test_value_dead_after_loop_may_change_type_inside():
    # x is assigned in the loop but neither read before assignment nor after the loop: not carried, so its
    # type may differ from the value before the loop.
    text = ir_of("""
x = 0
for i in range(n):
    x = load(X, (i, 0), (16, 16))
    store(Y, (i, 0), x * 2.0)
""")
    check_not(text, [r"iter_args"])


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
