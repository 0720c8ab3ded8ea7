"""loop-guards: a loop whose whole body runs under a bound on its index loops over that range instead.

Takes: tile IR after `canonicalize`. Gives: every `scf.for %i = %lb to %ub step 1` whose body is side-effect-free
scalar code followed by

    %r = scf.if %cond { <body> } else { scf.yield <the loop's iteration arguments, unchanged> }
    scf.yield %r

where `%cond` is a comparison (or a conjunction `&` of comparisons) between `a * %i + b` and a value the loop does
not change (`a` a constant, `b` loop invariant), becomes

    scf.for %i = max(%lb, <first index that passes>) to min(%ub, <last index that passes> + 1) step 1 { <body> }

Why: skipping work with an `if` inside the loop is how a Triton user writes causal attention
(`if j * BLOCK_N < (pid_m + 1) * BLOCK_M:`) or a block-sparse K loop (`if k < kmax:`). The condition holds on one
contiguous run of iterations, so the skipped ones are simply outside the loop. With the bound in the loop, the
kernel is the one the rest of the compiler schedules best: warp specialization applies (its producer must issue
the same loads on every iteration it runs, which a conditional load breaks), the loop length depends on the
program id as it does in `flash_attention.tawa` (`launch-order`, dynamic tiles), and no iteration waits for
operands it will not use. A condition of any other form keeps the `if` (the uniform-warp pipeline then loads the
operands of every iteration ahead and computes only where the condition holds).

The new bounds are computed in 64 bits from the condition's i32 terms and clamped into i32, so a sentinel such as
`kmax = 2**31 - 1` does not wrap; like LLVM's loop analyses, the pass takes `a * i + b` itself not to wrap in i32
(a program whose index arithmetic wraps is not given the same iterations).
"""
from __future__ import annotations

from mlir import ir, passmanager
from mlir.dialects import arith

from tawa.ir.kernel_info import kernels
from tawa.ir.ops import ForOp
from tawa.ir.traversal import defining_op, int_constant, is_ancestor, ops_of, walk
from tawa.lowering.canonicalize import erase_dead_pure_ops

#: Ops that may precede the guarded `if` in the body: no side effects, so running them on fewer iterations changes
#: nothing.
_PURE_PREFIXES = ("arith.", "math.", "tawa.splat", "tawa.arange", "tawa.expand_dims", "tawa.broadcast",
                  "tawa.dim", "tawa.program_id", "tawa.num_programs")
#: Scalars fixed for the whole launch, whatever the iteration.
_LAUNCH_SCALARS = ("tawa.program_id", "tawa.num_programs", "tawa.dim")
#: cmpi predicates (as MLIR numbers them) and the strict form each reduces to: (swap operands, add 1 to the side
#: that must be larger). slt: L < R; sle: L < R + 1; sgt: R < L; sge: R < L + 1.
_PREDICATES = {int(arith.CmpIPredicate.slt): (False, False), int(arith.CmpIPredicate.sle): (False, True),
               int(arith.CmpIPredicate.sgt): (True, False), int(arith.CmpIPredicate.sge): (True, True)}


def run(module, options=None):
    with module.context:
        for func in kernels(module):
            loops = [op for op in walk(func) if op.name == ForOp.NAME]
            # (repeatedly: `if j < e: if j >= s: ...` narrows twice)
            if any([_narrow_all(loop) for loop in loops]):
                erase_dead_pure_ops(func)       # the conditions' own code is dead now
                passmanager.PassManager.parse("builtin.module(canonicalize, cse)").run(module.operation)
    return module


class _Affine:
    """`a * iv + b`: `a` an int, `b` a list of (sign, loop-invariant i32 value) and an int."""

    def __init__(self, a=0, terms=(), c=0):
        self.a, self.terms, self.c = a, list(terms), c

    def __add__(self, o):
        return _Affine(self.a + o.a, self.terms + o.terms, self.c + o.c)

    def scaled(self, k: int):
        if k == 1:
            return self
        if k == -1 or not self.terms:
            return _Affine(self.a * k, [(s * k, v) for s, v in self.terms], self.c * k)
        return None          # k * (invariant value): kept only for k = +-1 (no products to build)


