"""Typed views of the `tawa` ops (and of the `scf` ops passes inspect): named operands, results and attributes.

Passes read `LoadOp(op).offsets` or `DotOp(op).acc` instead of `op.operands[2]`, and build arefs with
`create_put(...)` instead of spelling segment attributes. Each view wraps an `ir.Operation` and checks its name.
The op set itself is defined once, in IRDL, in `tawa.ir.dialect`.
"""
from __future__ import annotations

from mlir import ir

from tawa.errors import InternalCompilerError
from tawa.ir import attrs
from tawa.ir.dialect import AREF_MAX_VALUES
from tawa.ir.traversal import as_op, defining_op, ops_of
from tawa.ir.types import aref_params, aref_type


class OpView:
    NAME = ""

    def __init__(self, op):
        self.op = as_op(op)
        if self.NAME and self.op.name != self.NAME:
            raise InternalCompilerError(f"expected '{self.NAME}', got '{self.op.name}'")

    @property
    def location(self):
        return self.op.location

    def _int(self, name: str) -> int:
        return ir.IntegerAttr(self.op.attributes[name]).value


class ProgramIdOp(OpView):
    NAME = "tawa.program_id"
    axis = property(lambda self: self._int("axis"))


class NumProgramsOp(OpView):
    NAME = "tawa.num_programs"
    axis = property(lambda self: self._int("axis"))


class GridExtentOp(OpView):
    """`tawa.grid_extent {axis}`: the extent along `axis` of the grid a persistent kernel was written for (the
    `@grid` it declares, or the grid it is launched with); `tawa.program_id` / `tawa.num_programs` then name the
    CTAs actually launched, which loop over those programs."""
    NAME = "tawa.grid_extent"
    axis = property(lambda self: self._int("axis"))


class ClusterSizeOp(OpView):
    """`tawa.cluster_size`: the CTAs of the thread-block cluster this CTA runs in, 1 when the launch has none (a
    clustered persistent kernel runs with clusters only where its grid divides into them: see `persistent_tiles`)."""
    NAME = "tawa.cluster_size"


class NextTileOp(OpView):
    """`%t = tawa.next_tile`: the producer's fetch-and-add on the launch's tile counter, plus the CTAs launched: the
    linear index of the next tile its CTA computes, the grid's program count or more when none is left."""
    NAME = "tawa.next_tile"


class TilePutOp(OpView):
    """`tawa.tile_put %t`: the producer hands tile index %t to the consumer warp groups (a ring of two slots)."""
    NAME = "tawa.tile_put"
    tile = property(lambda self: self.op.operands[0])


class TileGetOp(OpView):
    """`%t = tawa.tile_get`: a consumer warp group takes the next tile index the producer put."""
    NAME = "tawa.tile_get"


class DimOp(OpView):
    NAME = "tawa.dim"
    tensor = property(lambda self: self.op.operands[0])
    axis = property(lambda self: self._int("axis"))


class LoadOp(OpView):
    """`%tile = tawa.load %src[%offsets...]`: the block at tile coordinates `offsets` of a global tensor."""
    NAME = "tawa.load"
    src = property(lambda self: self.op.operands[0])
    offsets = property(lambda self: list(self.op.operands)[1:])
    result = property(lambda self: self.op.results[0])


class LoadScalarOp(OpView):
    """`%x = tawa.load_scalar %src[%offsets...]`: the element at `offsets` of a tensor the kernel never writes, or 0
    outside it (scalar control: every warp group may read it for itself)."""
    NAME = "tawa.load_scalar"
    src = property(lambda self: self.op.operands[0])
    offsets = property(lambda self: list(self.op.operands)[1:])
    result = property(lambda self: self.op.results[0])


#: A `tawa.store` limit that bounds nothing (a dim its view leaves open): i32's largest value.
NO_LIMIT = 2**31 - 1


