"""The `@autotune(...)` declaration: a kernel's tuning space, written in the .tawa file beside `@grid`.

    @autotune(key=(M, N, K), configs=product(BLOCK_M=(128, 256), BLOCK_N=(128, 256)))
    @autotune(key=(S,), configs=(config(), config(BLOCK_N=64), config(BLOCK_N=64, warp_specialize=False)))

`key=` names the shape symbols whose values decide when to tune again; `configs=` lists candidate configurations,
each `config(NAME=VALUE, ...)` (overrides of the kernel's `const` parameters and compile options, as
`tawa.compile` takes them; `config()` is the kernel's defaults) or `product(NAME=(V1, V2, ...), ...)` (every
combination, the first name varying slowest). Either may be left out: the key then defaults to every shape
symbol, the configurations to the tuner's default space.

Why here: the declaration is checked by the frontend that checks the rest of the file, so a mistake in it is one
located error (`file:line:col`) even from a plain `tawa.compile`, which otherwise ignores it (compiling a file that
declares a space gives the kernel's defaults, as before). `space_info` hands the tuner, as JSON, everything it needs
from the source: the declared space, the `const` parameters and their defaults, the shape symbols and the argument
dimension each is read from, each tensor's dimensions, the grid's axes and `cdiv(SYMBOL, CONST)` tile pairs, and
whether the kernel has a `dot`, so `tawa.autotune` can cache it and tune on a machine without the compiler.
"""
from __future__ import annotations

import dataclasses
import difflib
import itertools

from tawa.errors import CompilationError
from tawa.options import ALIASES, CompileOptions, InvalidOptionError, tunable_options

from . import syntax as S
from .dtypes import DTYPE_ALIASES, DType
from .static import evaluate

#: Most configurations one declaration may expand to (a product over many names grows fast).
MAX_CONFIGS = 1024
#: The keyword arguments of `@autotune`.
_ARGUMENTS = ("key", "configs")


# ---- the declaration ---------------------------------------------------------------------------------------
def declared_space(kernel: S.Kernel, constants: dict, symbols, diag) -> dict | None:
    """Check the kernel's `@autotune` decorator and return `{"key": [...] | None, "configs": [...] | None}`, or
    None when it declares none. `constants` maps each `const` parameter to its value (a dtype-valued one to a
    DType), `symbols` are the shape symbols. Raises one located CompilationError for any mistake."""
    decos = [d for d in kernel.decorators if d.name == "autotune"]
    if not decos:
        return None
    d = decos[0]
    if len(decos) > 1:
        raise diag.error(decos[1], "decorator '@autotune' given twice")
    usage = "@autotune takes keyword arguments: key=(SYMBOL, ...) and/or configs=(config(NAME=VALUE, ...), ...)"
    if d.args is None:
        raise diag.error(d, usage)
    if d.args:
        raise diag.error(d.args[0], usage)
    given: dict = {}
    for kw in d.kwargs:
        if kw.name not in _ARGUMENTS:
            raise diag.error(kw, f"unknown argument '{kw.name}' of @autotune (it takes key= and configs=)")
        if kw.name in given:
            raise diag.error(kw, f"@autotune: '{kw.name}' given twice")
        given[kw.name] = kw
    if not given:
        raise diag.error(d, usage)
    key = _key(given["key"], list(symbols), diag) if "key" in given else None
    configs = _configs(given["configs"], constants, diag) if "configs" in given else None
    return {"key": key, "configs": configs}


def _items(e) -> list:
    """The items of a tuple expression, or the expression alone."""
    return list(e.items) if isinstance(e, S.Tuple) else [e]


def _key(kw: S.Keyword, symbols: list, diag) -> list:
    names: list = []
    items = _items(kw.value)
    if not items:
        raise diag.error(kw.value, "@autotune: key=() is empty; name the shape symbols that decide when to tune "
                                   "again, e.g. key=(M, N, K)")
    for item in items:
        if not isinstance(item, S.Name) or item.id not in symbols:
            what = f"'{item.id}'" if isinstance(item, S.Name) else "this expression"
            raise diag.error(item, f"@autotune: key entries are shape symbols of the kernel's tensor parameters; "
                                   f"{what} is not one (shape symbols: {', '.join(symbols) or 'none'})")
        if item.id in names:
            raise diag.error(item, f"@autotune: '{item.id}' appears twice in key=")
        names.append(item.id)
    return names


