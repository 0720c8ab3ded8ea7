"""The `tawa` verifier: the rules of the IR (docs/ir.md) that MLIR and IRDL cannot express.

`verify(module, after)` first runs MLIR's own verification (which checks the IRDL op and type definitions of
`tawa.ir.dialect`: operand and result *kinds*), then walks the module once and checks:

- shapes and dtypes of every `tawa` op (load/store ranks, offsets and element types, dot operand shapes,
  expand_dims/broadcast/trans/reduce/splat/arange result types, program_id/num_programs/dim axes);
- arefs: the payload of each `!tawa.aref` type, put values / get results against it, and that aref ops use a
  value made by `tawa.aref_create`;
- warp-group structure: roles, placement directly in a kernel body, one producer and at least one consumer,
  which aref ops each role may hold, and the numbers `register-realloc` and `assign-warp-groups` write
  (`tawa.max_registers`, `tawa.first_warp_group`, the kernel's `tawa.num_warps`);
- attribute kinds: every `tawa.*` attribute on any op is one of `tawa.ir.attrs.ALL`, with its declared kind.

A violation raises `InternalCompilerError` naming the pass after which the IR broke (`after`), the op, the rule
(its name in `RULES`, in brackets, such as `[dot-shape]`) and carrying the op's source location. After
`convert-to-nvvm` the module holds a `gpu.module` of llvm/nvvm ops and no `tawa` ops: then only MLIR's
verification (and the kinds of the module's own `tawa.*` attributes) apply.

The compiler runs this after every pass when `verify_each` is on (`tawa.compiler.run_pass`), so it is one walk
of Python over the ops, without printing or re-parsing IR (aref types excepted: their parameters are only
reachable through their text, read once per distinct type).
"""
from __future__ import annotations

from mlir import ir

from tawa import hopper
from tawa.errors import InternalCompilerError
from tawa.ir import attrs
from tawa.ir.dialect import AREF_MAX_VALUES
from tawa.ir.ops import (ArefPutOp, BroadcastOp, DimOp, DotOp, ExpandDimsOp, LoadOp, LoadScalarOp, PrefetchOp,
                         ReduceOp, SplatOp, StoreOp, TransOp, WARP_GROUP_REGION, aref_of)
from tawa.ir.location import source_location
from tawa.ir.types import aref_params, is_aref

#: Reduction kinds `tawa.reduce` accepts.
REDUCE_KINDS = ("sum", "max", "min")
#: Element types of `tawa.dot` operands, and of its accumulator.
DOT_OPERAND_TYPES = ("f16", "bf16", "f8E4M3FN", "f8E5M2", "f32")
DOT_ACC_TYPE = "f32"