class StoreOp(OpView):
    """`tawa.store %dst, %value, %offsets... [, %limits...]`: the tile written to the box at element `offsets`;
    with `limits` (one per dim, a store through a view that ends, `O[h, start:end]`), only the elements whose index
    along each dim is below its limit are written."""
    NAME = "tawa.store"
    dst = property(lambda self: self.op.operands[0])
    value = property(lambda self: self.op.operands[1])

    @property
    def rank(self) -> int:
        return ir.MemRefType(self.dst.type).rank

    @property
    def offsets(self) -> list:
        return list(self.op.operands)[2:2 + self.rank]

    @property
    def limits(self) -> list:
        """The limits, or [] for a store bounded by its tensor alone."""
        return list(self.op.operands)[2 + self.rank:]


class PrefetchOp(OpView):
    """`tawa.prefetch %src[%offsets...] {shape}`: the block of `shape` at `offsets`, loaded later by a `tawa.load`
    of the same block, starts its way toward the SM now (`epilogue_prefetch`); no effect on results."""
    NAME = "tawa.prefetch"
    src = property(lambda self: self.op.operands[0])
    offsets = property(lambda self: list(self.op.operands)[1:])
    shape = property(lambda self: list(ir.DenseI64ArrayAttr(self.op.attributes["shape"])))

    def served_load(self):
        """The `tawa.load` of the block this prefetch reads (the same source and offset values), or None."""
        for use in self.src.uses:
            op = use.owner
            if op.name == LoadOp.NAME and LoadOp(op).offsets == self.offsets and \
                    list(ir.RankedTensorType(LoadOp(op).result.type).shape) == self.shape:
                return op
        return None


def create_prefetch(load: LoadOp, ip: ir.InsertionPoint) -> ir.Operation:
    """A `tawa.prefetch` of the block `load` reads, at `ip`, with the load's location."""
    shape = ir.RankedTensorType(load.result.type).shape
    with ip:
        return ir.Operation.create(PrefetchOp.NAME, operands=[load.src] + load.offsets,
                                   attributes={"shape": ir.DenseI64ArrayAttr.get(list(shape))}, loc=load.location)


class DotOp(OpView):
    """`%d = tawa.dot %a, %b, %acc`: d = a @ b + acc."""
    NAME = "tawa.dot"
    a = property(lambda self: self.op.operands[0])
    b = property(lambda self: self.op.operands[1])
    acc = property(lambda self: self.op.operands[2])
    result = property(lambda self: self.op.results[0])
    A, B, ACC = 0, 1, 2   # operand numbers, for use-site checks


class SplatOp(OpView):
    NAME = "tawa.splat"
    value = property(lambda self: self.op.operands[0])


def is_zero_splat(value) -> bool:
    """Whether `value` is a tile splatted from the constant 0.0 (a fresh accumulator)."""
    op = defining_op(value)
    if op is None or op.name != SplatOp.NAME:
        return False
    src = defining_op(SplatOp(op).value)
    try:
        return src is not None and src.name == "arith.constant" and \
            float(ir.FloatAttr(src.attributes["value"]).value) == 0.0
    except (ValueError, TypeError):
        return False


class ArangeOp(OpView):
    NAME = "tawa.arange"
    start = property(lambda self: self._int("start"))
    end = property(lambda self: self._int("end"))


class ExpandDimsOp(OpView):
    NAME = "tawa.expand_dims"
    src = property(lambda self: self.op.operands[0])
    axis = property(lambda self: self._int("axis"))


class BroadcastOp(OpView):
    NAME = "tawa.broadcast"
    src = property(lambda self: self.op.operands[0])


class TransOp(OpView):
    NAME = "tawa.trans"
    src = property(lambda self: self.op.operands[0])


def readers_through_transposes(value) -> list:
    """The ops reading `value` (one entry per use), looking through `tawa.trans` ops: a transpose of a shared tile
    is a view of the same memory, so its readers read the tile."""
    out = []
    for user in (as_op(u.owner) for u in value.uses):
        if user.name == TransOp.NAME:
            out.extend(readers_through_transposes(user.results[0]))
        else:
            out.append(user)
    return out


