"""fp8 (f8E4M3FN, f8E5M2) values in the emitted code: conversions and memory access.

fp8 values keep their MLIR type in the emitted code (the LLVM lowering stores them as i8); loads and stores go
through i8 (`storage_type`, `to_storage`, `from_storage`). Arithmetic on them runs in f32, as the interpreter
computes it: operands are widened exactly (`cvt.rn.f16x2.e4m3x2`) and results rounded to nearest even
(`cvt.rn.satfinite.e4m3x2.f32`). That hardware conversion saturates where the interpreter (ml_dtypes) overflows, so
the overflow is restored: beyond the largest finite value's rounding range e4m3 gives NaN (it has no infinity) and
e5m2 gives infinity, with the input's sign.
"""
from __future__ import annotations

from tawa.elements import FP8

from .builder import Builder, V


_FP8_PTX = {"f8E4M3FN": "e4m3x2", "f8E5M2": "e5m2x2"}
#: (|x| limit, comparison that overflows, magnitude bits of the overflow value) of ml_dtypes' rounding: e4m3 rounds
#: up to 448 until 464 and to NaN above; e5m2 rounds to infinity from 61440 (a tie, to the even infinity) up.
_FP8_OVERFLOW = {"f8E4M3FN": (464.0, "ogt", 0x7F), "f8E5M2": (61440.0, "oge", 0x7C)}
_BITS = {"f8E4M3FN": 8, "f8E5M2": 8, "f16": 16, "bf16": 16, "f32": 32, "f64": 64}


def is_fp8(t: str) -> bool:
    return t in FP8


def storage_type(elem: str) -> str:
    """The type an element is loaded and stored as (fp8 has no LLVM type: i8)."""
    return "i8" if is_fp8(elem) else elem


def to_storage(b: Builder, v: V) -> V:
    return b.op(f"arith.bitcast {v} : {v.type} to i8", "i8") if is_fp8(v.type) else v


def from_storage(b: Builder, v: V, elem: str) -> V:
    return b.op(f"arith.bitcast {v} : {v.type} to {elem}", elem) if is_fp8(elem) else v


def _cvt_f16x2(b: Builder, h: V, elem: str) -> V:
    """The two fp8 elements of type `elem` in the i16 `h` (low byte first) as two f16 in an i32 (`cvt.rn.f16x2`)."""
    return b.op(f'"llvm.inline_asm"({h}) <{{asm_string = "cvt.rn.f16x2.{_FP8_PTX[elem]} $0, $1;", '
                f'constraints = "=r,h"}}> : (i16) -> i32', "i32")


def fp8_to_f32(b: Builder, v: V) -> V:
    """The exact f32 value of an fp8 element (through the hardware's fp8x2 -> f16x2 conversion)."""
    pair = _cvt_f16x2(b, b.cast("extui", to_storage(b, v), "i16"), v.type)
    half = b.op(f"arith.bitcast {b.cast('trunci', pair, 'i16')} : i16 to f16", "f16")
    return b.cast("extf", half, "f32")


def f32_to_fp8(b: Builder, x: V, elem: str) -> V:
    """f32 -> fp8, rounded to nearest even, overflowing as ml_dtypes does (see the module docstring)."""
    pair = b.op(f'"llvm.inline_asm"({b.const(0.0, "f32")}, {x}) <{{asm_string = '
                f'"cvt.rn.satfinite.{_FP8_PTX[elem]}.f32 $0, $1, $2;", constraints = "=h,f,f"}}> : (f32, f32) -> i16',
                "i16")
    bits = b.cast("trunci", pair, "i8")
    limit, pred, special = _FP8_OVERFLOW[elem]
    ax = b.op(f"math.absf {x} : f32", "f32")
    over = b.op(f"arith.cmpf {pred}, {ax}, {b.const(limit, 'f32')} : f32", "i1")
    sign = b.cast("trunci", b.and_(b.shr(b.op(f"arith.bitcast {x} : f32 to i32", "i32"), 24), 0x80), "i8")
    return from_storage(b, b.select(over, b.or_(sign, special), bits), elem)


def pack_word(b: Builder, elems: list) -> V:
    """One 32-bit register of a wgmma A fragment from its 1, 2 or 4 elements (lowest address first)."""
    if len(elems) == 1:
        return b.op(f"arith.bitcast {elems[0]} : {elems[0].type} to i32", "i32")
    elems = [to_storage(b, e) for e in elems]
    t = elems[0].type
    vec = f"vector<{len(elems)}x{t}>"
    u = b.op(f"llvm.mlir.undef : {vec}", vec)
    for i, e in enumerate(elems):
        u = b.op(f"llvm.insertelement {e}, {u}[{b.i32(i)} : i32] : {vec}", vec)
    return b.op(f"llvm.bitcast {u} : {vec} to i32", "i32")


