"""Shared by the autotuning tests: small kernels (fast to compile), a fake GPU timer, and cache isolation."""
from __future__ import annotations

import shutil

import pytest

#: A 2-D scale kernel: two tiles (BLOCK_M along M, BLOCK_N along N, both in the grid), no dot. Compiles for sm_90a
#: in ~0.1 s and runs in the interpreter in milliseconds on small arrays.
SCALE = """\
@grid(cdiv(M, BLOCK_M), cdiv(N, BLOCK_N))
def scale(X: f32[M, N], Y: f32[M, N], BLOCK_M: const = 16, BLOCK_N: const = 32, FACTOR: const = 2):
    x = load(X, (program_id(0), program_id(1)), (BLOCK_M, BLOCK_N))
    store(Y, (program_id(0), program_id(1)), x * FACTOR)
"""

#: The same kernel with a declared space.
SCALE_DECLARED = "@autotune(key=(M,), configs=product(BLOCK_M=(16, 64), BLOCK_N=(32, 64)))\n" + SCALE

#: What `space_info` gives for examples/gemm.tawa, minus the declaration.
GEMM_INFO = {"name": "gemm", "params": ["A", "B", "C"],
             "constants": {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "DTYPE": "bf16"},
             "symbols": [["M", 0, 0], ["K", 0, 1], ["N", 1, 1]],
             "tiles": [["BLOCK_M", "M"], ["BLOCK_N", "N"]],
             "operands": [[0, ["M", "K"]], [1, ["K", "N"]], [2, ["M", "N"]]], "has_dot": True, "dots": 1,
             "operand_dtypes": [[0, "DTYPE"], [1, "DTYPE"], [2, "DTYPE"]],
             "grid_symbols": [None, None], "epilogue_loads": False, "computed_b": False, "declared": None}

#: Candidate configurations of SCALE used by several tests.
CONFIGS = [{"BLOCK_M": 16, "BLOCK_N": 32}, {"BLOCK_M": 64, "BLOCK_N": 32}, {"BLOCK_M": 64, "BLOCK_N": 64}]
#: Timings of one tuning of CONFIGS with FakeTimer's default times (more than 5% apart): one pass, then the
#: fastest two (the tuner's MIN_FINALISTS) again in each of the 4 confirming rounds.
TIMINGS_PER_TUNING = len(CONFIGS) + 2 * 4


class FakeTimer:
    """Stands in for the CUDA-event timer: a time per configuration from `times(config)`, every call recorded.
    It never launches anything, so tuning for the cuda target runs on a machine without a GPU."""

    def __init__(self, times=None, device="Fake H200", fail=None):
        self.times = times or (lambda c: 1.0 + c.get("BLOCK_M", 16) / 100 - c.get("BLOCK_N", 32) / 1000)
        self.device = device
        self.fail = fail or {}          # config label -> exception to raise for it
        self.calls = []

    def device_name(self, device=None) -> str:
        return self.device

    def __call__(self, launch, *, stream, device, config):
        self.calls.append(dict(config))
        key = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in config.items()))
        if key in self.fail:
            raise self.fail[key]
        return self.times(config)


class NoTimer(FakeTimer):
    """A timer that fails the test if anything is timed (a stored result must be reused)."""

    def __call__(self, launch, **info):
        raise AssertionError(f"timed {info['config']}: expected a stored result")


@pytest.fixture
def no_results():
    """An empty results store (compiled kernels stay in the session's cache, so tests do not recompile)."""
    from tawa.autotune import results
    shutil.rmtree(results.results_dir(), ignore_errors=True)
    yield results
    shutil.rmtree(results.results_dir(), ignore_errors=True)


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    """A cache directory of this test's own (nothing compiled yet)."""
    path = tmp_path / "cache"
    monkeypatch.setenv("TAWA_CACHE_DIR", str(path))
    return path
