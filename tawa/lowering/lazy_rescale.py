"""lazy-rescale: an online softmax keeps its running maximum until it grows by more than a threshold.

Takes: tile IR after `mask-elision`. Gives: in every `scf.for` whose body runs the online-softmax recurrence on a
carried row maximum `m` (a rank-1 f32 iteration argument),

    m_new = maximumf(m, x)              -- yielded as the next m, and used only below
    p     = exp2(e - m_new[:, None])    -- (or exp) any number of such exponentials
    alpha = exp2(m - m_new)             -- used only to multiply carried values: l * alpha, acc * alpha[:, None]

the maximum actually used becomes

    m_used = select(m_new - m > THRESHOLD, m_new, m)
    alpha  = select(m_new - m > THRESHOLD, exp2(m - m_used), 1.0)

and each tile multiply `acc * alpha[:, None]` is marked `tawa.unit_scale_operand` (the index of its alpha
operand). The loop's final `m` must be unused after the loop.

Why: the maximum only keeps the exponentials in range; any value that every scaled quantity (the exponentials,
the row sum l, the accumulator acc) shares cancels in acc / l. Keeping a stale maximum lets the exponentials
reach 2^THRESHOLD at most (256: no overflow in f32, bf16 or f16; e^THRESHOLD for `exp`), and makes alpha exactly 1.0 on most
iterations: after the first key blocks a row's maximum rarely grows by that much. The GPU lowering then skips
the marked multiplies when every alpha a warp holds is 1.0 (a warp vote and a branch), which removes one multiply
per accumulator element and key block (at head dim 128 and 128-key blocks, a sixth of the softmax's
instructions). The decision is per row and exact, so results do not depend on how rows are spread over warps.
This is the conditional rescaling of FlashAttention-4; the program stays as written.

Exponentials rounded to fp8 (fp8 attention's `p.to(f8e4m3)`, whose largest finite value is 448) may grow only to
FP8_GROWTH: the threshold is log(FP8_GROWTH) in the exponential's base (e^8 = 2981 rounded to e4m3 NaN for every
row whose maximum grew by 6.2 to 8 after its first key blocks). Every use of the exponentials is followed (through
math, shape ops, branches' and loops' yields): where they reach a rounding to fp8 or f16 through other math first
(a product or a mask could grow them past the type's range, or hide a rounding), f16 math, or a use the walk does
not know, the pass leaves that loop alone.
"""
from __future__ import annotations

import math

from mlir import ir
from mlir.dialects import arith

from tawa.ir import attrs
from tawa.ir.kernel_info import kernels
from tawa.elements import FP8
from tawa.ir.ops import BroadcastOp, ExpandDimsOp, ForOp, ReduceOp, SplatOp
from tawa.ir.traversal import as_op, defining_op, parent_op, users, walk
from tawa.ir.types import elem_type

#: Growth of the row maximum (in the exponential's units) that forces a rescale: the exponentials stay <= 2^8
#: (or e^8 < 2^12 for `exp`), well inside f16's range.
THRESHOLD = 8.0
#: The most exponentials rounded straight to fp8 may grow to (e4m3's largest finite value is 448).
FP8_GROWTH = 256.0
#: Uses where a grown exponential is safe: reductions and dots compute in f32, a store writes the value as it is
#: (its type is the tensor's: a narrower one is reached through an explicit rounding, which the walk checks); an f16
#: reduction is not safe.
_SAFE_ENDS = ("tawa.reduce", "tawa.dot", "tawa.store")
#: Ops that move values without computing on them.
_SHAPE_OPS = ("tawa.broadcast", "tawa.expand_dims", "tawa.trans")
#: Values followed at most (a loop body's uses; beyond it the loop is left exact).
_WALK_LIMIT = 10000

_EXP = ("math.exp2", "math.exp")
# arith.CmpFPredicate: ogt = 2.
_OGT = 2


def _only_user(value):
    us = users(value)
    return us[0] if len(us) == 1 else None


