"""Small IR helpers shared by the warp-specialization passes (aref insertion, partition, protocol check).

Takes and gives MLIR objects of a `tawa` module; holds no state. Why a module of its own: the passes walk the
same structures (kernel functions, loops, warp-group regions, the aref ops with their segment attributes) and must
agree on what "cloneable scalar control" and "the same loop bound" mean.
"""
from __future__ import annotations

import os
import re

from mlir import ir

from tawa.errors import SourceLocation
from tawa.ir.dialect import AREF_MAX_VALUES, KERNEL_ATTR, WARP_GROUP_ATTR
from tawa.ir.traversal import ops_of, walk  # noqa: F401  (re-exported for the WS passes)

NUM_WARP_GROUPS_ATTR = "tawa.num_warp_groups"
#: Optional human-readable name of an aref (the source names of the loads it carries), used in diagnostics.
AREF_NAME_ATTR = "tawa.aref_name"

#: Ops without regions that compute scalar control and index math: safe to replicate into every warp group.
SCALAR_OPS = {"tawa.program_id", "tawa.num_programs", "tawa.dim"}
SCALAR_DIALECTS = ("arith.", "math.", "index.")


# ----------------------------------------------------------------------------------------------------------
# Walking
def kernels(module: ir.Module):
    """The kernel functions (`func.func` with `tawa.kernel`) of a module."""
    return [op for op in module.body.operations if op.operation.name == "func.func"
            and KERNEL_ATTR in op.operation.attributes]


def body_block(func_op) -> ir.Block:
    return func_op.operation.regions[0].blocks[0]


def parent_op(op: ir.Operation):
    """The op whose region holds `op` (None at module level)."""
    try:
        parent = op.parent
    except Exception:
        return None
    return parent.operation if parent is not None else None


def ancestor_in_block(op: ir.Operation, block: ir.Block):
    """The ancestor of `op` (or `op` itself) that lies directly in `block`, or None."""
    cur = op
    while cur is not None:
        if cur.block == block:
            return cur
        cur = parent_op(cur)
    return None


def is_ancestor(anc: ir.Operation, op: ir.Operation) -> bool:
    cur = parent_op(op)
    while cur is not None:
        if cur == anc:
            return True
        cur = parent_op(cur)
    return False


def defining_op(value: ir.Value):
    """The op that defines `value`, or None for a block argument."""
    owner = value.owner
    if isinstance(owner, ir.Block):
        return None
    return owner.operation if hasattr(owner, "operation") else owner


def warp_group_role(op: ir.Operation):
    if op.name == "scf.execute_region" and WARP_GROUP_ATTR in op.attributes:
        return ir.StringAttr(op.attributes[WARP_GROUP_ATTR]).value
    return None


def enclosing_warp_group(op: ir.Operation):
    cur = parent_op(op)
    while cur is not None:
        if warp_group_role(cur):
            return cur
        cur = parent_op(cur)
    return None


def is_tile(t: ir.Type) -> bool:
    return isinstance(t, ir.RankedTensorType)


def is_scalar_control(op: ir.Operation) -> bool:
    """Region-free op with only scalar results, no tile operands, and no side effects we know of."""
    if len(op.regions) != 0 or len(op.results) == 0:
        return False
    if op.name not in SCALAR_OPS and not op.name.startswith(SCALAR_DIALECTS):
        return False
    return all(not is_tile(r.type) for r in op.results) and all(not is_tile(v.type) for v in op.operands)


# ----------------------------------------------------------------------------------------------------------
# Arefs (the create_* builders give detached ops unless `ip` is an InsertionPoint)
def aref_type(types, depth: int) -> ir.Type:
    return ir.Type.parse(f"!tawa.aref<[{', '.join(str(t) for t in types)}], {int(depth)} : i32>")


def _split_top(text: str):
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def aref_params(t: ir.Type):
    """(list of value types, depth) of an `!tawa.aref<[...], D : i32>` type."""
    text = str(t)
    m = re.fullmatch(r"!tawa\.aref<\[(.*)\],\s*(\d+)\s*:\s*i32>", text)
    if not m:
        raise ValueError(f"not an aref type: {text}")
    return [ir.Type.parse(s, context=t.context) for s in _split_top(m.group(1))], int(m.group(2))


def create_aref(types, depth, loc=None, name=None, ip=False) -> ir.Operation:
    attrs = {AREF_NAME_ATTR: ir.StringAttr.get(name)} if name else {}
    return ir.Operation.create("tawa.aref_create", results=[aref_type(types, depth)], attributes=attrs, loc=loc, ip=ip)


