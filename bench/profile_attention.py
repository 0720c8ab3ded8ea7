"""Launch one built attention variant a few times on one shape, for a profiler (Nsight Compute) to look at.

    python bench/bench_attention.py build                                  # on a machine with the compiler
    ncu --kernel-name flash_attention --launch-skip 2 --launch-count 1 --set full \\
        python bench/profile_attention.py fa_d128_c0_n128_ws --shape 4 16 4096 128

The kernel runs from the `.carry/` folder `build` wrote (no MLIR needed), on fresh random inputs.
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
    ap.add_argument("variant")
    ap.add_argument("--shape", type=int, nargs=4, default=(4, 16, 4096, 128), metavar=("B", "H", "S", "D"))
    ap.add_argument("--out", default=os.path.join(ROOT, ".carry"))
    ap.add_argument("--launches", type=int, default=3)
    args = ap.parse_args()
    import torch
    from bench_gemm import _load
    launcher = _load(args.out, args.variant)
    B, H, S, D = args.shape
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o = torch.empty_like(q)
    for _ in range(args.launches):
        launcher.launch([q, k, v, o, D ** -0.5])
    torch.cuda.synchronize()
    print(f"{args.variant}: {args.launches} launches on {B}x{H}x{S}x{D}")


if __name__ == "__main__":
    main()
