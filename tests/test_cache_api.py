"""The disk cache through the public API: a hit needs neither MLIR nor Lark, and any change to what determines
the code (source, constants, options) misses."""
import pathlib
import json
import os
import subprocess
import sys

import tawa

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

GEMM = str(EXAMPLES / "gemm.tawa")


def test_cache_hit_imports_neither_mlir_nor_lark(tmp_path):
    env = dict(os.environ, TAWA_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    fill = subprocess.run([sys.executable, "-c", f"import tawa; tawa.compile({GEMM!r})"], env=env,
                          capture_output=True, text=True)
    assert fill.returncode == 0, fill.stderr
    probe = ("import sys, time, json, tawa\n"
             "t = time.perf_counter()\n"
             f"k = tawa.compile({GEMM!r})\n"
             "dt = time.perf_counter() - t\n"
             "print(json.dumps({'hit': k.from_cache, 'seconds': dt, 'ptx': bool(k.ptx),\n"
             "  'mods': sorted(m for m in sys.modules if m.split('.')[0] in ('mlir', 'lark') or\n"
             "                 m.startswith(('tawa.frontend', 'tawa.lowering', 'tawa.ir', 'tawa.compiler')))}))\n")
    hit = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert hit.returncode == 0, hit.stderr
    out = json.loads(hit.stdout)
    assert out["hit"] and out["ptx"]
    assert out["mods"] == []
    assert out["seconds"] < 0.5          # milliseconds in practice; generous for a loaded CI machine


def test_changed_constant_or_option_misses(tmp_path, monkeypatch):
    monkeypatch.setenv("TAWA_CACHE_DIR", str(tmp_path))
    first = tawa.compile(GEMM)
    assert not first.from_cache
    assert tawa.compile(GEMM).from_cache
    assert not tawa.compile(GEMM, BLOCK_N=64).from_cache
    assert not tawa.compile(GEMM, num_stages=2).from_cache
    assert not tawa.compile(GEMM, cache=False).from_cache
