"""Text of a .tawa file -> `tawa.frontend.syntax.Kernel`.

Lark LALR(1) with a Python-style indenter (INDENT/DEDENT tokens; newlines inside brackets are ignored). The
parser is built once, on first use, so `import tawa.frontend` stays cheap. Every Lark exception becomes a
`CompilationError` at the offending token, with the source line.
"""
from __future__ import annotations

import functools
import threading
from pathlib import Path

from ..errors import CompilationError, location_of
from . import syntax as S

_GRAMMAR = Path(__file__).with_name("tawa.lark")
_PARSE_LOCK = threading.Lock()


def _indenter_class():
    from lark import Token
    from lark.indenter import Indenter

    class TawaIndenter(Indenter):
        NL_type = "_NEWLINE"
        OPEN_PAREN_types = ["LPAR", "LSQB", "LBRACE"]
        CLOSE_PAREN_types = ["RPAR", "RSQB", "RBRACE"]
        INDENT_type = "_INDENT"
        DEDENT_type = "_DEDENT"
        tab_len = 8

        def process(self, stream):
            self.open_brackets = []       # the unclosed bracket tokens, for "never closed" errors
            return super().process(stream)

        def _process(self, stream):
            token = None
            for token in stream:
                if token.type == self.NL_type:
                    yield from self.handle_NL(token)
                else:
                    yield token
                if token.type in self.OPEN_PAREN_types:
                    self.paren_level += 1
                    self.open_brackets.append(token)
                elif token.type in self.CLOSE_PAREN_types:
                    self.paren_level -= 1
                    if self.open_brackets:
                        self.open_brackets.pop()
            while len(self.indent_level) > 1:
                self.indent_level.pop()
                yield (Token.new_borrow_pos(self.DEDENT_type, "", token) if token
                       else Token(self.DEDENT_type, "", 0, 1, 1, 1, 1, 0))

        def handle_NL(self, token):
            if self.paren_level > 0:
                return
            yield token
            indent_str = token.rsplit("\n", 1)[1] if "\n" in token else ""
            indent = indent_str.count(" ") + indent_str.count("\t") * self.tab_len
            if indent > self.indent_level[-1]:
                self.indent_level.append(indent)
                yield token.__class__.new_borrow_pos(self.INDENT_type, indent_str, token)
            else:
                while indent < self.indent_level[-1]:
                    self.indent_level.pop()
                    yield token.__class__.new_borrow_pos(self.DEDENT_type, indent_str, token)
                if indent != self.indent_level[-1]:
                    # Point at the first character of the badly indented line.
                    raise _IndentError(token.end_line, indent + 1)

    return TawaIndenter


class _IndentError(Exception):
    def __init__(self, line: int, column: int):
        self.line, self.column = line, column


@functools.lru_cache(maxsize=1)
def _parser():
    from lark import Lark
    # cache=True: lark keeps the LALR tables in a file keyed by the grammar's hash; building them takes ~0.1 s.
    return Lark(_GRAMMAR.read_text(), parser="lalr", postlex=_indenter_class()(), propagate_positions=True,
                maybe_placeholders=True, cache=True)


_TOKEN_NAMES = {"_NEWLINE": "end of line", "_INDENT": "indentation", "_DEDENT": "end of block",
                "$END": "end of file"}


