"""Compiling candidates in a process pool, through the kernel cache; and that the pool's workers do not re-run
the user's script (multiprocessing's spawn would, unguarded, without `_main_hidden`)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tawa.autotune import Config, compiling
from tawa.runtime import cache

from autotune_support import CONFIGS, SCALE


def test_pool_compiles_every_candidate_in_order_into_the_cache(own_cache):
    configs = [Config(c) for c in CONFIGS] + [Config({"BLOCK_M": 48})]
    outcomes = compiling.compile_all(SCALE, "scale.tawa", configs, jobs=2)
    assert [o.config for o in outcomes] == configs
    assert [o.kernel is not None for o in outcomes] == [True, True, True, False]
    assert "scale.tawa:" in outcomes[3].error and "power of two" in outcomes[3].error
    for o in outcomes[:3]:
        assert not o.from_cache and o.kernel.constants["BLOCK_M"] == o.config.get("BLOCK_M")
        assert cache.load(o.cache_key) is not None                 # written by the worker, read here
    again = compiling.compile_all(SCALE, "scale.tawa", configs, jobs=2)
    assert [o.from_cache for o in again] == [True, True, True, False]
    assert again[0].kernel.ptx == outcomes[0].kernel.ptx


def test_compile_one_goes_through_the_same_cache(own_cache):
    first = compiling.compile_one(SCALE, "scale.tawa", Config(CONFIGS[1]))
    second = compiling.compile_one(SCALE, "scale.tawa", Config(CONFIGS[1]))
    assert not first.from_cache and second.from_cache and first.cache_key == second.cache_key
    bad = compiling.compile_one(SCALE, "scale.tawa", Config({"BLOCK_N": 24}))
    assert bad.kernel is None and "power of two" in bad.error


def test_a_candidate_that_restates_the_defaults_shares_the_entry_of_tawa_compile(own_cache):
    import tawa
    tawa.compile(SCALE)
    defaults = {"BLOCK_M": 16, "BLOCK_N": 32, "FACTOR": 2}
    same = compiling.compile_one(SCALE, "s", Config({"BLOCK_M": 16, "FACTOR": 2}), defaults=defaults)
    assert same.from_cache and same.config == Config({"BLOCK_M": 16, "FACTOR": 2})    # reported as given
    other = compiling.compile_all(SCALE, "s", [Config({"BLOCK_M": 16}), Config({"BLOCK_M": 64})], jobs=1,
                                  defaults=defaults)
    assert [o.from_cache for o in other] == [True, False]
    assert Config({"DTYPE": "bf16", "B": True}).without_defaults({"DTYPE": "bf16", "B": 1}).as_dict() == {"B": True}


def test_workers_do_not_rerun_an_unguarded_script(own_cache, tmp_path):
    marker = tmp_path / "runs.txt"
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent(f"""
        # No `if __name__ == "__main__":` guard, as in many quick scripts.
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        with open({str(marker)!r}, "a") as f:
            f.write("ran\\n")
        from autotune_support import CONFIGS, SCALE
        from tawa.autotune import Config, compiling
        outcomes = compiling.compile_all(SCALE, "scale.tawa", [Config(c) for c in CONFIGS], jobs=2)
        print(sum(o.kernel is not None for o in outcomes))
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180,
                         env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["3"]
    assert marker.read_text() == "ran\n"            # once: the workers never ran the script
    assert sys.modules["__main__"].__name__ == "__main__"


def test_jobs_come_from_the_environment(monkeypatch):
    import pytest
    from tawa.autotune import AutotuneError
    monkeypatch.setenv("TAWA_AUTOTUNE_JOBS", "3")
    assert compiling.default_jobs() == 3
    monkeypatch.setenv("TAWA_AUTOTUNE_JOBS", "many")
    with pytest.raises(AutotuneError, match="TAWA_AUTOTUNE_JOBS='many': expected a positive number"):
        compiling.default_jobs()
    monkeypatch.delenv("TAWA_AUTOTUNE_JOBS")
    assert compiling.default_jobs() >= 1


DERIVED = """\
@autotune(configs=(config(BLOCK_N=16), config(BLOCK_N=32)))
@grid(cdiv(M, BLOCK_M), cdiv(N, BLOCK_N))
def derived(X: f32[M, N], Y: f32[M, N], BLOCK_M: const = 32, BLOCK_N: const = min(BLOCK_M, 32)):
    x = load(X, (program_id(0), program_id(1)), (BLOCK_M, BLOCK_N))
    store(Y, (program_id(0), program_id(1)), x * 2.0)
"""


def test_a_candidate_restating_a_derived_default_keeps_it(own_cache):
    """BLOCK_N's default is computed from BLOCK_M: with BLOCK_M=16 fixed, the candidate BLOCK_N=32 (the default
    only while BLOCK_M keeps its own) must compile with 32 keys, not fall back to min(16, 32)."""
    import tawa
    outcomes = tawa.autotune.compile_space(DERIVED, show_progress=False, BLOCK_M=16)
    assert [o.kernel.constants["BLOCK_N"] for o in outcomes] == [16, 32]
    # A plain default is still dropped, so that the candidate shares the entry of `tawa.compile`.
    assert compiling.compile_one(DERIVED, "derived.tawa", Config({"BLOCK_M": 32}),
                                 defaults={"BLOCK_M": 32}).cache_key == \
        compiling.compile_one(DERIVED, "derived.tawa", Config({})).cache_key
