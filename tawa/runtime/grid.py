"""Launch geometry from arguments alone: shape-symbol binding and grid evaluation (no MLIR needed).

A kernel declares its parameters in `tawa.params` (see docs/ir.md) and its grid as Python-syntax integer
expressions over the shape symbols and constants. At launch, `bind_shapes` / `bind_numpy_args` check every array
argument against its declaration (dtype, rank, consistent symbol extents, row-major innermost dimension) and
return the symbol bindings; `eval_grid` turns the grid expressions into a tuple of ints with a tiny evaluator
that accepts only names, integers, `+ - * // %`, parentheses, `cdiv`, `min` and `max`, so a cached kernel's grid
can never run arbitrary code. Both the GPU runtime and the CPU interpreter launch through this module.
"""
from __future__ import annotations

import ast
import functools
from typing import Any, Optional, Sequence

from tawa.errors import LaunchError, RequirementError
from tawa.options import cluster_axis

#: tawa dtype name -> numpy dtype name (bf16 and fp8 come from ml_dtypes).
DTYPE_NAMES = ("f32", "f16", "bf16", "f8E4M3FN", "f8E5M2", "i32", "i1")


def numpy_dtype(name: str):
    """The numpy dtype for a tawa dtype name (`"bf16"` -> `ml_dtypes.bfloat16`)."""
    import numpy as np
    if name == "f32":
        return np.dtype(np.float32)
    if name == "f16":
        return np.dtype(np.float16)
    if name == "i32":
        return np.dtype(np.int32)
    if name == "i1":
        return np.dtype(np.bool_)
    import ml_dtypes
    table = {"bf16": ml_dtypes.bfloat16, "f8E4M3FN": ml_dtypes.float8_e4m3fn, "f8E5M2": ml_dtypes.float8_e5m2}
    if name not in table:
        raise LaunchError(f"unknown dtype '{name}'")
    return np.dtype(table[name])


def dtype_name(dtype) -> Optional[str]:
    """The tawa dtype name of a numpy dtype, or None when tawa has no such dtype."""
    for name in DTYPE_NAMES:
        if numpy_dtype(name) == dtype:
            return name
    return None


def _describe(param: dict) -> str:
    if param.get("kind") == "tensor":
        return f"{param['dtype']}[{', '.join(str(s) for s in param['shape'])}]"
    return str(param.get("dtype"))


def bind_shapes(params: Sequence[dict], args: Sequence[Any], dtypes: Sequence[Optional[str]],
                shapes: Sequence[Optional[tuple]], innermost_contiguous: Sequence[bool]) -> dict:
    """Check arguments described by (tawa dtype name, shape, innermost stride is 1) and bind the shape symbols.

    `args` are only used to check scalars; `dtypes[i]`/`shapes[i]` are None for arguments that are not arrays.
    Returns {symbol: extent}. Raises one `LaunchError` naming the first offending argument.
    """
    if len(args) != len(params):
        raise LaunchError(f"the kernel takes {len(params)} arguments "
                          f"({', '.join(p['name'] for p in params)}), got {len(args)}")
    bindings: dict = {}
    origin: dict = {}
    for i, param in enumerate(params):
        name, kind = param["name"], param["kind"]
        where = f"argument '{name}' (declared {_describe(param)})"
        if kind == "tensor":
            if shapes[i] is None:
                raise LaunchError(f"{where} must be an array, got {type(args[i]).__name__}")
            if dtypes[i] != param["dtype"]:
                got = dtypes[i] or str(getattr(args[i], "dtype", "?"))
                raise LaunchError(f"{where} has dtype {got}, expected {param['dtype']}")
            shape, decl = tuple(shapes[i]), list(param["shape"])
            if len(shape) != len(decl):
                raise LaunchError(f"{where} has {len(shape)} dimensions {list(shape)}, expected {len(decl)}")
            if not innermost_contiguous[i]:
                raise LaunchError(f"{where} must be row-major with a contiguous innermost dimension")
            for axis, (extent, sym) in enumerate(zip(shape, decl)):
                if isinstance(sym, int):
                    if extent != sym:
                        raise LaunchError(f"{where}: dimension {axis} is {extent}, expected {sym}")
                elif sym in bindings:
                    if bindings[sym] != extent:
                        raise LaunchError(f"{where}: dimension {axis} is {extent} but {sym} = {bindings[sym]} "
                                          f"from {origin[sym]}")
                else:
                    bindings[sym] = int(extent)
                    origin[sym] = f"argument '{name}' dimension {axis}"
        elif kind == "scalar":
            _check_scalar(where, param["dtype"], args[i])
        else:
            raise LaunchError(f"{where}: unknown parameter kind '{kind}'")
    return bindings


