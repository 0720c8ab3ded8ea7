"""The tuner with its GPU timer faked: choosing, keys, the TAWA_AUTOTUNE switch, pruning, results on disk reused
by a fresh process, export and import, and a full launch through the CPU interpreter."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tawa
from tawa.abi import CompiledKernel
from tawa.autotune import AutotuneError, Config, compiling, results
from tawa.autotune.progress import Progress
from tawa.errors import LaunchError

from autotune_support import CONFIGS, SCALE, SCALE_DECLARED, TIMINGS_PER_TUNING, FakeTimer, NoTimer


def arrays(m, n):
    return np.zeros((m, n), np.float32), np.zeros((m, n), np.float32)


def test_the_fastest_candidate_wins_and_is_stored(no_results):
    timer = FakeTimer(times=lambda c: {16: 3.0, 64: 1.0}[c["BLOCK_M"]] + c["BLOCK_N"] / 1000)
    tuner = tawa.autotune(SCALE, configs=CONFIGS, timer=timer)
    choice = tuner.tune(*arrays(512, 512))
    assert choice.how == "tuned" and choice.config == {"BLOCK_M": 64, "BLOCK_N": 32}
    assert choice.ms == pytest.approx(1.032)
    # one pass, then the two within 5% of the fastest (1.032 and 1.064 ms) in four rounds, alternating who starts
    assert [(c["BLOCK_M"], c["BLOCK_N"]) for c in timer.calls] == [(16, 32), (64, 32), (64, 64)] + \
        [(64, 32), (64, 64), (64, 64), (64, 32)] * 2
    assert choice.kernel.compiled.constants["BLOCK_M"] == 64 and choice.kernel.target == "cuda"
    [record] = results.all_records()
    assert record["config"] == choice.config and record["device"] == "Fake H200"
    assert record["key"] == {"M": 512, "N": 512} and record["kernel"] == "scale"
    assert len(record["timings"]) == 3 and record["cache_key"]
    assert "* BLOCK_M=64 BLOCK_N=32: 1.0320 ms" in choice.report()


def test_close_calls_are_decided_by_the_median_of_rounds(no_results):
    # BLOCK_N=32 is timed lucky once (0.97 ms) and 1.10 ms after; BLOCK_N=64 is a steady 1.00 ms: one pass would
    # keep the lucky one, the rounds keep the steady one
    seen = {}

    def times(c):
        if c["BLOCK_M"] == 16:
            return 5.0
        seen[c["BLOCK_N"]] = seen.get(c["BLOCK_N"], 0) + 1
        return 1.0 if c["BLOCK_N"] == 64 else (0.97 if seen[32] == 1 else 1.10)
    choice = tawa.autotune(SCALE, configs=CONFIGS, timer=FakeTimer(times=times)).tune(*arrays(512, 512))
    assert choice.config == {"BLOCK_M": 64, "BLOCK_N": 64} and choice.ms == pytest.approx(1.0)
    assert seen == {32: 5, 64: 5}
    lucky = [t for t in choice.timings if t["config"] == {"BLOCK_M": 64, "BLOCK_N": 32}]
    assert lucky[0]["ms"] == pytest.approx(1.10)          # its median, not its first time


def test_one_pass_without_rounds_and_only_close_calls_are_timed_again(no_results):
    seen = {}

    def times(c):
        seen[c["BLOCK_N"], c["BLOCK_M"]] = seen.get((c["BLOCK_N"], c["BLOCK_M"]), 0) + 1
        return 1.0 + c["BLOCK_N"] / 1000 if c["BLOCK_M"] == 64 else 1.2      # 16x32: 16% slower than the fastest
    choice = tawa.autotune(SCALE, configs=CONFIGS, timer=FakeTimer(times=times), confirm_rounds=0).tune(
        *arrays(512, 512))
    assert choice.config == {"BLOCK_M": 64, "BLOCK_N": 32} and list(seen.values()) == [1, 1, 1]
    seen.clear()
    tawa.autotune(SCALE, configs=CONFIGS, timer=FakeTimer(times=times), confirm_rounds=2).tune(*arrays(256, 512))
    assert seen == {(32, 16): 1, (32, 64): 3, (64, 64): 3}
    with pytest.raises(AutotuneError, match="confirm_rounds=-1"):
        tawa.autotune(SCALE, configs=CONFIGS, confirm_rounds=-1)


class Timed:
    """A timed candidate as `_finalists` sees it: only its time."""
    def __init__(self, ms):
        self.ms = ms


def test_at_most_four_finalists_fastest_first():
    from tawa.autotune.tuner import FINALISTS, _finalists
    outcomes = [Timed(ms) for ms in (1.04, 1.00, 1.06, 1.01, 1.03, 1.02)]
    assert [o.ms for o in _finalists(outcomes)] == [1.00, 1.01, 1.02, 1.03][:FINALISTS]


def test_a_lone_leader_is_timed_again_with_the_runner_up():
    """A first timing 12% ahead of the rest (a candidate timed on a cool GPU) is not trusted alone."""
    from tawa.autotune.tuner import _finalists
    outcomes = [Timed(ms) for ms in (1.13, 1.00, 1.20, 1.12)]
    assert [o.ms for o in _finalists(outcomes)] == [1.00, 1.12]
    assert [o.ms for o in _finalists([Timed(1.0)])] == [1.0]


def test_an_early_lucky_timing_loses_to_the_sustained_fastest(no_results):
    seen = {}

    def times(c):
        n = seen[c["BLOCK_N"], c["BLOCK_M"]] = seen.get((c["BLOCK_N"], c["BLOCK_M"]), 0) + 1
        if (c["BLOCK_M"], c["BLOCK_N"]) == (16, 32):
            return 0.88 if n == 1 else 1.10          # fast once (cool GPU), then its sustained time
        return 1.0 if c["BLOCK_N"] == 64 else 1.2
    choice = tawa.autotune(SCALE, configs=CONFIGS, timer=FakeTimer(times=times)).tune(*arrays(512, 512))
    assert choice.config == {"BLOCK_M": 64, "BLOCK_N": 64}


def test_the_order_a_key_is_written_in_does_not_matter(no_results):
    first = tawa.autotune(SCALE, configs=CONFIGS, key=["M", "N"], timer=FakeTimer())
    best = first.tune(*arrays(512, 256)).config
    again = tawa.autotune(SCALE, configs=CONFIGS, key=["N", "M"], timer=NoTimer())
    assert again.identity == first.identity and again.tune(*arrays(512, 256)).how == "stored"
    assert again.tune(*arrays(512, 256)).config == best and list(again.choices) == [(256, 512)]


def test_a_key_is_tuned_once_and_only_key_symbols_count(no_results):
    timer = FakeTimer()
    tuner = tawa.autotune(SCALE, configs=CONFIGS, key=["M"], timer=timer)
    tuner.tune(*arrays(512, 512))
    tuner.tune(*arrays(512, 64))            # N is not in the key: same choice, nothing timed
    assert len(timer.calls) == TIMINGS_PER_TUNING and len(tuner.choices) == 1
    tuner.tune(*arrays(256, 512))           # a new M: tuned again
    assert len(timer.calls) == 2 * TIMINGS_PER_TUNING and sorted(tuner.choices) == [(256,), (512,)]


def test_oversized_tiles_are_not_compiled_or_timed(no_results):
    timer = FakeTimer()
    choice = tawa.autotune(SCALE, configs=CONFIGS, timer=timer).tune(*arrays(10, 512))
    assert timer.calls == []                          # the only candidate left is not even timed
    assert choice.ms is None and choice.config == {"BLOCK_M": 16, "BLOCK_N": 32}
    pruned = [t for t in choice.timings if "pruned" in t]
    assert len(pruned) == 2 and all("BLOCK_M=64 is larger than M=10 needs" in t["pruned"] for t in pruned)


def test_declared_space_and_key_are_used(no_results):
    tuner = tawa.autotune(SCALE_DECLARED, timer=FakeTimer())
    assert tuner.key == ["M"] and tuner.origin == "declared" and len(tuner.configs) == 4
    assert "4 declared candidates" in repr(tuner)
    assert tawa.autotune(SCALE_DECLARED, configs=CONFIGS, timer=FakeTimer()).origin == "python"


def test_switch_off_runs_the_first_fitting_candidate_without_timing(no_results, monkeypatch):
    monkeypatch.setenv("TAWA_AUTOTUNE", "0")
    timer = FakeTimer()
    tuner = tawa.autotune(SCALE, configs=[{"BLOCK_M": 64}, {"BLOCK_M": 16}], timer=timer)
    assert tuner.tune(*arrays(512, 512)).config == {"BLOCK_M": 64}
    assert tuner.tune(*arrays(8, 512)).config == {"BLOCK_M": 16}      # 64 rows is more than M=8 needs
    assert timer.calls == [] and results.all_records() == []
    assert tuner.tune(*arrays(8, 512)).how == "default"


def test_force_tunes_again_and_a_bad_switch_is_an_error(no_results, monkeypatch):
    tawa.autotune(SCALE, configs=CONFIGS, timer=FakeTimer()).tune(*arrays(512, 512))
    timer = FakeTimer()
    monkeypatch.setenv("TAWA_AUTOTUNE", "force")
    assert tawa.autotune(SCALE, configs=CONFIGS, timer=timer).tune(*arrays(512, 512)).how == "tuned"
    assert len(timer.calls) == TIMINGS_PER_TUNING
    monkeypatch.setenv("TAWA_AUTOTUNE", "sometimes")
    with pytest.raises(AutotuneError, match="TAWA_AUTOTUNE='sometimes': expected 1"):
        tawa.autotune(SCALE, configs=CONFIGS, timer=timer).tune(*arrays(512, 512))


def test_candidates_that_do_not_compile_or_run_are_pruned_with_the_reason(no_results):
    bad_launch = (("BLOCK_M", 64), ("BLOCK_N", 64))
    timer = FakeTimer(fail={bad_launch: LaunchError("too many resources requested")})
    configs = CONFIGS + [{"BLOCK_M": 48}]                      # not a power of two: a compile error
    choice = tawa.autotune(SCALE, configs=configs, timer=timer).tune(*arrays(512, 512))
    assert choice.config == {"BLOCK_M": 16, "BLOCK_N": 32}
    why = {Config(t["config"]).label(): t.get("pruned") for t in choice.timings}
    assert "power of two" in why["BLOCK_M=48"] and why["BLOCK_M=48"].startswith("does not compile:")
    assert why["BLOCK_M=64 BLOCK_N=64"] == "does not run: too many resources requested"


def test_no_candidate_left_is_one_error_listing_each(no_results):
    with pytest.raises(AutotuneError) as e:
        tawa.autotune(SCALE, configs=[{"BLOCK_M": 48}, {"BLOCK_N": 24}], timer=FakeTimer()).tune(*arrays(64, 64))
    text = e.value.message
    assert "kernel 'scale': no candidate configuration can run" in text
    assert "BLOCK_M=48: does not compile" in text and "BLOCK_N=24: does not compile" in text


def test_spilling_candidates_are_pruned_unless_all_spill():
    def outcome(spill):
        notes = [f"ptxas: 255 registers, {spill} bytes spill stores, {spill} bytes spill loads, 0 bytes stack"]
        kernel = CompiledKernel(name="k", target="cuda", params=[], grid=[], constants={}, notes=notes,
                                spill_bytes=2 * spill)
        return compiling.Outcome(Config({"S": spill}), kernel)
    mixed = [outcome(0), outcome(64), outcome(0)]
    assert compiling.prune(mixed) == [mixed[0], mixed[2]]
    assert mixed[1].pruned == "ptxas spills 128 bytes of registers"
    assert len(compiling.prune([outcome(8), outcome(16)])) == 2          # all spill: time them anyway
    assert compiling.prune([outcome(64)], spills=False) != []
    no_report = CompiledKernel(name="k", target="cuda", params=[], grid=[], constants={})
    assert no_report.spill_bytes is None


def test_bad_arguments_are_launch_errors():
    tuner = tawa.autotune(SCALE, configs=CONFIGS, timer=FakeTimer())
    with pytest.raises(LaunchError, match=r"kernel 'scale' takes 2 arguments \(X, Y\), got 1"):
        tuner.tune(np.zeros((4, 4), np.float32))
    with pytest.raises(LaunchError, match="argument 'X' must be an array, got int"):
        tuner.tune(3, np.zeros((4, 4), np.float32))
    with pytest.raises(LaunchError, match="argument 'X' has 1 dimensions"):
        tuner.tune(np.zeros(4, np.float32), np.zeros((4, 4), np.float32))


@pytest.mark.parametrize("keyword", ["grid", "self", "bogus"])
def test_bad_keywords_are_refused_before_tuning(keyword):
    timer = FakeTimer()
    tuner = tawa.autotune(SCALE, configs=CONFIGS, timer=timer)
    x = np.zeros((4, 4), np.float32)
    with pytest.raises(LaunchError, match=f"keyword argument '{keyword}'"):
        tuner(x, x, **{keyword: 1})
    with pytest.raises(LaunchError, match=f"keyword argument '{keyword}'"):
        tuner[(1,)](x, x, **{keyword: 1})
    assert not tuner.choices


def test_bad_tuner_arguments():
    with pytest.raises(tawa.CompilationError, match="invalid option num_stages=0"):
        tawa.autotune(SCALE, num_stages=0)
    with pytest.raises(AutotuneError, match="debugging switch"):
        tawa.autotune(SCALE, verify_each=True)
    with pytest.raises(AutotuneError, match="key: 'Q' is not a shape symbol"):
        tawa.autotune(SCALE, key=["Q"])
    with pytest.raises(AutotuneError, match="'FACTR' is neither a const parameter of kernel 'scale' nor a compile "
                                            "option") as e:
        tawa.autotune(SCALE, FACTR=3)
    assert e.value.note == "did you mean FACTOR?"
    with pytest.raises(AutotuneError, match="'cache' is neither"):
        tawa.autotune(SCALE, configs=[{"BLOCK_M": 64, "cache": False}])


def test_a_fresh_process_without_the_compiler_reuses_the_stored_result(no_results, tmp_path):
    tuner = tawa.autotune(SCALE, configs=CONFIGS, timer=FakeTimer())
    best = tuner.tune(*arrays(512, 512)).config
    script = tmp_path / "reuse.py"
    script.write_text(textwrap.dedent(f"""
        import json, sys
        sys.modules["mlir"] = sys.modules["lark"] = None    # as on a machine without the compiler
        import numpy as np
        import tawa
        sys.path.insert(0, {str(os.path.dirname(__file__))!r})
        from autotune_support import CONFIGS, SCALE, NoTimer
        choice = tawa.autotune(SCALE, configs=CONFIGS, timer=NoTimer()).tune(
            np.zeros((512, 512), np.float32), np.zeros((512, 512), np.float32))
        print(json.dumps([choice.how, choice.config, any(m in sys.modules and sys.modules[m] is not None
                                                         for m in ("mlir", "lark"))]))
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=dict(os.environ),
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1]) == ["stored", best, False]


