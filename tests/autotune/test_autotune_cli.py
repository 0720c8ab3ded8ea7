"""`tawac FILE --autotune-space`: the whole candidate set compiled ahead of time, into the cache or -o DIR."""
from __future__ import annotations

import os

from tawa.autotune import Config, space
from tawa.cli import main as tawac
from tawa.runtime import cache

from autotune_support import SCALE, SCALE_DECLARED


def test_compiles_the_declared_space_into_a_cache_directory(tmp_path, capsys, monkeypatch):
    kernel = tmp_path / "scale.tawa"
    kernel.write_text(SCALE_DECLARED)
    out_dir = tmp_path / "carry"
    assert tawac([str(kernel), "--autotune-space", "-o", str(out_dir), "-D", "FACTOR=3", "--jobs", "2"]) == 0
    out = capsys.readouterr()
    lines = out.out.splitlines()
    assert len(lines) == 4 and all(": ok (" in line for line in lines)
    assert lines[0].startswith("BLOCK_M=16 BLOCK_N=32 FACTOR=3: ok (") and "bytes spilled" in lines[0]
    assert "4 of 4 candidates compiled" in out.err
    assert os.environ.get("TAWA_CACHE_DIR") != str(out_dir)       # the cache directory was set for the run only
    # What a GPU machine pointed at that directory finds: every candidate and the space record.
    monkeypatch.setenv("TAWA_CACHE_DIR", str(out_dir))
    info = space.load_space(space.space_key(SCALE_DECLARED))
    assert info is not None and info["declared"]["key"] == ["M"]
    for values in info["declared"]["configs"]:
        options = Config(values).merged({"FACTOR": 3}).without_defaults(info["constants"]).options().validate()
        assert cache.load(cache.cache_key(SCALE_DECLARED, options)) is not None
    assert tawac([str(kernel), "--autotune-space", "-o", str(out_dir), "-D", "FACTOR=3"]) == 0
    assert all(line.endswith(", cached)") for line in capsys.readouterr().out.splitlines())


def test_default_space_and_failures(tmp_path, capsys, own_cache):
    kernel = tmp_path / "scale.tawa"
    kernel.write_text(SCALE)                     # no dot, no declaration: the defaults only
    assert tawac([str(kernel), "--autotune-space"]) == 0
    assert capsys.readouterr().out.startswith("defaults: ok (")
    assert tawac([str(kernel), "--autotune-space", "-D", "BLOCK_M=48"]) == 1      # nothing compiles
    out = capsys.readouterr()
    assert "BLOCK_M=48: does not compile: " in out.out and "0 of 1 candidates compiled" in out.err


def test_usage_errors(tmp_path, capsys):
    kernel = tmp_path / "scale.tawa"
    kernel.write_text(SCALE)
    (tmp_path / "file").write_text("")
    cases = [
        ([str(kernel), "--autotune-space", "--emit", "ptx"], "--emit and --passes are not available"),
        ([str(kernel), "--jobs", "2"], "--jobs applies to --autotune-space only"),
        ([str(kernel), "--autotune-space", "--jobs", "0"], "argument --jobs: invalid value 0"),
        ([str(kernel), "--autotune-space", "-o", str(tmp_path / "file")], "it is a file"),
        ([str(kernel), "--autotune-space", "-o", str(tmp_path / "no" / "dir")], "no such directory"),
    ]
    for argv, message in cases:
        assert tawac(argv) == 2, argv
        assert message in capsys.readouterr().err
    assert tawac([str(tmp_path / "missing.tawa"), "--autotune-space"]) == 1
    assert "no such kernel file" in capsys.readouterr().err