#: Every rule, by the name error messages give it in brackets.
RULES = {
    # shapes and dtypes
    "load-offsets": "tawa.load takes one offset per dim of its source",
    "load-shape": "tawa.load gives a tile of rank 1 to the source's rank",
    "load-dtype": "tawa.load gives the source's element type",
    "load-scalar": "tawa.load_scalar takes one offset per dim of its source and gives one i32 or f32 element of "
                   "the source's type",
    "prefetch": "tawa.prefetch takes one offset per dim of its source and a shape of rank 1 to that rank, "
                "extents >= 1",
    "store-offsets": "tawa.store takes one offset per dim of its destination, then optionally one limit per dim",
    "store-shape": "tawa.store writes a tile of rank 1 to the destination's rank",
    "store-dtype": "tawa.store writes the destination's element type",
    "dot-shape": "tawa.dot multiplies [M, K] by [K, N] into an [M, N] accumulator of the result's type",
    "dot-dtype": "tawa.dot operands share one f16/bf16/fp8/f32 element type; accumulator and result are f32",
    "expand-dims-shape": "tawa.expand_dims inserts an extent-1 dim at an axis in [0, rank]",
    "broadcast-shape": "tawa.broadcast stretches extent-1 dims, same rank and element type",
    "trans-shape": "tawa.trans transposes a 2-D tile",
    "reduce-kind": "tawa.reduce kind is sum, max or min",
    "reduce-shape": "tawa.reduce drops an axis in range (a 1-D tile gives a scalar), same element type",
    "splat-type": "tawa.splat makes a tile of its scalar operand's type",
    "arange-range": "tawa.arange gives tensor<(end - start)xi32>, end > start",
    "program-axis": "tawa.program_id / tawa.num_programs / tawa.grid_extent axis is 0, 1 or 2",
    "dim-axis": "tawa.dim axis is below the tensor's rank",
    "split-k": "split_k_store / split_k_sum take an f32 tile and a slot >= 0 (IRDL: split_k_sum gives its type); "
               "split_k_arrive / split_k_sum have splits >= 2",
    # arefs
    "aref-type": "an aref type is !tawa.aref<[types...], depth : i32>",
    "aref-payload": f"an aref slot holds 1 to {AREF_MAX_VALUES} tiles",
    "aref-depth": "an aref has at least one slot",
    "aref-operand": "aref_put / aref_get / aref_consumed use the result of a tawa.aref_create",
    "aref-put-values": "aref_put values match the aref's payload types",
    "aref-get-results": "aref_get results match the aref's payload types",
    "aref-role": "in a partitioned kernel aref_put is in the producer, aref_get / aref_consumed in consumers",
    "tile-channel-role": "next_tile / tile_put are in the producer warp group, tile_get in a consumer one",
    # warp groups
    "warp-group-op": "tawa.warp_group is on scf.execute_region ops",
    "warp-group-attr": "warp-group attributes are on warp-group regions",
    "warp-group-role": "a warp group's role is producer or consumer",
    "warp-group-nesting": "warp groups do not nest",
    "warp-group-placement": "warp groups sit directly in a kernel's body",
    "warp-group-count": "a kernel with warp groups has one producer and at least one consumer",
    "num-warp-groups": "tawa.num_warp_groups is at least 1",
    "first-warp-group": "tawa.first_warp_group: on all warp groups or none; producer 0, consumers consecutive",
    "num-warps": "an assigned kernel's tawa.num_warps is 4 x its warp groups",
    "max-registers": "tawa.max_registers is a multiple of 8 in [24, 256]",
    # attributes
    "attr-unknown": "every tawa.* attribute is one of tawa.ir.attrs.ALL",
    "attr-kind": "every tawa.* attribute has its declared kind",
}

#: Dynamic tiles' ops and the warp group each runs in (`persistent_tiles`).
_TILE_CHANNEL_ROLES = {"tawa.next_tile": attrs.PRODUCER, "tawa.tile_put": attrs.PRODUCER,
                       "tawa.tile_get": attrs.CONSUMER}

_BY_NAME = {a.name: a for a in attrs.ALL}
_WG_ONLY = (attrs.NUM_WARP_GROUPS.name, attrs.FIRST_WARP_GROUP.name, attrs.MAX_REGISTERS.name)


class _Violation(Exception):
    def __init__(self, op, rule: str, detail: str):
        super().__init__(detail)
        self.op, self.rule, self.detail = op, rule, detail


def _fail(op, rule: str, detail: str):
    assert rule in RULES, rule
    raise _Violation(op, rule, detail)


def verify(module: ir.Module, after: str | None = None) -> None:
    """Raise InternalCompilerError when `module` breaks a rule of the `tawa` IR; `after` names the pass that
    produced it (or "frontend")."""
    try:
        module.operation.verify()
    except ir.MLIRError as e:
        raise InternalCompilerError(f"the IR does not verify: {e}", after) from None
    try:
        _Verifier().run(module)
    except _Violation as v:
        op = v.op
        name = op.name if op is not None else None
        loc = source_location(op) if op is not None else None
        when = f" after '{after}'" if after else ""
        raise InternalCompilerError(f"the IR{when} breaks rule [{v.rule}]: {v.detail}", after, name,
                                    loc) from None


# ---- attribute kinds ---------------------------------------------------------------------------------------
def _is_i32(a) -> bool:
    return isinstance(a, ir.IntegerAttr) and str(a.type) == "i32"