def _configs(kw: S.Keyword, constants: dict, diag) -> list:
    items = _items(kw.value)
    if not items:
        raise diag.error(kw.value, "@autotune: configs=() is empty; list config(NAME=VALUE, ...) items, or leave "
                                   "configs= out for the default space")
    out: list = []
    for item in items:
        if not (isinstance(item, S.Call) and isinstance(item.func, S.Name) and item.func.id in ("config", "product")):
            raise diag.error(item, "@autotune: each item of configs= is config(NAME=VALUE, ...) or "
                                   "product(NAME=(VALUE, ...), ...)")
        if item.args:
            raise diag.error(item.args[0], f"{item.func.id}() takes NAME=VALUE arguments only")
        seen: set = set()
        for a in item.kwargs:
            if a.name in seen:
                raise diag.error(a, f"@autotune: '{a.name}' given twice in {item.func.id}()")
            seen.add(a.name)
        if item.func.id == "config":
            values = {a.name: _value(a, a.value, constants, diag) for a in item.kwargs}
            _check_options(item, values, diag)
            out.append(values)
        else:
            axes = []
            for a in item.kwargs:
                choices = _items(a.value)
                if not choices:
                    raise diag.error(a, f"@autotune: product() gives '{a.name}' no values")
                axes.append([(a.name, _value(a, c, constants, diag)) for c in choices])
            count = 1
            for axis in axes:
                count *= len(axis)
            if len(out) + count > MAX_CONFIGS:
                raise diag.error(item, f"@autotune declares more than {MAX_CONFIGS} configurations; tune fewer "
                                       f"names or values at a time")
            for combo in itertools.product(*axes):
                values = dict(combo)
                _check_options(item, values, diag)
                out.append(values)
        if len(out) > MAX_CONFIGS:
            raise diag.error(item, f"@autotune declares more than {MAX_CONFIGS} configurations")
    unique: list = []
    for c in out:                      # a product may repeat a listed config: each candidate once, first place
        if c not in unique:
            unique.append(c)
    return unique


def _value(kw: S.Keyword, e, constants: dict, diag):
    """The JSON value of `NAME=VALUE` in a config: a number, True/False, None (an option's auto), a dtype name, an
    option's word (`schedule=pingpong`) or, for an option, a tuple of numbers (a list). Checked against the
    constant's kind, or, for an option, left to `_check_options`."""
    options = tunable_options()
    if kw.name not in constants and kw.name not in options:
        pool = list(constants) + options
        close = difflib.get_close_matches(kw.name, pool, n=1)
        raise diag.error(kw, f"@autotune: '{kw.name}' is neither a const parameter of the kernel nor a compile "
                             f"option",
                         note=f"did you mean {close[0]}?" if close else
                         f"const parameters: {', '.join(constants) or 'none'}; options: {', '.join(options)}")
    if isinstance(e, S.Name) and e.id == "None":
        v = None
    elif isinstance(e, S.Name) and e.id in DTYPE_ALIASES:
        v = DTYPE_ALIASES[e.id]
    elif isinstance(e, S.Name) and (words := _word_choices(kw.name)):      # schedule=pingpong
        if e.id not in words:
            raise diag.error(e, f"@autotune: option '{kw.name}' takes one of {', '.join(words)}, got '{e.id}'")
        v = e.id
    elif isinstance(e, S.Tuple) and kw.name not in constants:      # an option taking a pair: cluster=(2, 1)
        v = [evaluate(item, {}, diag, f"@autotune: value of '{kw.name}'") for item in e.items]
    else:
        v = evaluate(e, {}, diag, f"@autotune: value of '{kw.name}'")
    if kw.name in constants:
        current = constants[kw.name]
        if v is None or (current is not None and isinstance(current, DType) != isinstance(v, DType)):
            want = "a dtype" if isinstance(current, DType) else "an int, float or bool"
            raise diag.error(e, f"@autotune: constant '{kw.name}' takes {want}, got {_show(v)}")
    return v.name if isinstance(v, DType) else v


def _word_choices(option: str) -> tuple:
    """The values of an option that are words (`schedule`: tile, persistent, pingpong), written bare in a config
    as dtype names are; () for other names."""
    fields = {f.name: f for f in dataclasses.fields(CompileOptions)}
    choices = fields[option].metadata.get("choices", ()) if option in fields else ()
    return tuple(c for c in choices if isinstance(c, str) and c.isidentifier())


def _show(v) -> str:
    return v.name if isinstance(v, DType) else repr(v)


def _check_options(call: S.Call, values: dict, diag) -> None:
    """The option values of one configuration, checked together (as `CompileOptions.validate` checks them)."""
    names = set(tunable_options())
    options = {k: v for k, v in values.items() if k in names}
    if not options:
        return
    try:
        CompileOptions(**options).validate()
    except InvalidOptionError as e:
        where = next((a.value for a in call.kwargs if a.name == e.option
                      or ALIASES.get(a.name) == e.option), call)
        raise diag.error(where, f"@autotune: {e.message}") from None
    except CompilationError as e:      # an option and its alias in one config
        raise diag.error(call, f"@autotune: {e.message}") from None