def narrow_fp8_pairs(b: Builder, regs: list, elem: str, at_most=None) -> list:
    """f32 registers rounded to the fp8 type `elem`, two to one `cvt.rn.satfinite` (one conversion an element and
    its overflow check, `f32_to_fp8`, cost about six instructions an element: in an fp8 attention kernel's
    softmax, P's conversion outweighed the exponentials). The saturation the paired conversion applies is undone
    as `f32_to_fp8` does, register by register, on a branch taken only where some register's magnitude reaches
    the overflow range (NaN inputs convert to NaN on either path). `at_most`: a bound a pass proved for every
    magnitude (`attrs.AT_MOST`); below the overflow range there is nothing to undo and no check is emitted (in fp8
    attention the check cost a tenth of the loop: 684 against 751 TFLOP/s, H200)."""
    limit, pred, _ = _FP8_OVERFLOW[elem]
    if at_most is not None and at_most < limit and len(regs) % 2 == 0:
        return [from_storage(b, v, elem) for v in _paired(b, regs, elem)]
    if len(regs) < 2:
        return [f32_to_fp8(b, r, elem) for r in regs]
    level = [b.op(f"math.absf {r} : f32", "f32") for r in regs]
    while len(level) > 1:               # (a tree: independent maxima issue back to back)
        level = [b.op(f"arith.maxnumf {level[i]}, {level[i + 1]} : f32", "f32") if i + 1 < len(level) else level[i]
                 for i in range(0, len(level), 2)]
    over = b.op(f"arith.cmpf {pred}, {level[0]}, {b.const(limit, 'f32')} : f32", "i1")

    def paired():
        out = _paired(b, regs[:len(regs) - len(regs) % 2], elem)
        if len(regs) % 2:
            out.append(to_storage(b, f32_to_fp8(b, regs[-1], elem)))
        return out

    bits = b.if_else_values(over, lambda: [to_storage(b, f32_to_fp8(b, r, elem)) for r in regs], paired,
                            ["i8"] * len(regs))
    return [from_storage(b, v, elem) for v in bits]


def _paired(b: Builder, regs: list, elem: str) -> list:
    """The i8 bits of an even number of f32 registers rounded to fp8, two per `cvt.rn.satfinite` (saturating)."""
    out = []
    for i in range(0, len(regs) - 1, 2):
        # (the first operand goes to the upper byte)
        pair = b.op(f'"llvm.inline_asm"({regs[i + 1]}, {regs[i]}) <{{asm_string = '
                    f'"cvt.rn.satfinite.{_FP8_PTX[elem]}.f32 $0, $1, $2;", constraints = "=h,f,f"}}> : '
                    f'(f32, f32) -> i16', "i16")
        out.append(b.cast("trunci", pair, "i8"))
        out.append(b.cast("trunci", b.op(f"arith.shrui {pair}, {b.const(8, 'i16')} : i16", "i16"), "i8"))
    return out


def fp8_pair_to_f16(b: Builder, lo: V, hi: V) -> tuple:
    """Two fp8 elements of one type as their exact f16 values, through one `cvt.rn.f16x2` (a conversion a pair: a
    weight converted for the tensor cores converts every element of B each K step, and one conversion an element
    ran a W8A16 GEMM at 0.74-0.89x this). Integer ops and a packed multiply instead of the conversions (the bytes
    moved into the 16-bit type's exponent and mantissa bits, rebiased) ran 0.6-0.8x this, H200."""
    vec = b.op("llvm.mlir.undef : vector<2xi8>", "vector<2xi8>")
    for i, v in enumerate((lo, hi)):
        vec = b.op(f"llvm.insertelement {to_storage(b, v)}, {vec}[{b.i32(i)} : i32] : vector<2xi8>", "vector<2xi8>")
    pair = _cvt_f16x2(b, b.op(f"llvm.bitcast {vec} : vector<2xi8> to i16", "i16"), lo.type)
    halves = b.op(f"llvm.bitcast {pair} : i32 to vector<2xf16>", "vector<2xf16>")
    return tuple(b.op(f"llvm.extractelement {halves}[{b.i32(i)} : i32] : vector<2xf16>", "f16") for i in (0, 1))


def widen_fp8_pairs(b: Builder, regs: list, to: str) -> list:
    """`regs` (fp8, one type) converted to the wider float `to` (f16, bf16, f32), two at a time."""
    out = []
    for i in range(0, len(regs) - 1, 2):
        out.extend(float_cast(b, h, to) for h in fp8_pair_to_f16(b, regs[i], regs[i + 1]))
    if len(regs) % 2:
        out.append(float_cast(b, regs[-1], to))
    return out


def float_cast(b: Builder, v: V, to: str) -> V:
    """A float conversion where either side may be fp8 (through the exact f32 value); else extf/truncf."""
    if v.type == to:
        return v
    if not (is_fp8(v.type) or is_fp8(to)):
        if _BITS[v.type] == _BITS[to]:     # f16 <-> bf16: through the exact f32 value
            return b.cast("truncf", b.cast("extf", v, "f32"), to)
        return b.cast("extf" if _BITS[v.type] < _BITS[to] else "truncf", v, to)
    x = fp8_to_f32(b, v) if is_fp8(v.type) else b.cast("extf", v, "f32")
    return f32_to_fp8(b, x, to) if is_fp8(to) else (x if to == "f32" else b.cast("truncf", x, to))


def fp8_constant(b: Builder, value: float, elem: str) -> V:
    """An fp8 constant, as its bit pattern (the value is an fp8 literal: converting it is exact)."""
    import ml_dtypes
    import numpy as np
    dtype = {"f8E4M3FN": ml_dtypes.float8_e4m3fn, "f8E5M2": ml_dtypes.float8_e5m2}[elem]
    bits = int(np.array(value, dtype=np.float32).astype(dtype).view(np.uint8))
    return from_storage(b, b.const(bits, "i8"), elem)
