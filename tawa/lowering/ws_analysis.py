"""Can a kernel be warp-specialized, and if not, why not.

Takes: one kernel `func.func` of a tile-level `tawa` module (before aref insertion). Gives: `can_specialize(func)
-> (bool, reason)`, and `plan(func)`: for every loop to pipeline, the loop and its "heavy" loads. Why: the
specialized schedule splits the kernel into a producer warp group that issues the tile loads of a loop and
consumer warp groups that run everything else. That split is only sound when the producer can run the loop on its
own: the loads it issues must depend only on scalar control it can recompute (program ids, loop bounds, the
induction variable, offsets), never on anything the consumers compute. Every construct this module rejects gets
a reason with a source location, so the compiler can fall back to the uniform-warp schedule and say why, instead
of crashing or deadlocking.

A load is heavy when its tile reaches an `a`/`b` operand of a `tawa.dot` (directly or through a transpose,
conversion or elementwise op). Supported shape: heavy loads lie directly in the body of an `scf.for` that lies
directly in the kernel body, or in `scf.for` loops the program writes around it (a batch loop, a persistent tile
loop written by hand: the producer runs them too) and `scf.if`s (a block past a sequence's end skips its loop: the
producer takes the same branch); their offsets, the loop bounds and those conditions are replicable scalar control
(induction variables of those loops included, never values they carry; scalars read from tensors the kernel never
writes, `scalar-loads`); the loaded tiles are not carried to the next iteration.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from mlir import ir

from tawa.ir.kernel_info import body_block
from tawa.ir.location import source_location, where
from tawa.ir.ops import ForOp, LoadOp, warp_group_role
from tawa.ir.traversal import defining_op, is_ancestor, ops_of, parent_op, walk
from tawa.ir.types import is_tile
from tawa import hopper
from tawa.errors import CompilationError
from tawa.ir.dialect import AREF_MAX_VALUES
from tawa.lowering import ws_ir

#: Ops through which a loaded tile still counts as feeding a dot operand.
_FORWARD_OPS = {"tawa.trans", "tawa.broadcast", "tawa.expand_dims", "tawa.splat"}
_FORWARD_PREFIXES = ("arith.", "math.")
_LOOPS = ("scf.for", "scf.while", "scf.parallel", "scf.forall")


@dataclass
class LoopPlan:
    loop: ir.Operation                       # an scf.for directly in the kernel body
    loads: list = field(default_factory=list)  # its heavy tawa.load ops, in block order


class NotSpecializable(Exception):
    def __init__(self, reason: str, op=None):
        super().__init__(reason)
        self.reason = reason
        self.op = op


def feeds_dot(load: ir.Operation, from_branch: bool = False) -> bool:
    """Whether the load's tile reaches operand a or b of a tawa.dot (`from_branch`: also out of an `scf.if` the
    load itself is in)."""
    work, seen = [load.results[0]], set()
    while work:
        v = work.pop()
        for use in v.uses:
            user = use.owner.operation if hasattr(use.owner, "operation") else use.owner
            if user.name == "tawa.dot" and use.operand_number in (0, 1):
                return True
            if user.name == "scf.yield" and parent_op(user).name == "scf.if" and \
                    (from_branch or not is_ancestor(parent_op(user), load)):
                # through a branch's result (mask-elision's masked and unmasked scores); a load inside the branch
                # itself stays the consumers' (the producer cannot issue a conditional load)
                work.append(parent_op(user).results[use.operand_number])
                continue
            if (user.name in _FORWARD_OPS or user.name.startswith(_FORWARD_PREFIXES)) and user not in seen:
                seen.add(user)
                work.extend(r for r in user.results if is_tile(r.type))
    return False


def _enclosing_loop(op):
    cur = parent_op(op)
    while cur is not None and cur.name != "func.func":
        if cur.name in _LOOPS:
            return cur
        cur = parent_op(cur)
    return None


def replicable(load) -> bool:
    """Whether a producer outside any loop can recompute the offsets of `load` (kernel arguments and scalar
    control of them)."""
    try:
        seen: set = set()
        for v in LoadOp(load).offsets:
            _check_replicable(v, None, "offset", load, seen)
    except NotSpecializable:
        return False
    return True


def _check_replicable(v: ir.Value, loop, what: str, load, seen):
    """`v` must be recomputable by the producer: the loop's induction variable, a kernel argument, or scalar
    control (transitively) built from those."""
    if v in seen:
        return
    seen.add(v)
    op = defining_op(v)
    if op is None:
        owner = v.owner
        parent = _block_owner(owner)
        if parent.name == "scf.for" and (parent == loop or (loop is not None and is_ancestor(parent, loop))):
            if v == owner.arguments[0]:
                return  # the induction variable (of the loop, or of a loop the program writes around it)
            raise NotSpecializable(
                f"the {what}{where(load)} depends on a value carried across iterations of the loop"
                f"{where(parent)}, which only the consumer warp groups compute", load)
        if parent.name == "func.func":
            return  # a kernel argument
        raise NotSpecializable(
            f"the {what}{where(load)} depends on a block argument of '{parent.name}'", load)
    if not ws_ir.is_scalar_control(op):
        raise NotSpecializable(
            f"the {what}{where(load)} depends on '{op.name}'{where(op)}, which only the consumer "
            f"warp groups compute (the producer can replicate only scalar control)", load)
    for operand in op.operands:
        _check_replicable(operand, loop, what, load, seen)


def _block_owner(block) -> ir.Operation:
    return block.owner.operation if hasattr(block.owner, "operation") else block.owner


def _check_nest(lp, body, load) -> None:
    """A pipelined loop lies in the kernel's body, or in `scf.for` loops the program writes around it (a batch
    loop, a hand-written tile loop) and `scf.if`s (tiles past an expert's row count, query blocks past a sequence's
    end skip the loop) that lie there: the producer runs those loops and takes those branches too, so the
    conditions must be replicable scalar control, and nothing but loops and conditionals may stand between the
    kernel's body and the pipelined loop."""
    cur = lp
    while cur.block != body:
        outer = parent_op(cur)
        if outer is None or outer.name not in ("scf.for", "scf.if"):
            where_ = f"('{outer.name}')" if outer is not None else ""
            raise NotSpecializable(
                f"the loop{where(lp)} with tile loads feeding a dot is inside a region {where_}; only loops at "
                f"the top level of the kernel, or nested only in loops and conditionals, are specialized", load)
        if outer.name == "scf.if":
            _check_replicable(outer.operands[0], _enclosing_loop(outer), "condition of the conditional", outer,
                              set())
        cur = outer


