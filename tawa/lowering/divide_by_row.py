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

from tawa.ir.kernel_info import kernels
from tawa.ir.traversal import walk

from .row_values import erase_if_unused, is_f32_tile, map_at_source_rank, repeats, splat


def _reciprocal(value: ir.Value) -> ir.Value:
    """1.0 / value, of a scalar or a tile."""
    one = arith.ConstantOp(ir.F32Type.get(), 1.0).result
    if not isinstance(value.type, ir.F32Type):
        one = splat(one, value.type)
    return arith.DivFOp(one, value).result


def _rewrite(div) -> bool:
    a, b = div.operands
    if not is_f32_tile(div.results[0]) or not repeats(b):
        return False
    with ir.InsertionPoint(div), div.location:
        product = arith.MulFOp(a, map_at_source_rank(b, _reciprocal, _reciprocal))
    div.results[0].replace_all_uses_with(product.result)
    div.erase()
    erase_if_unused(b)
    return True


def run(module, options):
    with module.context:
        for func in kernels(module):
            for op in [o for o in walk(func) if o.name == "arith.divf"]:
                _rewrite(op)
    return module