# ---- what the tuner reads from a source --------------------------------------------------------------------
def const_values(kernel: S.Kernel, diag) -> dict:
    """Each `const` parameter -> its default (a DType for a dtype-valued one; None when it has no default)."""
    constants: dict = {}
    for p in kernel.params:
        if p.type is not None and p.type.name == "const" and p.type.dims is None:
            constants[p.name] = (evaluate(p.default, constants, diag, f"default of '{p.name}'")
                                 if p.default is not None else None)
    return constants


def derived_constants(kernel: S.Kernel, constants: dict) -> list:
    """The `const` parameters whose default is computed from other constants (`BLOCK_N = 64 + 64 * (HEAD_DIM >= 64)`):
    their default value holds only while those keep theirs, so a candidate that sets one to that value still
    sets it (`Config.without_defaults`)."""
    return [p.name for p in kernel.params
            if p.name in constants and p.default is not None and S.expr_reads(p.default, set()) & set(constants)]


def shape_symbols(kernel: S.Kernel, constants: dict) -> dict:
    """Each shape symbol -> (argument index, axis) of the first tensor parameter that declares it. Arguments are
    numbered as the kernel takes them at launch (const parameters are not arguments)."""
    symbols: dict = {}
    index = 0
    for p in kernel.params:
        if p.type is not None and p.type.name == "const":
            continue
        if p.type is not None and p.type.dims:
            for axis, (name, _line, _col) in enumerate(p.type.dims):
                if isinstance(name, str) and name not in constants:
                    symbols.setdefault(name, (index, axis))
        index += 1
    return symbols


def _tensor_params(kernel: S.Kernel):
    """(argument index, dim names) of each tensor parameter of two or more dims, counting the arguments a launch
    passes (const parameters are not among them)."""
    for index, p in _tensor_param_types(kernel):
        yield index, [name for name, _line, _col in p.type.dims]


def tensor_dims(kernel: S.Kernel, constants: dict) -> list:
    """[[argument index, [shape symbol or None per dim]]] for each tensor parameter of two or more dims (None: a
    literal or constant extent), so that a launch can tell which operand a tensor is (`shape_defaults`)."""
    return [[index, [name if isinstance(name, str) and name not in constants else None for name in dims]]
            for index, dims in _tensor_params(kernel)]


def tensor_dtypes(kernel: S.Kernel) -> list:
    """[[argument index, dtype name or the constant holding it]] for each tensor parameter of two or more dims, so
    that a launch rule can size a tile's shared-memory copies (`launch_defaults._wide_tile_fits`)."""
    return [[index, p.type.name] for index, p in _tensor_param_types(kernel)]


def _tensor_param_types(kernel: S.Kernel):
    """(argument index, parameter) of each tensor parameter of two or more dims, as `_tensor_params` counts them."""
    index = 0
    for p in kernel.params:
        if p.type is not None and p.type.name == "const":
            continue
        if p.type is not None and p.type.dims and len(p.type.dims) >= 2:
            yield index, p
        index += 1


def tensor_constant_dims(kernel: S.Kernel, constants: dict) -> list:
    """[[argument index, [constant name, literal extent or None per dim]]] for each tensor parameter of two or more
    dims (None: a shape symbol), the dims `tensor_dims` leaves out: with the kernel's constants they give a
    launch rule a tile's fixed extents (attention's head dim)."""
    return [[index, [name if isinstance(name, int) or name in constants else None for name in dims]]
            for index, dims in _tensor_params(kernel)]


def grid_symbols(kernel: S.Kernel, symbols) -> list:
    """Per `@grid` expression (as many as the grid has axes; [] without one), the shape symbol it is when it is
    one alone (a batch axis: `Z`), else None."""
    for d in kernel.decorators:
        if d.name == "grid" and d.args:
            return [a.id if isinstance(a, S.Name) and a.id in symbols else None for a in d.args]
    return []


def grid_tiles(kernel: S.Kernel, constants: dict, symbols) -> list:
    """[(CONST, SYMBOL)] for each `cdiv(SYMBOL, CONST)` in the `@grid` expressions: the constant is the tile size
    along the symbol's extent, which is what the tuner prunes oversized tiles by."""
    pairs: list = []
    for d in kernel.decorators:
        if d.name != "grid" or not d.args:
            continue
        for node in _walk(d.args):
            if (isinstance(node, S.Call) and isinstance(node.func, S.Name) and node.func.id == "cdiv"
                    and len(node.args) == 2 and all(isinstance(a, S.Name) for a in node.args)
                    and node.args[0].id in symbols and node.args[1].id in constants):
                pair = (node.args[1].id, node.args[0].id)
                if pair not in pairs:
                    pairs.append(pair)
    return pairs


