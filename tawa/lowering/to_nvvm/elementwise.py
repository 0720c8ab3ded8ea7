"""Lowering of upstream `arith` / `math` ops, on scalars and on register tiles (mapped over the registers).

Each op is re-emitted in generic form with its own properties (comparison predicate, fast-math flags), once per
register for tiles; every tile operand is first brought to the result's layout. `math` ops on 16-bit floats are
computed in f32 (NVPTX has no 16-bit transcendental instructions).

Every op with an fp8 operand or result goes through f32, as the interpreter computes it: the operands are widened
exactly, the op runs in f32 and the result is rounded to fp8 (`fp8.float_cast`).
"""
from __future__ import annotations

from mlir import ir

from tawa.errors import CompilationError
from tawa.ir import attrs
from tawa.ir.location import source_location

from .builder import Builder, V
from tawa.ir.types import elem_type, is_tile

from .context import Ctx, LazyTile, Tile
from .fp8 import float_cast, fp8_constant, fp8_to_f32, f32_to_fp8, is_fp8, narrow_fp8_pairs, widen_fp8_pairs

_MATH_VIA_F32 = {"math.exp", "math.exp2", "math.log", "math.log2", "math.sqrt", "math.rsqrt", "math.tanh",
                 "math.sin", "math.cos", "math.erf", "math.absf"}


def _props(op) -> str:
    parts = []
    for i in range(len(op.attributes)):
        na = op.attributes[i]
        name = na.name
        if name.startswith("tawa."):
            continue
        parts.append(f"{name} = {na.attr}")
    return ", ".join(parts)


#: f32 ops lowered to the hardware's fast approximations (what CUDA's fast-math and Triton use): one MUFU
#: instruction instead of LLVM's generic expansions, which blow up register use in wide epilogues.
_FAST_F32 = {
    "math.exp": ("ex2.approx.ftz.f32 $0, $1;", 1.4426950408889634),
    "math.exp2": ("ex2.approx.ftz.f32 $0, $1;", None),
    "math.log": ("lg2.approx.ftz.f32 $0, $1;", "ln2"),
    "math.log2": ("lg2.approx.ftz.f32 $0, $1;", None),
    "math.rsqrt": ("rsqrt.approx.ftz.f32 $0, $1;", None),
    "math.tanh": ("tanh.approx.f32 $0, $1;", None),
    "arith.divf": ("div.full.f32 $0, $1, $2;", None),
}


def _asm(b: Builder, text: str, operands: list) -> V:
    cons = ",".join(["=f"] + ["f"] * len(operands))
    ops = ", ".join(o.name for o in operands)
    return b.op(f'"llvm.inline_asm"({ops}) <{{asm_string = "{text}", constraints = "{cons}"}}> : '
                f'({", ".join(o.type for o in operands)}) -> f32', "f32")


def _fp8_op(b: Builder, name: str, props: str, operands: list, result_type: str) -> V:
    """An op with an fp8 operand or result, computed on the operands' f32 values."""
    if name in ("arith.extf", "arith.truncf"):
        return float_cast(b, operands[0], result_type)
    if name == "arith.select":
        return b.generic(name, operands, [result_type], props=props)[0]
    wide = [fp8_to_f32(b, o) if is_fp8(o.type) else o for o in operands]
    if not is_fp8(result_type):          # comparisons, fp8 -> integer conversions
        return _scalar_op(b, name, props, wide, result_type)
    return f32_to_fp8(b, _scalar_op(b, name, props, wide, "f32"), result_type)


#: f32 ops that may be contracted into fused multiply-adds (as CUDA and Triton do by default): `x * c - m`
#: before an exponential becomes one FFMA, and a rescale-and-add one FFMA, instead of two rounded instructions.
_CONTRACTIBLE = ("arith.addf", "arith.subf", "arith.mulf")


def _contract(props: str) -> str:
    parts = [p for p in props.split(", ") if p and not p.startswith("fastmath")]
    return ", ".join(parts + ["fastmath = #arith.fastmath<contract>"])


def _scalar_op(b: Builder, name: str, props: str, operands: list, result_type: str) -> V:
    if is_fp8(result_type) or any(is_fp8(o.type) for o in operands):
        return _fp8_op(b, name, props, operands, result_type)
    if name in _CONTRACTIBLE and result_type == "f32":
        props = _contract(props)
    if result_type == "f32" and name in _FAST_F32:
        text, scale = _FAST_F32[name]
        if scale == "ln2":
            r = _asm(b, text, operands)
            return b.mul(r, b.const(0.6931471805599453, "f32"))
        if scale is not None:
            operands = [b.mul(operands[0], b.const(scale, "f32"))]
        return _asm(b, text, operands)
    if name in _MATH_VIA_F32 and result_type in ("f16", "bf16"):
        wide = [b.cast("extf", o, "f32") for o in operands]
        r = b.generic(name, wide, ["f32"], props=props)[0]
        return b.cast("truncf", r, result_type)
    return b.generic(name, operands, [result_type], props=props)[0]


