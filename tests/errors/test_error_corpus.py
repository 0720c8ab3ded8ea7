"""Runs the error corpus: every `.tawa` file here is a bad program whose first line states the expected error,
`# ERROR: LINE:COLUMN: MESSAGE`. Compiling it must raise exactly one CompilationError with that message at that
position (and the printed error must show the offending source line).

Optional header lines follow the first one:
- `# TARGET: cuda`: the program is fine for the frontend and is refused by the GPU backend; it is compiled through
  the whole pipeline (`tawa.compile(path, cache=False)`), not only parsed and lowered. Needs no GPU.
- `# NOTE: TEXT`: the error carries a note (a workaround) containing TEXT; required for `cuda` files.
- `# OPTIONS: name=value, ...`: compile options (`warp_specialize=False`, `num_stages=1`, ...).

Whatever fails, no Python exception other than a TawaError escapes, and `tawac FILE --emit ptx` exits with
status 1 and prints the error (never a traceback).
"""
from __future__ import annotations

import concurrent.futures
import os
import pathlib
import re
import subprocess
import sys

import pytest

import tawa
from tawa.cli import main as tawac
from tawa.errors import CompilationError, TawaError
from tawa.frontend import parse_and_lower, read_source

HERE = pathlib.Path(__file__).resolve().parent
CORPUS = sorted(HERE.glob("*.tawa"))
HEADER = re.compile(r"# ERROR: (\d+):(\d+): (.*)")
FIELD = re.compile(r"# (TARGET|NOTE|OPTIONS): (.*)")


def _value(text: str):
    text = text.strip()
    if text in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[text]
    try:
        return int(text)
    except ValueError:
        return text


def expectation(path: pathlib.Path) -> dict:
    """The header of a corpus file: line, column, message, target, note, options."""
    lines = path.read_text(encoding="utf-8").splitlines()
    m = HEADER.match(lines[0]) if lines else None
    assert m, f"{path.name}: first line must be '# ERROR: LINE:COLUMN: MESSAGE'"
    exp = dict(line=int(m.group(1)), column=int(m.group(2)), message=m.group(3), target=None, note=None,
               options={})
    for text in lines[1:]:
        f = FIELD.match(text)
        if not f:
            break
        key, value = f.group(1).lower(), f.group(2).strip()
        if key == "options":
            exp["options"] = {k.strip(): _value(v) for k, v in (item.split("=", 1) for item in value.split(","))}
        else:
            exp[key] = value
    assert exp["target"] in (None, "cuda"), f"{path.name}: unknown target {exp['target']!r}"
    assert exp["target"] is None or exp["note"], f"{path.name}: a backend rejection must say what its note holds"
    return exp


def compile_corpus_file(path: pathlib.Path, exp: dict):
    """Compile as the header says; returns the exception raised (None if it compiled)."""
    try:
        if exp["target"] == "cuda":
            tawa.compile(str(path), cache=False, **exp["options"])
        else:
            source, filename = read_source(str(path))
            parse_and_lower(source, filename)
    except Exception as e:      # noqa: BLE001 -- the tests below say which kinds are acceptable
        return e
    return None


def tawac_args(path: pathlib.Path, exp: dict) -> list:
    args = [str(path), "--emit", "ptx"]
    for name, value in exp["options"].items():
        flag = "--" + name.replace("_", "-")
        if name == "warp_specialize":
            args += [flag, {True: "on", False: "off", None: "auto"}[value]]
        else:
            args += [flag, str(value)]
    return args


def test_corpus_is_large_enough():
    assert len(CORPUS) >= 15
    assert sum(expectation(p)["target"] == "cuda" for p in CORPUS) >= 8


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_error(path):
    exp = expectation(path)
    source, filename = read_source(str(path))
    line, column, message = exp["line"], exp["column"], exp["message"]
    err = compile_corpus_file(path, exp)
    assert err is not None, f"{path.name}: compiled without an error"
    assert isinstance(err, CompilationError), \
        f"{path.name}: expected a CompilationError, got {type(err).__name__}: {err}"
    assert err.message == message
    assert err.location is not None, f"{path.name}: the error has no location"
    assert (err.location.line, err.location.column) == (line, column)
    assert err.location.filename == filename
    text = str(err)
    assert text.startswith(f"{filename}:{line}:{column}: error: {message}")
    assert source.splitlines()[line - 1].strip() in text        # the source line is shown
    if exp["note"]:
        assert err.note and exp["note"] in err.note, f"{path.name}: note {err.note!r}"
        assert f"\nnote: {err.note}" in text


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_only_tawa_errors_escape(path, capsys):
    """Compiling raises a TawaError (never a bare Python exception), and `tawac FILE --emit ptx` (run in
    process) returns 1 with the error on stderr, without a traceback."""
    exp = expectation(path)
    err = compile_corpus_file(path, exp)
    assert isinstance(err, TawaError), f"{path.name}: {type(err).__name__} escaped: {err}"
    capsys.readouterr()
    try:
        status = tawac(tawac_args(path, exp))
    except Exception as e:      # noqa: BLE001
        pytest.fail(f"tawac {path.name}: {type(e).__name__} escaped: {e}")
    out = capsys.readouterr()
    assert status == 1
    assert exp["message"] in out.err and "Traceback" not in out.err + out.out


@pytest.fixture(scope="module")
def tawac_runs():
    """`tawac FILE --emit ptx` as a separate process for every backend rejection (run concurrently)."""
    backend = [p for p in CORPUS if expectation(p)["target"] == "cuda"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parents[1])] + sys.path))

    def run(path):
        cmd = [sys.executable, "-m", "tawa.cli", *tawac_args(path, expectation(path))]
        return path, subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        return dict(pool.map(run, backend))


@pytest.mark.parametrize("path", [p for p in CORPUS if expectation(p)["target"] == "cuda"],
                         ids=[p.stem for p in CORPUS if expectation(p)["target"] == "cuda"])
def test_tawac_process_reports_backend_rejections(path, tawac_runs):
    exp = expectation(path)
    proc = tawac_runs[path]
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert f"{path.name}:{exp['line']}:{exp['column']}: error: {exp['message']}" in proc.stderr
    assert exp["note"] in proc.stderr