def _axis_like(node, constants) -> bool:
    """Whether the second argument of `sum` / `max` / `min` reads as a reduction axis (`sum(x, 1)`, `sum(x, -1)`,
    `sum(x, AXIS)` of a constant) rather than a second operand (`min(a, b)` of two values)."""
    if isinstance(node, S.UnaryOp) and node.op == "-":
        node = node.operand
    return isinstance(node, S.Num) or (isinstance(node, S.Name) and node.id in constants)


def tile_invariant(kernel: S.Kernel, constants: dict, symbols) -> bool:
    """Whether the program computes the same thing whatever its tile constants, so that a launch may run a variant
    compiled with other tiles (`tawa.autotune.launch_defaults`, the default tuning space).

    A whitelist, read on the syntax: the constants that size a grid axis (`cdiv(M, BLOCK_M)`) or a block of a load
    (`load(A, (pid_m, k), (BLOCK_M, BLOCK_K))`), and the index variables that address those blocks (program ids of
    tiled axes, loop variables used as block offsets), may appear only
    - as the extents of tiles (`zeros`, `full`, a load's block shape), an index variable as the offset of a block
      of its own constant in a load, or (a program id) in the position of its grid axis in a store;
    - as `index * CONST`, and `index * CONST + arange(0, CONST)` (element indices of the block);
    - in `range(cdiv(X, CONST))` (a loop over blocks).
    A GEMM-family program (one dot, or a dot per operand pair) may not reduce a tile: its tiles hold parts of rows,
    so `sum(acc, axis=1)` changes with BLOCK_N. An attention-family program (two dots, a grid tiling one axis) may,
    since its online softmax combines blocks whatever their size; there shifted indices (`(pid_m + 1) * BLOCK_M`)
    and `cdiv` anywhere are allowed too, floor division (`//`, `%`) by a tile constant is not. Anything else --
    `partial[pid_n]`, `acc / BLOCK_N`, `num_programs` of a tiled axis, a grid tiled in a product -- makes the tiles
    part of the program's meaning, and the launch keeps the kernel's own. A program without a dot is not switched
    by the launch: True."""
    if not has_dot(kernel):
        return True

    def is_call(node, *names):
        return isinstance(node, S.Call) and isinstance(node.func, S.Name) and node.func.id in names

    def is_name(node, name=None):
        return isinstance(node, S.Name) and (name is None or node.id == name)

    axes = {}               # tiled grid axis -> its constant; None: tiled in a way not followed (a product ...)
    for d in kernel.decorators:
        if d.name == "grid" and d.args:
            for i, arg in enumerate(d.args):
                if is_call(arg, "cdiv") and len(arg.args) == 2 and is_name(arg.args[1]) \
                        and arg.args[1].id in constants:
                    axes[i] = arg.args[1].id
                elif any(is_name(n) and n.id in constants for n in _walk([arg])):
                    axes[i] = None                       # `cdiv(M, BM) * cdiv(N, BN)`, `(M + BM - 1) // BM`
    if any(tile is None for tile in axes.values()):
        return False
    # (a GEMM with two dots, a GLU's, tiles both axes of its output: its tiles hold parts of rows)
    attention = dot_count(kernel) == 2 and len(axes) == 1
    checked = set(axes.values())
    index = {}              # index variable -> the constant of the blocks it addresses
    pids = set()            # the index variables that hold a program id

    def axis_call(node):
        """(program_id | num_programs, axis) of a call naming a tiled axis by a literal, else (None, None)."""
        if is_call(node, "program_id", "num_programs"):
            if node.kwargs or len(node.args) != 1 or not isinstance(node.args[0], S.Num):
                return node.func.id, -1                  # an axis not given as a literal: not followed
            if node.args[0].value in axes:
                return node.func.id, node.args[0].value
        return None, None

    body = list(_walk(kernel.body))
    for node in body:
        kind, axis = axis_call(node)
        if kind == "num_programs" or axis == -1:
            return False
        if isinstance(node, S.Assign) and kind is None:
            k2, a2 = axis_call(node.value)
            if k2 == "program_id" and a2 not in (None, -1):
                if node.target in index or node.op is not None:
                    return False
                index[node.target] = axes[a2]
                pids.add(node.target)
        # loads name the other block constants: a constant as a block extent, the name at its offset an index
        if is_call(node, "load") and len(node.args) >= 3:
            offsets = node.args[1].items if isinstance(node.args[1], S.Tuple) else [node.args[1]]
            shape = node.args[2].items if isinstance(node.args[2], S.Tuple) else [node.args[2]]
            for off, ext in zip(offsets, shape):
                if is_name(ext) and ext.id in constants:
                    checked.add(ext.id)
                    if is_name(off) and off.id not in index and not any(
                            isinstance(n, S.Assign) and n.target == off.id for n in body):
                        index[off.id] = ext.id           # a loop variable: blocks of this constant
    if any(isinstance(n, S.Assign) and n.target in index and not (axis_call(n.value)[0] == "program_id")
           for n in body):
        return False            # an index variable reassigned: not followed

    def block_offset(node, parents, const) -> bool:
        """`node` is an offset (directly or in a tuple) of a load whose block is `const` there, or (a program id)
        of a store in the position of its grid axis."""
        if parents and isinstance(parents[-1], S.Tuple):
            holder, call = parents[-1], parents[-2] if len(parents) >= 2 else None
            position = next(i for i, x in enumerate(holder.items) if x is node)
        else:
            holder, call, position = node, parents[-1] if parents else None, 0
        if not (is_call(call, "load", "store") and len(call.args) >= 2 and call.args[1] is holder):
            return False
        if call.func.id == "store":
            is_pid = not is_name(node) or node.id in pids
            return is_pid and any(c == const and a == position for a, c in axes.items())
        if len(call.args) < 3:
            return False
        shape = call.args[2].items if isinstance(call.args[2], S.Tuple) else [call.args[2]]
        return position < len(shape) and is_name(shape[position], const)

    def index_const(node):
        if is_name(node) and node.id in index:
            return index[node.id]
        kind, axis = axis_call(node)
        return axes.get(axis) if kind == "program_id" else None

    def scaled(node, parents, const) -> bool:
        """`node` times `const` (in the attention family, after a shift by terms free of index variables)."""
        cur, i = node, len(parents) - 1
        if attention:
            while i >= 0 and isinstance(parents[i], S.BinOp) and parents[i].op in "+-" and \
                    not any(index_const(n) for n in _walk([parents[i].right if parents[i].left is cur
                                                           else parents[i].left])):
                cur, i = parents[i], i - 1
        p = parents[i] if i >= 0 else None
        return isinstance(p, S.BinOp) and p.op == "*" and is_name(p.right if p.left is cur else p.left, const)

    def const_ok(node, parents) -> bool:
        c = node.id
        p = parents[-1] if parents else None
        # a tile extent
        if isinstance(p, S.Tuple) and len(parents) >= 2 and is_call(parents[-2], "zeros", "full", "load") and \
                (parents[-2].args[0] is p if parents[-2].func.id != "load" else
                 len(parents[-2].args) >= 3 and parents[-2].args[2] is p):
            return True
        if is_call(p, "load") and len(p.args) >= 3 and p.args[2] is node:
            return True
        if is_call(p, "zeros", "full") and p.args and p.args[0] is node:
            return True
        # index * CONST
        if isinstance(p, S.BinOp) and p.op == "*":
            other = p.right if p.left is node else p.left
            if index_const(other) == c:
                return True
            if attention:
                cur = other
                while isinstance(cur, S.BinOp) and cur.op in "+-":
                    sides = [cur.left, cur.right]
                    ix = [x for x in sides if any(index_const(n) for n in _walk([x]))]
                    if len(ix) != 1:
                        break
                    cur = ix[0]
                if index_const(cur) == c:
                    return True
        # arange(0, CONST) next to index * CONST
        if is_call(p, "arange") and len(p.args) == 2 and p.args[1] is node and len(parents) >= 2 and \
                isinstance(parents[-2], S.BinOp) and parents[-2].op == "+":
            other = parents[-2].right if parents[-2].left is p else parents[-2].left
            if isinstance(other, S.BinOp) and other.op == "*" and \
                    any(is_name(x, c) for x in (other.left, other.right)) and \
                    any(index_const(x) == c for x in (other.left, other.right)):
                return True
        # a loop over blocks
        if is_call(p, "cdiv") and len(p.args) == 2 and p.args[1] is node:
            if attention or (len(parents) >= 2 and is_call(parents[-2], "range")):
                return True
        return False

    def scalar_read(node) -> bool:
        """`sum(load(X, i, 1))`: one element read as a scalar (a count, an expert id), not a reduction of a tile,
        where neither its offsets nor its uses bring the tiles into its meaning (`read_values` below)."""
        if not is_scalar_read(node):
            return False
        offsets = node.args[0].args[1]
        return not any(is_name(n) and (n.id in index or n.id in checked) or axis_call(n)[0] is not None
                       for n in _walk([offsets]))

    def index_ok(node, parents) -> bool:
        const = index_const(node)
        return block_offset(node, parents, const) or scaled(node, parents, const)

    # Values read from memory or passed as scalar arguments know nothing of the tiles: as a block offset (a work
    # list's tile row, in blocks of BLOCK_M) such a value means something else under other tiles. (A loop whose
    # index addresses blocks takes one in its bound only as an element count divided right there,
    # `range(cdiv(n, CONST))`: see the loop rule below.)
    read_values = {p.name for p in kernel.params if p.type is not None and p.type.dims is None
                   and p.type.name in ("i32", "f32")}
    grew = True
    while grew:
        grew = False
        for n in body:
            if isinstance(n, S.Assign) and n.target not in read_values and any(
                    is_scalar_read(x) or (is_name(x) and x.id in read_values) for x in _walk([n.value])):
                read_values.add(n.target)
                grew = True
    for n in body:
        if is_call(n, "load", "store") and len(n.args) >= 2 and \
                any((is_name(x) and x.id in read_values) or (is_scalar_read(x) and x is not n)
                    for x in _walk([n.args[1]])):
            return False
    todo = [(stmt, []) for stmt in reversed(kernel.body)]
    while todo:
        node, parents = todo.pop()
        if isinstance(node, list):
            todo.extend((n, parents) for n in reversed(node))
            continue
        if not isinstance(node, S.Node):
            continue
        if isinstance(node, S.Assign) and axis_call(node.value)[0] == "program_id":
            continue                                        # the definition of a program id's name
        if isinstance(node, S.For) and node.var in index:
            if not (is_call(node.iter, "range") and len(node.iter.args) == 1):
                return False
            # the loop's block count divides by the constant of the blocks it addresses (`range(cdiv(S, 128))`
            # over blocks of BLOCK_N = 128 would visit half the keys at BLOCK_N = 64), also through a name
            # (`num_kv = min(cdiv(S, BLOCK_N), ...)`)
            exprs, names, todo_names = [node.iter.args[0]], set(), [node.iter.args[0]]
            while todo_names:           # through every name the bound reads, and the names those read
                for n in _walk([todo_names.pop()]):
                    if is_name(n) and n.id not in names:
                        names.add(n.id)
                        values = [a.value for a in body if isinstance(a, S.Assign) and a.target == n.id]
                        exprs += values
                        todo_names += values
            for n in _walk(exprs):
                if (is_call(n, "cdiv") and len(n.args) == 2 and not is_name(n.args[1], index[node.var])) or \
                        (isinstance(n, S.BinOp) and n.op == "//" and not is_name(n.right, index[node.var])):
                    return False
            # a block count read from memory or passed in (`range(nkb)`) counts blocks of the kernel's own size;
            # an element count is divided by the constant right in the bound (`range(cdiv(n, BLOCK_K))`)
            direct = node.iter.args[0]
            counted = is_call(direct, "cdiv") and len(direct.args) == 2 and is_name(direct.args[1], index[node.var])
            if not counted and any((is_name(n) and n.id in read_values) or is_scalar_read(n) for n in _walk(exprs)):
                return False
        kind, axis = axis_call(node)
        if kind == "program_id":
            if not index_ok(node, parents):
                return False
            continue
        if is_name(node) and node.id in index and not index_ok(node, parents):
            return False
        if is_name(node) and node.id in checked and not const_ok(node, parents):
            return False
        if isinstance(node, S.BinOp) and node.op in ("//", "%") and \
                any(is_name(x) and x.id in checked for x in (node.left, node.right)):
            return False
        if not attention and is_call(node, "sum", "max", "min") and (
                len(node.args) == 1 or (len(node.args) == 2 and _axis_like(node.args[1], constants))) and \
                not scalar_read(node):
            return False        # a reduction over part of a row or column (`sum(x, axis=1)`, `sum(x, 1)`)
        for f in dataclasses.fields(node):
            child = getattr(node, f.name)
            if isinstance(child, (list, S.Node)):
                todo.append((child, parents + [node]))
    return True


