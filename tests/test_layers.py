"""The package's layering, enforced from the import statements of every module under tawa/ (read with `ast`, so
imports inside function bodies count as much as those at the top of a file).

Layers, bottom up (a module may import from its own layer and the layers below it):

- base: `tawa.errors`, `tawa.options`, `tawa.hopper`, `tawa.abi`, `tawa.elements`, `tawa.version`,
  `tawa.source` — import nothing from `tawa` but each other;
- `tawa.ir.*` — base and `tawa.ir` only;
- `tawa.frontend.*` — base, `tawa.ir`, `tawa.frontend` only;
- tile-level passes (modules directly in `tawa/lowering/`, the back end excepted) — nothing from
  `tawa.lowering.to_nvvm`, `tawa.runtime`, `tawa.compiler`, `tawa.cli`, `tawa.frontend`;
- back end (`tawa.lowering.to_nvvm.*`, `tawa.lowering.backend`, `.emit_ptx`, `.lower_to_llvm`) — nothing from
  `tawa.runtime`, `tawa.compiler`, `tawa.cli`, `tawa.frontend`;
- `tawa.runtime.*` — nothing from `tawa.frontend`, `tawa.lowering`, `tawa.compiler`, `tawa.cli`, nor the package
  root `tawa` itself; and the launch path (`launcher`, `arrays`, `tensor_map`, `driver`, `grid`, `cache`,
  `kernel`) loads neither `mlir` nor `lark` when imported (followed through every module it imports at module
  level, parent packages included), so a cached kernel launches without them;
- no import cycle anywhere (module-level and function-level imports both count).

Each failure lists every violation as `file:line: [rule] ...`. The checker itself is tested below on small fake
packages, so a broken checker cannot pass silently.
"""
from __future__ import annotations

import ast
import pathlib
import textwrap
from collections import deque
from dataclasses import dataclass, field

import pytest

PACKAGE_DIR = pathlib.Path(__file__).resolve().parent.parent / "tawa"

#: Base modules. `tawa.source` (the one `read_source`, shared by `tawa.compile`, the frontend and `tawac`)
#: imports only `tawa.errors` and sits here with them.
BASE = frozenset({"tawa.errors", "tawa.options", "tawa.option_flags", "tawa.hopper", "tawa.abi", "tawa.elements", "tawa.version",
                  "tawa.source"})
BACKEND = ("tawa.lowering.to_nvvm", "tawa.lowering.backend", "tawa.lowering.emit_ptx",
           "tawa.lowering.lower_to_llvm")
LAUNCH_PATH = tuple(f"tawa.runtime.{m}" for m in
                    ("launcher", "arrays", "tensor_map", "driver", "grid", "cache", "kernel"))
HEAVY = ("mlir", "lark")


# ---- reading the imports -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Import:
    target: str          # the module imported: resolved, absolute (`from a import b` gives `a.b` if that is a module)
    line: int
    module_level: bool   # runs when the importing module is imported (not inside a function, not TYPE_CHECKING)
    internal: bool       # inside the checked package


@dataclass
class Module:
    name: str
    path: pathlib.Path
    is_package: bool
    imports: list = field(default_factory=list)

    def where(self, line: int, root: pathlib.Path) -> str:
        return f"{self.path.relative_to(root.parent).as_posix()}:{line}"


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def discover(package_dir: pathlib.Path) -> dict:
    """Every module of the package at `package_dir`, by dotted name (a package is its `__init__`)."""
    root = package_dir.name
    modules = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        name = ".".join([root, *parts])
        modules[name] = Module(name, path, is_package)
    for module in modules.values():
        module.imports = _imports(module, set(modules), root)
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(module: Module, known: set, root: str) -> list:
    tree = ast.parse(module.path.read_text(encoding="utf-8"), filename=str(module.path))
    found: list = []
    # __package__ of the module: relative imports count from here.
    package = module.name if module.is_package else module.name.rpartition(".")[0]

    def add(target: str, line: int, module_level: bool):
        found.append(Import(target, line, module_level, _under(target, root)))

    def visit(node: ast.AST, module_level: bool):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno, module_level)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                if node.level - 1 >= len(base_parts):
                    raise AssertionError(f"{module.path}:{node.lineno}: relative import beyond the package")
                base = ".".join(base_parts[:len(base_parts) - (node.level - 1)])
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                add(sub if alias.name != "*" and sub in known else source, node.lineno, module_level)
        elif isinstance(node, ast.Call):
            # importlib.import_module("literal") is an import too.
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
            if name == "import_module" and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str) and not node.args[0].value.startswith("."):
                add(node.args[0].value, node.lineno, module_level)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            module_level = False
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            visit(node.test, module_level)
            for child in node.body:
                visit(child, False)
            for child in node.orelse:
                visit(child, module_level)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, module_level)

    visit(tree, True)
    return found


