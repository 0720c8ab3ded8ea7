"""Autotuning on the examples: per shape, the tuned configuration against the kernel's defaults and a torch anchor,
and every candidate's time; writes a Markdown table, a JSON file and a PNG plot (docs/autotuning.md shows it).

Three steps, so that compilation (which needs MLIR) and tuning (which needs a Hopper GPU) may run on different
machines:

    python bench/bench_autotune.py build [--cache DIR]                # every candidate space, into the cache DIR
    python bench/bench_autotune.py run   [--cache DIR] [--json OUT] [--plot PATH]   # tune and time, on the GPU
    python bench/bench_autotune.py plot  --json OUT [--plot PATH]     # redraw the plot from an earlier run

`python bench/bench_autotune.py` (or `all`) does build and run on one machine. DIR defaults to
`.carry/autotune-bench` in the repository root; the run step needs neither MLIR nor Lark when DIR was built.

Each case (CASES) tunes an example over its declared space with `tawa.autotune` (CUDA events, L2 flushed before
every run; results stored in DIR are removed first, so every shape is tuned here), checks the tuned output against
torch, then times the kernel at its default constants (`tawa.compile`), the tuned choice and the anchor
(`torch.matmul`, SDPA, `torch.softmax`) with the same timer, side by side. The plot shows, per shape, the defaults
and the tuned choice relative to the anchor, and the spread of the candidates the tuner chose from.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

EXAMPLES = os.path.join(ROOT, "examples")
DEFAULT_CACHE = os.path.join(ROOT, ".carry", "autotune-bench")
DEFAULT_PLOT = os.path.join(ROOT, "docs", "img", "autotune.png")


def _gemm_args(torch, m, n, k):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    return (a, b, torch.empty(m, n, device="cuda", dtype=torch.bfloat16))


def _attention_args(torch, z, h, s, d):
    q, k, v = (torch.randn(z, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    return (q, k, v, torch.empty_like(q), 1 / math.sqrt(d))


def _softmax_args(torch, m, n):
    x = torch.randn(m, n, device="cuda")
    return (x, torch.empty_like(x))


def _sdpa(torch, causal):
    return lambda q, k, v, o, scale: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


@dataclass
class Case:
    label: str
    example: str
    fixed: dict                 # constants and options fixed for every candidate (and the defaults run)
    shapes: list
    make: Callable              # make(torch, *shape) -> the kernel's arguments
    output: int                 # which argument the kernel writes
    anchor_name: str
    anchor: Callable            # anchor(torch) -> f(*arguments) -> the reference output
    work: Callable              # work(*shape) -> FLOPs (or bytes moved, for softmax)


CASES = [
    Case("gemm bf16", "gemm.tawa", {},
         [(4096, 4096, 4096), (8192, 8192, 2048), (512, 8192, 8192), (8, 4096, 4096), (1000, 1480, 776)],
         _gemm_args, 2, "cuBLAS", lambda torch: (lambda a, b, c: torch.matmul(a, b)),
         lambda m, n, k: 2 * m * n * k),
    Case("flash_attention", "flash_attention.tawa", {"CAUSAL": 0}, [(4, 16, 4096, 128)], _attention_args, 3,
         "SDPA", lambda torch: _sdpa(torch, False), lambda z, h, s, d: 4 * z * h * s * s * d),
    Case("flash_attention causal", "flash_attention.tawa", {"CAUSAL": 1}, [(4, 16, 4096, 128)], _attention_args,
         3, "SDPA", lambda torch: _sdpa(torch, True), lambda z, h, s, d: 2 * z * h * s * s * d),
    Case("softmax f32", "softmax.tawa", {}, [(16384, 1000)], _softmax_args, 1, "torch.softmax",
         lambda torch: (lambda x, y: torch.softmax(x, 1)), lambda m, n: 8 * m * n),
]


def build(cache: str) -> None:
    """Compile every case's candidate space and its defaults into `cache` (no GPU needed)."""
    os.environ["TAWA_CACHE_DIR"] = cache
    import tawa
    for case in CASES:
        path = os.path.join(EXAMPLES, case.example)
        t0 = time.time()
        outcomes = tawa.autotune.compile_space(path, **case.fixed)
        tawa.compile(path, **case.fixed)
        ok = sum(o.kernel is not None for o in outcomes)
        print(f"{case.label}: {ok} of {len(outcomes)} candidates compiled in {time.time() - t0:.1f}s", flush=True)


def run(cache: str) -> dict:
    """Tune and time every case on the GPU; returns the results (see the module docstring)."""
    os.environ["TAWA_CACHE_DIR"] = cache
    import torch
    import tawa
    from tawa.autotune import results
    from tawa.runtime.timing import CudaEventTimer

    shutil.rmtree(results.results_dir(), ignore_errors=True)
    timer = CudaEventTimer()

    def t(fn):
        return timer(fn, stream=torch.cuda.current_stream().cuda_stream)

    out = {"device": timer.device_name(), "cases": []}
    for case in CASES:
        path = os.path.join(EXAMPLES, case.example)
        tuner, default = tawa.autotune(path, **case.fixed), tawa.compile(path, **case.fixed)
        anchor = case.anchor(torch)
        for shape in case.shapes:
            torch.manual_seed(0)
            args = case.make(torch, *shape)
            t0 = time.time()
            choice = tuner.tune(*args)
            tune_s = time.time() - t0
            tuner(*args)
            ref = anchor(*args).double()
            torch.cuda.synchronize()
            err = ((args[case.output].double() - ref).norm() / ref.norm()).item()
            if err > 2e-2:
                raise SystemExit(f"{case.label} {shape}: the tuned kernel is wrong (rel err {err:.3g})")
            row = {"case": case.label, "shape": list(shape), "work": case.work(*shape), "anchor": case.anchor_name,
                   "default_config": {k: v for k, v in default.compiled.constants.items() if not isinstance(v, str)},
                   "config": choice.config, "tune_s": tune_s, "candidates": choice.timings,
                   "default_ms": t(lambda: default(*args)), "tuned_ms": t(lambda: tuner(*args)),
                   "anchor_ms": t(lambda: anchor(*args))}
            out["cases"].append(row)
            print(_line(row), flush=True)
    return out