def _unsupported_syntax(source: str, tok) -> str | None:
    """A note for Python syntax the language does not have, recognised at the token the parser stopped on."""
    lines = source.splitlines()
    if tok.line is None or not 1 <= tok.line <= len(lines):
        return None
    line = lines[tok.line - 1]
    before = line[:max((tok.column or 1) - 1, 0)]
    if str(tok) == "*" and before.rstrip().endswith("*"):
        return "there is no power operator '**': multiply (x * x), or use exp2 / exp and log"
    after = line[max((tok.column or 1) - 1, 0) + len(str(tok)):]
    if str(tok) in ("<", ">") and (before.endswith(str(tok)) or after.startswith(str(tok))):
        return "there are no shift operators ('<<', '>>'): multiply or floor-divide by a power of two " \
               "(x * 1024, x // 256), or write the constant (1073741824 for 1 << 30)"
    if str(tok) in ("<", "<=", ">", ">=", "==", "!=") and \
            any(op in before for op in ("<", ">", "==", "!=")):
        return "comparisons do not chain: write (a <= x) & (x < b)"
    if str(tok) == "[" and before.rstrip().endswith(("(", ",")):
        return "shapes and block coordinates are tuples, not lists: (BLOCK_M, BLOCK_N), or (BLOCK_M,) for one dim"
    if str(tok) == "[" and before.rstrip().endswith("="):
        return "there are no lists: a tile comes from load, zeros, full or arange; shapes are tuples"
    if str(tok) == "@" and before.strip() and not line.strip().startswith("@"):
        return "there is no '@' operator: use dot(a, b), or dot(a, b, acc) to add the product to acc"
    if str(tok) == ":" and "[" in before and before.count("[") > before.count("]") and \
            not line.lstrip().startswith("def "):
        return "a slice is start:end (no step); tiles are not sliced: load the block you need with load(T, " \
               "coords, shape), or reduce over an axis (sum, max); a tile subscript may only be ':' and None"
    if str(tok) == "," and "=" in after and "(" not in before and before.strip().isidentifier():
        return "there is no tuple unpacking: assign one name at a time (x = ...; y = ...)"
    if str(tok) == "if" and before.strip() == "else":
        return "write `elif cond:`"
    if str(tok) == "if" and before.strip():
        return "there is no conditional expression: where(cond, x, y) chooses between tiles or scalars; an if " \
               "statement chooses between statements"
    if str(tok) == "*" and before.rstrip().endswith(("(", ",")):
        return "there is no argument unpacking: pass each argument"
    if before.rstrip().endswith("lambda"):
        return "'lambda' is not part of the language (a kernel is assignments, `if`, `for i in range(...)` and " \
               "calls of its builtins); see docs/language.md"
    first = line.split()[0] if line.split() else ""
    if first == "return":
        return "a kernel returns nothing: store() its results; a bare `return` may end the kernel"
    if first in ("while", "break", "continue"):
        return f"'{first}' is not part of the language: loops are `for i in range(...)` and run to their end; " \
               "see docs/language.md"
    if first in ("try", "with", "class", "lambda", "import", "from", "global", "del", "assert", "raise"):
        return f"'{first}' is not part of the language (a kernel is assignments, `if`, `for i in range(...)` and " \
               "calls of its builtins); see docs/language.md"
    return None


def parse(source: str, filename: str = "<string>") -> list:
    """Parse a whole file; returns the list of `syntax.Kernel`s in it (the lowering insists on exactly one)."""
    from lark import exceptions as E
    text = source if source.endswith("\n") else source + "\n"
    # The parser and its indenter (which keeps per-parse state) are shared: one parse at a time.
    with _PARSE_LOCK:
        try:
            tree = _parser().parse(text)
        except _IndentError as e:
            raise CompilationError("syntax error: inconsistent indentation",
                                   location_of(filename, source, e.line, e.column)) from None
        except E.UnexpectedCharacters as e:
            ch = text[e.pos_in_stream] if e.pos_in_stream < len(text) else ""
            raise CompilationError(f"syntax error: unexpected character {ch!r}",
                                   location_of(filename, source, e.line, e.column)) from None
        except E.UnexpectedToken as e:
            tok = e.token
            opened = getattr(_parser().options.postlex, "open_brackets", None)
            if tok.type in ("$END", "_DEDENT") and opened:
                b = opened[-1]
                raise CompilationError(f"syntax error: '{b}' was never closed",
                                       location_of(filename, source, b.line, b.column)) from None
            if tok.type in _TOKEN_NAMES:
                what = _TOKEN_NAMES[tok.type]
            else:
                what = repr(str(tok))
            line = tok.line if tok.line is not None else len(source.splitlines())
            column = tok.column if tok.column is not None else 1
            if tok.type == "_NEWLINE":
                line, column = tok.line, tok.column    # where the line ends
            elif tok.type in ("_INDENT", "_DEDENT"):
                line, column = tok.end_line or line, (tok.end_column or 1)
            note = _unsupported_syntax(source, tok)
            if opened and line > opened[-1].line:
                b = opened[-1]
                note = f"the '{b}' at {b.line}:{b.column} is not closed"
            raise CompilationError(f"syntax error: unexpected {what}",
                                   location_of(filename, source, line, column), note) from None
        except E.UnexpectedEOF:
            lines = source.splitlines() or [""]
            raise CompilationError("syntax error: unexpected end of file",
                                   location_of(filename, source, len(lines), len(lines[-1]) + 1)) from None
        except E.UnexpectedInput as e:        # any other lexer/parser position error
            raise CompilationError("syntax error", location_of(filename, source, e.line, e.column)) from None
    return _ToAst().transform(tree).children


