"""masked-dots: a dot on a masked loaded tile runs on the tile as loaded wherever one scalar test proves the mask
all-true.

Takes: tile IR after `mask-elision` (which leaves such selects as they are) in a kernel that will be
warp-specialized. Gives: every `dot(where(mask, a, 0.0), b, acc)` in a loop, where `a` is a loaded tile and the
select's only user is the dot (as its A or B operand; both masked, under the conjunction of their tests), rewritten
as

    %r = scf.if %all_true -> (acc type) {
      scf.yield (tawa.dot %a, %b, %acc)                 the loaded tile, read by wgmma from shared memory
    } else {
      <the mask's ops>; scf.yield (tawa.dot (arith.select %mask, %a, %zero), %b, %acc)
    }

with `%all_true` the scalar bounds test of `mask-elision` (`a < b` everywhere when max(a) < min(b)).

Why: a masked operand is computed in registers, so every k-step copies the tile out of its ring slot, selects,
and stages it back to shared memory behind a barrier of the consumer warp groups, though the mask cuts only the
last K block of a GEMM whose K comes from memory, the diagonal blocks of a triangular A, or the rows past a bound
of B. Measured (H200, docs/performance.md): a batched GEMM with a K per batch ran 501 TFLOP/s before and 619
after, a GEMM with B's rows masked 343 and 537. The ring slot stays valid in both branches: the consumer releases
it after the `if`, once the dot has completed. The uniform-warp schedule keeps the select (its software pipeline
runs the loop's dots in flight, which a dot inside a branch is not; a GEMM with B masked ran 5% slower with the
branch), and so does a mask that the bounds test cannot read.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, scf

from tawa.ir.ops import DotOp, ForOp, TransOp
from tawa.ir.location import where
from tawa.ir.traversal import defining_op, enclosing, walk
from tawa.lowering.mask_elision import Bounds, loaded, mask_slice, rewrite_each


def _masked_load(value):
    """(the `arith.select` of a loaded tile that `value` is, directly or through one `tawa.trans`
    (`where(mask, x, 0.0).T`, as a load through a view that ends gives `x.T`), that transpose or None), or None."""
    op = defining_op(value)
    trans = None
    if op is not None and op.name == TransOp.NAME:
        trans, op = op, defining_op(op.operands[0])
    if op is None or op.name != "arith.select" or not loaded(op.operands[1]):
        return None
    return op, trans


def _masked_operand(dot, operand: int):
    """`_masked_load` of the dot's A or B operand where the mask is a tile and the select (and transpose) sit in
    the dot's block and nothing else uses them, else None."""
    found = _masked_load(dot.operands[operand])
    if found is None or not isinstance(found[0].operands[0].type, ir.RankedTensorType) or \
            any(op is not None and (op.block != dot.block or len(list(op.results[0].uses)) != 1) for op in found):
        return None
    return found


def branch(dot) -> bool:
    """Rewrite a dot on masked loaded tiles (the module docstring; A, B or both, under the conjunction of their
    tests); False where neither operand is one."""
    if enclosing(dot, (ForOp.NAME,)) is None:
        return False
    found = {i: m for i in (0, 1) for m in [_masked_operand(dot, i)] if m is not None}
    if not found:
        return False
    with ir.InsertionPoint(dot), dot.location:
        bounds = Bounds()
        tests = {i: bounds.all_true(sel.operands[0]) for i, (sel, _) in found.items()}
        found = {i: m for i, m in found.items() if tests[i] is not None}
        if not found:
            return False
        cond = None
        for i in found:
            cond = tests[i] if cond is None else arith.AndIOp(cond, tests[i]).result
        test = scf.IfOp(cond, [r.type for r in dot.results], has_else=True)
        for r, b in zip(dot.results, test.results):
            r.replace_all_uses_with(b)
        with ir.InsertionPoint(test.then_block):
            # the loaded tiles themselves (transposed again where the mask was)
            operands = {i: sel.operands[1] if trans is None else ir.Operation.create(
                TransOp.NAME, results=[trans.results[0].type], operands=[sel.operands[1]]).results[0]
                for i, (sel, trans) in found.items()}
            plain = dot.clone()
            for i, v in operands.items():
                plain.operands[i] = v
            scf.YieldOp(list(plain.results))
        with ir.InsertionPoint(test.else_block):
            done = scf.YieldOp(list(dot.results))
    # (the tests were built first: a scalar they read stays outside the branch, `mask_slice` seeing its new user)
    moved = [op for sel, trans in found.values() for op in mask_slice(sel) + [sel] + ([trans] if trans else [])]
    for op in moved + [dot]:
        op.move_before(done)
    return True


def masked_before_loop_notes(func) -> list:
    """Notes for the dots in a loop whose A or B operand is a loaded tile masked before that loop (`where(mask, q,
    0.0)`, or a load through a view that ends, `Q[h, start:end]`): the tile is computed in registers, and a dot on
    a computed operand completes before the next iteration (20% slower on variable-length attention's query
    block, H200), where the tile as loaded would stay in shared memory with the dot in flight."""
    notes = []
    for dot in (op for op in walk(func) if op.name == DotOp.NAME):
        loop = enclosing(dot, (ForOp.NAME,))
        if loop is None:
            continue
        for i in (DotOp.A, DotOp.B):
            found = _masked_load(dot.operands[i])
            if found is None:
                continue
            op = found[0]
            inner = enclosing(op, (ForOp.NAME,))
            if inner is not None and inner == loop:
                continue        # (masked in the loop: `masked-dots` branches around the mask)
            notes.append(f"the {'AB'[i]} operand of the dot{where(dot)} is a tile masked before the loop{where(op)}: "
                         "it is computed in registers and the dot completes every iteration; where the rows it "
                         "masks are masked later anyway (the scores of keys past a sequence's end), load it "
                         "unmasked (`Q[h, start:]` rather than `Q[h, start:end]`) to keep it in shared memory")
    return notes


def run(module, options):
    return rewrite_each(module, DotOp.NAME, branch)