def _line(r: dict) -> str:
    shape = "x".join(map(str, r["shape"]))
    return (f"{r['case']} {shape}: defaults {r['default_ms']:.4f} ms, tuned {r['tuned_ms']:.4f} ms "
            f"({_label(r['config'])}), {r['anchor']} {r['anchor_ms']:.4f} ms; defaults/tuned "
            f"{r['default_ms'] / r['tuned_ms']:.2f}, tuned/{r['anchor']} {r['anchor_ms'] / r['tuned_ms']:.2f}; "
            f"tuned in {r['tune_s']:.1f}s")


def _label(config: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items()) or "defaults"


def table(data: dict) -> str:
    lines = [f"{data['device']}", "",
             "| case | shape | defaults | tuned | tuned choice | defaults / tuned | tuned / anchor | tuning |",
             "|---|---|---:|---:|---|---:|---:|---:|"]
    for r in data["cases"]:
        lines.append(f"| {r['case']} | {'x'.join(map(str, r['shape']))} | {r['default_ms']:.4f} ms | "
                     f"{r['tuned_ms']:.4f} ms | {_label(r['config'])} | {r['default_ms'] / r['tuned_ms']:.2f} | "
                     f"{r['anchor_ms'] / r['tuned_ms']:.2f} ({r['anchor']}) | {r['tune_s']:.1f} s |")
    return "\n".join(lines)


def write_plot(data: dict, path: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        print(f"no plot ({type(e).__name__}: {e})")
        return
    rows = data["cases"]
    label = lambda r: f"{r['case']}\n{'x'.join(map(str, r['shape']))}"  # noqa: E731
    timed = [r for r in rows if any(c.get("ms") is not None for c in r.get("candidates", []))]
    if timed:
        fig, (left, right) = plt.subplots(1, 2, figsize=(max(12, 1.6 * len(rows) + 1.2 * len(timed)), 5.2),
                                          gridspec_kw={"width_ratios": [max(len(rows), 1), max(len(timed), 2)]})
    else:
        fig, left = plt.subplots(figsize=(max(8, 1.6 * len(rows)), 5.2))
    xs = range(len(rows))
    width = 0.38
    left.bar([x - width / 2 for x in xs], [r["anchor_ms"] / r["default_ms"] for r in rows], width,
             label="kernel defaults", color="#bbbbbb")
    left.bar([x + width / 2 for x in xs], [r["anchor_ms"] / r["tuned_ms"] for r in rows], width,
             label="tuned", color="#1f77b4")
    left.axhline(1.0, color="k", linewidth=0.8)
    left.set_xticks(list(xs))
    left.set_xticklabels([label(r) for r in rows], fontsize=7)
    left.set_ylabel("speed relative to the anchor (anchor time / time)")
    left.set_title("Tawa examples at their defaults and tuned, against torch")
    left.legend(fontsize=8, frameon=False, loc="lower left")
    if timed:
        # Every timed candidate of a tuning run, relative to the fastest (1.0 = the choice).
        for x, r in enumerate(timed):
            times = [c["ms"] for c in r["candidates"] if c.get("ms") is not None]
            best = min(times)
            right.scatter([x] * len(times), [tm / best for tm in times], s=18, color="#1f77b4", alpha=0.7)
            pruned = sum(1 for c in r["candidates"] if c.get("pruned"))
            if pruned:
                right.annotate(f"{pruned} pruned", (x, 1.0), textcoords="offset points", xytext=(0, -14),
                               ha="center", fontsize=7, color="#555555")
        right.axhline(1.0, color="k", linewidth=0.8)
        right.set_xticks(range(len(timed)))
        right.set_xticklabels([label(r) for r in timed], fontsize=7)
        right.set_xlim(-0.7, len(timed) - 0.3)
        right.set_ylabel("candidate time / best candidate time")
        right.set_title("candidates timed")
    fig.suptitle(f"Autotuning ({data['device']}, CUDA events, L2 flushed)", fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"plot written to {path}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("step", nargs="?", default="all", choices=["build", "run", "all", "plot"])
    ap.add_argument("--cache", default=DEFAULT_CACHE, help="kernel cache directory (default .carry/autotune-bench)")
    ap.add_argument("--json", default=None, metavar="OUT", help="write (run) or read (plot) the results as JSON")
    ap.add_argument("--plot", default=DEFAULT_PLOT, metavar="PATH", help="PNG plot (default docs/img/autotune.png)")
    ns = ap.parse_args()
    cache = os.path.abspath(ns.cache)
    if ns.step in ("build", "all"):
        build(cache)
    if ns.step in ("run", "all"):
        data = run(cache)
        print(table(data))
        if ns.json:
            with open(ns.json, "w") as f:
                json.dump(data, f, indent=1)
        write_plot(data, ns.plot)
    if ns.step == "plot":
        if not ns.json:
            ap.error("plot needs --json FILE from an earlier run")
        with open(ns.json) as f:
            data = json.load(f)
        print(table(data))
        write_plot(data, ns.plot)
