"""The syntax tree of a .tawa kernel, as built by `tawa.frontend.parser` from Lark's parse tree.

Plain dataclasses with a 1-based `line`/`column` on every node, so the lowering can point errors at the exact
spot. Also `reads`/`assigns`: the variable names a statement list reads and writes, which the lowering needs to
decide what a loop or an `if` carries.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union


@dataclass
class Node:
    line: int
    column: int


# ---- expressions -------------------------------------------------------------------------------------------
@dataclass
class Name(Node):
    id: str


@dataclass
class Num(Node):
    value: Union[int, float]


@dataclass
class Tuple(Node):
    items: list


@dataclass
class BinOp(Node):
    op: str            # + - * / // % & | and or < <= > >= == !=
    left: "Expr"
    right: "Expr"


@dataclass
class UnaryOp(Node):
    op: str            # - not
    operand: "Expr"


@dataclass
class Keyword(Node):
    name: str
    value: "Expr"


@dataclass
class Call(Node):
    func: "Expr"
    args: list
    kwargs: list       # list[Keyword]


@dataclass
class Subscript(Node):
    value: "Expr"
    items: list        # Expr or Slice


@dataclass
class Slice(Node):
    """A slice in a subscript: a bare `:` (start and stop None), `a:`, `:b` or `a:b`."""
    start: "Expr | None" = None
    stop: "Expr | None" = None

    @property
    def bare(self) -> bool:
        return self.start is None and self.stop is None


@dataclass
class Attribute(Node):
    value: "Expr"
    attr: str


Expr = Union[Name, Num, Tuple, BinOp, UnaryOp, Call, Subscript, Attribute]


# ---- statements --------------------------------------------------------------------------------------------
@dataclass
class Assign(Node):
    target: str
    value: Expr
    op: Optional[str] = None     # "+" for `+=` etc.


@dataclass
class ExprStmt(Node):
    value: Expr


@dataclass
class Pass(Node):
    pass


@dataclass
class Return(Node):
    pass


@dataclass
class For(Node):
    var: str
    iter: Expr
    body: list


@dataclass
class If(Node):
    test: Expr
    body: list
    orelse: list       # an `elif` is an If alone in orelse


# ---- declarations ------------------------------------------------------------------------------------------
@dataclass
class TypeRef(Node):
    name: str                       # dtype name, `const`, or a constant holding a dtype
    dims: Optional[list] = None     # tensor: list of (str | int, line, column); scalar: None


@dataclass
class Param(Node):
    name: str
    type: Optional[TypeRef]
    default: Optional[Expr]


@dataclass
class Decorator(Node):
    name: str
    args: Optional[list]            # None: no parentheses
    kwargs: list = field(default_factory=list)


@dataclass
class Kernel(Node):
    name: str
    decorators: list
    params: list
    body: list


# ---- variable use ------------------------------------------------------------------------------------------
def expr_reads(e, out: set) -> set:
    """Every name read in expression `e`, added to `out` (iterative: expressions may nest thousands deep)."""
    todo = [e]
    while todo:
        e = todo.pop()
        if isinstance(e, Name):
            out.add(e.id)
        elif isinstance(e, Tuple):
            todo.extend(e.items)
        elif isinstance(e, BinOp):
            todo.append(e.left)
            todo.append(e.right)
        elif isinstance(e, UnaryOp):
            todo.append(e.operand)
        elif isinstance(e, Call):
            todo.append(e.func)
            todo.extend(e.args)
            todo.extend(k.value for k in e.kwargs)
        elif isinstance(e, Subscript):
            todo.append(e.value)
            todo.extend(e.items)
        elif isinstance(e, Attribute):
            todo.append(e.value)
        elif isinstance(e, Slice):           # a view's bounds (`X[start:end]`)
            todo.extend(x for x in (e.start, e.stop) if x is not None)
    return out


def reads(stmts: list, out: Optional[set] = None) -> set:
    """Every name read anywhere in `stmts` (including nested bodies)."""
    out = set() if out is None else out
    for s in stmts:
        if isinstance(s, Assign):
            expr_reads(s.value, out)
            if s.op:
                out.add(s.target)
        elif isinstance(s, ExprStmt):
            expr_reads(s.value, out)
        elif isinstance(s, For):
            expr_reads(s.iter, out)
            reads(s.body, out)
        elif isinstance(s, If):
            expr_reads(s.test, out)
            reads(s.body, out)
            reads(s.orelse, out)
    return out


def assigns(stmts: list, out: Optional[set] = None) -> set:
    """Every name assigned anywhere in `stmts` (including nested bodies and loop variables)."""
    out = set() if out is None else out
    for s in stmts:
        if isinstance(s, Assign):
            out.add(s.target)
        elif isinstance(s, For):
            out.add(s.var)
            assigns(s.body, out)
        elif isinstance(s, If):
            assigns(s.body, out)
            assigns(s.orelse, out)
    return out


def reads_before_assign(stmts: list) -> set:
    """Names that `stmts` may read before writing them (so their incoming value matters)."""
    result: set = set()
    written: set = set()

    def visit(block: list, written: set) -> set:
        for s in block:
            if isinstance(s, Assign):
                r = expr_reads(s.value, set())
                if s.op:
                    r.add(s.target)
                result.update(r - written)
                written = written | {s.target}
            elif isinstance(s, ExprStmt):
                result.update(expr_reads(s.value, set()) - written)
            elif isinstance(s, For):
                result.update(expr_reads(s.iter, set()) - written)
                visit(s.body, written | {s.var})
                # The body may run zero times: its writes do not count as definite.
            elif isinstance(s, If):
                result.update(expr_reads(s.test, set()) - written)
                w1 = visit(s.body, set(written))
                w2 = visit(s.orelse, set(written))
                written = written | (w1 & w2)
        return written

    visit(stmts, written)
    return result