def plan(func_op) -> list:
    """The loops to pipeline and their heavy loads; raises NotSpecializable with the reason."""
    func = func_op.operation
    body = body_block(func)
    for op in walk(func):
        if op.name.startswith("tawa.aref_") or warp_group_role(op):
            raise NotSpecializable("the kernel already has arefs or warp groups", op)

    # (a 1-D block that reaches a dot only through math, a key-padding mask row, is loaded into the consumers'
    # registers: aref slots hold 2-D tiles)
    heavy = [op for op in walk(func) if op.name == "tawa.load" and feeds_dot(op)
             and len(ir.RankedTensorType(op.results[0].type).shape) == 2]
    heavy_in_loops = [(ld, _enclosing_loop(ld)) for ld in heavy]
    heavy_in_loops = [(ld, lp) for ld, lp in heavy_in_loops if lp is not None]
    # A dot operand loaded in a loop the program writes around the pipelined loop (attention's Q block, in a loop
    # over heads) is copied by the consumers themselves, once per outer iteration, as a block loaded before the
    # loop is in a kernel with one program per CTA.
    heavy_in_loops = [(ld, lp) for ld, lp in heavy_in_loops
                      if not any(other is not lp and is_ancestor(lp, other) for _, other in heavy_in_loops)]
    if not heavy_in_loops:
        branch = next((op for op in walk(func) if op.name == "tawa.load" and _enclosing_loop(op) is not None
                       and feeds_dot(op, from_branch=True)), None)
        if branch is not None:
            raise NotSpecializable(
                f"the tile load{where(branch)} feeds a dot through a run-time `if` in the loop; the producer must "
                f"issue the same loads every iteration (write one loop per pair of operands, both accumulating "
                f"into the same tile)", branch)
        raise NotSpecializable("no tile loads feed a dot inside a loop")

    plans: dict = {}
    for ld, lp in heavy_in_loops:
        if lp.name != "scf.for":
            raise NotSpecializable(
                f"the tile load{where(ld)} is inside an '{lp.name}' loop; only scf.for loops with known "
                f"bounds are specialized", ld)
        _check_nest(lp, body, ld)
        if ld.block != lp.regions[0].blocks[0]:
            raise NotSpecializable(
                f"the tile load{where(ld)} is inside a conditional ('{parent_op(ld).name}') in the "
                f"loop; the producer must issue the same loads every iteration (a condition that bounds the "
                f"loop index, such as `if k < n:` around the whole body, becomes the loop's range instead)", ld)
        plans.setdefault(lp, LoopPlan(lp)).loads.append(ld)

    result = []
    for op in walk(func):
        if op not in plans:
            continue
        p = plans[op]
        loop_block = op.regions[0].blocks[0]
        order = {o: i for i, o in enumerate(ops_of(loop_block))}
        p.loads.sort(key=lambda o: order[o])
        if len(p.loads) > AREF_MAX_VALUES:
            raise NotSpecializable(
                f"the loop{where(op)} issues {len(p.loads)} tile loads per iteration; at most "
                f"{AREF_MAX_VALUES} fit one aref slot", op)
        for name, v in zip(("lower bound", "upper bound", "step"), ForOp(op).bounds):
            _check_replicable(v, _enclosing_loop(op), f"{name} of the loop", op, set())
        outer = _enclosing_loop(op)
        while outer is not None:        # the producer runs the loops the program writes around it too
            for name, v in zip(("lower bound", "upper bound", "step"), ForOp(outer).bounds):
                _check_replicable(v, _enclosing_loop(outer), f"{name} of the loop", outer, set())
            outer = _enclosing_loop(outer)
        for ld in p.loads:
            for v in ld.operands:
                _check_replicable(v, op, "tile load", ld, set())
            for use in ld.results[0].uses:
                user = use.owner.operation if hasattr(use.owner, "operation") else use.owner
                if user.name == "scf.yield" and parent_op(user) == op:
                    raise NotSpecializable(
                        f"the tile loaded{where(ld)} is carried to the next iteration; a borrowed aref slot "
                        f"must be released within its iteration", ld)
        result.append(p)
    return result


