"""Lowering of a kernel body (statements and expressions) to IR at the current insertion point.

Takes the syntax tree of the body and an environment of names; gives arith/math/scf/tawa ops. Compile-time
values (constants, literals, `if` on a `const`) fold in Python; run-time values become SSA values. Control flow:
- `for v in range(...)` becomes `scf.for` with i32 bounds. It carries, as iter_args, every variable defined before
  the loop and assigned in its body that is read after the loop or read in the body before being assigned; the
  carried value must keep its type. Variables first assigned inside the body are local to it.
- `if` on a run-time condition becomes `scf.if`, yielding every variable assigned in a branch that is read later
  and defined on both paths; both paths must give it the same type.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import scf

from . import syntax as S
from .builtins import BUILTIN_VALUES, UNARY_MATH, attribute, call_method
from .diag import TOO_DEEP
from .dtypes import DTYPES
from .ops import Emitter
from .values import Builtin, Method, TensorArg, Unavailable, describe, is_static, is_tile, is_value, shape_of

_SPECIAL = {"True": True, "False": False, "None": None, "inf": float("inf"), "nan": float("nan")}
#: Math functions of other languages: asked for one, the error lists the language's own (`UNARY_MATH`).
_MATH_ELSEWHERE = ("sin", "cos", "tan", "pow", "erf", "log2", "log10", "expm1", "log1p", "floor", "ceil", "round",
                   "relu", "gelu", "sinh", "cosh", "atan", "asin", "acos", "softplus")


class BodyLowering:
    def __init__(self, diag, globals_: dict, readonly: dict, const_anchor: ir.Operation | None = None):
        """`globals_`: names visible in the body besides variables (constants, tensors, shape symbols).
        `readonly`: name -> what it is, for names a kernel may not assign ("tensor parameter", ...).
        `const_anchor`: where scalar constants go (see `Emitter`)."""
        self.diag = diag
        self.emit = Emitter(diag, const_anchor)
        self.globals = globals_
        self.readonly = readonly
        self.assign_site: dict = {}

    def loc(self, node) -> ir.Location:
        return ir.Location.file(self.diag.filename, node.line, node.column)

    # ---- statements ----------------------------------------------------------------------------------------
    def block(self, stmts: list, env: dict, live_after, top: bool = False) -> None:
        # One pass for the whole block: the last statement reading each name, so "read after statement i" is
        # a lookup (rescanning the rest of the block for every statement made long kernels quadratic).
        last_read: dict = {}
        for i, s in enumerate(stmts):
            for n in S.reads([s]):
                last_read[n] = i
        for i, s in enumerate(stmts):
            after = _ReadAfter(last_read, i, live_after)
            with self.loc(s):
                if isinstance(s, S.Return):
                    if not (top and i == len(stmts) - 1):
                        raise self.diag.error(s, "return is only allowed as the last statement of a kernel")
                    continue
                try:
                    self.stmt(s, env, after)
                except RecursionError:
                    raise self.diag.error(s, TOO_DEEP) from None

    def stmt(self, s, env: dict, live_after: set) -> None:
        if isinstance(s, S.Assign):
            if s.target in self.readonly:
                raise self.diag.error(s, f"cannot assign to {self.readonly[s.target]} '{s.target}'")
            value = self.expr(s.value, env)
            if s.op:
                value = self.emit.binary(s.op, self.lookup(S.Name(s.line, s.column, s.target), env), value, s)
            if isinstance(value, (Builtin, Method)) or value is None and not isinstance(s.value, S.Name):
                raise self.diag.error(s.value, f"cannot assign {describe(value)} to a variable")
            env[s.target] = value
            self.assign_site[s.target] = s
        elif isinstance(s, S.ExprStmt):
            self.expr(s.value, env)
        elif isinstance(s, S.Pass):
            pass
        elif isinstance(s, S.For):
            self.for_loop(s, env, live_after)
        elif isinstance(s, S.If):
            self.if_stmt(s, env, live_after)
        else:     # pragma: no cover - the parser makes no other statements
            raise self.diag.error(s, f"unsupported statement {type(s).__name__}")

    def _carried_value(self, name, v, node, like=None):
        if isinstance(v, Unavailable):
            raise self.diag.error(node, f"'{name}' is {v.why}")
        if not (is_value(v) or is_static(v)):
            raise self.diag.error(node, f"variable '{name}' ({describe(v)}) cannot change inside a loop or "
                                  "an if on a run-time condition")
        return self.emit.materialize(v, node, like=like)

    def for_loop(self, s: S.For, env: dict, live_after: set) -> None:
        it = s.iter
        if not (isinstance(it, S.Call) and isinstance(it.func, S.Name) and it.func.id == "range"
                and "range" not in env):
            raise self.diag.error(it, "a for loop must iterate over range(...)")
        if it.kwargs or not 1 <= len(it.args) <= 3:
            raise self.diag.error(it, f"range() takes 1 to 3 arguments, got {len(it.args) + len(it.kwargs)}")
        bounds = [self.expr(a, env) for a in it.args]
        for a, b in zip(it.args, bounds):
            self.emit.index(b, a, "range bound")
        if len(bounds) == 1:
            bounds = [0, bounds[0]]
        if len(bounds) == 2:
            bounds.append(1)
        if is_static(bounds[2]) and bounds[2] <= 0:
            raise self.diag.error(it.args[2], f"range step must be positive, got {bounds[2]}")
        lb, ub, step = [self.emit.materialize(b, it) for b in bounds]

        body_assigned = _ordered_assigns(s.body)
        body_assigned = [n for n in body_assigned if n != s.var]
        needed = S.reads_before_assign(s.body) | live_after
        carried = [n for n in body_assigned if n in env and not isinstance(env[n], Unavailable) and n in needed]
        inits = [self._carried_value(n, env[n], s) for n in carried]

        loop = scf.ForOp(lb, ub, step, inits)
        body_env = dict(env)
        body_env[s.var] = loop.induction_variable
        for n, arg in zip(carried, loop.inner_iter_args):
            body_env[n] = arg
        with ir.InsertionPoint(loop.body):
            self.block(s.body, body_env, live_after | S.reads(s.body) | S.reads_before_assign(s.body))
            yields = []
            for n, init in zip(carried, inits):
                site = self.assign_site.get(n, s)
                v = self._carried_value(n, body_env[n], site, like=init.type)
                if v.type != init.type:
                    raise self.diag.error(site, f"loop-carried variable '{n}' changes type in the loop: "
                                          f"{describe(init)} before, {describe(v)} after")
                yields.append(v)
            scf.YieldOp(yields)
        for n in body_assigned:
            if n not in carried:
                env[n] = Unavailable(n, f"assigned inside the loop at line {s.line} and not available after it"
                                     if n in env else f"defined only inside the loop at line {s.line}; "
                                     "define it before the loop to use it afterwards")
        env[s.var] = Unavailable(s.var, f"the variable of the loop at line {s.line}; it is only defined "
                                        "inside the loop")
        for n, r in zip(carried, loop.results):
            env[n] = r

    def if_stmt(self, s: S.If, env: dict, live_after: set) -> None:
        cond = self.emit.truth(self.expr(s.test, env), s.test)
        if isinstance(cond, bool):           # compile-time condition: only the taken branch exists
            self.block(s.body if cond else s.orelse, env, live_after)
            return
        if is_tile(cond):
            raise self.diag.error(s.test, f"if condition must be a scalar, got {describe(cond)}",
                                  note="use where(cond, a, b) for elementwise selection")
        probe = scf.IfOp(cond, [], has_else=True)
        envs = []
        for block, stmts in ((probe.then_block, s.body), (probe.else_block, s.orelse)):
            benv = dict(env)
            with ir.InsertionPoint(block):
                self.block(stmts, benv, live_after)
            envs.append((block, benv))
        assigned = _ordered_assigns(s.body + s.orelse)
        results, values = [], [[], []]
        for n in assigned:
            defined = [n in e and not isinstance(e[n], Unavailable) for _, e in envs]
            if not all(defined):
                env[n] = Unavailable(n, f"assigned in only one branch of the if at line {s.line}")
                continue
            if n not in live_after:
                if n in env:
                    env[n] = Unavailable(n, f"assigned in the if at line {s.line} and not available after it")
                continue
            a, b = envs[0][1][n], envs[1][1][n]
            if is_static(a) and is_static(b) and type(a) is type(b) and a == b:
                env[n] = a
                continue
            site = self.assign_site.get(n, s)
            like = a.type if is_value(a) else (b.type if is_value(b) else None)
            vs = []
            for (block, _), v in zip(envs, (a, b)):
                with ir.InsertionPoint(block):
                    vs.append(self._carried_value(n, v, site, like=like))
            if vs[0].type != vs[1].type:
                raise self.diag.error(site, f"'{n}' has different types in the branches of the if at line "
                                      f"{s.line}: {describe(vs[0])} and {describe(vs[1])}")
            results.append(n)
            values[0].append(vs[0])
            values[1].append(vs[1])
        real = scf.IfOp(cond, [v.type for v in values[0]], has_else=True)
        for (old, _), new, vals in zip(envs, (real.then_block, real.else_block), values):
            with ir.InsertionPoint(new):
                term = scf.YieldOp(vals)
            for op in list(old.operations):
                op.move_before(term)
        probe.operation.erase()
        for n, r in zip(results, real.results):
            env[n] = r

    # ---- expressions ----------------------------------------------------------------------------------------
    def _unknown_name_note(self, name: str, env: dict) -> str | None:
        """'did you mean' a name in scope; for a math function the language lacks, the ones it has."""
        import difflib
        known = list(env) + list(self.globals) + list(BUILTIN_VALUES) + list(DTYPES)
        if name in ("break", "continue"):
            return f"'{name}' is not part of the language: loops are `for i in range(...)` and run to their end " \
                   "(an `if` in the body skips an iteration's work); see docs/language.md"
        if name in _MATH_ELSEWHERE:
            return f"'{name}' is not a builtin; the elementwise math functions are {', '.join(UNARY_MATH)}"
        close = difflib.get_close_matches(name, known, n=1)
        return f"did you mean '{close[0]}'?" if close else None

    def lookup(self, node: S.Name, env: dict):
        n = node.id
        if n in env:
            v = env[n]
        elif n in self.globals:
            v = self.globals[n]
            if callable(v) and not isinstance(v, (Builtin, Method)):
                v = v()          # shape symbols: `tawa.dim` made on first use
        elif n in _SPECIAL:
            v = _SPECIAL[n]
        elif n in DTYPES:
            v = DTYPES[n]
        elif n in BUILTIN_VALUES:
            v = BUILTIN_VALUES[n]
        else:
            raise self.diag.error(node, f"unknown name '{n}'", note=self._unknown_name_note(n, env))
        if isinstance(v, Unavailable):
            raise self.diag.error(node, f"'{n}' is {v.why}")
        return v

    def expr(self, e, env: dict):
        with self.loc(e):
            return self._expr(e, env)

    def _expr(self, e, env: dict):
        if isinstance(e, S.Num):
            return e.value
        if isinstance(e, S.Name):
            return self.lookup(e, env)
        if isinstance(e, S.Tuple):
            return tuple(self.expr(i, env) for i in e.items)
        if isinstance(e, S.BinOp):
            a = self.expr(e.left, env)
            if e.op in ("and", "or") and is_static(a):      # short-circuit on compile-time values
                if (e.op == "and") != bool(a):
                    return bool(a)
                return self.emit.truth(self.expr(e.right, env), e.right)
            b = self.expr(e.right, env)
            return self.emit.binary(e.op, a, b, e)
        if isinstance(e, S.UnaryOp):
            v = self.expr(e.operand, env)
            return self.emit.negate(v, e) if e.op == "-" else self.emit.logical_not(v, e)
        if isinstance(e, S.Call):
            fn = self.expr(e.func, env)
            args = [self.expr(a, env) for a in e.args]
            kwargs = {}
            for k in e.kwargs:
                if k.name in kwargs:
                    raise self.diag.error(k, f"keyword argument '{k.name}' repeated")
                kwargs[k.name] = self.expr(k.value, env)
            if isinstance(fn, Builtin):
                return fn.fn(self, e, args, kwargs)
            if isinstance(fn, Method):
                return call_method(self, e, fn, args, kwargs)
            raise self.diag.error(e, f"{describe(fn)} is not callable")
        if isinstance(e, S.Attribute):
            return attribute(self, e, self.expr(e.value, env), e.attr)
        if isinstance(e, S.Subscript):
            return self.subscript(e, env)
        raise self.diag.error(e, f"unsupported expression {type(e).__name__}")

    def subscript(self, e: S.Subscript, env: dict):
        base = self.expr(e.value, env)
        if isinstance(base, TensorArg):
            return self.tensor_subscript(base, e, env)
        if isinstance(base, tuple):
            if len(e.items) != 1 or isinstance(e.items[0], S.Slice):
                raise self.diag.error(e, "a tuple takes one integer index")
            i = self.expr(e.items[0], env)
            if not isinstance(i, int) or isinstance(i, bool) or not -len(base) <= i < len(base):
                raise self.diag.error(e.items[0], f"tuple index {i!r} out of range")
            return base[i]
        if not is_tile(base):
            raise self.diag.error(e, f"cannot subscript {describe(base)}")
        rank = len(shape_of(base))
        slices = sum(isinstance(i, S.Slice) for i in e.items)
        out, axis = base, 0
        for item in e.items:
            if isinstance(item, S.Slice):
                if not item.bare:
                    raise self.diag.error(item, "tiles are not sliced: load the block you need with load(T, "
                                          "coords, shape) (a tensor view such as X[start:end] selects rows of a "
                                          "tensor); a tile subscript may only be ':' and None (x[:, None])")
                axis += 1
                continue
            v = self.expr(item, env)
            if v is not None:
                raise self.diag.error(item, "tile subscripts may only be ':' and None (x[:, None]); indexing "
                                      "elements of a tile is not supported")
            out = self.emit.expand_dims(out, axis)
            axis += 1
        if slices != rank:
            raise self.diag.error(e, f"subscript of a {rank}-D tile needs {rank} ':' entries, got {slices}")
        return out


    def tensor_subscript(self, base: TensorArg, e: S.Subscript, env: dict) -> TensorArg:
        """`Q[z, h]` selects leading dims at element indices; slices after them view the block dims:
        `Q[h, start:end]` counts block coordinates from row `start` and ends the rows at `end` (docs/language.md)."""
        if base.viewed:
            raise self.diag.error(e, f"{base.name} is already a view; index and slice a tensor in one subscript "
                                  f"({base.name}[h, start:end])")
        idx, views = [], []
        for item in e.items:
            if isinstance(item, S.Slice):
                views.append(item)
                continue
            if views:
                raise self.diag.error(item, "element indices select leading dims: put them before the slices "
                                      "(Q[h, start:end])")
            v = self.emit.index(self.expr(item, env), item, "tensor index")
            idx.append(self.emit.materialize(v, item))
        if len(base.indices) + len(idx) >= base.rank:
            lead = f"{base.name}[{', '.join(['...'] * (base.rank - 1))}]" if base.rank > 1 else base.name
            raise self.diag.error(e, f"tensor {base.name} has {base.rank} dims; at most {base.rank - 1} may "
                                  "be selected by index (the rest are loaded as a block)",
                                  note=f"to read one element as a scalar, load a block of one and reduce it: "
                                       f"sum(load({lead}, i, 1))")
        block_rank = base.rank - len(base.indices) - len(idx)
        if len(views) > block_rank:
            raise self.diag.error(e, f"tensor {base.name} has {base.rank} dims; {len(base.indices) + len(idx)} "
                                  f"selected by index leave {block_rank} to slice, got {len(views)} slices")
        origins, ends = [], []
        for item in views:
            bounds = []
            for what, node in (("start", item.start), ("end", item.stop)):
                if node is None:
                    bounds.append(None)
                    continue
                v = self.emit.index(self.expr(node, env), node, f"view {what}")
                if isinstance(v, int) and v < 0:
                    raise self.diag.error(node, f"view {what} {v} is negative: a view's bounds are element "
                                          "indices from the tensor's start (there are no end-relative indices)")
                bounds.append(self.emit.materialize(v, node) if not isinstance(v, int) else v)
            origins.append(bounds[0])
            ends.append(bounds[1])
        if all(o is None and n is None for o, n in zip(origins, ends)):
            origins, ends = [], []                      # only bare ':': the tensor itself
        else:
            origins += [None] * (block_rank - len(origins))
            ends += [None] * (block_rank - len(ends))
        return TensorArg(base.name, base.value, base.dtype, base.shape, base.indices + idx, origins, ends)


class _Live:
    """A set of names that only answers `in` (and `|`, giving another such set)."""
    def __or__(self, other):
        return _LiveUnion(self, other)

    __ror__ = __or__


class _ReadAfter(_Live):
    """The names read after statement `i` of a block (per `last_read`: name -> index of its last reader) or live
    after the block (`outer`)."""
    __slots__ = ("last_read", "i", "outer")

    def __init__(self, last_read: dict, i: int, outer):
        self.last_read, self.i, self.outer = last_read, i, outer

    def __contains__(self, name) -> bool:
        return self.last_read.get(name, -1) > self.i or name in self.outer


class _LiveUnion(_Live):
    __slots__ = ("a", "b")

    def __init__(self, a, b):
        self.a, self.b = a, b

    def __contains__(self, name) -> bool:
        return name in self.a or name in self.b


def _ordered_assigns(stmts: list) -> list:
    """Assigned names in order of first assignment (so iter_args and results have a stable order)."""
    seen: dict = {}

    def visit(block):
        for s in block:
            if isinstance(s, S.Assign):
                seen.setdefault(s.target, None)
            elif isinstance(s, S.For):
                seen.setdefault(s.var, None)
                visit(s.body)
            elif isinstance(s, S.If):
                visit(s.body)
                visit(s.orelse)
    visit(stmts)
    return list(seen)