def _inside(value, loop) -> bool:
    """Whether `value` is defined in the loop (its body's arguments included)."""
    owner = value.owner.owner if isinstance(value, ir.BlockArgument) else value.owner
    return owner == loop or is_ancestor(loop, owner)


def _invariant(value, loop, depth=0) -> bool:
    """Whether `value` is the same on every iteration: defined outside the loop, or by scalar arithmetic in its body
    of such values (`_hoisted` computes it before the loop)."""
    if not _inside(value, loop):
        return True
    op = defining_op(value)
    return op is not None and op.name.startswith(("arith.",) + _LAUNCH_SCALARS) and not op.regions and \
        depth < 16 and op.block == ForOp(loop).body and all(_invariant(v, loop, depth + 1) for v in op.operands)


def _hoisted(value, loop, done: dict):
    """An invariant `value` computed before the loop (its ops in the body cloned there, once)."""
    if not _inside(value, loop):
        return value
    if value not in done:
        op = defining_op(value)
        operands = [_hoisted(v, loop, done) for v in op.operands]
        clone = op.clone(ir.InsertionPoint(loop))
        for i, v in enumerate(operands):
            clone.operands[i] = v
        for r, c in zip(op.results, clone.results):
            done[r] = c
    return done[value]


def _affine(value, loop, depth=0):
    """`value` as an `_Affine` of the loop's index, or None."""
    body = ForOp(loop).body
    if value == ForOp(loop).iv:
        return _Affine(a=1)
    c = int_constant(value)
    if c is not None:
        return _Affine(c=c)
    if _invariant(value, loop):
        return _Affine(terms=[(1, value)])          # the same on every iteration
    owner = defining_op(value)
    if owner is None or depth > 16 or not isinstance(value.type, ir.IntegerType) or owner.block != body:
        return None                                 # an iteration argument, or not scalar code of the body
    x = [_affine(v, loop, depth + 1) for v in owner.operands]
    if any(t is None for t in x):
        return None
    if owner.name == "arith.addi":
        return x[0] + x[1]
    if owner.name == "arith.subi":
        neg = x[1].scaled(-1)
        return None if neg is None else x[0] + neg
    if owner.name == "arith.muli":
        for i in (0, 1):
            k = int_constant(owner.operands[1 - i])
            if k is not None:
                return x[i].scaled(k)
    return None


def _guards(cond, loop):
    """[(A, B)] with the condition equivalent to `A * iv < B` for all of them (B an `_Affine` without iv), or
    None."""
    op = defining_op(cond)
    if op is None or op.block != ForOp(loop).body:
        return None
    if op.name == "arith.andi":
        parts = [_guards(v, loop) for v in op.operands]
        return None if any(p is None for p in parts) else parts[0] + parts[1]
    if op.name != "arith.cmpi" or not isinstance(op.operands[0].type, ir.IntegerType):
        return None
    pred = ir.IntegerAttr(op.attributes["predicate"]).value
    if pred not in _PREDICATES:
        return None
    swap, inclusive = _PREDICATES[pred]
    lhs, rhs = (_affine(v, loop) for v in op.operands)
    if lhs is None or rhs is None:
        return None
    if swap:
        lhs, rhs = rhs, lhs
    # lhs < rhs (+ 1): (a_l - a_r) iv < (b_r - b_l) (+ 1)
    neg = lhs.scaled(-1)
    if neg is None:
        return None
    diff = rhs + neg
    a = -diff.a
    if a == 0:
        return None          # no bound on the index
    return [(a, _Affine(terms=diff.terms, c=diff.c + (1 if inclusive else 0)))]


def _build(b: _Affine, i64, loop, done: dict):
    """The value of an iv-free `_Affine` in 64 bits (its i32 terms sign-extended: no sum or product of them can
    wrap), built before the loop."""
    total = arith.ConstantOp(i64, b.c).result
    for sign, v in b.terms:
        v = arith.ExtSIOp(i64, _hoisted(v, loop, done)).result
        total = arith.AddIOp(total, v).result if sign > 0 else arith.SubIOp(total, v).result
    return total