# ---- the rules ------------------------------------------------------------------------------------------------
def _in_base(t: str) -> bool:
    return t in BASE


def _in_ir(t: str) -> bool:
    return _under(t, "tawa.ir")


def _is_backend(m: str) -> bool:
    return any(_under(m, b) for b in BACKEND)


def _is_tile_pass(m: str) -> bool:
    return _under(m, "tawa.lowering") and m.count(".") <= 2 and not _is_backend(m)


def _forbids(*prefixes: str, root: bool = False):
    def allowed(t: str) -> bool:
        return not any(_under(t, p) for p in prefixes) and not (root and t == "tawa")
    return allowed


@dataclass(frozen=True)
class Rule:
    name: str
    applies: object      # module name -> bool
    allowed: object      # imported module name -> bool
    text: str


RULES = (
    Rule("base", lambda m: m in BASE, _in_base,
         "base modules import nothing from tawa but each other (" + ", ".join(sorted(BASE)) + ")"),
    Rule("ir", lambda m: _under(m, "tawa.ir"), lambda t: _in_base(t) or _in_ir(t),
         "tawa.ir imports only base modules and tawa.ir"),
    Rule("frontend", lambda m: _under(m, "tawa.frontend"),
         lambda t: _in_base(t) or _in_ir(t) or _under(t, "tawa.frontend"),
         "tawa.frontend imports only base modules, tawa.ir and tawa.frontend"),
    Rule("tile-pass", _is_tile_pass,
         _forbids("tawa.lowering.to_nvvm", "tawa.runtime", "tawa.compiler", "tawa.cli", "tawa.frontend"),
         "tile-level passes import nothing from tawa.lowering.to_nvvm, tawa.runtime, tawa.compiler, tawa.cli, "
         "tawa.frontend"),
    Rule("backend", _is_backend, _forbids("tawa.runtime", "tawa.compiler", "tawa.cli", "tawa.frontend"),
         "the back end (to_nvvm, backend, emit_ptx, lower_to_llvm) imports nothing from tawa.runtime, "
         "tawa.compiler, tawa.cli, tawa.frontend"),
    Rule("runtime", lambda m: _under(m, "tawa.runtime"),
         _forbids("tawa.frontend", "tawa.lowering", "tawa.compiler", "tawa.cli", root=True),
         "tawa.runtime imports nothing from tawa.frontend, tawa.lowering, tawa.compiler, tawa.cli, nor the "
         "package root tawa"),
)


def direction_violations(modules: dict, root: pathlib.Path) -> list:
    out = []
    for m in modules.values():
        rules = [r for r in RULES if r.applies(m.name)]
        for imp in m.imports:
            if not imp.internal or imp.target == m.name:
                continue
            for rule in rules:
                if not rule.allowed(imp.target):
                    scope = "" if imp.module_level else " (inside a function)"
                    out.append(f"{m.where(imp.line, root)}: [{rule.name}] {m.name} imports {imp.target}{scope}; "
                               f"{rule.text}")
    return out


def _parents(name: str) -> list:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def heavy_import_violations(modules: dict, root: pathlib.Path, launch_path=LAUNCH_PATH, heavy=HEAVY) -> list:
    """Launch-path modules whose import loads `mlir` or `lark`: followed through module-level imports and the
    parent packages Python runs first."""
    out = []
    for start in launch_path:
        if start not in modules:
            out.append(f"[launch-path] {start} does not exist")
            continue
        via = {start: None}
        queue = deque([start])
        while queue:
            name = queue.popleft()
            m = modules[name]
            nxt = [(p, None) for p in _parents(name)]
            for imp in m.imports:
                if not imp.module_level:
                    continue
                if imp.internal:
                    nxt += [(t, imp) for t in (*_parents(imp.target), imp.target)]
                elif imp.target.split(".")[0] in heavy:
                    chain, cur = [], name
                    while cur is not None:
                        chain.append(cur)
                        cur = via[cur]
                    out.append(f"{m.where(imp.line, root)}: [launch-path] importing {start} loads "
                               f"{imp.target} (via {' -> '.join(reversed(chain))}); the launch path must import "
                               f"neither mlir nor lark at module level")
            for t, _ in nxt:
                if t in modules and t not in via:
                    via[t] = name
                    queue.append(t)
    return out