def _kind_ok(spec, a) -> tuple[bool, str]:
    """(whether attribute `a` has the kind `spec` declares, that kind in words)."""
    if isinstance(spec, attrs.UnitAttr):
        return isinstance(a, ir.UnitAttr), "a unit attribute"
    if isinstance(spec, attrs.I32Attr):
        return _is_i32(a), "an i32 integer"
    if isinstance(spec, attrs.StrAttr):
        return isinstance(a, ir.StringAttr), "a string"
    if isinstance(spec, attrs.StrListAttr):
        return isinstance(a, ir.ArrayAttr) and all(isinstance(x, ir.StringAttr) for x in a), "an array of strings"
    # PyAttr: plain-Python metadata; its kind is that of its default (a list, a dict), elements included.
    default = spec.default
    if isinstance(default, list):
        if not isinstance(a, ir.ArrayAttr):
            return False, "an array"
        if default and isinstance(default[0], str):
            return all(isinstance(x, ir.StringAttr) for x in a), "an array of strings"
        return True, "an array"
    if isinstance(default, dict):
        return isinstance(a, ir.DictAttr), "a dictionary"
    return True, "any attribute"


def _check_attrs(op, names) -> None:
    for name in names:
        if not name.startswith("tawa."):
            continue
        spec = _BY_NAME.get(name)
        if spec is None:
            _fail(op, "attr-unknown", f"unknown attribute '{name}' (known: {', '.join(sorted(_BY_NAME))})")
        ok, kind = _kind_ok(spec, op.attributes[name])
        if not ok:
            _fail(op, "attr-kind", f"attribute '{name}' must be {kind}, got {op.attributes[name]}")


# ---- helpers -------------------------------------------------------------------------------------------------
def _shape(t) -> list:
    return list(ir.RankedTensorType(t).shape)


def _tensor(op, v, rule: str, what: str) -> ir.RankedTensorType:
    t = v.type
    if not isinstance(t, ir.RankedTensorType):
        _fail(op, rule, f"{what} must be a tile (ranked tensor), got {t}")
    return t


def _int_attr(op, name: str, rule: str) -> int:
    a = op.attributes[name] if name in op.attributes else None
    if not isinstance(a, ir.IntegerAttr):
        _fail(op, rule, f"attribute '{name}' must be an integer, got {a}")
    return a.value


def _fmt(shape) -> str:
    return "x".join(str(d) for d in shape) if shape else "scalar"


def _aref_creator(op):
    """The aref_create op behind the first operand of an aref op."""
    rule = "aref-operand"
    if len(op.operands) < 1:
        _fail(op, rule, "expects an aref operand")
    owner = aref_of(op).owner
    if isinstance(owner, ir.Block) or owner.operation.name != "tawa.aref_create":
        src = "a block argument" if isinstance(owner, ir.Block) else f"'{owner.operation.name}'"
        _fail(op, rule, f"the aref operand must be the result of a 'tawa.aref_create', got {src}")
    return owner.operation


# ---- per-op shape and dtype rules ---------------------------------------------------------------------------
def _program_axis(op):
    axis = _int_attr(op, "axis", "program-axis")
    if axis not in (0, 1, 2):
        _fail(op, "program-axis", f"axis must be 0, 1 or 2, got {axis}")


def _dim(op):
    rank = ir.MemRefType(DimOp(op).tensor.type).rank
    axis = _int_attr(op, "axis", "dim-axis")
    if not 0 <= axis < rank:
        _fail(op, "dim-axis", f"axis {axis} is out of range for a rank-{rank} tensor")


def _block_access(op, rule: str, memref, tile, offsets: int, mem: str, tile_word: str, tile_desc: str):
    """The rules a load and a store share: one offset per tensor dim, a tile of rank 1 to that rank, one dtype."""
    mem_type = ir.MemRefType(memref.type)
    t = _tensor(op, tile, f"{rule}-shape", tile_desc)
    if offsets != mem_type.rank:
        _fail(op, f"{rule}-offsets", f"a rank-{mem_type.rank} {mem} takes {mem_type.rank} offsets, got {offsets}")
    if not 1 <= t.rank <= mem_type.rank:
        _fail(op, f"{rule}-shape", f"{tile_word} rank {t.rank} must be between 1 and the {mem} rank {mem_type.rank}")
    if str(t.element_type) != str(mem_type.element_type):
        _fail(op, f"{rule}-dtype", f"{tile_word} element type {t.element_type} differs from the {mem}'s "
                                   f"{mem_type.element_type}")


def _load(op):
    load = LoadOp(op)
    _block_access(op, "load", load.src, load.result, len(load.offsets), "source", "result", "the result")


