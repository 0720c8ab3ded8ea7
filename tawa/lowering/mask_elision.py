"""mask-elision: skip a loop's mask where one scalar test proves it all-true.

Takes: tile IR after `canonicalize`. Gives: every tile `arith.select %mask, %x, %y` inside a loop whose mask is a
conjunction (`&`, possibly expanded or broadcast) of signed comparisons between affine index tiles -- built from
`arange`, splats of i32 scalars, `+`, `-`, `*` by a non-negative constant, `expand_dims` and `broadcast` -- becomes

    %r = scf.if %all_true -> (type) { scf.yield %x }
         else { <the mask's ops used nowhere else>; scf.yield (arith.select %mask, %x, %y) }

where `%all_true` compares the bounds of each comparison's sides in scalar arithmetic (`a < b` holds everywhere
when max(a) < min(b)). The mask's own ops move into the else branch, so a block that needs no mask computes none
of it.

Why: attention masks the keys beyond the sequence end and, when causal, the keys after each query; both masks are
all-true on every key block but the last and the diagonal ones. Computing and applying them costs a compare and a
select per score on every block (a third of the softmax's instructions); FlashAttention-3 writes separate loops
for the masked blocks by hand. Here the plain tile program keeps one loop and the compiler derives the test.
Comparisons whose bounds it cannot derive (other predicates, non-affine indices) keep the select as written.
"""
from __future__ import annotations

from mlir import ir, passmanager
from mlir.dialects import arith, scf

from tawa.ir.kernel_info import kernels
from tawa.ir.ops import BroadcastOp, ExpandDimsOp, SplatOp, ForOp
from tawa.ir.traversal import defining_op, enclosing, users, walk

_RESHAPES = (ExpandDimsOp.NAME, BroadcastOp.NAME)
#: Ops that may move into the else branch with the mask (no side effects, no regions).
_PURE = ("arith.", "tawa.splat", "tawa.arange", "tawa.expand_dims", "tawa.broadcast")


class Bounds:
    """Scalar i32 lower and upper bounds of index tiles, built at one insertion point."""

    def __init__(self):
        self.i32 = ir.IntegerType.get_signless(32)

    def const(self, c: int) -> ir.Value:
        return arith.ConstantOp(self.i32, c).result

    def constant_of(self, value):
        """The integer a value splats everywhere, if it is a compile-time constant."""
        op = defining_op(value)
        if op is None:
            return None
        if op.name == "arith.constant":
            attr = op.attributes["value"]
            if isinstance(attr, ir.IntegerAttr):
                return attr.value
            if isinstance(attr, ir.DenseIntElementsAttr) and attr.is_splat:
                return attr.get_splat_value().value
            return None
        if op.name in (SplatOp.NAME,) + _RESHAPES:
            return self.constant_of(op.operands[0])
        return None

    def of(self, value):
        """(lo, hi) of an i32 index tile or scalar, or None."""
        t = value.type
        elem = t.element_type if isinstance(t, ir.RankedTensorType) else t
        if not (isinstance(elem, ir.IntegerType) and elem.width == 32):
            return None
        c = self.constant_of(value)
        if c is not None:
            v = self.const(c)
            return v, v
        if not isinstance(t, ir.RankedTensorType):
            return value, value                  # any scalar is its own bound
        op = defining_op(value)
        if op is None:
            return None                          # a tile carried by a loop or branch: no static bounds
        name = op.name
        if name == "tawa.arange":
            return self.const(ir.IntegerAttr(op.attributes["start"]).value), \
                self.const(ir.IntegerAttr(op.attributes["end"]).value - 1)
        if name == SplatOp.NAME:
            return self.of(op.operands[0])
        if name in _RESHAPES:
            return self.of(op.operands[0])
        if name in ("arith.addi", "arith.subi", "arith.muli"):
            a, b = op.operands
            if name == "arith.muli":
                for x, y in ((a, b), (b, a)):
                    c = self.constant_of(y)
                    bx = self.of(x) if c is not None and c >= 0 else None
                    if bx is not None:
                        k = self.const(c)
                        return arith.MulIOp(bx[0], k).result, arith.MulIOp(bx[1], k).result
                return None
            ba, bb = self.of(a), self.of(b)
            if ba is None or bb is None:
                return None
            if name == "arith.addi":
                return arith.AddIOp(ba[0], bb[0]).result, arith.AddIOp(ba[1], bb[1]).result
            return arith.SubIOp(ba[0], bb[1]).result, arith.SubIOp(ba[1], bb[0]).result
        return None

    def all_true(self, mask):
        """A scalar i1 that is true only if every element of the i1 tile `mask` is true, or None."""
        op = defining_op(mask)
        if op is None:
            return None
        if op.name in _RESHAPES:
            return self.all_true(op.operands[0])
        if op.name == "arith.andi":
            a, b = (self.all_true(v) for v in op.operands)
            return arith.AndIOp(a, b).result if a is not None and b is not None else None
        if op.name != "arith.cmpi":
            return None
        pred = ir.IntegerAttr(op.attributes["predicate"]).value
        # arith.CmpIPredicate: slt = 2, sle = 3, sgt = 4, sge = 5
        if pred not in (2, 3, 4, 5):
            return None
        ba, bb = self.of(op.operands[0]), self.of(op.operands[1])
        if ba is None or bb is None:
            return None
        if pred in (2, 3):      # a < b (a <= b) everywhere: max(a) < min(b)
            return arith.CmpIOp(pred, ba[1], bb[0]).result
        return arith.CmpIOp(pred, ba[0], bb[1]).result   # a > b (a >= b) everywhere: min(a) > max(b)