def create_put(aref: ir.Value, values, loc=None, ip=False) -> ir.Operation:
    n = len(values)
    assert 1 <= n <= AREF_MAX_VALUES
    seg = ir.DenseI32ArrayAttr.get([1] + [1] * n + [0] * (AREF_MAX_VALUES - n))
    return ir.Operation.create("tawa.aref_put", operands=[aref, *values],
                               attributes={"operandSegmentSizes": seg}, loc=loc, ip=ip)


def create_get(aref: ir.Value, loc=None, ip=False) -> ir.Operation:
    types, _ = aref_params(aref.type)
    n = len(types)
    seg = ir.DenseI32ArrayAttr.get([1] * n + [0] * (AREF_MAX_VALUES - n))
    return ir.Operation.create("tawa.aref_get", results=types, operands=[aref],
                               attributes={"resultSegmentSizes": seg}, loc=loc, ip=ip)


def create_consumed(aref: ir.Value, loc=None, ip=False) -> ir.Operation:
    return ir.Operation.create("tawa.aref_consumed", operands=[aref], loc=loc, ip=ip)


AREF_USE_OPS = ("tawa.aref_put", "tawa.aref_get", "tawa.aref_consumed")


def aref_name(create_op: ir.Operation, index: int) -> str:
    types, depth = aref_params(create_op.results[0].type)
    label = (ir.StringAttr(create_op.attributes[AREF_NAME_ATTR]).value
             if AREF_NAME_ATTR in create_op.attributes else f"#{index}")
    return f"aref {label} <{', '.join(str(t) for t in types)}; depth {depth}>"


# ----------------------------------------------------------------------------------------------------------
# Locations
_LOC_RE = re.compile(r'"([^"]*)":(\d+):(\d+)')


def source_location(op) -> SourceLocation | None:
    """The first `file:line:col` in an op's location (the frontend sets them), with the source line if the file
    can be read."""
    text = str(op.location)
    for m in _LOC_RE.finditer(text):
        filename, line, col = m.group(1), int(m.group(2)), int(m.group(3))
        if filename in ("-", ""):
            continue
        source_line = ""
        try:
            if os.path.isfile(filename):
                with open(filename, encoding="utf-8", errors="replace") as f:
                    lines = f.read().splitlines()
                if 0 < line <= len(lines):
                    source_line = lines[line - 1]
        except OSError:
            pass
        return SourceLocation(filename, line, col, source_line)
    return None


def where(op) -> str:
    loc = source_location(op)
    return f" at {loc}" if loc else ""


# ----------------------------------------------------------------------------------------------------------
# Cloning scalar control
def clone_slice(values, ip: ir.InsertionPoint, mapping: dict, can_clone=is_scalar_control):
    """Clone into `ip` the region-free ops that define `values` (transitively), remapping operands through
    `mapping` (old Value → new Value, filled in as ops are cloned). Values already in `mapping` or defined by
    ops for which `can_clone` is false are left as they are. Returns the mapped values."""
    order, seen = [], set()

    def visit(v):
        if _key(v) in mapping:
            return
        op = defining_op(v)
        if op is None or not can_clone(op) or op in seen:
            return
        seen.add(op)
        for operand in op.operands:
            visit(operand)
        order.append(op)

    for v in values:
        visit(v)
    for op in order:
        new = op.clone(ip=ip)
        for i, operand in enumerate(op.operands):
            mapped = mapping.get(_key(operand))
            if mapped is not None:
                new.operands[i] = mapped
        for old_r, new_r in zip(op.results, new.results):
            mapping[_key(old_r)] = new_r
    return [mapping.get(_key(v), v) for v in values]


def _key(v: ir.Value):
    return v


def values_equivalent(a: ir.Value, b: ir.Value, depth: int = 0) -> bool:
    """True when `a` and `b` are the same value or clones of one computation (same op name, attributes and
    equivalent operands, region-free scalar control)."""
    if a == b:
        return True
    if depth > 64 or a.type != b.type:
        return False
    oa, ob = defining_op(a), defining_op(b)
    if oa is None or ob is None:
        return False
    if oa.name != ob.name or not is_scalar_control(oa) or not is_scalar_control(ob):
        return False
    if len(oa.operands) != len(ob.operands) or len(oa.results) != len(ob.results):
        return False
    if _result_index(oa, a) != _result_index(ob, b):
        return False
    if _attrs(oa) != _attrs(ob):
        return False
    return all(values_equivalent(x, y, depth + 1) for x, y in zip(oa.operands, ob.operands))


def _result_index(op, v):
    for i, r in enumerate(op.results):
        if r == v:
            return i
    return -1


def _attrs(op):
    attrs = op.attributes
    return sorted((name, str(attrs[name])) for name in attrs)
