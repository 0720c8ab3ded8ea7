"""The disk cache: round trip, key sensitivity, atomic and corruption-tolerant entries, no MLIR on a hit."""
from __future__ import annotations

import json
import subprocess
import sys

from tawa.options import CompileOptions
from tawa.runtime import cache
from tawa.abi import AbiParam, CompiledKernel


def _kernel(**kw) -> CompiledKernel:
    base = dict(name="gemm", target="cuda",
                params=[{"name": "A", "kind": "tensor", "dtype": "bf16", "shape": ["M", "K"]},
                        {"name": "alpha", "kind": "scalar", "dtype": "f32"}],
                grid=["cdiv(M, 128)"], constants={"BLOCK_M": 128},
                abi=[AbiParam("tensormap", 0, box=[128, 64], swizzle=128), AbiParam("dim", 0, axis=1),
                     AbiParam("scalar", 1, dtype="f32")],
                num_threads=384, shared_bytes=160 * 1024, ptx=".version 8.0\n// ptx text\n",
                cubin=bytes(range(256)) * 3, notes=["warp specialized: 2 consumer groups"])
    base.update(kw)
    return CompiledKernel(**base)


def test_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("TAWA_CACHE_DIR", str(tmp_path))
    key = cache.cache_key("kernel source", CompileOptions())
    assert cache.load(key) is None
    k = _kernel(uneven_programs=True)
    d = cache.store(key, k)
    assert d == tmp_path / key
    assert sorted(p.name for p in d.iterdir()) == ["kernel.cubin", "kernel.json", "kernel.ptx"]
    got = cache.load(key)
    assert got == k
    assert isinstance(got.abi[0], AbiParam) and got.abi[0].box == [128, 64]
    assert got.cubin == k.cubin and got.ptx == k.ptx


def test_round_trip_without_binaries(tmp_path, monkeypatch):
    monkeypatch.setenv("TAWA_CACHE_DIR", str(tmp_path))
    k = _kernel(ptx=None, cubin=None, target="cpu", ir="module {}")
    cache.store("abc", k)
    assert sorted(p.name for p in (tmp_path / "abc").iterdir()) == ["kernel.json"]
    assert cache.load("abc") == k


def test_default_directory(monkeypatch, tmp_path):
    monkeypatch.delenv("TAWA_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache.cache_dir() == tmp_path / ".cache" / "tawa"


def test_key_sensitivity():
    src = "kernel k(A: f32[N]) {}"
    opts = CompileOptions()
    base = cache.cache_key(src, opts)
    assert base == cache.cache_key(src, CompileOptions())
    assert len(base) == 64
    different = {
        cache.cache_key(src + " ", opts),
        cache.cache_key(src, CompileOptions(constants={"BLOCK": 64})),
        cache.cache_key(src, CompileOptions(constants={"BLOCK": 128})),
        cache.cache_key(src, CompileOptions(num_stages=4)),
        cache.cache_key(src, CompileOptions(warp_specialize=False)),
        cache.cache_key(src, CompileOptions(target="cpu")),
        cache.cache_key(src, opts, version="999.0"),
        cache.cache_key(src, opts, constants={"X": 1}),
        cache.cache_key(src, opts, target="cpu"),
    }
    assert base not in different and len(different) == 9
    # Printing IR does not change the code.
    assert cache.cache_key(src, CompileOptions(dump_ir_after_all=True)) == base
    # Options given as a plain dict key the same way.
    assert cache.cache_key(src, opts.cache_key_fields()) == base


def test_incomplete_or_corrupt_entries_are_misses(tmp_path, monkeypatch):
    monkeypatch.setenv("TAWA_CACHE_DIR", str(tmp_path))
    cache.store("k1", _kernel())
    (tmp_path / "k1" / "kernel.cubin").unlink()          # binary missing
    assert cache.load("k1") is None
    cache.store("k2", _kernel())
    (tmp_path / "k2" / "kernel.json").write_text("{not json")
    assert cache.load("k2") is None
    cache.store("k3", _kernel())
    meta = json.loads((tmp_path / "k3" / "kernel.json").read_text())
    meta["unexpected_field"] = 1
    (tmp_path / "k3" / "kernel.json").write_text(json.dumps(meta))
    assert cache.load("k3") is None
    (tmp_path / "k4").mkdir()                            # a writer that died before kernel.json
    (tmp_path / "k4" / "kernel.ptx").write_text("x")
    assert cache.load("k4") is None


def test_store_overwrites_and_leaves_no_temporaries(tmp_path, monkeypatch):
    monkeypatch.setenv("TAWA_CACHE_DIR", str(tmp_path))
    cache.store("k", _kernel(num_threads=128))
    cache.store("k", _kernel(num_threads=256))
    assert cache.load("k").num_threads == 256
    assert not [p for p in (tmp_path / "k").iterdir() if p.name.startswith(".")]


def test_unwritable_cache_warns(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TAWA_CACHE_DIR", str(blocker))
    import pytest
    with pytest.warns(RuntimeWarning, match="could not write the kernel cache"):
        assert cache.store("k", _kernel()) is None


def test_runtime_imports_without_compiler_dependencies():
    code = ("import sys\n"
            "import tawa, tawa.runtime.cache, tawa.runtime.launcher, tawa.runtime.tensor_map, "
            "tawa.runtime.arrays, tawa.runtime.driver, tawa.runtime.kernel\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('mlir', 'lark', 'torch', 'cuda') or "
            "m.startswith(('tawa.frontend', 'tawa.ir', 'tawa.lowering'))]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)
