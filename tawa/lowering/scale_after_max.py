"""scale-after-max: a row maximum of scores times a positive scalar is taken on the unscaled scores, then scaled.

Takes: tile IR after `lazy-rescale`. Gives: every `tawa.reduce` of kind max or min whose tile is `t * c` -- `c` a
splatted f32 scalar that is positive (below) -- directly or through masks that keep their fill value under the
scaling (`where(mask, t * c, -inf)`, and `mask-elision`'s `scf.if` choosing between masked and unmasked scores,
nested ones included), reads the unscaled tile instead (masked alike), and its row result is multiplied by `c`,
once per row:

    %s = arith.mulf %t, splat(%c)            %u = <masks of %t>
    %w = <masks of %s>                 ->    %w = arith.mulf %u, splat(%c)          (the tile's other readers)
    %m = tawa.reduce max %w                  %m = arith.mulf (tawa.reduce max %u), splat(%c)

A mask-elision `scf.if` on the way is changed to yield unscaled tiles, and all its readers then read its result
times `c`. The pass applies only where the reduced tile's other readers are exponentials of it minus a row
(`exp(s - m)`, `exp2(s - m)`): `exp-base2`, next, folds the remaining `%u * c` into its log2(e) product (an exp2's
multiply and subtraction contract into one FMA), so each score costs one FMA before its exponential and `%s` is
gone. A tile also stored or summed keeps its multiply anyway, and its scale (a GEMM's alpha) is not assumed.
For `c > 0`, `max(t * c) = max(t) * c` holds exactly, rounding included (multiplying by a positive number
preserves order, and rounding is monotonic), and `-inf * c = -inf` keeps masked scores masked.

Why: written as users write attention (`s = dot(q, k.T) * sm_scale`, `m = max(s, axis=1)`, `exp(s - m)`), every
score is multiplied before its maximum is taken: one more instruction per score than in FlashAttention's kernels
and `examples/flash_attention.tawa`, which take the maximum of the unscaled scores. Measured on an H200, the user
form ran 4% slower than the same kernel written the example's way, at head dims 64 and 128.

Positive: `c` is built by `arith.mulf` and `arith.divf` from positive f32 constants and the kernel's f32 scalar
arguments, whose magnitudes the launch keeps within [2^-60, 2^60] (`tawa.abi.POSITIVE_ARG_RANGE`); the pass
takes it only where those bounds keep `c` and every product on the way to it a normal float (a product flushed
to zero would turn masked scores into NaN). An argument counts as positive only with `positive_scales` left on
(the default): the pass records it in `tawa.positive_params`, the launcher checks its value at every launch, and
a kernel from `tawa.compile` (or the autotuner) launches its variant compiled with `positive_scales=False` for
other values. GPU only: the
interpreter runs the program as written.
"""
from __future__ import annotations

import math

from mlir import ir
from mlir.dialects import arith

from tawa.abi import POSITIVE_ARG_RANGE
from tawa.ir import attrs
from tawa.ir.kernel_info import kernels
from tawa.ir.ops import BroadcastOp, ExpandDimsOp, ReduceOp, SplatOp
from tawa.ir.traversal import as_op, defining_op, is_ancestor, walk

from .row_values import is_f32_tile, splat, splatted_f32

#: log2 of the magnitudes a scale may take and stay a normal f32 (smallest normal 2^-126; largest below 2^128).
NORMAL_LOG2 = (-126.0, 127.0)
#: Fill values that scaling by a positive number leaves as they are: masked scores stay masked.
_SCALE_INVARIANT = (float("-inf"), float("inf"), 0.0)


class _Scale:
    """A splatted scalar `c` that multiplies a tile, and the kernel arguments assumed positive to prove `c > 0`."""

    def __init__(self, scalar: ir.Value, assumed: frozenset):
        self.scalar, self.assumed = scalar, assumed


def _log2_bounds(scalar: ir.Value, assume: bool, assumed: set):
    """[lo, hi] bounds of log2(scalar) for a scalar provably positive, else None; adds the kernel arguments the
    proof assumes positive to `assumed`."""
    op = defining_op(scalar)
    if op is None:
        parent = scalar.owner.owner
        if not assume or parent is None or as_op(parent).name != "func.func" or \
                not isinstance(scalar.type, ir.F32Type):
            return None
        assumed.add(ir.BlockArgument(scalar).arg_number)
        return tuple(math.log2(v) for v in POSITIVE_ARG_RANGE)
    if op.name == "arith.constant":
        attr = op.attributes["value"]
        if not isinstance(attr, ir.FloatAttr):
            return None
        v = ir.FloatAttr(attr).value
        return (math.log2(v),) * 2 if 0.0 < v < math.inf and _normal((math.log2(v),) * 2) else None
    if op.name in ("arith.mulf", "arith.divf"):
        a, b = (_log2_bounds(x, assume, assumed) for x in op.operands)
        if a is None or b is None:
            return None
        bounds = (a[0] + b[0], a[1] + b[1]) if op.name == "arith.mulf" else (a[0] - b[1], a[1] - b[0])
        return bounds if _normal(bounds) else None      # (every product on the way, not only the last)
    return None