def _check_scalar(where: str, dtype: str, value: Any) -> None:
    import numbers
    if hasattr(value, "shape") and getattr(value, "shape", ()) != ():
        raise LaunchError(f"{where} must be a scalar, got an array of shape {tuple(value.shape)}")
    if dtype == "i1":
        ok = isinstance(value, (bool, numbers.Integral)) or type(value).__name__ == "bool_"
    elif dtype == "i32":
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        if ok and not -2**31 <= int(value) < 2**31:
            raise LaunchError(f"{where}: {int(value)} does not fit in i32")
    else:
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
        if ok and dtype == "f32":
            check_f32(where, value)
    if not ok:
        raise LaunchError(f"{where} must be a {dtype} scalar, got {type(value).__name__}")


#: The smallest magnitude that rounds to infinity in f32 (2**128 - 2**103); anything below rounds to a finite
#: value, FLT_MAX as C writes it (3.4028235e38) included.
F32_MAX = 2.0 ** 128 - 2.0 ** 103


def check_f32(where: str, value) -> None:
    """A finite value beyond f32's range would reach the kernel as infinity: refused (inf and NaN pass as given)."""
    v = float(value)
    if v == v and abs(v) != float("inf") and abs(v) >= F32_MAX:
        raise LaunchError(f"{where}: {v!r} does not fit in f32 (it would arrive as infinity)")


def bind_numpy_args(params: list, args: list) -> dict:
    """Check numpy arrays and scalars against `tawa.params`; return the shape-symbol bindings, e.g. {"M": 256}."""
    import numpy as np
    dtypes, shapes, contiguous = [], [], []
    for arg in args:
        if isinstance(arg, np.ndarray):
            dtypes.append(dtype_name(arg.dtype))
            shapes.append(arg.shape)
            contiguous.append(arg.ndim == 0 or arg.size == 0 or arg.shape[-1] <= 1 or arg.strides[-1] == arg.itemsize)
        else:
            dtypes.append(None)
            shapes.append(None)
            contiguous.append(True)
    bindings = bind_shapes(params, args, dtypes, shapes, contiguous)
    for param, arg in zip(params, args):
        if isinstance(arg, np.ndarray):
            check_written(param, arg.shape, tuple(s // max(arg.itemsize, 1) for s in arg.strides))   # (elements)
    return bindings


# ---------------------------------------------------------------------------------------------------------------
# Grid expressions

def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


_FUNCS = {"cdiv": _cdiv, "min": min, "max": max}
_BINOPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
           ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}


def _eval(node: ast.AST, env: dict, text: str) -> int:
    if isinstance(node, ast.Expression):
        return _eval(node.body, env, text)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise LaunchError(f"grid expression '{text}': unknown name '{node.id}'")
        value = env[node.id]
        if isinstance(value, bool) or not isinstance(value, int):
            raise LaunchError(f"grid expression '{text}': '{node.id}' = {value!r} is not an integer")
        return value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _eval(node.left, env, text), _eval(node.right, env, text)
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and right == 0:
            raise LaunchError(f"grid expression '{text}': division by zero")
        return _BINOPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _eval(node.operand, env, text)
        return -value if isinstance(node.op, ast.USub) else value
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS
            and not node.keywords):
        args = [_eval(a, env, text) for a in node.args]
        if node.func.id == "cdiv":
            if len(args) != 2:
                raise LaunchError(f"grid expression '{text}': cdiv takes 2 arguments")
            if args[1] == 0:
                raise LaunchError(f"grid expression '{text}': division by zero")
        elif not args:
            raise LaunchError(f"grid expression '{text}': {node.func.id} needs arguments")
        return _FUNCS[node.func.id](*args)
    raise LaunchError(f"grid expression '{text}': only integers, names, + - * // %, cdiv, min and max are allowed")


