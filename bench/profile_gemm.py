"""Time one built GEMM-shaped variant against torch.matmul on one shape, or launch it a few times for a profiler.

    python bench/bench_gemm.py build                                         # on a machine with the compiler
    python bench/profile_gemm.py gemm_bf16_pers_128x256 --shape 3000 5000 2000           # times it and cuBLAS
    ncu --kernel-name gemm --launch-skip 2 --launch-count 1 --section SpeedOfLight \\
        python bench/profile_gemm.py gemm_bf16_pers_128x256 --shape 3000 5000 2000 --launches 3

The kernel runs from the `.carry/` folder `build` wrote (no MLIR needed), on fresh random inputs; its output is
checked against torch.matmul first.
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--shape", type=int, nargs=3, default=(3000, 5000, 2000), metavar=("M", "N", "K"))
    ap.add_argument("--out", default=os.path.join(ROOT, ".carry", "gemm"))
    ap.add_argument("--launches", type=int, default=0, help="launch this many times and stop (for a profiler)")
    args = ap.parse_args()
    import torch
    from bench_gemm import _load, _time
    m, n, k = args.shape
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float()
    flops = 2.0 * m * n * k
    for name in args.variants:
        launcher = _load(args.out, name)
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        launcher.launch([a, b, c])
        torch.cuda.synchronize()
        err = ((c.float() - ref).norm() / ref.norm()).item()
        if args.launches:
            for _ in range(args.launches):
                launcher.launch([a, b, c])
            torch.cuda.synchronize()
            print(f"{name}: {args.launches} launches on {m}x{n}x{k}, rel err {err:.1e}")
            continue
        t = _time(lambda: launcher.launch([a, b, c]))
        print(f"{name:28s} {t * 1e3:8.1f} us {flops / t / 1e9:7.1f} TFLOP/s  rel err {err:.1e}")
    if not args.launches:
        t = _time(lambda: a @ b)
        print(f"{'cuBLAS':28s} {t * 1e3:8.1f} us {flops / t / 1e9:7.1f} TFLOP/s")


if __name__ == "__main__":
    main()
