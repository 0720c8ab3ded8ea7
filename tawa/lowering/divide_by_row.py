"""divide-by-row: a tile divided by a row, a column or a scalar is multiplied by its reciprocal, taken once per row.

Takes: tile IR (after `exp-base2`). Gives: every f32 `arith.divf(a, b)` on tiles whose divisor `b` repeats along
rows or columns (`acc / l_i[:, None]`, `x / sum(x, axis=1)[:, None]`, `s / cap`) becomes

    arith.mulf(a, b')       with b' = 1.0 / b computed before b's broadcast (one division per row, or one scalar)

Why: the GPU divides f32 with `div.full.f32`, which ptxas expands to a reciprocal and two or three multiplies per
element (a range check scales large divisors); dividing every element of a tile by the same few values repeats that
work per element. After the rewrite each element costs one multiply. The result differs from `a / b` by the
rounding of the reciprocal (about an ulp; `div.full` is itself within two), and by more for divisors beyond 2^126
in magnitude, whose reciprocal is subnormal and flushed to zero (a softmax's row sum, at most the keys times 2^8,
is far from it), so the pass runs for the GPU only, and the interpreter divides as written.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith

from .row_values import f32_like, is_f32_tile, map_at_source_rank, repeats, replace_op, rewrite_each


def _reciprocal(value: ir.Value) -> ir.Value:
    """1.0 / value, of a scalar or a tile."""
    return arith.DivFOp(f32_like(value, 1.0), value).result


def _rewrite(div) -> bool:
    a, b = div.operands
    if not is_f32_tile(div.results[0]) or not repeats(b):
        return False
    with ir.InsertionPoint(div), div.location:
        product = arith.MulFOp(a, map_at_source_rank(b, _reciprocal, _reciprocal))
    replace_op(div, product.result, b)
    return True


def run(module, options):
    return rewrite_each(module, "arith.divf", _rewrite)