def _load_scalar(op):
    load = LoadScalarOp(op)
    mem = ir.MemRefType(load.src.type)
    if len(load.offsets) != mem.rank:
        _fail(op, "load-scalar", f"a rank-{mem.rank} source takes {mem.rank} offsets, got {len(load.offsets)}")
    if str(load.result.type) != str(mem.element_type) or str(mem.element_type) not in ("i32", "f32"):
        _fail(op, "load-scalar", f"gives {load.result.type} from a tensor of {mem.element_type}")


def _prefetch(op):
    p = PrefetchOp(op)
    rank = ir.MemRefType(p.src.type).rank
    if len(p.offsets) != rank:
        _fail(op, "prefetch", f"a rank-{rank} source takes {rank} offsets, got {len(p.offsets)}")
    try:
        shape = p.shape
    except (KeyError, ValueError):
        _fail(op, "prefetch", "the shape attribute must be an array<i64: ...>")
    if not 1 <= len(shape) <= rank or min(shape) < 1:
        _fail(op, "prefetch", f"shape {list(shape)} must have rank 1 to {rank} and extents >= 1")


def _store(op):
    store = StoreOp(op)
    given = len(op.operands) - 2
    # offsets, or offsets and limits (a store through a view that ends)
    count = store.rank if given == 2 * store.rank else given
    _block_access(op, "store", store.dst, store.value, count, "destination", "value", "the stored value")


def _splat(op):
    res = _tensor(op, op.results[0], "splat-type", "the result")
    src = SplatOp(op).value.type
    if isinstance(src, (ir.RankedTensorType, ir.UnrankedTensorType, ir.MemRefType)):
        _fail(op, "splat-type", f"the operand must be a scalar, got {src}")
    if str(res.element_type) != str(src):
        _fail(op, "splat-type", f"result element type {res.element_type} differs from the scalar type {src}")


def _arange(op):
    start = _int_attr(op, "start", "arange-range")
    end = _int_attr(op, "end", "arange-range")
    res = _tensor(op, op.results[0], "arange-range", "the result")
    if end <= start:
        _fail(op, "arange-range", f"end {end} must exceed start {start}")
    if res.rank != 1 or res.shape[0] != end - start or str(res.element_type) != "i32":
        _fail(op, "arange-range", f"the result must be tensor<{end - start}xi32> (end - start), got {res}")


def _dot(op):
    dot = DotOp(op)
    a = _tensor(op, dot.a, "dot-shape", "operand a")
    b = _tensor(op, dot.b, "dot-shape", "operand b")
    acc = _tensor(op, dot.acc, "dot-shape", "the accumulator")
    res = _tensor(op, op.results[0], "dot-shape", "the result")
    if a.rank != 2 or b.rank != 2 or acc.rank != 2 or res.rank != 2:
        _fail(op, "dot-shape", f"operands and result must be 2-D, got {a}, {b}, {acc} -> {res}")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        _fail(op, "dot-shape", f"inner dimensions differ: a is {_fmt(a.shape)}, b is {_fmt(b.shape)}")
    if list(acc.shape) != [m, n] or list(res.shape) != [m, n]:
        _fail(op, "dot-shape", f"accumulator {_fmt(acc.shape)} and result {_fmt(res.shape)} must be {m}x{n}")
    ea, eb = str(a.element_type), str(b.element_type)
    if ea != eb:
        _fail(op, "dot-dtype", f"operand element types differ ({ea} vs {eb})")
    if ea not in DOT_OPERAND_TYPES:
        _fail(op, "dot-dtype", f"operands must be {', '.join(DOT_OPERAND_TYPES)}, got {ea}")
    if str(acc.element_type) != str(res.element_type) or str(acc.element_type) != DOT_ACC_TYPE:
        _fail(op, "dot-dtype", f"accumulator and result must be {DOT_ACC_TYPE}, got {acc.element_type} and "
                               f"{res.element_type}")


def _same_elem(op, src, res, rule):
    if str(src.element_type) != str(res.element_type):
        _fail(op, rule, f"result element type {res.element_type} differs from the operand's {src.element_type}")


def _expand_dims(op):
    src = _tensor(op, ExpandDimsOp(op).src, "expand-dims-shape", "the operand")
    res = _tensor(op, op.results[0], "expand-dims-shape", "the result")
    axis = _int_attr(op, "axis", "expand-dims-shape")
    if not 0 <= axis <= src.rank:
        _fail(op, "expand-dims-shape", f"axis {axis} is out of range for a {src.rank}-D operand")
    want = list(src.shape)
    want.insert(axis, 1)
    if list(res.shape) != want:
        _fail(op, "expand-dims-shape", f"result shape {_fmt(res.shape)} must be {_fmt(want)}")
    _same_elem(op, src, res, "expand-dims-shape")