@functools.lru_cache(maxsize=1024)
def _parse_grid(text: str) -> ast.AST:
    """A grid expression parsed once per distinct text (the tree is only read, never changed)."""
    try:
        return ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise LaunchError(f"grid expression '{text}' is not a valid expression") from None


def _integer_names(constants: dict, bindings: dict) -> dict:
    """The names a grid expression or launch condition may read: integer constants, then the shape symbols."""
    env = {k: v for k, v in constants.items() if isinstance(v, int) and not isinstance(v, bool)}
    env.update(bindings)
    return env


def eval_grid(grid_exprs: list, bindings: dict, constants: dict) -> tuple:
    """Evaluate 1-3 grid expressions over shape-symbol bindings and integer constants; a tuple of ints."""
    if not 1 <= len(grid_exprs) <= 3:
        raise LaunchError(f"a grid has 1 to 3 dimensions, got {len(grid_exprs)}")
    env = _integer_names(constants, bindings)
    grid = []
    for text in grid_exprs:
        value = _eval(_parse_grid(str(text)), env, text)
        if value < 0:
            raise LaunchError(f"grid expression '{text}' is negative ({value})")
        grid.append(value)
    return tuple(grid)


def check_written(param: dict, shape, strides) -> None:
    """An argument the kernel stores to (`"written"` in its declaration) must not be a view whose elements share
    memory: a broadcast view (a stride-0 dimension of more than one element; torch refuses such writes for the
    same reason), or one where a step along one dimension lands on a step along another (`x.unfold(0, 4, 2)`'s
    windows, `as_strided` with equal strides). Different programs would write the same memory at once. (Views
    that overlap in other ways are not detected.)"""
    if not param.get("written") or 0 in tuple(shape):
        return          # (an empty array writes nothing; numpy gives empty arrays stride-0 dimensions)
    name = param["name"]
    note = "pass a tensor that owns its elements (.contiguous() or .clone())"
    for axis, (extent, stride) in enumerate(zip(shape, strides)):
        if extent > 1 and stride == 0:
            raise LaunchError(f"argument '{name}' is written by the kernel, but its dimension {axis} has "
                              f"stride 0 (a broadcast view): its {extent} elements there share one address", note=note)
    dims = [(axis, abs(stride), extent) for axis, (extent, stride) in enumerate(zip(shape, strides)) if extent > 1]
    for a, s, n in dims:
        for b, t, _ in dims:
            # index t / s along dimension a is index 1 along dimension b: the same address
            if a != b and t % s == 0 and t // s <= n - 1:
                raise LaunchError(f"argument '{name}' is written by the kernel, but its elements overlap: index "
                                  f"{t // s} along dimension {a} (stride {s}) and index 1 along dimension {b} "
                                  f"(stride {t}) are the same address", note=note)


def check_requires(kernel, bindings: dict) -> None:
    """Raise a LaunchError naming the first of the kernel's `@requires` conditions (`CompiledKernel.requires`)
    that these shape-symbol bindings break."""
    if not getattr(kernel, "requires", None):
        return
    env = _integer_names(kernel.constants, bindings)
    for r in kernel.requires:
        text = r["condition"]
        node = _parse_grid(text)
        body = node.body if isinstance(node, ast.Expression) else node
        if not (isinstance(body, ast.Compare) and len(body.ops) == 1 and type(body.ops[0]) in _COMPARE):
            raise LaunchError(f"kernel '{kernel.name}': launch condition '{text}' is not one comparison")
        left, right = _eval(body.left, env, text), _eval(body.comparators[0], env, text)
        if not _COMPARE[type(body.ops[0])](left, right):
            names = sorted({n.id for n in ast.walk(body) if isinstance(n, ast.Name) and n.id in bindings})
            values = ", ".join(f"{n} = {bindings[n]}" for n in names)
            raise RequirementError(f"kernel '{kernel.name}' requires {text}, but {values or 'the arguments'} "
                              f"(the @requires on line {r.get('line', '?')})",
                              note="launch it on arguments that meet the condition, or compile it with constants "
                                   "that do (for example a larger block)")