def test_export_and_import_carry_results_and_kernels_to_a_machine_without_the_compiler(
        no_results, tmp_path, monkeypatch):
    tuner = tawa.autotune(SCALE_DECLARED, timer=FakeTimer())
    best = tuner.tune(*arrays(512, 512))
    path = tmp_path / "tuned.json"
    assert tawa.autotune.export_results(path) == 1
    data = json.loads(path.read_text())
    assert data["format"] == "tawa-autotune-results" and len(data["results"]) == 1
    [entry] = data["kernels"].values()
    assert entry["cubin"] and entry["meta"]["ptx"] and "ir" not in entry["meta"]
    assert tawa.autotune.export_results(tmp_path / "none.json", kernel="gemm") == 0

    # Elsewhere: an empty cache, no compiler, no way to read the .tawa file.
    monkeypatch.setenv("TAWA_CACHE_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setattr(compiling, "compiler_available", lambda: False)
    monkeypatch.setitem(sys.modules, "tawa.frontend.tuning", None)
    with pytest.raises(AutotuneError, match="not in the kernel cache"):
        tawa.autotune(SCALE_DECLARED, timer=NoTimer())
    assert tawa.autotune.import_results(path) == 1
    choice = tawa.autotune(SCALE_DECLARED, timer=NoTimer()).tune(*arrays(512, 512))
    assert choice.how == "stored" and choice.config == best.config
    assert choice.kernel.from_cache and choice.kernel.cubin == best.kernel.cubin
    # A key tuned nowhere: only what the cache holds can run here, the rest is pruned saying why ...
    other = tawa.autotune(SCALE_DECLARED, timer=NoTimer()).tune(*arrays(64, 512))
    assert other.how == "tuned" and other.config == best.config and other.ms is None
    assert sum("this machine has no compiler" in t.get("pruned", "") for t in other.timings) == 3
    # ... and with nothing in the cache, one clean error.
    with pytest.raises(AutotuneError, match="this machine has no compiler"):
        tawa.autotune(SCALE_DECLARED, timer=NoTimer(), FACTOR=5).tune(*arrays(512, 512))


@pytest.mark.parametrize("content, message", [
    ("not json", "is not a JSON file"),
    ('{"format": "something else"}', "is not a Tawa autotuning export"),
    ('{"format": "tawa-autotune-results", "version": 99}', "has export version 99"),
    ('{"format": "tawa-autotune-results", "version": 1, "results": [{"a": 1}]}', "must be a list of result"),
    ('{"format": "tawa-autotune-results", "version": 1, "results": [], "kernels": {"k": {}}}', "is malformed"),
])
def test_import_rejects_bad_files_cleanly(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(AutotuneError, match=message):
        tawa.autotune.import_results(path)
    with pytest.raises(AutotuneError, match="cannot read"):
        tawa.autotune.import_results(tmp_path / "missing.json")


def test_cpu_target_tunes_and_launches_in_the_interpreter(no_results):
    timer = FakeTimer()
    tuner = tawa.autotune(SCALE, configs=CONFIGS, target="cpu", timer=timer, FACTOR=3)
    x = np.arange(40 * 70, dtype=np.float32).reshape(40, 70)
    y = np.zeros_like(x)
    tuner(x, y)
    np.testing.assert_array_equal(y, 3 * x)
    assert all(c["FACTOR"] == 3 for c in timer.calls) and len(timer.calls) == TIMINGS_PER_TUNING
    chosen = tuner.best_config(x, y)
    y2 = np.zeros_like(x)
    tuner[lambda c: ((40 + c["BLOCK_M"] - 1) // c["BLOCK_M"], (70 + c["BLOCK_N"] - 1) // c["BLOCK_N"])](x, y2)
    np.testing.assert_array_equal(y2, 3 * x)
    assert len(timer.calls) == TIMINGS_PER_TUNING and tuner.kernel_for(x, y).compiled.constants["BLOCK_M"] == chosen["BLOCK_M"]


def test_wall_clock_timer_times_the_interpreter(no_results):
    choice = tawa.autotune(SCALE, configs=CONFIGS[:2], target="cpu").tune(*arrays(64, 64))
    assert choice.ms > 0 and choice.how == "tuned"
    assert all(t["ms"] > 0 for t in choice.timings)


def test_progress_lines_when_asked_and_silence_otherwise():
    out = io.StringIO()
    bar = Progress("tawa autotune k compile", 3, show=True, stream=out)
    bar.advance(2)
    bar.advance()
    bar.close("2 of 3 to time")
    lines = out.getvalue().splitlines()
    assert lines[0] == "tawa autotune k compile: 3 ..."
    assert lines[1].startswith("tawa autotune k compile: 3/3 in ") and lines[1].endswith("2 of 3 to time")
    quiet = io.StringIO()
    bar = Progress("x", 3, show=False, stream=quiet)
    bar.advance()
    bar.close("done")
    assert quiet.getvalue() == ""


def test_progress_bar_redraws_in_place_on_a_terminal():
    class Tty(io.StringIO):
        def isatty(self):
            return True
    out = Tty()
    bar = Progress("t", 4, show=True, stream=out)
    bar.advance(2)
    bar.close("ok")
    text = out.getvalue()
    assert "\rt [" + "#" * 12 + "." * 12 + "] 2/4" in text and text.endswith(" ok\n") and text.count("\n") == 1


def _gemm_declaring(configs: str) -> str:
    """examples/gemm.tawa with its tuning space replaced by `configs`."""
    gemm = open(os.path.join(os.path.dirname(__file__), "..", "..", "examples", "gemm.tawa")).read()
    body = gemm[gemm.index("@grid"):]
    return f"@autotune(key=(M, N, K), configs={configs})\n" + body


def test_the_launch_default_is_always_a_candidate(no_results):
    """Tuning never ends slower than not tuning: the configuration `tawa.compile`'s kernel would launch for the
    shape (here ping-pong 128x192, whose 384 tiles fill the waves where 288 of 128x256 fill 0.73) is timed beside
    the declared candidates, and wins when it is the fastest. Not with candidates given from Python (the user's
    list), nor with a grid given as numbers (sized for those candidates' tiles)."""
    default = {"BLOCK_N": 192}          # (ping-pong is the compiler's own choice for 128x192)
    timer = FakeTimer(times=lambda c: 0.5 if c.get("BLOCK_N") == 192 else 1.0)
    m, n, k = 1536, 6144, 2048
    args = lambda: (np.empty((m, k), np.float16), np.empty((k, n), np.float16), np.empty((m, n), np.float16))
    choice = tawa.autotune(_gemm_declaring("(config(), config(BLOCK_N=128))"), timer=timer).tune(*args())
    assert default in timer.calls
    assert choice.config == default
    # a declared candidate that is the same kernel is not timed twice (a 1x1 cluster is no cluster)
    timer.calls.clear()
    tawa.autotune(_gemm_declaring("(config(BLOCK_N=192, cluster=(1, 1)), config())"),
                  timer=timer).tune(*args())
    assert sum(c.get("BLOCK_N") == 192 for c in timer.calls[:2]) == 1 and len(timer.calls) <= 2 + 2 * 4
    timer.calls.clear()
    tawa.autotune(_gemm_declaring("(config(), config(BLOCK_N=128))"), timer=timer).tune(*args(), grid=(12, 24))
    assert all(c.get("BLOCK_N") != 192 for c in timer.calls)
    timer.calls.clear()
    tawa.autotune(_gemm_declaring("(config(),)"), configs=[{"BLOCK_N": 256}, {"BLOCK_N": 128}],
                  timer=timer).tune(*args())
    assert all(c.get("BLOCK_N") != 192 for c in timer.calls) and timer.calls


def test_the_variant_without_tma_leaves_the_schedule_to_the_compiler(own_cache):
    """A candidate whose schedule or clusters need TMA's rings (ping-pong, persistent attention) falls back, for
    arguments TMA cannot copy, to the same tiles compiled without TMA under the compiler's own schedule: asked with
    the candidate's schedule and tma=False, the compile is refused ("not warp-specialized")."""
    gemm = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "gemm.tawa")
    tuner = tawa.autotune(gemm, configs=[{"BLOCK_N": 192, "schedule": "pingpong", "cluster": "2x1"}],
                          timer=NoTimer())
    config = {"BLOCK_N": 192, "schedule": "pingpong", "cluster": "2x1"}
    outcome = compiling.compile_one(tuner.source, tuner.filename, Config(config), "cuda", tuner._defaults)
    fallback = tuner._kernel(outcome, config)._without_tma()
    assert fallback.compiled.constants["BLOCK_N"] == 192 and not fallback.compiled.persistent
    with pytest.raises(tawa.CompilationError, match="not warp-specialized"):
        tawa.compile(gemm, cache=False, BLOCK_N=192, schedule="pingpong", tma=False)


def test_the_launch_default_of_attention_joins_the_candidates_with_its_compiled_traits(no_results):
    """The tuner adds what `tawa.compile` would launch (`launch_defaults.attention_defaults`, which reads the kernel
    compiled with the fixed constants alone): at head dim 64 and S = 4096 the 192-row blocks without causal
    masking, nothing with it (causal loops need S >= 6144); so tuning never ends slower than not tuning."""
    import pathlib

    class Shaped:
        def __init__(self, *shape):
            self.shape = shape

    path = pathlib.Path(__file__).resolve().parents[2] / "examples" / "gqa_attention.tawa"
    for causal, expected in ((0, {"BLOCK_M": 192, "BLOCK_N": 128, "schedule": "tile"}), (1, None)):
        tuner = tawa.autotune(str(path), HEAD_DIM=64, CAUSAL=causal)
        q, kv = Shaped(8, 16, 4096, 64), Shaped(8, 4, 4096, 64)
        got = tuner._launch_default([q, kv, kv, q, 0.125], {"Z": 8, "H": 16, "S": 4096}, None)
        assert (None if got is None else {k: v for k, v in got.as_dict().items() if k not in ("HEAD_DIM", "CAUSAL")}) \
            == expected