def _broadcast(op):
    src = _tensor(op, BroadcastOp(op).src, "broadcast-shape", "the operand")
    res = _tensor(op, op.results[0], "broadcast-shape", "the result")
    if src.rank != res.rank or any(s != r and s != 1 for s, r in zip(src.shape, res.shape)):
        _fail(op, "broadcast-shape", f"cannot broadcast {_fmt(src.shape)} to {_fmt(res.shape)} (same rank, "
                                     f"only extent-1 dims stretch)")
    _same_elem(op, src, res, "broadcast-shape")


def _trans(op):
    src = _tensor(op, TransOp(op).src, "trans-shape", "the operand")
    res = _tensor(op, op.results[0], "trans-shape", "the result")
    if src.rank != 2 or list(res.shape) != list(reversed(src.shape)):
        _fail(op, "trans-shape", f"a 2-D transpose of {_fmt(src.shape)} cannot give {_fmt(res.shape)}")
    _same_elem(op, src, res, "trans-shape")


def _reduce(op):
    src = _tensor(op, ReduceOp(op).src, "reduce-shape", "the operand")
    kind = op.attributes["kind"] if "kind" in op.attributes else None
    if not isinstance(kind, ir.StringAttr) or kind.value not in REDUCE_KINDS:
        _fail(op, "reduce-kind", f"kind must be one of {', '.join(REDUCE_KINDS)}, got {kind}")
    axis = _int_attr(op, "axis", "reduce-shape")
    if not 0 <= axis < src.rank:
        _fail(op, "reduce-shape", f"axis {axis} is out of range for a {src.rank}-D operand")
    rest = list(src.shape[:axis]) + list(src.shape[axis + 1:])
    rt = op.results[0].type
    if rest:
        ok = isinstance(rt, ir.RankedTensorType) and list(rt.shape) == rest and \
            str(rt.element_type) == str(src.element_type)
    else:
        ok = str(rt) == str(src.element_type)
    if not ok:
        want = f"tensor<{_fmt(rest)}x{src.element_type}>" if rest else str(src.element_type)
        _fail(op, "reduce-shape", f"reducing {src} over axis {axis} gives {want}, got {rt}")


def _split_k(op):
    if op.name != "tawa.split_k_arrive":
        tile = _tensor(op, op.operands[0], "split-k", "the partial")
        if str(tile.element_type) != "f32":
            _fail(op, "split-k", f"a split-K partial is an f32 accumulator, got {tile}")
        if _int_attr(op, "slot", "split-k") < 0:
            _fail(op, "split-k", "slot must be >= 0")
    if op.name != "tawa.split_k_store":
        if _int_attr(op, "splits", "split-k") < 2:
            _fail(op, "split-k", "splits must be >= 2")


_SHAPE_RULES = {
    "tawa.program_id": _program_axis, "tawa.num_programs": _program_axis,
    "tawa.grid_extent": _program_axis, "tawa.dim": _dim,
    "tawa.load": _load, "tawa.load_scalar": _load_scalar, "tawa.prefetch": _prefetch, "tawa.store": _store, "tawa.splat": _splat, "tawa.arange": _arange, "tawa.dot": _dot,
    "tawa.expand_dims": _expand_dims, "tawa.broadcast": _broadcast, "tawa.trans": _trans, "tawa.reduce": _reduce,
    "tawa.split_k_store": _split_k, "tawa.split_k_arrive": _split_k, "tawa.split_k_sum": _split_k,
}


# ---- the walk ------------------------------------------------------------------------------------------------
class _Kernel:
    """What the walk knows about the kernel function it is in."""

    def __init__(self, func, groups: list):
        self.func = func
        self.groups = groups              # warp-group regions directly in the body, in order
        self.partitioned = bool(groups)