def untransposed(value):
    """(the value a dot operand is a transpose of, True), or (`value`, False) when it is not a transpose."""
    op = defining_op(value)
    if op is not None and op.name == TransOp.NAME:
        return TransOp(op).src, True
    return value, False


class ReduceOp(OpView):
    NAME = "tawa.reduce"
    src = property(lambda self: self.op.operands[0])
    axis = property(lambda self: self._int("axis"))
    kind = property(lambda self: ir.StringAttr(self.op.attributes["kind"]).value)


# ---- split-K ---------------------------------------------------------------------------------------------
class SplitKStoreOp(OpView):
    """`tawa.split_k_store %partial, %tile, %split {slot}`: keep this program's partial accumulator."""
    NAME = "tawa.split_k_store"
    value = property(lambda self: self.op.operands[0])
    tile = property(lambda self: self.op.operands[1])
    split = property(lambda self: self.op.operands[2])
    slot = property(lambda self: self._int("slot"))


class SplitKArriveOp(OpView):
    """`%last = tawa.split_k_arrive %tile {splits}`: true for the last of the tile's programs to arrive."""
    NAME = "tawa.split_k_arrive"
    tile = property(lambda self: self.op.operands[0])
    splits = property(lambda self: self._int("splits"))


class SplitKSumOp(OpView):
    """`%sum = tawa.split_k_sum %partial, %tile, %split {slot, splits}`: the partials of every split, summed in
    order; %partial is this program's own, of split %split."""
    NAME = "tawa.split_k_sum"
    value = property(lambda self: self.op.operands[0])
    tile = property(lambda self: self.op.operands[1])
    split = property(lambda self: self.op.operands[2])
    slot = property(lambda self: self._int("slot"))
    splits = property(lambda self: self._int("splits"))
    result = property(lambda self: self.op.results[0])


def _i32_attr(value: int) -> ir.IntegerAttr:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(32), value)


def create_split_k_store(partial: ir.Value, tile: ir.Value, split: ir.Value, slot: int) -> ir.Operation:
    return ir.Operation.create(SplitKStoreOp.NAME, operands=[partial, tile, split], attributes={"slot": _i32_attr(slot)})


def create_split_k_arrive(tile: ir.Value, splits: int) -> ir.Value:
    return ir.Operation.create(SplitKArriveOp.NAME, results=[ir.IntegerType.get_signless(1)], operands=[tile],
                               attributes={"splits": _i32_attr(splits)}).results[0]


def create_split_k_sum(partial: ir.Value, tile: ir.Value, split: ir.Value, slot: int, splits: int) -> ir.Value:
    return ir.Operation.create(SplitKSumOp.NAME, results=[partial.type], operands=[partial, tile, split],
                               attributes={"slot": _i32_attr(slot), "splits": _i32_attr(splits)}).results[0]


# ---- arefs -----------------------------------------------------------------------------------------------
class ArefCreateOp(OpView):
    NAME = "tawa.aref_create"
    result = property(lambda self: self.op.results[0])

    @property
    def payload(self) -> list:
        return aref_params(self.result.type)[0]

    @property
    def depth(self) -> int:
        return aref_params(self.result.type)[1]

    def describe(self, index: int = 0) -> str:
        """'aref a, b <types; depth D>' for diagnostics: the source names of the loads it carries."""
        label = attrs.AREF_NAME.get(self.op) or f"#{index}"
        return f"aref {label} <{', '.join(str(t) for t in self.payload)}; depth {self.depth}>"


class ArefPutOp(OpView):
    NAME = "tawa.aref_put"
    aref = property(lambda self: self.op.operands[0])
    values = property(lambda self: list(self.op.operands)[1:])


class ArefGetOp(OpView):
    NAME = "tawa.aref_get"
    aref = property(lambda self: self.op.operands[0])
    values = property(lambda self: list(self.op.results))


