"""Small-M (decode-shaped) GEMMs: split-K against cuBLAS, and what the autotuner picks.

    python bench/bench_split_k.py build --cache DIR      # on a machine with the compiler: every kernel below
    TAWA_CACHE_DIR=DIR python bench/bench_split_k.py run [--json out.json]   # on the GPU machine
    python bench/bench_split_k.py                         # both, where the compiler and a GPU are together

For M in 1..64 and LLM projection sizes, times `torch.matmul` (cuBLAS) and examples/gemm.tawa (bf16) with 64-row
tiles unsplit and split 2-8 ways, plus `tawa.autotune` over the example's declared space (which includes split_k),
in one process on the same inputs, alternating over rounds; every time is the median of CUDA-event runs with the L2
cache flushed before each (the weights of a decode step do not sit in L2 in a model). Results are checked against
torch first. Prints a table of times and ratios to cuBLAS.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
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
            for _ in range(ROUNDS):
                for label, fn in fns.items():
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
        with open(json_path, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", nargs="?", choices=("build", "run"))
    p.add_argument("--cache", default=None, help="kernel cache directory to fill (build)")
    p.add_argument("--json", default=None, help="write the results here (run)")
    args = p.parse_args()
    if args.mode in (None, "build") and (args.mode == "build" or args.cache):
        build(args.cache or os.environ.get("TAWA_CACHE_DIR", ".tawa-cache"))
    if args.mode in (None, "run"):
        run(args.json)


if __name__ == "__main__":
    main()