def _sccs(graph: dict) -> list:
    """Strongly connected components (Tarjan, iterative)."""
    index, low, on_stack, stack, result, counter = {}, {}, set(), [], [], [0]
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                result.append(sorted(comp))
    return result


def cycle_violations(modules: dict, root: pathlib.Path) -> list:
    """Every import cycle: one entry per strongly connected component, naming a shortest cycle through it and
    every import (file:line) between its modules."""
    edges: dict = {name: {} for name in modules}     # module -> {target: [Import, ...]}
    for m in modules.values():
        for imp in m.imports:
            if imp.internal and imp.target in modules and imp.target != m.name:
                edges[m.name].setdefault(imp.target, []).append(imp)
    out = []
    for comp in _sccs({n: set(t) for n, t in edges.items()}):
        if len(comp) < 2:
            continue
        members = set(comp)
        # A shortest cycle through the component's first module.
        first = comp[0]
        prev = {first: None}
        queue, cycle = deque([first]), None
        while queue and cycle is None:
            node = queue.popleft()
            for t in sorted(edges[node]):
                if t == first:
                    cycle, cur = [first], node
                    while cur is not None:
                        cycle.append(cur)
                        cur = prev[cur]
                    cycle.reverse()
                    break
                if t in members and t not in prev:
                    prev[t] = node
                    queue.append(t)
        lines = [f"[cycle] import cycle {' -> '.join(cycle)}; the imports between "
                 f"{', '.join(comp)}:"]
        for name in comp:
            for t in sorted(edges[name]):
                if t in members:
                    for imp in edges[name][t]:
                        scope = "" if imp.module_level else " (inside a function)"
                        lines.append(f"    {modules[name].where(imp.line, root)}: {name} imports {t}{scope}")
        out.append("\n".join(lines))
    return out


def _report(violations: list) -> str:
    return f"{len(violations)} layering violation(s):\n" + "\n".join(violations)


# ---- the package --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def package():
    return discover(PACKAGE_DIR)


def test_checker_sees_the_package(package):
    # Guard against a checker that reads nothing and so passes.
    assert {"tawa", "tawa.runtime.launcher", "tawa.ir.types", "tawa.lowering.to_nvvm"} <= set(package)
    assert any(imp.internal for imp in package["tawa.runtime.launcher"].imports)
    assert all(base in package for base in BASE), sorted(BASE - set(package))


def test_import_directions(package):
    violations = direction_violations(package, PACKAGE_DIR)
    assert not violations, _report(violations)


def test_launch_path_imports_neither_mlir_nor_lark(package):
    violations = heavy_import_violations(package, PACKAGE_DIR)
    assert not violations, _report(violations)


def test_no_import_cycles(package):
    violations = cycle_violations(package, PACKAGE_DIR)
    assert not violations, _report(violations)


# ---- the checker, on fake packages ----------------------------------------------------------------------------------
def _fake(tmp_path: pathlib.Path, files: dict) -> tuple:
    root = tmp_path / "tawa"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    for d in [root, *(p for p in root.rglob("*") if p.is_dir())]:
        (d / "__init__.py").touch()
    return discover(root), root


def test_checker_finds_a_cycle_through_a_function_body(tmp_path):
    modules, root = _fake(tmp_path, {
        "a.py": "import tawa.b\n",
        "b.py": "def f():\n    from tawa import a\n    return a\n",
        "c.py": "from tawa import a\n",
    })
    found = cycle_violations(modules, root)
    assert len(found) == 1, found
    assert "tawa.a -> tawa.b -> tawa.a" in found[0]
    assert "tawa/a.py:1: tawa.a imports tawa.b" in found[0]
    assert "tawa/b.py:2: tawa.b imports tawa.a (inside a function)" in found[0]
    assert "tawa.c" not in found[0]


