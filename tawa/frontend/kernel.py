"""A parsed kernel -> one `func.func` in a new module, with the attributes docs/ir.md defines.

Resolves the signature first: `const` parameters (defaults, then the caller's overrides) are folded away and
recorded in `tawa.constants`; tensor parameters become `memref<?x...xT>` arguments whose shape symbols bind to
`tawa.dim` on use; scalar parameters become i32/f32 arguments. Then the `@grid(...)` expressions are rendered to
strings, an `@autotune(...)` declaration is checked (`tawa.frontend.tuning`; it does not change what is compiled)
and the body is lowered by `BodyLowering`.
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import func

from ..ir import attrs
from ..ir.traversal import walk
from . import syntax as S
from .dtypes import DTYPE_ALIASES, DTYPES, SCALAR_DTYPES, TENSOR_DTYPES, DType
from .lower import BodyLowering
from .ops import I32, i32_attr, tawa_op
from .static import evaluate, render_grid, render_requirement
from .tuning import declared_space
from .values import TensorArg

_DECORATORS = ("grid", "requires", "num_warps", "autotune")


def _resolve_constants(kernel: S.Kernel, overrides: dict, diag) -> dict:
    constants: dict = {}
    declared = [p for p in kernel.params if p.type is not None and p.type.name == "const" and p.type.dims is None]
    names = {p.name for p in declared}
    for name in overrides:
        if name not in names:
            known = ", ".join(sorted(names)) or "none"
            raise diag.error(kernel, f"unknown constant '{name}' given at compile time (kernel {kernel.name} "
                             f"declares: {known})")
    for p in declared:
        default = None
        if p.default is not None:
            default = evaluate(p.default, constants, diag, f"default of '{p.name}'")
        if p.name in overrides:
            value = _override_value(p, overrides[p.name], default, diag)
        elif p.default is None:
            raise diag.error(p, f"constant '{p.name}' has no default and was not given at compile time")
        else:
            value = default
        if isinstance(value, int) and not isinstance(value, bool) and not -2**63 <= value < 2**63:
            where = "given at compile time as" if p.name in overrides else "has the value"
            raise diag.error(p.default if p.default is not None and p.name not in overrides else p,
                             f"constant '{p.name}' {where} {value}, which does not fit in 64 bits")
        constants[p.name] = value
    return constants


def _override_value(p: S.Param, v, default, diag):
    if isinstance(v, str) and v in DTYPES:
        v = DTYPES[v]
    elif isinstance(v, str) and v in DTYPE_ALIASES:
        v = DTYPE_ALIASES[v]
    ok = isinstance(v, (bool, int, float, DType))
    if ok and default is not None and isinstance(default, DType) != isinstance(v, DType):
        ok = False
    if not ok:
        want = "a dtype name" if isinstance(default, DType) else "an int, float or bool"
        raise diag.error(p, f"constant '{p.name}' given at compile time as {v!r}; expected {want}")
    return v


def _dtype_for(tref: S.TypeRef, constants: dict, diag) -> DType:
    if tref.name in DTYPES:
        return DTYPES[tref.name]
    if isinstance(constants.get(tref.name), DType):
        return constants[tref.name]
    raise diag.error(tref, f"unknown dtype '{tref.name}'", note=f"dtypes are: {', '.join(DTYPES)}")


def _attr(v) -> ir.Attribute:
    if isinstance(v, DType):
        return ir.StringAttr.get(v.name)
    if isinstance(v, bool):
        return ir.BoolAttr.get(v)
    if isinstance(v, int):
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v)
    if isinstance(v, float):
        return ir.FloatAttr.get(ir.F64Type.get(), v)
    return ir.StringAttr.get(str(v))


def build_kernel(kernels: list, overrides: dict, diag, module: ir.Module) -> None:
    if len(kernels) != 1:
        if not kernels:
            raise diag.error((1, 1), "no kernel in this file (expected one 'def')")
        raise diag.error(kernels[1], f"a file holds one kernel; found {len(kernels)} "
                         f"({', '.join(k.name for k in kernels)})")
    k = kernels[0]
    constants = _resolve_constants(k, overrides, diag)

    # ---- parameters
    seen: set = set()
    params = []          # (Param, kind, dtype, shape)
    for p in k.params:
        if p.name in seen:
            raise diag.error(p, f"duplicate parameter '{p.name}'")
        seen.add(p.name)
        if p.type is None:
            raise diag.error(p, f"parameter '{p.name}' has no type",
                             note="write e.g. 'A: bf16[M, K]', 'alpha: f32' or 'BLOCK: const = 64'")
        if p.type.name == "const":
            if p.type.dims is not None:
                raise diag.error(p.type, "'const' takes no shape")
            continue
        if p.default is not None:
            raise diag.error(p.default, f"only const parameters take a default ('{p.name}' is not const)")
        dt = _dtype_for(p.type, constants, diag)
        if p.type.dims is None:
            if dt.name not in SCALAR_DTYPES:
                raise diag.error(p.type, f"scalar parameter '{p.name}' must be i32 or f32, got {dt}")
            params.append((p, "scalar", dt, None))
            continue
        if dt.name not in TENSOR_DTYPES:
            raise diag.error(p.type, f"tensor parameter '{p.name}' cannot have dtype {dt}")
        if not p.type.dims:
            raise diag.error(p.type, f"tensor parameter '{p.name}' needs at least one dim")
        shape = []
        for name, line, col in p.type.dims:
            if isinstance(name, str) and name in constants:
                name = constants[name]
                if isinstance(name, bool) or not isinstance(name, int):
                    raise diag.error((line, col), f"dim of '{p.name}' must be an integer, got constant {name!r}")
            if isinstance(name, int) and name <= 0:
                raise diag.error((line, col), f"dim of '{p.name}' must be positive, got {name}")
            if isinstance(name, int) and name >= 2**63:
                raise diag.error((line, col), f"dim of '{p.name}' is {name}, which does not fit in 64 bits")
            shape.append(name)
        params.append((p, "tensor", dt, shape))

    names = {p.name for p in k.params}
    symbols: dict = {}      # symbol -> (param index, axis), first tensor that declares it
    for i, (p, kind, dt, shape) in enumerate(params):
        if kind == "tensor":
            for axis, s in enumerate(shape):
                if isinstance(s, str):
                    if s in names:
                        raise diag.error(p.type, f"shape symbol '{s}' of '{p.name}' is also a parameter name")
                    symbols.setdefault(s, (i, axis))

    # ---- decorators
    grid_exprs: list = []
    requirements: list = []      # ({"condition", "source", "line"}) checked at every launch
    num_warps = None
    seen_deco: set = set()
    for d in k.decorators:
        if d.name not in _DECORATORS:
            raise diag.error(d, f"unknown decorator '@{d.name}' (known: @grid, @requires, @num_warps, @autotune)")
        if d.name in seen_deco:
            raise diag.error(d, f"decorator '@{d.name}' given twice")
        seen_deco.add(d.name)
        if d.name == "autotune":
            continue            # the tuning space: checked below, compiled as the defaults
        if d.args is None or d.kwargs:
            raise diag.error(d, f"@{d.name} takes positional arguments in parentheses")
        if d.name == "grid":
            if not 1 <= len(d.args) <= 3:
                raise diag.error(d, f"@grid takes 1 to 3 expressions, got {len(d.args)}")
            grid_exprs = [render_grid(e, set(symbols), constants, diag) for e in d.args]
        elif d.name == "requires":
            if not d.args:
                raise diag.error(d, "@requires takes one or more conditions, such as N <= BLOCK_N")
            text = diag.source.splitlines()[d.line - 1].strip() if 0 < d.line <= diag.source.count("\n") + 1 \
                else "@requires"
            for e in d.args:
                condition = render_requirement(e, set(symbols), constants, diag)
                if condition is not None:
                    requirements.append({"condition": condition, "source": text, "line": d.line})
        else:
            if len(d.args) != 1:
                raise diag.error(d, "@num_warps takes one integer")
            num_warps = evaluate(d.args[0], constants, diag, "@num_warps")
            from tawa.options import NUM_WARPS     # the warp counts the layouts support: 1 or 2 warp groups
            if isinstance(num_warps, bool) or not isinstance(num_warps, int) or num_warps not in NUM_WARPS:
                raise diag.error(d, f"@num_warps must be {' or '.join(map(str, NUM_WARPS))} (one or two warp "
                                    f"groups), got {num_warps!r}",
                                 note="use @num_warps(4) or @num_warps(8); a warp-specialized kernel sets its "
                                      "own warp count (num_consumer_groups)")

    # A declared tuning space does not change what this compile produces (the kernel's defaults and the caller's
    # overrides), but a mistake in it is reported here, like any other in the file.
    declared_space(k, constants, list(symbols), diag)

    # ---- the function
    dyn = ir.ShapedType.get_dynamic_size()
    arg_types = [ir.MemRefType.get([dyn] * len(shape), dt.mlir()) if kind == "tensor" else dt.mlir()
                 for (_, kind, dt, shape) in params]
    with ir.Location.file(diag.filename, k.line, k.column), ir.InsertionPoint(module.body):
        fn = func.FuncOp(k.name, ir.FunctionType.get(arg_types, []))
        attrs.KERNEL.set(fn)
        fn.attributes[attrs.PARAMS.name] = ir.ArrayAttr.get([_param_attr(p, kind, dt, shape)
                                                         for (p, kind, dt, shape) in params])
        fn.attributes[attrs.GRID.name] = ir.ArrayAttr.get([ir.StringAttr.get(g) for g in grid_exprs])
        fn.attributes[attrs.CONSTANTS.name] = ir.DictAttr.get({n: _attr(v) for n, v in constants.items()})
        if requirements:
            fn.attributes[attrs.REQUIRES.name] = ir.ArrayAttr.get(
                [ir.DictAttr.get({k: _attr(v) for k, v in r.items()}) for r in requirements])
        if num_warps is not None:
            attrs.NUM_WARPS.set(fn, num_warps)
        entry = fn.add_entry_block()

    globals_: dict = dict(constants)
    readonly = {n: "constant" for n in constants}
    env: dict = {}
    for (p, kind, dt, shape), arg in zip(params, entry.arguments):
        if kind == "tensor":
            globals_[p.name] = TensorArg(p.name, arg, dt, shape)
            readonly[p.name] = "tensor parameter"
        else:
            env[p.name] = arg
    used = S.reads(k.body)
    with ir.InsertionPoint(entry):
        for s, (i, axis) in symbols.items():
            readonly.setdefault(s, "shape symbol")
            if s in used and s not in constants:
                p = params[i][0]
                with ir.Location.file(diag.filename, p.line, p.column):
                    globals_[s] = tawa_op("dim", [I32.mlir()], [entry.arguments[i]],
                                          {"axis": i32_attr(axis)}).result
        # A placeholder marking where hoisted constants go (after the dims); removed once the body is built.
        anchor = tawa_op("program_id", [I32.mlir()], [], {"axis": i32_attr(0)})
        body = BodyLowering(diag, globals_, readonly, anchor)
        body.block(k.body, env, set(), top=True)
        anchor.erase()
        with ir.Location.file(diag.filename, k.line, k.column):
            func.ReturnOp([])
    # The tensors the kernel stores to, marked `"written"` in `tawa.params`: the launch refuses a broadcast view
    # there (a stride-0 dimension), whose elements would all be written by different programs at once.
    written = _stored_arguments(fn, entry)
    if written:
        fn.attributes[attrs.PARAMS.name] = ir.ArrayAttr.get(
            [_param_attr(p, kind, dt, shape, written=i in written) for i, (p, kind, dt, shape) in enumerate(params)])


def _param_attr(p, kind, dt, shape, written: bool = False) -> ir.DictAttr:
    d = {"name": ir.StringAttr.get(p.name), "kind": ir.StringAttr.get(kind), "dtype": ir.StringAttr.get(dt.ir_name)}
    if kind == "tensor":
        d["shape"] = ir.ArrayAttr.get([ir.StringAttr.get(s) if isinstance(s, str)
                                       else ir.IntegerAttr.get(ir.IntegerType.get_signless(64), s)
                                       for s in shape])
        if written:
            d["written"] = ir.BoolAttr.get(True)
    return ir.DictAttr.get(d)


def _stored_arguments(fn, entry) -> set:
    """Indices of the kernel's arguments that some `tawa.store` in its body writes."""
    args = {a: i for i, a in enumerate(entry.arguments)}
    found = set()
    for op in walk(fn):
        if op.name == "tawa.store" and op.operands[0] in args:
            found.add(args[op.operands[0]])
    return found