class _Verifier:
    def __init__(self):
        self.aref_payloads: dict = {}     # aref type text -> (payload types, depth)

    def run(self, module: ir.Module) -> None:
        top = module.operation
        _check_attrs(top, top.attributes)
        body = module.body
        if any(op.operation.name == "gpu.module" for op in body.operations):
            return    # after convert-to-nvvm: llvm/nvvm ops only, MLIR's verification applies
        self._block(body, None, None, False)

    # kernel: the _Kernel the block is in (or None); role: the enclosing warp group's role (or None);
    # top: whether the block is the kernel's body block.
    def _block(self, block, kernel, role, top) -> None:
        for child in block.operations:
            self._op(child.operation, kernel, role, top)

    def _op(self, op, kernel, role, top) -> None:
        name = op.name
        names = list(op.attributes)
        if names:
            _check_attrs(op, names)
        if attrs.WARP_GROUP.name in names:
            role = self._warp_group(op, kernel, role, top)
        else:
            for n in _WG_ONLY:
                if n in names:
                    _fail(op, "warp-group-attr", f"'{n}' belongs on a warp-group region (an "
                                                 f"'scf.execute_region' with '{attrs.WARP_GROUP.name}')")
        if name.startswith("tawa."):
            rule = _SHAPE_RULES.get(name)
            if rule is not None:
                rule(op)
            else:
                self._aref_op(op, kernel, role)
        elif name == "func.func":
            if attrs.KERNEL.name in names:
                self._kernel(op)
                return
            kernel, role = None, None
        regions = op.regions
        if len(regions):
            for region in regions:
                for block in region.blocks:
                    self._block(block, kernel, role, False)

    # ---- kernels and warp groups ---------------------------------------------------------------------------
    def _kernel(self, func) -> None:
        blocks = func.regions[0].blocks
        if not len(blocks):
            return
        body = blocks[0]
        groups = [op.operation for op in body.operations
                  if op.operation.name == WARP_GROUP_REGION and attrs.WARP_GROUP.name in op.operation.attributes]
        kernel = _Kernel(func, groups)
        for i, block in enumerate(blocks):
            self._block(block, kernel, None, i == 0)
        if groups:
            self._kernel_groups(kernel)

    def _warp_group(self, op, kernel, role, top) -> str:
        if op.name != WARP_GROUP_REGION:
            _fail(op, "warp-group-op", f"'{attrs.WARP_GROUP.name}' belongs on an 'scf.execute_region'")
        new_role = attrs.WARP_GROUP.get(op)
        if new_role not in (attrs.PRODUCER, attrs.CONSUMER):
            _fail(op, "warp-group-role", f"role must be '{attrs.PRODUCER}' or '{attrs.CONSUMER}', got "
                                         f"'{new_role}'")
        if role is not None:
            _fail(op, "warp-group-nesting", f"a {new_role} warp group is nested in a {role} warp group")
        if kernel is None or not top:
            _fail(op, "warp-group-placement", f"a {new_role} warp group must sit directly in a kernel's body")
        n = attrs.NUM_WARP_GROUPS.get(op)
        if n < 1:
            _fail(op, "num-warp-groups", f"'{attrs.NUM_WARP_GROUPS.name}' must be at least 1, got {n}")
        regs = attrs.MAX_REGISTERS.get(op)
        if regs is not None and (regs % hopper.SETMAXNREG_STEP or
                                 not hopper.SETMAXNREG_MIN <= regs <= hopper.SETMAXNREG_MAX):
            _fail(op, "max-registers", f"'{attrs.MAX_REGISTERS.name}' must be a multiple of "
                                       f"{hopper.SETMAXNREG_STEP} in [{hopper.SETMAXNREG_MIN}, "
                                       f"{hopper.SETMAXNREG_MAX}], got {regs}")
        return new_role

    def _kernel_groups(self, kernel: _Kernel) -> None:
        func, groups = kernel.func, kernel.groups
        roles = [attrs.WARP_GROUP.get(g) for g in groups]
        producers = [g for g, r in zip(groups, roles) if r == attrs.PRODUCER]
        consumers = [g for g, r in zip(groups, roles) if r == attrs.CONSUMER]
        if len(producers) != 1:
            _fail(producers[1] if producers else func, "warp-group-count",
                  f"a kernel with warp groups needs exactly one producer, found {len(producers)}")
        if not consumers:
            _fail(func, "warp-group-count", "a kernel with warp groups needs at least one consumer, found 0")
        with_first = [g for g in groups if attrs.FIRST_WARP_GROUP.has(g)]
        if not with_first:
            return
        if len(with_first) != len(groups):
            missing = next(g for g in groups if not attrs.FIRST_WARP_GROUP.has(g))
            _fail(missing, "first-warp-group", f"'{attrs.FIRST_WARP_GROUP.name}' is on some warp groups but "
                                               f"not on this one")
        producer = producers[0]
        if attrs.FIRST_WARP_GROUP.get(producer) != 0:
            _fail(producer, "first-warp-group", f"the producer must be warp group 0, got "
                                                f"{attrs.FIRST_WARP_GROUP.get(producer)}")
        nxt = attrs.NUM_WARP_GROUPS.get(producer)
        for g in consumers:
            first = attrs.FIRST_WARP_GROUP.get(g)
            if first != nxt:
                _fail(g, "first-warp-group", f"consumer warp groups must follow the producer consecutively: "
                                             f"expected first warp group {nxt}, got {first}")
            nxt += attrs.NUM_WARP_GROUPS.get(g)
        warps = attrs.NUM_WARPS.get(func)
        if warps != hopper.WARPS_PER_GROUP * nxt:
            _fail(func, "num-warps", f"'{attrs.NUM_WARPS.name}' must be {hopper.WARPS_PER_GROUP} x {nxt} warp "
                                     f"groups = {hopper.WARPS_PER_GROUP * nxt}, got {warps}")

    # ---- arefs ---------------------------------------------------------------------------------------------
    def _payload(self, op, t) -> tuple:
        key = str(t)
        found = self.aref_payloads.get(key)
        if found is None:
            if not is_aref(t):
                _fail(op, "aref-type", f"expected an aref type, got {t}")
            try:
                found = aref_params(t)
            except Exception as e:  # malformed parameters
                _fail(op, "aref-type", f"cannot read the aref type {t}: {e}")
            self.aref_payloads[key] = found
        return found

    def _aref_op(self, op, kernel, role) -> None:
        name = op.name
        if name == "tawa.aref_create":
            payload, depth = self._payload(op, op.results[0].type)
            if not 1 <= len(payload) <= AREF_MAX_VALUES:
                _fail(op, "aref-payload", f"an aref slot holds 1 to {AREF_MAX_VALUES} values, the type lists "
                                          f"{len(payload)}")
            for t in payload:
                if not isinstance(t, ir.RankedTensorType):
                    _fail(op, "aref-payload", f"aref payload types must be tiles, got {t}")
            if depth < 1:
                _fail(op, "aref-depth", f"an aref needs at least one slot, got depth {depth}")
            return
        if name in _TILE_CHANNEL_ROLES:
            want = _TILE_CHANNEL_ROLES[name]
            if role != want:
                where = f"a {role} warp group" if role else "no warp group"
                _fail(op, "tile-channel-role", f"'{name}' belongs in "
                                               f"{'the producer' if want == attrs.PRODUCER else 'a consumer'} warp "
                                               f"group, found in {where}")
            return
        if name not in ("tawa.aref_put", "tawa.aref_get", "tawa.aref_consumed"):
            return    # an unknown tawa op: MLIR's verification already rejected it
        create = _aref_creator(op)
        payload, _ = self._payload(create, create.results[0].type)
        if name == "tawa.aref_put":
            got = [v.type for v in ArefPutOp(op).values]
            if len(got) != len(payload) or any(str(a) != str(b) for a, b in zip(got, payload)):
                _fail(op, "aref-put-values", f"the values ({', '.join(map(str, got))}) do not match the aref's "
                                             f"payload ({', '.join(map(str, payload))})")
        elif name == "tawa.aref_get":
            got = [r.type for r in op.results]
            if len(got) != len(payload) or any(str(a) != str(b) for a, b in zip(got, payload)):
                _fail(op, "aref-get-results", f"the results ({', '.join(map(str, got))}) do not match the "
                                              f"aref's payload ({', '.join(map(str, payload))})")
        if kernel is not None and kernel.partitioned:
            want = attrs.PRODUCER if name == "tawa.aref_put" else attrs.CONSUMER
            if role != want:
                where = f"a {role} warp group" if role else "no warp group"
                _fail(op, "aref-role", f"in a partitioned kernel '{name}' belongs in "
                                       f"{'the producer' if want == attrs.PRODUCER else 'a consumer'} warp "
                                       f"group, found in {where}")
