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


def _masked_operand(dot, operand: int):
    """The `arith.select` of a loaded tile that is the dot's A or B operand, directly or through one `tawa.trans`
    (`where(mask, x, 0.0).T`, as a load through a view that ends gives `x.T`), used by nothing else, in the dot's
    block, with that transpose or None; None where there is none."""
    op = defining_op(dot.operands[operand])
    trans = None
    if op is not None and op.name == TransOp.NAME and op.block == dot.block and \
            len(list(op.results[0].uses)) == 1:
        trans, op = op, defining_op(op.operands[0])
    if op is None or op.name != "arith.select" or op.block != dot.block:
        return None
    mask, x, _ = op.operands
    if not isinstance(mask.type, ir.RankedTensorType) or not loaded(x) or len(list(op.results[0].uses)) != 1:
        return None
    return op, trans


def branch(dot) -> bool:
    """Rewrite a dot on masked loaded tiles (the module docstring; A, B or both, under the conjunction of their
    tests); False where neither operand is one."""
    if enclosing(dot, (ForOp.NAME,)) is None:
        return False
    found = {i: m for i in (0, 1) for m in [_masked_operand(dot, i)] if m is not None}
    if not found:
        return False
    selects = {i: sel for i, (sel, _) in found.items()}
    with ir.InsertionPoint(dot), dot.location:
        bounds = Bounds()
        tests = {i: bounds.all_true(sel.operands[0]) for i, sel in selects.items()}
        selects = {i: sel for i, sel in selects.items() if tests[i] is not None}
        if not selects:
            return False
        cond = None
        for i in selects:
            cond = tests[i] if cond is None else arith.AndIOp(cond, tests[i]).result
        test = scf.IfOp(cond, [r.type for r in dot.results], has_else=True)
        for r, b in zip(dot.results, test.results):
            r.replace_all_uses_with(b)
        with ir.InsertionPoint(test.then_block):
            operands = {}
            for i, sel in selects.items():
                trans = found[i][1]
                operands[i] = sel.operands[1] if trans is None else ir.Operation.create(
                    TransOp.NAME, results=[trans.results[0].type], operands=[sel.operands[1]]).results[0]
            plain = dot.clone()
            for i, v in operands.items():
                plain.operands[i] = v
            scf.YieldOp(list(plain.results))
        with ir.InsertionPoint(test.else_block):
            done = scf.YieldOp(list(dot.results))
    # (the tests were built first: a scalar they read stays outside the branch, `mask_slice` seeing its new user)
    moved = [op for i, sel in selects.items() for op in mask_slice(sel) + [sel] + [t for t in [found[i][1]] if t]]
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
            op = defining_op(dot.operands[i])
            while op is not None and op.name == TransOp.NAME:
                op = defining_op(op.operands[0])
            if op is None or op.name != "arith.select" or not loaded(op.operands[1]):
                continue
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