def _normal(bounds) -> bool:
    return NORMAL_LOG2[0] <= bounds[0] and bounds[1] <= NORMAL_LOG2[1]


def _positive_scale(value: ir.Value, assume: bool):
    """The `_Scale` of a splatted f32 scalar that is provably a positive normal float, else None."""
    scalar = splatted_f32(value)
    if scalar is None:
        return None
    assumed: set = set()
    bounds = _log2_bounds(scalar, assume, assumed)
    if bounds is None or not _normal(bounds):
        return None
    return _Scale(scalar, frozenset(assumed))


def _invariant_fill(value: ir.Value) -> bool:
    """Whether `value` is a splat of -inf, +inf or 0 (the same after scaling by a positive number)."""
    scalar = splatted_f32(value)
    op = defining_op(scalar) if scalar is not None else None
    if op is None or op.name != "arith.constant" or not isinstance(op.attributes["value"], ir.FloatAttr):
        return False
    return ir.FloatAttr(op.attributes["value"]).value in _SCALE_INVARIANT


def _yields(if_op) -> list:
    """The `scf.yield` of each region of an `scf.if` (both regions present), else None."""
    if len(if_op.regions) != 2 or not len(if_op.regions[1].blocks):
        return None
    return [list(r.blocks[0].operations)[-1] for r in if_op.regions]


def _scale_of(value: ir.Value, assume: bool):
    """The `_Scale` that `value` is a tile times (per the module's docstring), else None. Reads, changes nothing."""
    if not is_f32_tile(value):
        return None
    op = defining_op(value)
    if op is None:
        return None
    if op.name == "arith.mulf":
        for i in (0, 1):
            scale = _positive_scale(op.operands[i], assume)
            if scale is not None:
                return scale
        return None
    if op.name == "arith.select":
        _, a, b = op.operands
        if _invariant_fill(b):
            return _scale_of(a, assume)
        if _invariant_fill(a):
            return _scale_of(b, assume)
        sa, sb = _scale_of(a, assume), _scale_of(b, assume)
        return sa if sa is not None and sb is not None and sa.scalar == sb.scalar else None
    if op.name == "scf.if":
        yields = _yields(op)
        if yields is None:
            return None
        index = ir.OpResult(value).result_number
        scales = [_scale_of(y.operands[index], assume) for y in yields]
        if any(s is None for s in scales) or scales[0].scalar != scales[1].scalar:
            return None
        inner = defining_op(scales[0].scalar)
        if inner is not None and is_ancestor(op, inner):
            return None                 # (the product after the if needs the scalar there)
        return _Scale(scales[0].scalar, scales[0].assumed | scales[1].assumed)
    return None


class _Strip:
    """One rewrite's state: the values no longer read once the rewrite is done (erased only after the scale has
    its new readers: erased earlier, they could take the scale's own definition with them), and the `scf.if`
    results already changed (a tile reached twice, through two masks, is unscaled once; each result of an
    `scf.if` on its own)."""

    def __init__(self, scale: _Scale):
        self.scale, self.dead, self.ifs = scale, [], []

    def unscaled(self, value: ir.Value) -> ir.Value:
        """The tile that `value` is the scale times (`_scale_of` said so): the product's other factor, a new mask
        of the unscaled tile (built before the old one), or the `scf.if` itself, changed to yield the unscaled
        tiles, its readers then reading its result times the scale (built after it). Other readers of a product
        or a mask are left as they are."""
        op = defining_op(value)
        if op.name == "arith.mulf":
            for i in (0, 1):
                factor = splatted_f32(op.operands[i])
                if factor is not None and factor == self.scale.scalar:
                    return op.operands[1 - i]
            raise AssertionError("scale-after-max: a product without the scale")
        if op.name == "arith.select":
            cond, a, b = op.operands
            a = a if _invariant_fill(a) else self.unscaled(a)
            b = b if _invariant_fill(b) else self.unscaled(b)
            with ir.InsertionPoint(op), op.location:
                return arith.SelectOp(cond, a, b).result
        index = ir.OpResult(value).result_number
        if any(op == done and index == i for done, i in self.ifs):
            return value                # (changed already: it yields the unscaled tiles there)
        self.ifs.append((op, index))
        readers = [(as_op(u.owner), u.operand_number) for u in value.uses]
        for y in _yields(op):
            old = y.operands[index]
            y.operands[index] = self.unscaled(old)
            self.dead.append(old)
        with ir.InsertionPoint.after(op), op.location:
            scaled = arith.MulFOp(value, splat(self.scale.scalar, value.type)).result
        for owner, number in readers:
            owner.operands[number] = scaled
        self.dead.append(scaled)
        return value