class ArefConsumedOp(OpView):
    NAME = "tawa.aref_consumed"
    aref = property(lambda self: self.op.operands[0])


AREF_USE_OPS = (ArefPutOp.NAME, ArefGetOp.NAME, ArefConsumedOp.NAME)


def aref_of(op) -> ir.Value:
    """The aref an aref_put / aref_get / aref_consumed uses."""
    return as_op(op).operands[0]


def create_aref(payload, depth: int, loc=None, name: str | None = None, ip=False) -> ir.Operation:
    op = ir.Operation.create(ArefCreateOp.NAME, results=[aref_type(payload, depth)], loc=loc, ip=ip)
    if name:
        attrs.AREF_NAME.set(op, name)
    return op


def create_put(aref: ir.Value, values, loc=None, ip=False) -> ir.Operation:
    n = len(values)
    if not 1 <= n <= AREF_MAX_VALUES:
        raise InternalCompilerError(f"an aref slot holds 1 to {AREF_MAX_VALUES} values, got {n}")
    seg = ir.DenseI32ArrayAttr.get([1] + [1] * n + [0] * (AREF_MAX_VALUES - n))
    return ir.Operation.create(ArefPutOp.NAME, operands=[aref, *values], attributes={"operandSegmentSizes": seg},
                               loc=loc, ip=ip)


def create_get(aref: ir.Value, loc=None, ip=False) -> ir.Operation:
    payload, _ = aref_params(aref.type)
    n = len(payload)
    seg = ir.DenseI32ArrayAttr.get([1] * n + [0] * (AREF_MAX_VALUES - n))
    return ir.Operation.create(ArefGetOp.NAME, results=payload, operands=[aref],
                               attributes={"resultSegmentSizes": seg}, loc=loc, ip=ip)


def create_consumed(aref: ir.Value, loc=None, ip=False) -> ir.Operation:
    return ir.Operation.create(ArefConsumedOp.NAME, operands=[aref], loc=loc, ip=ip)


# ---- structure: loops and warp groups ------------------------------------------------------------------------
class ForOp(OpView):
    """`scf.for %iv = %lb to %ub step %step iter_args(...)`."""
    NAME = "scf.for"
    lower = property(lambda self: self.op.operands[0])
    upper = property(lambda self: self.op.operands[1])
    step = property(lambda self: self.op.operands[2])
    bounds = property(lambda self: list(self.op.operands)[:3])
    inits = property(lambda self: list(self.op.operands)[3:])
    body = property(lambda self: self.op.regions[0].blocks[0])
    iv = property(lambda self: self.body.arguments[0])
    iter_args = property(lambda self: list(self.body.arguments)[1:])
    results = property(lambda self: list(self.op.results))

    @property
    def yield_op(self) -> ir.Operation:
        return ops_of(self.body)[-1]


class IfOp(OpView):
    """`scf.if %cond`: a then region and an optional else region."""
    NAME = "scf.if"
    condition = property(lambda self: self.op.operands[0])


WARP_GROUP_REGION = "scf.execute_region"


def warp_group_role(op) -> str | None:
    """'producer' / 'consumer' for a warp-group region, None for any other op."""
    op = as_op(op)
    return attrs.WARP_GROUP.get(op) if op.name == WARP_GROUP_REGION else None


def warp_groups(func) -> list:
    """The warp-group regions directly in a kernel's body, in order."""
    from tawa.ir.kernel_info import body_block
    return [op for op in ops_of(body_block(func)) if warp_group_role(op)]


def enclosing_warp_group(op):
    cur = as_op(op).parent
    while cur is not None:
        cur = as_op(cur)
        if warp_group_role(cur):
            return cur
        cur = cur.parent
    return None


def consumer_warp_groups(func) -> int:
    """Warp groups that run consumer regions (a region may span several)."""
    return sum(attrs.NUM_WARP_GROUPS.get(g) for g in warp_groups(func) if warp_group_role(g) == attrs.CONSUMER)
