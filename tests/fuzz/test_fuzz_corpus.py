"""The seeded fuzz corpus (tests/fuzz/generate.py): generated kernels, each with an independent numpy model.

(1) every program runs in the interpreter on NaN-poisoned outputs and matches its numpy model;
(2) every program compiles for sm_90a (PTX assembled to a cubin by ptxas) with the automatic schedule, and a
    seeded subset also with `warp_specialize=False` (the generator only emits GPU-supported constructs, so every
    compile must succeed);
(3) on a Hopper GPU (`gpu` marker), the same corpus runs through `tawa.compile` against the interpreter's output.
    `TAWA_PREFILL=1 TAWA_CACHE_DIR=DIR pytest tests/fuzz` fills DIR on a machine without a GPU
    (tests/e2e/e2e_support.py); `TAWA_CACHE_DIR=DIR pytest tests/fuzz -m gpu` then runs them on the GPU.

`python3 tests/fuzz/generate.py SEED...` prints programs; TAWA_FUZZ_ALL_SCHEDULES=1 compiles every program with
both schedules.
"""
import os
import pathlib
import random
import sys

import numpy as np
import pytest

import tawa

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from generate import N_PROGRAMS, generate  # noqa: E402

PREFILL = os.environ.get("TAWA_PREFILL") == "1"
SEEDS = list(range(N_PROGRAMS))
UNIFORM_SUBSET = sorted(random.Random(2026).sample(SEEDS, 60))
if os.environ.get("TAWA_FUZZ_ALL_SCHEDULES") == "1":
    UNIFORM_SUBSET = SEEDS


def _program(seed):
    return generate(seed)


def _ordered(prog, values):
    return [values[a.name] for a in prog.args]


def _f64(x):
    return np.asarray(x).astype(np.float64)


def _check(prog, got: dict, ref: dict, tols: dict, what: str, factor: float = 1.0):
    for a in prog.outputs:
        g, r = _f64(got[a.name]), _f64(ref[a.name])
        assert g.shape == r.shape
        assert not np.isnan(g).any(), f"{prog.name}: {a.name} has {int(np.isnan(g).sum())} NaN (unwritten) " \
                                      f"elements ({what})\n{prog.source}"
        tol = tols[a.name] * factor
        err = np.abs(g - r)
        bad = int((err > tol).sum())
        assert bad == 0, (f"{prog.name}: {a.name}: {bad}/{err.size} elements off by more than {tol:.3g} "
                          f"(max {err.max():.3g}) ({what})\n{prog.source}")


def _interpreter_references() -> dict:
    """The interpreter's output of every corpus program on the GPU test's inputs, as `"seed:output" -> array`.

    Computed where the compiler (MLIR) is installed and stored next to the kernel cache, so that a GPU machine
    without MLIR compares against the same interpreter outputs (prefill mode writes them)."""
    from tawa.runtime.cache import cache_dir
    path = cache_dir() / "fuzz_interpreter_outputs.npz"
    if path.exists():
        with np.load(path) as data:
            return {k: data[k] for k in data.files}
    out = {}
    for seed in SEEDS:
        prog = _program(seed)
        values = prog.inputs(np.random.default_rng(10_000 + seed))
        for name, v in interpret_program(prog, values).items():
            out[f"{seed}:{name}"] = _f64(v)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **out)
    return out


def interpret_program(prog, values):
    kernel = tawa.interpret(prog.source)
    args = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in values.items()}
    kernel(*_ordered(prog, args))
    return {a.name: args[a.name] for a in prog.outputs}


@pytest.mark.parametrize("seed", SEEDS)
def test_interpreter_matches_numpy(seed):
    prog = _program(seed)
    values = prog.inputs()
    got = interpret_program(prog, values)
    ref, tols = prog.reference(values)
    _check(prog, got, ref, tols, "interpreter vs numpy")


@pytest.mark.parametrize("seed", SEEDS)
def test_compiles_for_gpu(seed):
    prog = _program(seed)
    schedules = [None, False] if seed in UNIFORM_SUBSET else [None]
    for ws in schedules:
        kernel = tawa.compile(prog.source, cache=False, warp_specialize=ws)
        assert ".target sm_90a" in kernel.ptx, prog.name
        assert kernel.cubin and kernel.cubin[:4] == b"\x7fELF", prog.name
        if prog.family.startswith("dot"):
            assert "wgmma.mma_async" in kernel.ptx, prog.name


def _compiled_for_gpu(prog, ws):
    try:
        kernel = tawa.compile(prog.source, warp_specialize=ws)
    except ImportError as error:
        pytest.fail(f"{prog.name} is not in the kernel cache and this machine cannot compile ({error}); "
                    "prefill the cache on a machine with the compiler (see this module's docstring)")
    return kernel


@pytest.mark.gpu
@pytest.mark.parametrize("ws", [pytest.param(None, id="auto"), pytest.param(False, id="uniform")])
def test_corpus_on_gpu(ws):
    _run_corpus_on_gpu(ws, SEEDS)


def _run_corpus_on_gpu(ws, seeds):
    """Every program on the GPU against the interpreter (and the numpy model): the mismatch count must be 0."""
    kernels = {seed: _compiled_for_gpu(_program(seed), ws) for seed in seeds}
    references = _interpreter_references()
    if PREFILL:
        pytest.skip("kernels and interpreter outputs stored with the cache; the check runs on a GPU")
    import torch
    torch_dtypes = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
    mismatches = []
    for seed in seeds:
        prog = _program(seed)
        values = prog.inputs(np.random.default_rng(10_000 + seed))
        ref = {name: references[f"{seed}:{name}"] for name in (a.name for a in prog.outputs)}
        model, tols = prog.reference(values)
        args = []
        for a in prog.args:
            v = values[a.name]
            if a.kind == "scalar":
                args.append(float(v))
            else:
                t = torch.from_numpy(_f64(v)).to(device="cuda", dtype=torch_dtypes[a.dtype])
                args.append(t)
        kernels[seed](*args)
        torch.cuda.synchronize()
        got = {a.name: t.double().cpu().numpy() for a, t in zip(prog.args, args) if a.output}
        try:
            _check(prog, got, ref, tols, f"GPU ws={ws} vs interpreter", factor=2.0)   # both within tol of exact
            _check(prog, got, model, tols, f"GPU ws={ws} vs numpy")
        except AssertionError as error:
            mismatches.append(str(error).splitlines()[0])
    assert not mismatches, f"{len(mismatches)} of {len(seeds)} programs differ:\n" + "\n".join(mismatches)