def _erase_unused(values: list) -> None:
    """Erase the ops defining `values` that nothing reads any more, then their operands' in turn (splats,
    broadcasts, arith: what `erase_if_unused` erases), each op once whatever the order or repeats in `values`."""
    pending = []

    def add(value):
        op = defining_op(value)
        if op is not None and not op.regions and len(op.results) == 1 and \
                (op.name in (SplatOp.NAME, BroadcastOp.NAME, ExpandDimsOp.NAME) or op.name.startswith("arith.")) \
                and not any(op == p for p in pending):
            pending.append(op)
    for value in values:
        add(value)
    progress = True
    while progress:
        progress = False
        for op in list(pending):
            if not list(op.results[0].uses):
                pending.remove(op)
                operands = list(op.operands)
                op.erase()
                for operand in operands:
                    add(operand)
                progress = True


def _exponent_only(value: ir.Value, reduce) -> bool:
    """Whether every reader of `value` but `reduce` is another max/min reduction or the minuend of a subtraction
    that only exponentials read (`exp(s - m)`, `exp2(s - m)`): there the scaled tile costs nothing after the
    rewrite (exp-base2 folds the scale into its log2(e) product; an exp2's multiply and subtraction contract into
    one FMA). A scaled tile stored or summed keeps its multiply whatever the maximum reads, and its scale is not
    worth assuming positive (a GEMM's alpha may be negative)."""
    for use in value.uses:
        owner = as_op(use.owner)
        if owner == reduce or (owner.name == ReduceOp.NAME and ReduceOp(owner).kind in ("max", "min")):
            continue
        if owner.name != "arith.subf" or use.operand_number != 0 or \
                not all(as_op(u.owner).name in ("math.exp", "math.exp2") for u in owner.results[0].uses):
            return False
    return True


def _rewrite(reduce, assume: bool, assumed: set) -> bool:
    red = ReduceOp(reduce)
    if red.kind not in ("max", "min"):
        return False
    scores = red.src
    scale = _scale_of(scores, assume)
    if scale is None or not _exponent_only(scores, reduce):
        return False
    op = defining_op(scores)
    others = [(as_op(u.owner), u.operand_number) for u in scores.uses if as_op(u.owner) != reduce]
    strip = _Strip(scale)
    unscaled = strip.unscaled(scores)
    if op.name == "arith.select" and others:
        # the masked tile's other readers (the exponentials) read the unscaled one times the scale, which
        # `exp-base2` folds into its log2(e) product (a product read as it is keeps its one multiply for them; an
        # `scf.if`'s readers were given that product by `unscaled`)
        with ir.InsertionPoint(op), op.location:
            scaled = arith.MulFOp(unscaled, splat(scale.scalar, scores.type)).result
        for owner, number in others:
            owner.operands[number] = scaled
    with ir.InsertionPoint(reduce), reduce.location:
        attributes = {reduce.attributes[i].name: reduce.attributes[i].attr for i in range(len(reduce.attributes))}
        row_type = reduce.results[0].type
        plain = ir.Operation.create(ReduceOp.NAME, results=[row_type], operands=[unscaled],
                                    attributes=attributes).result
        factor = scale.scalar if isinstance(row_type, ir.F32Type) else splat(scale.scalar, row_type)
        result = arith.MulFOp(plain, factor).result
    read = reduce.operands[0]
    reduce.results[0].replace_all_uses_with(result)
    reduce.erase()
    _erase_unused(strip.dead + [read] + ([scores] if op.name != "scf.if" else []))
    assumed |= scale.assumed
    return True


def run(module, options):
    assume = getattr(options, "positive_scales", None) is not False
    with module.context:
        for func in kernels(module):
            assumed: set = set()
            for op in [o for o in walk(func) if o.name == ReduceOp.NAME]:
                _rewrite(op, assume, assumed)
            if assumed:
                attrs.POSITIVE_PARAMS.set(func, sorted(assumed | set(attrs.POSITIVE_PARAMS.get(func))))
    return module