def is_scalar_read(node) -> bool:
    """`sum(load(X, i, 1))` (or `max`, `min`): one element of a tensor read as a scalar."""
    if not (isinstance(node, S.Call) and isinstance(node.func, S.Name) and node.func.id in ("sum", "max", "min")):
        return False
    if len(node.args) != 1 or node.kwargs:
        return False
    load = node.args[0]
    if not (isinstance(load, S.Call) and isinstance(load.func, S.Name) and load.func.id == "load") or \
            len(load.args) < 3:
        return False
    shape = load.args[2]
    return all(isinstance(x, S.Num) and x.value == 1 for x in (shape.items if isinstance(shape, S.Tuple) else
                                                               [shape]))


def has_dot(kernel: S.Kernel) -> bool:
    """Whether the body calls `dot` (the kernels the default tile space is for)."""
    return dot_count(kernel) > 0


def loads_after_loop(kernel: S.Kernel) -> bool:
    """Whether the body loads a tensor after its first top-level loop (an epilogue operand: a bias, a residual, a
    scale), which the stream-K schedule refuses."""
    seen_loop = False
    for statement in kernel.body:
        if isinstance(statement, S.For):
            seen_loop = True
        elif seen_loop and any(_calls(n, "load") for n in _walk([statement])):
            return True
    return False


