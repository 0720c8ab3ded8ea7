"""Small-M (decode-shaped) GEMMs: split-K against cuBLAS, and what the autotuner picks.

    python bench/bench_split_k.py build --cache DIR      # on a machine with the compiler: every kernel below
    TAWA_CACHE_DIR=DIR python bench/bench_split_k.py run [--json out.json]   # on the GPU machine
    python bench/bench_split_k.py                         # both, where the compiler and a GPU are together
    python bench/bench_split_k.py plot --json out.json [--png split_k.png]    # redraw the plot

For M in 1..64 and LLM projection sizes, times `torch.matmul` (cuBLAS) and examples/gemm.tawa (bf16) with 64-row
tiles unsplit and split 2-8 ways, plus `tawa.autotune` over the example's declared space (which includes split_k),
in one process on the same inputs, alternating over rounds; every time is the median of CUDA-event runs with the L2
cache flushed before each (the weights of a decode step do not sit in L2 in a model). Results are checked against
torch first. Prints a table of times and ratios to cuBLAS; with --json, also writes the results and a PNG plot of
the speed relative to cuBLAS per shape (unsplit 64x128 against the tuned choice) next to them.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
GEMM = os.path.join(ROOT, "examples", "gemm.tawa")

MS = (1, 8, 32, 64)
NK = ((4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192))
#: (label, constants and options) of the fixed variants timed beside the tuner.
VARIANTS = [("64x128", dict(BLOCK_M=64, BLOCK_N=128)),
            ("64x256", dict(BLOCK_M=64, BLOCK_N=256)),
            ("64x128 s2", dict(BLOCK_M=64, BLOCK_N=128, split_k=2)),
            ("64x128 s4", dict(BLOCK_M=64, BLOCK_N=128, split_k=4)),
            ("64x128 s8", dict(BLOCK_M=64, BLOCK_N=128, split_k=8)),
            ("64x64 s4", dict(BLOCK_M=64, BLOCK_N=64, split_k=4))]
ROUNDS = 3


def build(cache: str) -> None:
    os.environ["TAWA_CACHE_DIR"] = os.path.abspath(cache)
    import tawa
    for label, kw in VARIANTS:
        k = tawa.compile(GEMM, **kw)
        print(label, [n for n in k.compiled.notes if n.startswith("ptxas")])
    # The tuner's candidates and the space record it reads without the compiler.
    subprocess.run([sys.executable, "-m", "tawa.cli", GEMM, "--autotune-space", "-o", os.path.abspath(cache)],
                   check=True)


def run(json_path: str | None) -> None:
    import torch
    import tawa
    from tawa.runtime.timing import CudaEventTimer
    from bench_gemm import rotated
    timer = CudaEventTimer(warmup_ms=10, rep_ms=40)
    kernels = {label: tawa.compile(GEMM, **kw) for label, kw in VARIANTS}
    tuner = tawa.autotune(GEMM, show_progress=False)
    stream = torch.cuda.current_stream().cuda_stream
    print(f"GPU: {torch.cuda.get_device_name()}\n")
    labels = ["cuBLAS", *kernels, "tuned"]
    print("| M x N x K | " + " | ".join(f"{l} (µs)" for l in labels) + " | tuned choice | best fixed / cuBLAS | "
          "tuned / cuBLAS |")
    print("|---|" + "---:|" * len(labels) + "---|---:|---:|")
    rows = []
    for m in MS:
        for n, k in NK:
            torch.manual_seed(m + n + k)
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
            c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            ref = a.float() @ b.float()
            choice = tuner.tune(a, b, c)
            fns = {"cuBLAS": lambda: torch.matmul(a, b)}
            fns.update({label: (lambda kern=kern: kern(a, b, c)) for label, kern in kernels.items()})
            fns["tuned"] = lambda: choice.kernel(a, b, c)
            for label, fn in fns.items():
                if label == "cuBLAS":
                    continue
                c.fill_(float("nan"))
                fn()
                torch.cuda.synchronize()
                err = ((c.float() - ref).norm() / ref.norm()).item()
                assert err < 1e-2, (label, m, n, k, err)
            times = {label: [] for label in fns}
            for r in range(ROUNDS):
                for label, fn in rotated(fns.items(), r):
                    times[label].append(timer(fn, stream=stream) * 1e3)
            us = {label: sorted(t)[len(t) // 2] for label, t in times.items()}
            best_fixed = min(us[label] for label in kernels)
            row = {"shape": [m, n, k], "us": us, "choice": choice.config}
            rows.append(row)
            pick = ",".join(f"{k}={v}" for k, v in choice.config.items())
            print(f"| {m}x{n}x{k} | " + " | ".join(f"{us[l]:.1f}" for l in labels) +
                  f" | {pick} | {us['cuBLAS'] / best_fixed:.2f} | {us['cuBLAS'] / us['tuned']:.2f} |")
    import math
    gm = math.exp(sum(math.log(r["us"]["cuBLAS"] / r["us"]["tuned"]) for r in rows) / len(rows))
    low = min(r["us"]["cuBLAS"] / r["us"]["tuned"] for r in rows)
    print(f"\ntuned / cuBLAS: geomean {gm:.3f}, lowest {low:.3f} over {len(rows)} shapes")
    if json_path:
        data = {"gpu": torch.cuda.get_device_name(), "rows": rows}
        with open(json_path, "w") as f:
            json.dump(data, f, indent=1)
        write_plot(data, os.path.splitext(json_path)[0] + ".png")


def write_plot(data: dict, path: str) -> None:
    """Bars per shape: cuBLAS time / Tawa time for the unsplit 64x128 tile and for the tuned choice."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:          # noqa: BLE001 -- the table is the result; the plot is a convenience
        print(f"no plot ({type(e).__name__}: {e})")
        return
    rows = data["rows"]
    xs = range(len(rows))
    fig, ax = plt.subplots(figsize=(max(10, 0.8 * len(rows)), 4.8))
    width = 0.38
    ax.bar([x - width / 2 for x in xs], [r["us"]["cuBLAS"] / r["us"]["64x128"] for r in rows], width,
           label="64x128, not split", color="#bbbbbb")
    ax.bar([x + width / 2 for x in xs], [r["us"]["cuBLAS"] / r["us"]["tuned"] for r in rows], width,
           label="tawa.autotune (split_k in the space)", color="#1f77b4")
    for x, r in enumerate(rows):
        split = r["choice"].get("split_k", 1)
        ax.annotate(f"s{split}" if split > 1 else "", (x + width / 2, r["us"]["cuBLAS"] / r["us"]["tuned"]),
                    textcoords="offset points", xytext=(0, 2), ha="center", fontsize=7)
    ax.axhline(1.0, color="k", linewidth=0.8)
    ax.axhline(0.8, color="#d62728", linewidth=0.8, linestyle="--", label="0.8x cuBLAS")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(["x".join(map(str, r["shape"])) for r in rows], rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("speed relative to cuBLAS (cuBLAS time / time)")
    ax.set_title(f"Small-M bf16 GEMM (M x N x K), {data.get('gpu', '')}: split-K")
    ax.legend(fontsize=8, frameon=False, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    print(f"plot written to {path}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", nargs="?", choices=("build", "run", "plot"))
    p.add_argument("--cache", default=None, help="kernel cache directory to fill (build)")
    p.add_argument("--json", default=None, help="write the results here (run), or read them (plot)")
    p.add_argument("--png", default=None, help="where the plot goes (plot; default: beside the JSON)")
    args = p.parse_args()
    if args.mode == "plot":
        with open(args.json) as f:
            write_plot(json.load(f), args.png or os.path.splitext(args.json)[0] + ".png")
        return
    if args.mode in (None, "build") and (args.mode == "build" or args.cache):
        build(args.cache or os.environ.get("TAWA_CACHE_DIR", ".tawa-cache"))
    if args.mode in (None, "run"):
        run(args.json)


if __name__ == "__main__":
    main()
