"""Runs every FileCheck test file under tests/passes/ (`*.mlir`, `*.tawa`), one test id per file.

Each file holds `// RUN:` lines (`# RUN:` in a .tawa file), lit style: the commands run with bash under
`set -o pipefail` from the repository root, after these substitutions:
  %s            the test file          %S   its directory          %t   a scratch path for this test
  %examples     the examples/ directory of the repository
  tawa-opt      python3 -m tawa.opt    tawac   python3 -m tawa (the compiler driver)
  FileCheck     python3 -m filecheck (the `filecheck` package, a port of LLVM FileCheck; also `filecheck`)
  not CMD       succeeds when CMD fails (for error cases: `not tawa-opt ... 2>&1 | FileCheck %s`)
A RUN line ending in `\\` continues on the next RUN line. The test fails with the command's output when any
RUN pipeline exits non-zero. See tests/passes/README.md.
"""
from __future__ import annotations

import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
EXAMPLES = ROOT / "examples"
FILES = sorted(p for p in HERE.rglob("*") if p.suffix in (".mlir", ".tawa") and p.is_file())

_RUN = re.compile(r"^\s*(?://|#)\s*RUN:\s?(.*?)\s*$")
_TOOLS = {
    "tawa-opt": f"{shlex.quote(sys.executable)} -m tawa.opt",
    "tawac": f"{shlex.quote(sys.executable)} -m tawa",
    "FileCheck": f"{shlex.quote(sys.executable)} -m filecheck",
    "filecheck": f"{shlex.quote(sys.executable)} -m filecheck",
}
# A tool name as a command word: at the start, or after a pipe, `;`, `&&`, `||`, `(` or `not`.
_TOOL_RE = re.compile(r"(^|[|;&(]\s*|\bnot\s+)(" + "|".join(re.escape(t) for t in _TOOLS) + r")(?=\s|$)")
PRELUDE = "set -o pipefail\nnot() { if \"$@\"; then return 1; else return 0; fi; }\n"


def run_lines(path: pathlib.Path) -> list[str]:
    """The RUN commands of a test file, continuation lines joined."""
    commands, current = [], None
    for line in path.read_text(encoding="utf-8").splitlines():
        m = _RUN.match(line)
        if not m:
            if current is not None:
                raise ValueError(f"{path}: RUN line ends with '\\' but the next line is not a RUN line")
            continue
        text = m.group(1)
        current = text if current is None else current + " " + text
        if current.endswith("\\"):
            current = current[:-1].rstrip()
            continue
        commands.append(current)
        current = None
    return commands


def substitute(command: str, path: pathlib.Path, tmp: pathlib.Path) -> str:
    subs = {"%s": shlex.quote(str(path)), "%S": shlex.quote(str(path.parent)), "%t": shlex.quote(str(tmp)),
            "%examples": shlex.quote(str(EXAMPLES)), "%%": "%"}
    command = re.sub(r"%examples|%[sSt%]", lambda m: subs[m.group(0)], command)
    return _TOOL_RE.sub(lambda m: m.group(1) + _TOOLS[m.group(2)], command)


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(HERE)) for p in FILES])
def test_file(path, tmp_path):
    commands = run_lines(path)
    assert commands, f"{path.relative_to(ROOT)} has no RUN lines"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               NO_COLOR="1")
    for original in commands:
        command = substitute(original, path, tmp_path / "t")
        proc = subprocess.run(["bash", "-c", PRELUDE + command], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=300)
        if proc.returncode != 0:
            pytest.fail(f"RUN: {original}\n$ {command}\nexit status {proc.returncode}\n"
                        f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}", pytrace=False)


def test_substitutions():
    path = pathlib.Path("/x/y.mlir")
    cmd = substitute("not tawa-opt %s --passes a 2>&1 | FileCheck %s --check-prefix=ERR", path, pathlib.Path("/t"))
    py = shlex.quote(sys.executable)
    assert cmd == f"not {py} -m tawa.opt /x/y.mlir --passes a 2>&1 | {py} -m filecheck /x/y.mlir --check-prefix=ERR"
    assert substitute("tawac %examples/gemm.tawa | filecheck %S/z", path, path) == \
        f"{py} -m tawa {shlex.quote(str(EXAMPLES))}/gemm.tawa | {py} -m filecheck /x/z"