def _check_split_k(func_op, plans) -> None:
    """Split-K runs the code after the split loop in the last program of a tile only (under a condition on the
    other programs' arrivals, which the producer does not see): no other pipelined loop may come with it."""
    body = body_block(func_op.operation)
    for p in plans:
        if p.loop.block != body:
            raise NotSpecializable(
                f"with split_k, the loop{where(p.loop)} nested in a loop or conditional is not specialized (split-K "
                f"runs the code after its loop under a condition on the other programs' arrivals, which the "
                f"producer does not see)", p.loop)


def required_plan(func_op) -> list:
    """`plan(func_op)` for a kernel that must be specialized: the reason becomes a located error."""
    try:
        return plan(func_op)
    except NotSpecializable as e:
        raise CompilationError(f"cannot warp-specialize kernel '{kernel_name(func_op)}': {e.reason}",
                               source_location(e.op or func_op.operation),
                               note="compile with warp_specialize=False (or --warp-specialize off) to use the "
                                    "uniform-warp schedule") from None


def can_specialize(func_op) -> tuple:
    """(True, "") when the kernel can be warp-specialized, else (False, reason with the source location)."""
    try:
        plan(func_op)
    except NotSpecializable as e:
        return False, e.reason
    return True, ""


def kernel_name(func_op) -> str:
    return ir.StringAttr(func_op.operation.attributes["sym_name"]).value