def lower_constant(ctx: Ctx, op) -> None:
    value = op.attributes["value"]
    t = op.results[0].type
    if is_tile(t):
        from .shape import layout_of
        dense = ir.DenseElementsAttr(value)
        if not dense.is_splat:
            raise CompilationError("a constant tile must hold one value in every element (a splat)",
                                   source_location(op),
                                   note="build tiles that vary from arange() and arithmetic on it, or load them "
                                        "from a tensor")
        elem = elem_type(t)
        splat = dense.get_splat_value()
        scalar = fp8_constant(ctx.b, ir.FloatAttr(splat).value, elem) if is_fp8(elem) else \
            ctx.b.op(f"arith.constant {splat} : {elem}", elem)
        layout = layout_of(op)
        ctx.set(op.results[0], Tile([scalar] * len(layout.regs), layout, elem, uniform=True))
        return
    if is_fp8(str(t)):
        ctx.set(op.results[0], fp8_constant(ctx.b, ir.FloatAttr(value).value, str(t)))
        return
    ctx.set(op.results[0], ctx.b.op(f"arith.constant {value}", str(t)))


def lower_elementwise(ctx: Ctx, op) -> None:
    from .shape import as_tile, layout_of
    b = ctx.b
    name = op.name
    props = _props(op)
    result = op.results[0]
    if not is_tile(result.type):
        operands = [ctx.get(v) for v in op.operands]
        ctx.set(result, _scalar_op(b, name, props, operands, str(result.type)))
        return
    layout = layout_of(op)
    rtype = elem_type(result.type)
    # A multiply `lazy-rescale` marked is never lazy: its branch computes every register at once, or none.
    which = attrs.UNIT_SCALE_OPERAND.get(op) if name == "arith.mulf" and rtype == "f32" else None
    if ctx.lazy and which is None:
        # Register i of the result is computed when it is first needed, from register i of each operand.
        tiles = [as_lazy_tile(ctx, v, layout, op) for v in op.operands]
        ctx.set(result, LazyTile(layout, rtype, lambda i: _scalar_op(b, name, props, [_reg(t, i) for t in tiles],
                                                                      rtype)))
        return
    tiles = [as_tile(ctx, ctx.get(v), layout, elem_type(v.type), op) for v in op.operands]
    if which is not None:
        product = lambda: [b.mul(a, s) for a, s in zip(tiles[1 - which].regs, tiles[which].regs)]  # noqa: E731
        ctx.set(result, Tile(_unless_unit_scale(b, tiles[which], tiles[1 - which], product), layout, rtype))
        return
    if name == "arith.extf" and is_fp8(tiles[0].elem) and rtype in ("f16", "bf16", "f32"):
        ctx.set(result, Tile(widen_fp8_pairs(b, tiles[0].regs, rtype), layout, rtype))
        return
    if name == "arith.truncf" and is_fp8(rtype) and tiles[0].elem in ("f16", "bf16", "f32"):
        wide = [r if r.type == "f32" else b.cast("extf", r, "f32") for r in tiles[0].regs]
        ctx.set(result, Tile(narrow_fp8_pairs(b, wide, rtype, attrs.AT_MOST.get(op)), layout, rtype))
        return
    regs = [_scalar_op(b, name, props, [t.regs[i] for t in tiles], rtype) for i in range(len(layout.regs))]
    ctx.set(result, Tile(regs, layout, rtype))


def _unless_unit_scale(b: Builder, scale: Tile, other: Tile, product) -> list:
    """`product()`'s registers, or `other`'s as they are when every register of `scale` in this warp is exactly
    1.0: one warp vote and a uniform branch instead of a multiply per register (`lazy-rescale` marks the
    multiplies whose scale is usually all ones: attention's rescale of its accumulator)."""
    one = b.const(1.0, "f32")
    distinct = list({r.name: r for r in scale.regs}.values())
    differs = None
    for r in distinct:
        ne = b.op(f"arith.cmpf une, {r}, {one} : f32", "i1")
        differs = ne if differs is None else b.op(f"arith.ori {differs}, {ne} : i1", "i1")
    scaled = b.op(f"nvvm.vote.sync any {b.i32(-1)}, {differs} -> i1", "i1")
    return b.if_else_values(scaled, product, lambda: list(other.regs), ["f32"] * len(other.regs))


def _reg(tile, i: int) -> V:
    return tile.reg(i) if isinstance(tile, LazyTile) else tile.regs[i]


def as_lazy_tile(ctx: Ctx, value, layout, op):
    """An operand of a lazy elementwise op in `layout`: a lazy tile in that mapping as it is; anything else as
    `as_tile` gives it (materialized, converted, splatted, read from shared memory)."""
    from .shape import as_tile
    lowered = ctx.get_lazy(value)
    if isinstance(lowered, LazyTile) and lowered.layout.same_mapping(layout):
        return lowered
    return as_tile(ctx, ctx.get(value), layout, elem_type(value.type), op)
