"""Compile-time expressions outside the kernel body: `const` defaults, the `@grid(...)` launch grid and the
`@requires(...)` launch conditions.

`evaluate` folds an expression over constants to a Python value. `render_grid` turns a grid expression into the
Python-syntax string stored in `tawa.grid`: constants are folded in, shape symbols stay as names, and only
`+ - * // %`, `cdiv`, `min`, `max` and integers remain, which is what the runtime's small evaluator accepts.
`render_requirement` renders a comparison of two such expressions for `tawa.requires`.
"""
from __future__ import annotations

from . import syntax as S
from .dtypes import DTYPES, DType

_NAMED = {"True": True, "False": False}


def _trunc_div(a, b):
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _apply(op, a, b):
    if op == "+": return a + b
    if op == "-": return a - b
    if op == "*": return a * b
    if op == "/": return a / b
    if op == "//": return _trunc_div(a, b)
    if op == "%": return a - b * _trunc_div(a, b)
    if op == "and": return bool(a) and bool(b)
    if op == "or": return bool(a) or bool(b)
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}[op]


def evaluate(e, constants: dict, diag, what: str):
    """Fold `e` to a Python value (int, float, bool or DType) using `constants`."""
    if isinstance(e, S.Num):
        return e.value
    if isinstance(e, S.Name):
        if e.id in constants:
            return constants[e.id]
        if e.id in _NAMED:
            return _NAMED[e.id]
        if e.id in DTYPES:
            return DTYPES[e.id]
        raise diag.error(e, f"{what}: '{e.id}' is not a compile-time constant")
    if isinstance(e, S.UnaryOp):
        v = evaluate(e.operand, constants, diag, what)
        if isinstance(v, DType):
            raise diag.error(e, f"{what}: '{e.op}' on a dtype")
        return (not v) if e.op == "not" else -v
    if isinstance(e, S.BinOp) and e.op not in ("&", "|"):
        a = evaluate(e.left, constants, diag, what)
        b = evaluate(e.right, constants, diag, what)
        if isinstance(a, DType) or isinstance(b, DType):
            raise diag.error(e, f"{what}: '{e.op}' on a dtype")
        try:
            return _apply(e.op, a, b)
        except ZeroDivisionError:
            raise diag.error(e, f"{what}: division by zero") from None
    if isinstance(e, S.Call) and isinstance(e.func, S.Name) and e.func.id in ("cdiv", "min", "max") and not e.kwargs:
        args = [evaluate(a, constants, diag, what) for a in e.args]
        if len(args) != 2:
            raise diag.error(e, f"{e.func.id} takes 2 arguments, got {len(args)}")
        if any(isinstance(a, DType) for a in args):
            raise diag.error(e, f"{what}: '{e.func.id}' of a dtype")
        if e.func.id == "cdiv":
            if args[1] == 0:
                raise diag.error(e, f"{what}: division by zero")
            return -(-args[0] // args[1])
        return min(args) if e.func.id == "min" else max(args)
    raise diag.error(e, f"{what}: not a compile-time expression")


def render_grid(e, symbols: set, constants: dict, diag, what: str = "grid") -> str:
    """The `tawa.grid` string for one grid expression (see the module docstring); `what` names the construct in
    errors (`@requires` renders its sides here too)."""
    def r(e) -> tuple:      # (text, precedence, folded value or None)
        if isinstance(e, S.Num):
            if isinstance(e.value, float):
                raise diag.error(e, f"{what}: expressions must be integers")
            return str(e.value), 9, e.value
        if isinstance(e, S.Name):
            if e.id in constants:
                v = constants[e.id]
                if isinstance(v, (DType, float)):
                    raise diag.error(e, f"{what}: constant '{e.id}' is not an integer")
                return str(int(v)), 9, int(v)
            if e.id in symbols:
                return e.id, 9, None
            raise diag.error(e, f"{what}: '{e.id}' is not a shape symbol or constant",
                             note=f"the {what} may use tensor shape symbols, constants, cdiv, min and max")
        if isinstance(e, S.BinOp) and e.op in ("+", "-", "*", "//", "%"):
            prec = 1 if e.op in "+-" else 2
            (lt, lp, lv), (rt, rp, rv) = r(e.left), r(e.right)
            if lv is not None and rv is not None:
                if e.op in ("//", "%") and rv == 0:
                    raise diag.error(e, f"{what}: division by zero")
                v = _apply(e.op, lv, rv)
                return str(v), 9, v
            lt = f"({lt})" if lp < prec else lt
            rt = f"({rt})" if rp <= prec else rt
            return f"{lt} {e.op} {rt}", prec, None
        if isinstance(e, S.UnaryOp) and e.op == "-":
            t, p, v = r(e.operand)
            if v is not None:
                return str(-v), 9, -v
            return f"-({t})", 9, None
        if isinstance(e, S.Call) and isinstance(e.func, S.Name) and e.func.id in ("cdiv", "min", "max"):
            if e.kwargs or len(e.args) != 2:
                raise diag.error(e, f"{e.func.id} takes 2 arguments, got {len(e.args) + len(e.kwargs)}")
            parts = [r(a) for a in e.args]
            if all(p[2] is not None for p in parts):
                a, b = parts[0][2], parts[1][2]
                if e.func.id == "cdiv":
                    if b == 0:
                        raise diag.error(e, f"{what}: division by zero")
                    v = -(-a // b)
                else:
                    v = min(a, b) if e.func.id == "min" else max(a, b)
                return str(v), 9, v
            return f"{e.func.id}({parts[0][0]}, {parts[1][0]})", 9, None
        raise diag.error(e, f"{what}: unsupported expression",
                         note=f"the {what} may use tensor shape symbols, constants, + - * // %, cdiv, min and max")
    return r(e)[0]


#: The comparisons `@requires` takes, and what each means on two integers.
COMPARISONS = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
               ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}


def render_requirement(e, symbols: set, constants: dict, diag) -> str | None:
    """The `tawa.requires` string for one `@requires` condition (`N <= BLOCK_N` -> "N <= 1024"), checked at
    every launch; None where the constants alone decide it and it holds (an error where it does not)."""
    if not (isinstance(e, S.BinOp) and e.op in COMPARISONS):
        raise diag.error(e, "@requires: each condition is one comparison of two integer expressions",
                         note="for example @requires(N <= BLOCK_N, K % 8 == 0); give several conditions as "
                              "several arguments")
    left = render_grid(e.left, symbols, constants, diag, "@requires")
    right = render_grid(e.right, symbols, constants, diag, "@requires")
    if _is_int(left) and _is_int(right):
        if not COMPARISONS[e.op](int(left), int(right)):
            raise diag.error(e, f"@requires: the condition fails for these constants ({left} {e.op} {right})")
        return None
    return f"{left} {e.op} {right}"


def _is_int(text: str) -> bool:
    return text.lstrip("-").isdigit()
