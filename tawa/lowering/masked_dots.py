"""masked-dots: a dot on a masked loaded tile runs on the tile as loaded wherever one scalar test proves the mask
all-true.

Takes: tile IR after `mask-elision` (which leaves such selects as they are) in a kernel that will be
warp-specialized. Gives: every `dot(where(mask, a, 0.0), b, acc)` in a loop, where `a` is a loaded tile and the
select's only user is the dot (as its A or B operand), rewritten as

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

from mlir import ir, passmanager
from mlir.dialects import scf

from tawa.ir.kernel_info import kernels
from tawa.ir.ops import DotOp, ForOp
from tawa.ir.traversal import enclosing, walk
from tawa.lowering.mask_elision import Bounds, loaded, mask_slice


def _dot_of(select_op):
    """(the dot in the select's block whose A or B operand is the select's only use, operand index), or None."""
    uses = list(select_op.results[0].uses)
    if len(uses) != 1 or uses[0].operand_number not in (0, 1):
        return None
    owner = uses[0].owner
    owner = owner.operation if hasattr(owner, "operation") else owner
    if owner.name != DotOp.NAME or owner.block != select_op.block:
        return None
    return owner, uses[0].operand_number


def branch(select_op) -> bool:
    """Rewrite one masked dot operand (the module docstring); False where the select is not one."""
    mask, x, _ = select_op.operands
    if not isinstance(mask.type, ir.RankedTensorType) or enclosing(select_op, (ForOp.NAME,)) is None \
            or not loaded(x):
        return False
    found = _dot_of(select_op)
    if found is None:
        return False
    dot, operand = found
    with ir.InsertionPoint(dot), dot.location:
        cond = Bounds().all_true(mask)
        if cond is None:
            return False
        test = scf.IfOp(cond, [r.type for r in dot.results], has_else=True)
        for r, b in zip(dot.results, test.results):
            r.replace_all_uses_with(b)
        with ir.InsertionPoint(test.then_block):
            plain = dot.clone()
            plain.operands[operand] = x
            scf.YieldOp(list(plain.results))
        with ir.InsertionPoint(test.else_block):
            done = scf.YieldOp(list(dot.results))
    for op in mask_slice(select_op) + [select_op, dot]:
        op.move_before(done)
    return True


def run(module, options):
    with module.context:
        changed = 0
        for func in kernels(module):
            changed += sum(branch(op) for op in [o for o in walk(func) if o.name == "arith.select"])
        if changed:       # fold the bounds' constants
            passmanager.PassManager.parse("builtin.module(canonicalize, cse)").run(module.operation)
    return module