def mask_slice(select_op) -> list:
    """The mask's ops in the select's block used only by the select or by each other, in program order."""
    block = select_op.block
    taken = [select_op]
    frontier = [select_op.operands[0]]
    while frontier:
        op = defining_op(frontier.pop())
        if op is None or op.block != block or op in taken or op.regions or len(op.results) != 1 or \
                not op.name.startswith(_PURE):
            continue
        if all(u in taken for u in users(op.results[0])):
            taken.append(op)
            frontier.extend(op.operands)
    return sorted(taken[1:], key=lambda o: _index(block, o))


def _index(block, op) -> int:
    for i, o in enumerate(block.operations):
        if o == op:
            return i
    return -1


def loaded(value) -> bool:
    """Whether a tile is a load's result as it is (or transposed)."""
    op = defining_op(value)
    while op is not None and op.name == "tawa.trans":
        op = defining_op(op.operands[0])
    return op is not None and op.name == "tawa.load"


def _reaches_dot_operand(value, depth: int = 6) -> bool:
    """Whether a tile flows, through elementwise ops and transposes, into the A or B operand of a dot."""
    for use in value.uses:
        owner = use.owner.opview if hasattr(use.owner, "opview") else use.owner
        name = owner.operation.name if hasattr(owner, "operation") else owner.name
        if name == "tawa.dot" and use.operand_number in (0, 1):
            return True
        if depth and (name.startswith(("arith.", "math.")) or name == "tawa.trans") and \
                len(owner.results) == 1 and _reaches_dot_operand(owner.results[0], depth - 1):
            return True
    return False


def elide(select_op) -> bool:
    mask, x, _ = select_op.operands
    if not isinstance(mask.type, ir.RankedTensorType) or enclosing(select_op, (ForOp.NAME,)) is None:
        return False
    # A dot operand loaded and masked (`where(mask, a, 0.0)` before `dot(a, b)`) stays one select: as a branch
    # result, the loaded tile would reach the dot through registers on both paths. `masked-dots` moves the dot
    # itself into the branches where the kernel is warp-specialized.
    if loaded(x) and _reaches_dot_operand(select_op.results[0]):
        return False
    with ir.InsertionPoint(select_op), select_op.location:
        cond = Bounds().all_true(mask)
        if cond is None:
            return False
        result = select_op.results[0]
        branch = scf.IfOp(cond, [result.type], has_else=True)
        result.replace_all_uses_with(branch.results[0])
        with ir.InsertionPoint(branch.then_block):
            scf.YieldOp([x])
        with ir.InsertionPoint(branch.else_block):
            done = scf.YieldOp([result])
    for op in mask_slice(select_op) + [select_op]:
        op.move_before(done)
    return True


def rewrite_each(module, op_name: str, rewrite):
    """`rewrite` (True where it changed the IR) on every op named `op_name` of every kernel, then canonicalize and
    CSE where anything changed (the bounds tests' constants fold): the driver of this pass and `masked-dots`."""
    with module.context:
        changed = 0
        for func in kernels(module):
            changed += sum(rewrite(op) for op in [o for o in walk(func) if o.name == op_name])
        if changed:
            passmanager.PassManager.parse("builtin.module(canonicalize, cse)").run(module.operation)
    return module


def run(module, options):
    return rewrite_each(module, "arith.select", elide)