def _calls(node, *names: str) -> bool:
    """Whether a syntax node is a call of one of the builtins `names`."""
    return isinstance(node, S.Call) and isinstance(node.func, S.Name) and node.func.id in names


def computed_b(kernel: S.Kernel) -> bool:
    """Whether a dot's B operand is computed after its load (`dot(a, w.to(bf16))`, a weight-only fp8 GEMM): its
    main loop converts B every K step, which tiles of 128x128 amortize worse than 128x256 or 256x128
    (`launch_defaults.COMPUTED_B_RATES`). Read from the text in order: a name is a load while its latest
    assignment is one, through transposes and other such names (`b = load(...); b = b.T` is)."""
    loads: dict = {}

    def loaded(e) -> bool:
        while (isinstance(e, S.Attribute) and e.attr == "T") or (_calls(e, "trans") and e.args):
            e = e.value if isinstance(e, S.Attribute) else e.args[0]
        if isinstance(e, S.Name):
            return loads.get(e.id, False)
        return _calls(e, "load")

    for n in _walk(kernel.body):
        if _calls(n, "dot") and len(n.args) >= 2 and not loaded(n.args[1]):
            return True
        if isinstance(n, S.Assign):
            loads[n.target] = n.op is None and loaded(n.value)
    return False


def dot_count(kernel: S.Kernel) -> int:
    """The `dot` calls in the body's text."""
    return sum(_calls(n, "dot") for n in _walk(kernel.body))