class _Match:
    """The pieces of one online-softmax recurrence on iteration argument `index` of `loop`."""

    def __init__(self, loop: ForOp, index: int):
        self.loop, self.index = loop, index
        self.m = loop.iter_args[index]
        self.m_new = None
        self.shifts = []        # the ops `e - m_new[:, None]` (m_new's broadcast is operand 1)
        self.alpha_sub = None   # m - m_new
        self.alpha = None       # exp2(m - m_new)
        self.scaled = []        # (mulf, index of alpha's operand) of tile multiplies by alpha[:, None]
        self.exps = set()       # the exponentials' kind: one base for all, or the maximum would not cancel
        self.exp_ops = []       # the exponentials of the scores
        self.fp8_roundings = []  # roundings to fp8 straight from them
        self.threshold = THRESHOLD

    def find(self) -> bool:
        t = self.m.type
        if not (isinstance(t, ir.RankedTensorType) and t.rank == 1 and isinstance(t.element_type, ir.F32Type)):
            return False
        yield_op = self.loop.yield_op
        self.m_new = yield_op.operands[self.index]
        top = defining_op(self.m_new)
        if top is None or top.name not in ("arith.maximumf", "arith.maxnumf") or self.m not in list(top.operands):
            return False
        if users(self.loop.results[self.index]):
            return False                 # the final maximum is read after the loop: it must stay exact
        for use in self.m_new.uses:
            owner = as_op(use.owner)
            if owner == yield_op:
                if use.operand_number != self.index:
                    return False
            elif owner.name == "arith.subf" and use.operand_number == 1 and owner.operands[0] == self.m:
                if self.alpha_sub is not None:
                    return False
                self.alpha_sub = owner
            elif owner.name == ExpandDimsOp.NAME:
                if not self._shift(owner):
                    return False
            else:
                return False
        return bool(self.shifts) and self.alpha_sub is not None and self._alpha() and self._rounding_allows()

    def _rounding_allows(self) -> bool:
        """Whether the exponentials may grow by the threshold everywhere they flow, and the threshold that keeps
        them in range (module docstring). Every use is followed -- through math, shape ops, branches' and loops'
        yields, roundings to bf16 or f16 -- and must end where a grown value is safe: an f32 or bf16 value, a
        reduction or a dot operand (f32 results), a store, or a rounding to fp8 straight from the exponential (the
        threshold capped). f16 reached straight from the exponential takes e^8 but no further math; a rounding
        to fp8 or f16 after other math, or a use of another kind, refuses the loop."""
        base = 2.0 if next(iter(self.exps)) == "math.exp2" else math.e
        seen = []               # (value, direct, f16) already followed; MLIR values compare by identity
        frontier = [(exp.results[0], True, False) for exp in self.exp_ops]
        while frontier:
            item = frontier.pop()
            if item in seen:
                continue
            seen.append(item)
            if len(seen) > _WALK_LIMIT:
                return False
            value, direct, f16 = item
            for use in value.uses:
                user = as_op(use.owner)
                name = user.name
                if name == "arith.truncf":
                    to = elem_type(user.results[0].type)
                    if to in FP8 and direct:
                        self.threshold = min(self.threshold, math.log(FP8_GROWTH, base))
                        self.fp8_roundings.append(user)
                    elif to in FP8 or (to == "f16" and not direct):
                        return False
                    elif to == "f16":
                        frontier.append((user.results[0], False, True))
                    else:
                        frontier.append((user.results[0], False, f16))
                elif name in _SAFE_ENDS and not (f16 and name == "tawa.reduce"):
                    continue                # (an f16 sum could overflow; dots and stores of f16 hold e^8)
                elif name in _SHAPE_OPS:
                    frontier.extend((r, direct, f16) for r in user.results)
                elif name == "scf.yield":
                    parent = parent_op(user)
                    targets = [parent.results[use.operand_number]]
                    if parent.name == ForOp.NAME:
                        targets.append(ForOp(parent).iter_args[use.operand_number])
                    frontier.extend((t, direct, f16) for t in targets)
                elif (name.startswith("arith.") or name.startswith("math.")) and not f16:
                    frontier.extend((r, False, False) for r in user.results)
                else:
                    return False
        return True

    def _shift(self, expand) -> bool:
        """m_new[:, None] broadcast, subtracted from scores that go straight into an exponential."""
        if ExpandDimsOp(expand).axis != 1:
            return False
        for bcast in users(expand.results[0]):
            if bcast.name != BroadcastOp.NAME:
                return False
            for sub in users(bcast.results[0]):
                if sub.name != "arith.subf" or list(sub.operands)[1:] != [bcast.results[0]] or \
                        sub.operands[0] == bcast.results[0]:
                    return False
                exps = users(sub.results[0])
                if not exps or any(u.name not in _EXP for u in exps):
                    return False
                self.exps.update(u.name for u in exps)
                self.exp_ops.extend(exps)
                self.shifts.append(sub)
        return True

    def _alpha(self) -> bool:
        """alpha = exp(m - m_new) multiplies carried values only (the row sum, the accumulator)."""
        exp = _only_user(self.alpha_sub.results[0])
        if exp is None or self.exps != {exp.name}:
            return False
        self.alpha = exp
        carried = set(self.loop.iter_args)
        for use in exp.results[0].uses:
            owner = as_op(use.owner)
            if owner.name == "arith.mulf" and owner.operands[1 - use.operand_number] in carried:
                continue
            if owner.name != ExpandDimsOp.NAME or ExpandDimsOp(owner).axis != 1:
                return False
            for bcast in users(owner.results[0]):
                if bcast.name != BroadcastOp.NAME:
                    return False
                for b_use in bcast.results[0].uses:
                    mul = as_op(b_use.owner)
                    if mul.name != "arith.mulf" or mul.operands[1 - b_use.operand_number] not in carried:
                        return False
                    self.scaled.append((mul, b_use.operand_number))
        return True

    def rewrite(self) -> None:
        top = defining_op(self.m_new)
        t = self.m.type
        with ir.InsertionPoint.after(top), top.location:
            threshold, one = _splat(self.threshold, t), _splat(1.0, t)
            growth = arith.SubFOp(self.m_new, self.m)
            grows = arith.CmpFOp(_OGT, growth.result, threshold).result
            m_used = arith.SelectOp(grows, self.m_new, self.m)
        # Every reader of the maximum (the exponentials' shift, alpha, the next iteration) reads the one in use.
        self.m_new.replace_all_uses_except(m_used.result, [growth.operation, m_used.operation])
        alpha = self.alpha.results[0]
        with ir.InsertionPoint.after(self.alpha), self.alpha.location:
            exact = arith.SelectOp(grows, alpha, one)
        alpha.replace_all_uses_except(exact.result, exact.operation)
        for mul, operand in self.scaled:
            attrs.UNIT_SCALE_OPERAND.set(mul, operand)
        if self._shifts_own_maximum():
            # the exponentials are of scores less a maximum at most `threshold` below theirs: 0 <= p <= 256
            for rounding in self.fp8_roundings:
                attrs.AT_MOST.set(rounding, int(FP8_GROWTH))

    def _shifts_own_maximum(self) -> bool:
        """Whether every exponential's scores are the tile whose row maximum the new maximum takes (`m_new =
        maximum(m, max(e, axis=1))`, `exp(e - m_new[:, None])`), so that they never exceed it."""
        top = defining_op(self.m_new)
        other = [v for v in top.operands if v != self.m]
        reduce = defining_op(other[0]) if len(other) == 1 else None
        if reduce is None or reduce.name != ReduceOp.NAME or ReduceOp(reduce).kind != "max" or \
                ReduceOp(reduce).axis != 1:
            return False
        return all(sub.operands[0] == ReduceOp(reduce).src for sub in self.shifts)


def _splat(value: float, t) -> ir.Value:
    """An f32 tile of type `t` holding `value` everywhere, built as the frontend builds constants."""
    scalar = arith.ConstantOp(ir.F32Type.get(), value).result
    return ir.Operation.create(SplatOp.NAME, results=[t], operands=[scalar]).result


def run(module, options):
    with module.context:
        for func in kernels(module):
            for op in [o for o in walk(func) if o.name == ForOp.NAME]:
                loop = ForOp(op)
                for index in range(len(loop.iter_args)):
                    match = _Match(loop, index)
                    if match.find():
                        match.rewrite()
    return module