def _floordiv(x, d: int):
    """floor(x / d) for a constant d > 0 (arith.divsi truncates toward zero)."""
    cd = arith.ConstantOp(x.type, d).result
    q = arith.DivSIOp(x, cd).result
    r = arith.RemSIOp(x, cd).result
    zero = arith.ConstantOp(x.type, 0).result
    fix = arith.AndIOp(arith.CmpIOp(arith.CmpIPredicate.ne, r, zero).result,
                       arith.CmpIOp(arith.CmpIPredicate.slt, x, zero).result).result
    return arith.SubIOp(q, arith.ExtUIOp(x.type, fix).result).result


def _to_i32(x, i32):
    """A 64-bit bound clamped into i32 (the index never leaves it, so the iterations are the same) and cut."""
    lo, hi = (arith.ConstantOp(x.type, v).result for v in (-2 ** 31, 2 ** 31 - 1))
    return arith.TruncIOp(i32, arith.MaxSIOp(arith.MinSIOp(x, hi).result, lo).result).result


def _narrow_all(loop) -> bool:
    narrowed = False
    while _narrow(loop):
        narrowed = True
    return narrowed


def _narrow(loop) -> bool:
    f = ForOp(loop)
    if int_constant(f.step) != 1 or f.iv.type != ir.IntegerType.get_signless(32):
        return False          # (the frontend's loops count in i32; the bounds are computed in i64 and clamped)
    ops = ops_of(f.body)
    if len(ops) < 2 or ops[-2].name != "scf.if" or ops[-1].name != "scf.yield":
        return False
    guard, yield_op = ops[-2], ops[-1]
    if any(not op.name.startswith(_PURE_PREFIXES) or op.regions for op in ops[:-2]):
        return False
    # the loop yields the if's results, and its else branch the iteration arguments, unchanged
    if list(yield_op.operands) != list(guard.results) or len(guard.regions) != 2:
        return False
    else_blocks = list(guard.regions[1].blocks)
    if else_blocks:
        else_ops = ops_of(else_blocks[0])
        if len(else_ops) != 1 or list(else_ops[0].operands) != list(f.iter_args):
            return False
    elif f.iter_args:
        return False
    guards = _guards(guard.operands[0], loop)
    if not guards:
        return False
    i32, i64 = f.iv.type, ir.IntegerType.get_signless(64)
    with ir.InsertionPoint(loop), loop.location:
        lb, ub = f.lower, f.upper
        wide_lb = wide_ub = None
        done = {}
        for a, rhs in guards:
            bound = _build(rhs, i64, loop, done)
            if a > 0:          # a iv < B  <=>  iv < ceil(B / a) = floor((B + a - 1) / a)
                top = arith.AddIOp(bound, arith.ConstantOp(i64, a - 1).result).result
                start = int_constant(lb)
                if start is not None and start >= 0:
                    # (truncating division: where B <= 0 it gives at most 0 and no index >= lb >= 0 passes, as
                    # with the floor; kept plain so that `launch-order` reads the bound's direction)
                    end = arith.DivSIOp(top, arith.ConstantOp(i64, a).result).result
                else:
                    end = _floordiv(top, a)
                wide_ub = arith.MinSIOp(wide_ub if wide_ub is not None else arith.ExtSIOp(i64, ub).result,
                                        end).result
            else:              # -|a| iv < B  <=>  iv > -B / |a|  <=>  iv >= floor(-B / |a|) + 1
                neg = arith.SubIOp(arith.ConstantOp(i64, 0).result, bound).result
                start = arith.AddIOp(_floordiv(neg, -a), arith.ConstantOp(i64, 1).result).result
                wide_lb = arith.MaxSIOp(wide_lb if wide_lb is not None else arith.ExtSIOp(i64, lb).result,
                                        start).result
        if wide_lb is not None:
            lb = _to_i32(wide_lb, i32)
        if wide_ub is not None:
            ub = _to_i32(wide_ub, i32)
    loop.operands[0] = lb
    loop.operands[1] = ub
    then = ops_of(guard.regions[0].blocks[0])
    for op in then[:-1]:
        op.move_before(guard)
    for r, v in zip(guard.results, then[-1].operands):
        r.replace_all_uses_with(v)
    guard.erase()
    return True