def _walk(roots):
    """Every syntax node under `roots` (iterative: expressions may nest thousands deep)."""
    todo = list(reversed(roots))          # a stack, pushed in reverse: nodes come out in source order
    while todo:
        node = todo.pop()
        if isinstance(node, list):
            todo.extend(reversed(node))
            continue
        if not isinstance(node, S.Node):
            continue
        yield node
        children = [getattr(node, f.name) for f in dataclasses.fields(node)]
        todo.extend(reversed([c for c in children if isinstance(c, (list, S.Node))]))


_COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")


def block_sizes_free(kernel: S.Kernel, constants: dict) -> bool:
    """Whether the program visits the same elements and compares them alike whatever its block sizes, as far as
    a whitelist read on the syntax shows; a launch rule reads it before running an attention kernel on blocks of
    other sizes (`launch_defaults`), since `tile_invariant` lets that family shift indices by block offsets:
    - every comparison (`<`, `<=`, `>`, `>=`, `==`, `!=`) of values that, through the names assigned to them,
      involve a tile constant compares element indices: each such side adds an `arange` that no reduction (`min`,
      `max`, `sum`) has folded away (`cols[None, :] <= rows[:, None]` with `cols = j * BLOCK_N + arange(0,
      BLOCK_N)`). A test of block offsets, `j * BLOCK_N < pid_m * BLOCK_M` (key block j wholly below the
      diagonal), is exact only for some pairs of block sizes, which the source does not say;
    - every loop bound that involves a tile constant counts whole blocks: `cdiv(E, C)` of an expression free of
      the loop's constant C, or the `min` of such counts (`min(cdiv(S, BLOCK_N), cdiv((pid_m + 1) * BLOCK_M,
      BLOCK_N))`); `cdiv(pid_m * BLOCK_M, BLOCK_N) + 1` visits other keys for other blocks.
    False wherever anything else is found."""
    tiles = {name for name, value in constants.items() if isinstance(value, int) and not isinstance(value, bool)}
    assigned: dict = {}
    for n in _walk(kernel.body):
        if isinstance(n, S.Assign):
            assigned.setdefault(n.target, []).append(n.value)

    def traits(expr, seen, folded=False) -> tuple:
        """(involves a tile constant, adds an arange not under a reduction) over `expr` and the values of the names
        it reads; loaded and constant tiles are data, whose shapes name tile constants as extents, not indices."""
        tiled = arange = False
        todo = [(expr, folded)]
        while todo:
            node, under = todo.pop()
            if isinstance(node, list):
                todo.extend((x, under) for x in node)
                continue
            if not isinstance(node, S.Node):
                continue
            if isinstance(node, S.Name):
                if node.id in tiles:
                    tiled = True
                elif node.id in assigned and node.id not in seen:
                    seen.add(node.id)
                    for value in assigned[node.id]:
                        more = traits(value, seen, under)
                        tiled, arange = tiled or more[0], arange or more[1]
                continue
            if _calls(node, "arange"):
                arange = arange or not under
                continue
            if _calls(node, "load", "zeros", "full"):
                continue                    # (data, or constant tiles: their shapes are not indices)
            if isinstance(node, S.BinOp) and node.op in _COMPARISONS:
                continue                    # (a mask: its comparison is checked on its own)
            if _calls(node, "where") and node.args:
                todo.extend((arg, under) for arg in node.args[1:])     # (the values chosen, not the mask)
                continue
            inner = under or _calls(node, "min", "max", "sum", "argmax", "argmin")
            todo.extend((getattr(node, f.name), inner) for f in dataclasses.fields(node))
        return tiled, arange

    def whole_blocks(bound, seen=()) -> bool:
        if isinstance(bound, S.Name) and bound.id in assigned and bound.id not in seen:
            return all(whole_blocks(value, seen + (bound.id,)) for value in assigned[bound.id])
        if _calls(bound, "min"):
            return all(whole_blocks(arg, seen) for arg in bound.args)
        if _calls(bound, "cdiv") and len(bound.args) == 2 and isinstance(bound.args[1], S.Name) and \
                bound.args[1].id in tiles:
            return bound.args[1].id not in {n.id for n in _walk([bound.args[0]]) if isinstance(n, S.Name)}
        return not traits(bound, set())[0]

    for n in _walk(kernel.body):
        if isinstance(n, S.BinOp) and n.op in _COMPARISONS:
            for side in (n.left, n.right):
                tiled, arange = traits(side, set())
                if tiled and not arange:
                    return False
        if isinstance(n, S.For):
            # the stop of a range counts whole blocks; a start or a step counted in blocks (`range(cdiv(pid_m *
            # BLOCK_M, BLOCK_N), n)`) starts at other keys for other blocks, so they are free of tile constants
            if _calls(n.iter, "range") and n.iter.args:
                others = list(n.iter.args)
                stop = others.pop(1 if len(others) > 1 else 0)
            else:
                stop, others = None, [n.iter]
            if (stop is not None and not whole_blocks(stop)) or any(traits(a, set())[0] for a in others):
                return False
    return True