def _build_transformer():
    # Non-recursive: a long expression (`x + x + ... + x`) is a deep tree, which Lark's recursive Transformer
    # would walk with one Python frame per level.
    from lark import v_args, Token
    from lark.visitors import Transformer_NonRecursive as Transformer

    def pos(meta_or_tok):
        return meta_or_tok.line, meta_or_tok.column

    @v_args(meta=True)
    class ToAst(Transformer):
        # ---- declarations
        def kernel(self, meta, c):
            *decos, name, params, body = c
            return S.Kernel(name.line, name.column, str(name), decos, params or [], body)

        def decorator(self, meta, c):
            name, args = c
            plain = None if args is None else [a for a in args if not isinstance(a, S.Keyword)]
            kws = [] if args is None else [a for a in args if isinstance(a, S.Keyword)]
            return S.Decorator(*pos(meta), str(name), plain, kws)

        def params(self, meta, c):
            return [p for p in c if p is not None]

        def param(self, meta, c):
            name, ptype, default = c
            return S.Param(name.line, name.column, str(name), ptype, default)

        def type_name(self, meta, c):
            return S.TypeRef(*pos(c[0]), str(c[0]), None)

        def type_tensor(self, meta, c):
            return S.TypeRef(*pos(c[0]), str(c[0]), c[1])

        def dims(self, meta, c):
            return [d for d in c if d is not None]

        def dim_name(self, meta, c):
            return (str(c[0]), c[0].line, c[0].column)

        def dim_int(self, meta, c):
            return (int(c[0]), c[0].line, c[0].column)

        # ---- statements
        def suite(self, meta, c):
            return list(c)

        def assign(self, meta, c):
            return S.Assign(*pos(c[0]), str(c[0]), c[1])

        def augassign(self, meta, c):
            return S.Assign(*pos(c[0]), str(c[0]), c[2], op=str(c[1])[:-1])

        def pass_stmt(self, meta, c):
            return S.Pass(*pos(meta))

        def return_stmt(self, meta, c):
            return S.Return(*pos(meta))

        def expr_stmt(self, meta, c):
            return S.ExprStmt(*pos(meta), c[0])

        def for_stmt(self, meta, c):
            return S.For(*pos(meta), str(c[0]), c[1], c[2])

        def if_stmt(self, meta, c):
            test, body, *rest = c
            els = rest[-1]
            elifs = rest[:-1]
            orelse = els if els is not None else []
            for e in reversed(elifs):
                orelse = [S.If(e.line, e.column, e.test, e.body, orelse)]
            return S.If(*pos(meta), test, body, orelse)

        def elif_clause(self, meta, c):
            return S.If(*pos(meta), c[0], c[1], [])

        def else_clause(self, meta, c):
            return c[0]

        # ---- expressions
        def _bin(self, meta, op, l, r):
            return S.BinOp(*pos(meta), op, l, r)

        def or_op(self, meta, c):
            return self._bin(meta, "or", *c)

        def and_op(self, meta, c):
            return self._bin(meta, "and", *c)

        def not_op(self, meta, c):
            return S.UnaryOp(*pos(meta), "not", c[0])

        def compare(self, meta, c):
            return S.BinOp(*pos(c[1]), str(c[1]), c[0], c[2])    # errors point at the operator

        def bitor_op(self, meta, c):
            return self._bin(meta, "|", *c)

        def bitand_op(self, meta, c):
            return self._bin(meta, "&", *c)

        def binop(self, meta, c):
            return S.BinOp(*pos(c[1]), str(c[1]), c[0], c[2])

        def neg(self, meta, c):
            return S.UnaryOp(*pos(meta), "-", c[0])

        def call(self, meta, c):
            fn, args = c
            args = args or []
            plain = [a for a in args if not isinstance(a, S.Keyword)]
            kws = [a for a in args if isinstance(a, S.Keyword)]
            return S.Call(fn.line, fn.column, fn, plain, kws)

        def subscript(self, meta, c):
            return S.Subscript(c[0].line, c[0].column, c[0], c[1])

        def attribute(self, meta, c):
            return S.Attribute(c[0].line, c[0].column, c[0], str(c[1]))

        def name(self, meta, c):
            return S.Name(*pos(c[0]), str(c[0]))

        def int_lit(self, meta, c):
            return S.Num(*pos(c[0]), int(c[0]))

        def float_lit(self, meta, c):
            return S.Num(*pos(c[0]), float(c[0]))

        def tuple_expr(self, meta, c):
            return S.Tuple(*pos(meta), c[0])

        def empty_tuple(self, meta, c):
            return S.Tuple(*pos(meta), [])

        def tuple_items(self, meta, c):
            return [x for x in c if x is not None]

        def arguments(self, meta, c):
            return [a for a in c if a is not None]

        def kwarg(self, meta, c):
            return S.Keyword(*pos(c[0]), str(c[0]), c[1])

        def subscripts(self, meta, c):
            return [x for x in c if x is not None]

        def slice_all(self, meta, c):
            return S.Slice(*pos(meta))

        def slice_from(self, meta, c):
            return S.Slice(*pos(meta), c[0], None)

        def slice_to(self, meta, c):
            return S.Slice(*pos(meta), None, c[0])

        def slice_range(self, meta, c):
            return S.Slice(*pos(meta), c[0], c[1])

    return ToAst


class _ToAst:
    """Lazily built Lark transformer (Lark is imported on first parse only)."""
    _cls = None

    def transform(self, tree):
        if _ToAst._cls is None:
            _ToAst._cls = _build_transformer()
        return _ToAst._cls().transform(tree)