def _num_warps_conflict(func_op, options) -> str:
    """Why an explicit warp count (`num_warps=` or `@num_warps`) rules out specialization ('' when it does not):
    a specialized kernel has 4 x (1 + consumer warp groups) warps, so only a count matching an explicit
    `num_consumer_groups` is compatible."""
    from tawa.ir import attrs
    explicit = getattr(options, "num_warps", None)
    source = f"num_warps={explicit}"
    if not explicit:
        explicit = attrs.NUM_WARPS.get(func_op)
        source = f"@num_warps({explicit})"
    if not explicit:
        return ""
    groups = getattr(options, "num_consumer_groups", None)
    if groups is not None and explicit == hopper.WARPS_PER_GROUP * (1 + groups):
        return ""
    return (f"{source} asks for {explicit} warps, but a warp-specialized kernel has 4 x (1 + consumer warp "
            f"groups) warps" + (f" ({hopper.WARPS_PER_GROUP * (1 + groups)} with num_consumer_groups={groups})"
                                if groups is not None else ""))


#: How a kernel's notes say it runs the uniform-warp schedule, before the reason.
_UNIFORM = "uses the uniform-warp schedule: "


def uniform_note(name: str, reason: str) -> str:
    """The note of a kernel that runs the uniform-warp schedule, and why."""
    return f"kernel '{name}' {_UNIFORM}{reason}"


def uniform_reason(note: str) -> str:
    """The reason a `uniform_note` gives ("" for any other note)."""
    return note.split(_UNIFORM, 1)[1] if note and _UNIFORM in note else ""


def decide(func_op, options) -> tuple:
    """Apply `options.warp_specialize` (None: where possible; True: required; False: never) to one kernel.

    Returns (plans, note): `plans` is `plan(func_op)` when the kernel is specialized, else None (the driver hands
    it to the schedule decisions, so that it is found once per compile); `note` is a diagnostic to show the user
    when a kernel falls back to the uniform-warp schedule on its own. Raises CompilationError when specialization
    was required but is impossible.
    """
    if options.warp_specialize is False:
        return None, ""
    if getattr(options, "tma", None) is False:
        return None, uniform_note(kernel_name(func_op), "tma=False (its producer warp group would load through TMA)")
    try:
        plans, reason = plan(func_op), ""
        if getattr(options, "split_k", 1) > 1:
            _check_split_k(func_op, plans)
    except NotSpecializable as e:
        plans, reason = None, e.reason
    name = kernel_name(func_op)
    if plans is not None:
        conflict = _num_warps_conflict(func_op, options)
        if not conflict:
            return plans, ""
        if options.warp_specialize is True:
            raise CompilationError(f"cannot warp-specialize kernel '{name}': {conflict}",
                                   source_location(func_op.operation),
                                   note="a warp-specialized kernel has 4 x (1 + consumer warp groups) warps: set "
                                        "num_consumer_groups instead of num_warps, or compile with "
                                        "warp_specialize=False to run the uniform-warp schedule with these warps")
        return None, uniform_note(name, f"{conflict} (set num_consumer_groups instead to specialize)")
    if options.warp_specialize is True:
        raise CompilationError(f"cannot warp-specialize kernel '{name}': {reason}",
                               source_location(func_op.operation),
                               note="compile with warp_specialize=False (or --warp-specialize off) to use the "
                                    "uniform-warp schedule")
    return None, uniform_note(name, reason)