def compared_symbols(kernel: S.Kernel, symbols) -> list:
    """The shape symbols a comparison reads directly (`cols[None, :] < S`: a mask of the elements past a tensor's
    extent), in declaration order. A launch rule reads it: a key block larger than the kernel's own, which may not
    divide the sequence, is safe where the kernel masks the keys past its end."""
    compared = {side.id for n in _walk(kernel.body) if isinstance(n, S.BinOp) and n.op in ("<", "<=", ">", ">=")
                for side in (n.left, n.right) if isinstance(side, S.Name)}
    return [name for name in symbols if name in compared]


def space_info(source: str, filename: str = "<string>") -> dict:
    """What the tuner needs from a kernel source, as JSON (see the module docstring). Parses the file and checks
    the declaration; raises CompilationError as the compiler would for a malformed declaration or file."""
    from .diag import Diagnostics
    from .parser import parse

    diag = Diagnostics(filename, source)
    kernels = parse(source, filename)
    if len(kernels) != 1:
        if not kernels:
            raise diag.error((1, 1), "no kernel in this file (expected one 'def')")
        raise diag.error(kernels[1], f"a file holds one kernel; found {len(kernels)} "
                                     f"({', '.join(k.name for k in kernels)})")
    k = kernels[0]
    constants = const_values(k, diag)
    symbols = shape_symbols(k, constants)
    declared = declared_space(k, constants, list(symbols), diag)
    params = [p.name for p in k.params if not (p.type is not None and p.type.name == "const")]
    return {
        "name": k.name,
        "params": params,
        "constants": {n: (v.name if isinstance(v, DType) else v) for n, v in constants.items()},
        "derived_constants": derived_constants(k, constants),
        "dtype_constants": [n for n, v in constants.items() if isinstance(v, DType)],
        "symbols": [[n, arg, axis] for n, (arg, axis) in symbols.items()],      # a list: declaration order
        "tiles": [list(p) for p in grid_tiles(k, constants, symbols)],
        "grid_symbols": grid_symbols(k, symbols),
        "operands": tensor_dims(k, constants),
        "operand_constants": tensor_constant_dims(k, constants),
        "operand_dtypes": tensor_dtypes(k),
        "has_dot": has_dot(k),
        "tile_invariant": tile_invariant(k, constants, symbols),
        "compared_symbols": compared_symbols(k, symbols),
        "block_sizes_free": block_sizes_free(k, constants),
        "dots": dot_count(k),
        "epilogue_loads": loads_after_loop(k),
        "computed_b": computed_b(k),
        "declared": declared,
    }


__all__ = ["declared_space", "space_info", "MAX_CONFIGS"]
