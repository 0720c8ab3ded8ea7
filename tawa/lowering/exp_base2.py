"""exp-base2: an exponential of a difference against a row (or scalar) becomes a base-2 exponential of one FMA.

Takes: tile IR after `lazy-rescale`. Gives: every f32 `math.exp(a - b)` whose subtrahend `b` is a broadcast row or
column, or a splat -- the online softmax's `exp(s - m_new[:, None])`, a row softmax's `exp(x - max(x)[:, None])`
-- becomes

    math.exp2(a * LOG2E - b')        with b' = b * LOG2E computed before its broadcast (once per row)

and where `a` is itself a tile times a splatted scalar (`s = dot(q, k.T) * sm_scale`), `a * LOG2E` becomes that
tile times `sm_scale * LOG2E` (one scalar multiply). Other exponentials keep `exp`; `a` keeps its other readers
(the row maximum reads `s`).

Why: the GPU computes `exp(x)` as `ex2.approx(x * LOG2E)`. Written as a user writes attention or a softmax, each
score then costs a subtract and a multiply before the MUFU instruction; after the rewrite the multiply and the
subtract contract into one FMA (f32 `*` and `-` may contract, docs/language.md), as in FlashAttention's and
Triton's hand-written `exp2(qk * qk_scale - m)`. At 128x128 key blocks that is one instruction of each score's
four or five, in a loop bound by issue slots and the MUFU units. Results differ from `exp` by the rounding of
`LOG2E` products (a few ulp of the exponent, below `ex2.approx`'s own error), so the pass runs for the GPU only;
the interpreter keeps `exp` as written.
"""
from __future__ import annotations

import math

from mlir import ir
from mlir.dialects import arith

from tawa.ir.traversal import defining_op

from .row_values import (f32_like, is_f32_tile, map_at_source_rank, repeats, replace_op, rewrite_each, splat,
                         splatted_f32)

LOG2E = 1.0 / math.log(2.0)


def _times_log2e(value: ir.Value) -> ir.Value:
    """value * LOG2E, of a scalar or a tile."""
    return arith.MulFOp(value, f32_like(value, LOG2E)).result


def _scaled_tile(a: ir.Value) -> ir.Value:
    """a * LOG2E; a tile times a splatted scalar folds LOG2E into the scalar."""
    op = defining_op(a)
    if op is not None and op.name == "arith.mulf":
        for i in (0, 1):
            scalar = splatted_f32(op.operands[i])
            if scalar is not None:
                return arith.MulFOp(op.operands[1 - i], splat(_times_log2e(scalar), a.type)).result
    return _times_log2e(a)


def _rewrite(exp) -> bool:
    x = exp.operands[0]
    sub = defining_op(x)
    if sub is None or sub.name != "arith.subf" or not is_f32_tile(x) or not repeats(sub.operands[1]):
        return False
    with ir.InsertionPoint(exp), exp.location:
        row = map_at_source_rank(sub.operands[1], _times_log2e, _times_log2e)
        shifted = arith.SubFOp(_scaled_tile(sub.operands[0]), row).result
        exp2 = ir.Operation.create("math.exp2", results=[exp.results[0].type], operands=[shifted])
    replace_op(exp, exp2.results[0], x)
    return True


def run(module, options):
    return rewrite_each(module, "math.exp", _rewrite)