def test_checker_resolves_relative_imports_and_package_inits(tmp_path):
    modules, root = _fake(tmp_path, {
        # A package importing its own submodules, and `from . import x` naming a submodule: no cycle.
        "runtime/__init__.py": "from . import cache\nfrom .cache import KEY\n",
        "runtime/cache.py": "from ..errors import E\nfrom . import grid\nKEY = 1\n",
        "runtime/grid.py": "from tawa.errors import E\n",
        "errors.py": "E = Exception\n",
    })
    imports = {(i.target, i.line) for i in modules["tawa.runtime"].imports}
    assert imports == {("tawa.runtime.cache", 1), ("tawa.runtime.cache", 2)}
    assert {i.target for i in modules["tawa.runtime.cache"].imports} == {"tawa.errors", "tawa.runtime.grid"}
    assert cycle_violations(modules, root) == []
    assert direction_violations(modules, root) == []

    modules, root = _fake(tmp_path / "2", {
        "runtime/__init__.py": "from .cache import KEY\n",
        "runtime/cache.py": "from . import helper_value\nKEY = 1\n",   # helper_value is no module: the __init__
    })
    found = cycle_violations(modules, root)
    assert len(found) == 1 and "tawa.runtime -> tawa.runtime.cache -> tawa.runtime" in found[0], found


def test_checker_finds_wrong_directions(tmp_path):
    modules, root = _fake(tmp_path, {
        "__init__.py": "__version__ = '0'\n",
        "errors.py": "import tawa.runtime.cache\n",                              # base -> runtime
        "options.py": "from tawa import hopper, errors\n",                      # fine
        "hopper.py": "",
        "compiler.py": "",
        "ir/types.py": "def f():\n    from tawa.frontend import parse\n",     # ir -> frontend, in a function
        "frontend/parse.py": "from tawa.ir import types\nfrom tawa.lowering import canonicalize\n",
        "lowering/canonicalize.py": "from .to_nvvm import context\n",          # tile pass -> to_nvvm
        "lowering/backend.py": "from tawa.lowering.to_nvvm import context\n",  # fine
        "lowering/to_nvvm/context.py": "from ... import compiler\n",           # back end -> compiler
        "runtime/cache.py": "import tawa\nfrom tawa import __version__\nfrom tawa import errors\n",
        "runtime/launcher.py": "from tawa.runtime import cache\n",
    })
    found = direction_violations(modules, root)
    expected = [
        "tawa/errors.py:1: [base] tawa.errors imports tawa.runtime.cache",
        "tawa/ir/types.py:2: [ir] tawa.ir.types imports tawa.frontend.parse (inside a function)",
        "tawa/frontend/parse.py:2: [frontend] tawa.frontend.parse imports tawa.lowering.canonicalize",
        "tawa/lowering/canonicalize.py:1: [tile-pass] tawa.lowering.canonicalize imports tawa.lowering.to_nvvm.context",
        "tawa/lowering/to_nvvm/context.py:1: [backend] tawa.lowering.to_nvvm.context imports tawa.compiler",
        "tawa/runtime/cache.py:1: [runtime] tawa.runtime.cache imports tawa;",
        "tawa/runtime/cache.py:2: [runtime] tawa.runtime.cache imports tawa;",
    ]
    for text in expected:
        assert sum(v.startswith(text) for v in found) == 1, (text, found)
    assert len(found) == len(expected), found


def test_checker_follows_the_launch_path_to_mlir(tmp_path):
    modules, root = _fake(tmp_path, {
        "ir/types.py": "from mlir import ir\n",
        "ir/__init__.py": "",
        "runtime/launcher.py": "from tawa.runtime.arrays import X\ndef f():\n    import lark\n",
        "runtime/arrays.py": "from tawa.ir import types\nX = 1\n",
        "runtime/kernel.py": "def launch():\n    from mlir import ir\n",      # inside a function: fine
        "runtime/grid.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import mlir\n",
        "runtime/driver.py": "", "runtime/cache.py": "", "runtime/tensor_map.py": "",
        "frontend/__init__.py": "import lark\n",
        "frontend/x.py": "",
        "runtime/interp.py": "import tawa.frontend.x\n",   # not on the launch path
    })
    found = heavy_import_violations(modules, root)
    assert len(found) == 2, found
    assert all(v.startswith("tawa/ir/types.py:1: [launch-path]") for v in found), found
    assert any("tawa.runtime.launcher -> tawa.runtime.arrays -> tawa.ir.types" in v for v in found), found
    assert any("importing tawa.runtime.arrays loads mlir" in v for v in found), found
    # The parent package runs first: a heavy import in tawa/__init__.py is on every launch path.
    (root / "__init__.py").write_text("import lark\n")
    (root / "ir" / "types.py").write_text("")
    found = heavy_import_violations(discover(root), root)
    assert len(found) == 7 and all(v.startswith("tawa/__init__.py:1: [launch-path]") for v in found), found