def requirements_met(kernel, bindings: dict) -> bool:
    """Whether these bindings meet the kernel's `@requires` conditions, as far as they bind the conditions'
    names (a condition over a symbol not bound here counts as met: the launch checks it)."""
    try:
        check_requires(kernel, bindings)
    except RequirementError:
        return False
    except LaunchError:
        return True
    return True


_COMPARE = {ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b,
            ast.GtE: lambda a, b: a >= b, ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b}


def cluster_size_for(cluster: Optional[Sequence[int]], tile_grid: tuple, most_ctas: int) -> int:
    """The CTAs per cluster a clustered persistent kernel launches with when at most `most_ctas` CTAs run: those
    its `cluster` [x, y] asks for, where at least one cluster's worth of tiles runs and the grid it was written
    for divides into clusters along that axis, or where rounding the axis up costs no wave (below); else 1 (the
    kernel then works alone on every tile: see `tawa.lowering.persistent_tiles`).

    The kernel's walk rounds the axis up to whole clusters: in the last one, the CTAs past the grid compute a tile
    outside the output (their loads read zeros, their stores are clipped away) so that their part of the shared
    tile reaches the others. Those extra tiles are only worth it where they fit in the last wave's idle slots."""
    if not cluster or max(cluster) <= 1:
        return 1
    axis, size = cluster_axis(cluster)
    tiles, walked = _tiles(tile_grid), _walked_tiles(tile_grid, axis, size)
    ctas = min(walked, most_ctas) // size * size
    if ctas < size:
        return 1
    if walked != tiles and -(-walked // ctas) > -(-tiles // min(tiles, most_ctas)):
        return 1
    return size


def _tiles(tile_grid: tuple) -> int:
    return tile_grid[0] * tile_grid[1] * tile_grid[2]


def _walked_tiles(tile_grid: tuple, axis: int, size: int) -> int:
    """The tiles the pair walk covers: the grid with `axis` rounded up to whole clusters of `size`."""
    return _tiles(tile_grid) // tile_grid[axis] * (-(-tile_grid[axis] // size) * size) if tile_grid[axis] else 0


def walked_tiles(cluster: Optional[Sequence[int]], tile_grid: tuple, most_ctas: int) -> tuple:
    """(tiles, CTAs per cluster): the tiles a persistent kernel written for the 3-D `tile_grid` walks when at most
    `most_ctas` CTAs run, in the clusters `cluster_size_for` allows (the grid rounded up to whole clusters along
    the paired axis), and the size of those clusters (1: none)."""
    size = cluster_size_for(cluster, tile_grid, most_ctas)
    return (_walked_tiles(tile_grid, cluster_axis(cluster)[0], size) if size > 1 else _tiles(tile_grid)), size


def persistent_launch(cluster: Optional[Sequence[int]], tile_grid: tuple, most_ctas: int) -> tuple:
    """((CTAs, 1, 1), CTAs per cluster): how a persistent kernel written for the 3-D `tile_grid` is launched when
    at most `most_ctas` CTAs are to run (on the GPU, those resident at once): one per tile it walks up to that
    many, in the clusters `cluster_size_for` allows, a whole number of them. The GPU runtime and the interpreter
    both launch through it, so the interpreter walks tiles and clusters as the GPU does."""
    tiles, size = walked_tiles(cluster, tile_grid, most_ctas)
    ctas = min(tiles, most_ctas)
    return (ctas // size * size, 1, 1), size
