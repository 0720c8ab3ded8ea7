"""A small text builder for the NVVM-level kernel: typed SSA values, scalar arithmetic, regions.

The conversion writes MLIR text (upstream `arith`, `scf`, `llvm`, `nvvm`, `gpu` ops; NVVM ops in the generic
form, which is stable across LLVM releases) and parses it once at the end. Writing text keeps every lowering
rule a few readable lines and makes the unrolled per-register code easy to inspect.

Constants and per-thread index math go to a prelude at the top of the kernel so that they dominate every use.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class V:
    """An SSA value of the output kernel: its name and MLIR type (as text)."""
    name: str
    type: str

    def __str__(self) -> str:
        return self.name


FLOAT_TYPES = ("f16", "bf16", "f32", "f64", "f8E4M3FN", "f8E5M2")


def is_float(t: str) -> bool:
    return t in FLOAT_TYPES


class Builder:
    def __init__(self):
        self.prelude: list[str] = []
        self.lines: list[str] = []
        self._n = 0
        self._indent = 2
        self._consts: dict = {}

    # ---- raw emission --------------------------------------------------------------------------------------
    def fresh(self, prefix: str = "v") -> str:
        self._n += 1
        return f"%{prefix}{self._n}"

    def line(self, text: str) -> None:
        self.lines.append("  " * self._indent + text)

    @contextmanager
    def redirect(self, lines: list, indent: int = 2):
        """Emit into `lines` for a while (the kernel's start-up section, for instance)."""
        saved, saved_indent = self.lines, self._indent
        self.lines, self._indent = lines, indent
        try:
            yield
        finally:
            self.lines, self._indent = saved, saved_indent

    @contextmanager
    def indented(self):
        self._indent += 1
        try:
            yield
        finally:
            self._indent -= 1

    def op(self, rhs: str, type: str, prelude: bool = False) -> V:
        name = self.fresh()
        text = f"{name} = {rhs}"
        if prelude:
            self.prelude.append("    " + text)
        else:
            self.line(text)
        return V(name, type)

    def generic(self, name: str, operands=(), results=(), props: str = "", attrs: str = "") -> list:
        """An op in generic form: `"name"(operands) <{props}> {attrs} : (types) -> (types)`."""
        ops = ", ".join(o.name for o in operands)
        types = ", ".join(o.type for o in operands)
        p = f" <{{{props}}}>" if props else ""
        a = f" {{{attrs}}}" if attrs else ""
        sig = f"({types}) -> ({', '.join(results)})"
        if not results:
            self.line(f'"{name}"({ops}){p}{a} : {sig}')
            return []
        if len(results) == 1:
            return [self.op(f'"{name}"({ops}){p}{a} : {sig}', results[0])]
        base = self.fresh()
        self.line(f'{base}:{len(results)} = "{name}"({ops}){p}{a} : {sig}')
        return [V(f"{base}#{i}", t) for i, t in enumerate(results)]

    # ---- constants -----------------------------------------------------------------------------------------
    def const(self, value, type: str = "i32") -> V:
        key = (repr(value), type)
        if key not in self._consts:
            if type == "i1":
                lit = "true" if value else "false"
            elif is_float(type):
                lit = _float_literal(float(value), type)
            else:
                lit = str(int(value))
            text = f"arith.constant {lit}" if type == "i1" else f"arith.constant {lit} : {type}"
            self._consts[key] = self.op(text, type, prelude=True)
        return self._consts[key]

    def i32(self, value: int) -> V:
        return self.const(value, "i32")

    # ---- scalar arithmetic ---------------------------------------------------------------------------------
    def binary(self, opname: str, a: V, b: V) -> V:
        return self.op(f"arith.{opname} {a}, {b} : {a.type}", a.type)

    def add(self, a: V, b) -> V:
        b = self._lift(b, a.type)
        if isinstance(b, V) and b.name == self.const(0, a.type).name:
            return a
        return self.binary("addf" if is_float(a.type) else "addi", a, b)

    def mul(self, a: V, b) -> V:
        return self.binary("mulf" if is_float(a.type) else "muli", a, self._lift(b, a.type))

    def sub(self, a: V, b) -> V:
        return self.binary("subf" if is_float(a.type) else "subi", a, self._lift(b, a.type))

    def and_(self, a: V, b) -> V:
        return self.binary("andi", a, self._lift(b, a.type))

    def or_(self, a: V, b) -> V:
        return self.binary("ori", a, self._lift(b, a.type))

    def xor(self, a: V, b) -> V:
        return self.binary("xori", a, self._lift(b, a.type))

    def shr(self, a: V, b) -> V:
        return self.binary("shrui", a, self._lift(b, a.type))

    def shl(self, a: V, b) -> V:
        return self.binary("shli", a, self._lift(b, a.type))

    def divu(self, a: V, b) -> V:
        return self.binary("divui", a, self._lift(b, a.type))

    def remu(self, a: V, b) -> V:
        return self.binary("remui", a, self._lift(b, a.type))

    def cmpi(self, pred: str, a: V, b) -> V:
        b = self._lift(b, a.type)
        return self.op(f"arith.cmpi {pred}, {a}, {b} : {a.type}", "i1")

    def select(self, c: V, a: V, b: V) -> V:
        return self.op(f"arith.select {c}, {a}, {b} : {a.type}", a.type)

    def cast(self, opname: str, a: V, to: str) -> V:
        if a.type == to:
            return a
        return self.op(f"arith.{opname} {a} : {a.type} to {to}", to)

    def ext_i64(self, a: V) -> V:
        return self.cast("extsi", a, "i64")

    def _lift(self, b, type):
        return b if isinstance(b, V) else self.const(b, type)

    # ---- pointers ------------------------------------------------------------------------------------------
    def gep(self, base: V, index: V | int, elem: str = "i8") -> V:
        if isinstance(index, int):
            if index == 0:
                return base
            return self.op(f"llvm.getelementptr {base}[{index}] : ({base.type}) -> {base.type}, {elem}", base.type)
        return self.op(f"llvm.getelementptr {base}[{index}] : ({base.type}, {index.type}) -> {base.type}, {elem}",
                       base.type)


    # ---- structured control flow ---------------------------------------------------------------------------
    @contextmanager
    def if_(self, cond: V):
        self.line(f"scf.if {cond} {{")
        with self.indented():
            yield
        self.line("}")

    def if_else(self, cond: V, then_fn, else_fn) -> None:
        """`scf.if` without results: then_fn/else_fn emit the two bodies."""
        self.line(f"scf.if {cond} {{")
        with self.indented():
            then_fn()
        self.line("} else {")
        with self.indented():
            else_fn()
        self.line("}")

    def if_else_values(self, cond: V, then_fn, else_fn, types: list) -> list:
        """`scf.if` yielding values; then_fn/else_fn emit their bodies and return the values to yield."""
        base = self.fresh()
        res = f"{base}:{len(types)} = " if len(types) > 1 else f"{base} = "
        self.line(f"{res}scf.if {cond} -> ({', '.join(types)}) {{")
        with self.indented():
            vals = then_fn()
            self.line(f"scf.yield {', '.join(v.name for v in vals)} : {', '.join(v.type for v in vals)}")
        self.line("} else {")
        with self.indented():
            vals = else_fn()
            self.line(f"scf.yield {', '.join(v.name for v in vals)} : {', '.join(v.type for v in vals)}")
        self.line("}")
        if len(types) == 1:
            return [V(base, types[0])]
        return [V(f"{base}#{i}", t) for i, t in enumerate(types)]


def _float_literal(x: float, type: str) -> str:
    import math
    import struct
    if math.isinf(x) or math.isnan(x):
        if type == "f32":
            return "0x" + struct.pack(">f", x).hex().upper()
        if type == "f16":
            return {float("inf"): "0x7C00", float("-inf"): "0xFC00"}.get(x, "0x7E00")
        if type == "bf16":
            return {float("inf"): "0x7F80", float("-inf"): "0xFF80"}.get(x, "0x7FC0")
        if type == "f64":
            return "0x" + struct.pack(">d", x).hex().upper()
    return repr(float(x))
