"""The cost of the variant without TMA (tma=False), which runs tensors whose rows break TMA's 16-byte rules.

    python bench/bench_unaligned.py          # needs the compiler, or a kernel cache holding gemm.tawa's default
                                             # and tma=False kernels (TAWA_CACHE_DIR)

Times examples/gemm.tawa (bf16, default tile) with TMA and with tma=False on aligned shapes, the automatic
kernel on shapes with odd N or K (it launches the tma=False variant), and torch.matmul (cuBLAS) on each, in one
process, alternating over rounds (CUDA events, median round). Every result is checked against torch first.
"""
from __future__ import annotations

import os
import sys
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SHAPES = [(4096, 4096, 4096), (4096, 4095, 4096), (4096, 4096, 4095), (2048, 50257, 4096), (8, 50257, 4096)]


def main() -> None:
    import torch
    import tawa
    path = os.path.join(ROOT, "examples", "gemm.tawa")
    auto, off = tawa.compile(path), tawa.compile(path, tma=False)
    warnings.simplefilter("ignore", tawa.TawaPerformanceWarning)
    print(f"GPU: {torch.cuda.get_device_name()}\n")
    print("| M x N x K | rows 16-byte aligned | Tawa (TMA) | Tawa tma=False | cuBLAS | tma=False / TMA | Tawa / cuBLAS |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        aligned = n % 8 == 0 and k % 8 == 0
        ref = a.float() @ b.float()
        fns = {"cublas": lambda: torch.matmul(a, b), "off": lambda: off(a, b, c)}
        if aligned:
            fns["tma"] = lambda: auto(a, b, c)
        for name in ("off", "tma") if aligned else ("off",):
            c.fill_(float("nan"))
            fns[name]()
            torch.cuda.synchronize()
            err = ((c.float() - ref).norm() / ref.norm()).item()
            assert err < 1e-2, (name, m, n, k, err)
        times = {name: [] for name in fns}
        for _ in range(7):
            for name, fn in fns.items():
                fn()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                for _ in range(10):
                    fn()
                e.record()
                torch.cuda.synchronize()
                times[name].append(s.elapsed_time(e) / 10)
        med = {name: sorted(t)[len(t) // 2] for name, t in times.items()}
        tf = {name: 2 * m * n * k / (ms * 1e-3) / 1e12 for name, ms in med.items()}
        tma = f"{tf['tma']:.0f}" if aligned else "-"
        ratio = f"{tf['off'] / tf['tma']:.2f}" if aligned else "-"
        best = tf["tma"] if aligned else tf["off"]
        print(f"| {m}x{n}x{k} | {'yes' if aligned else 'no'} | {tma} | {tf['off']:.0f} | {tf['cublas']:.0f} | "
              f"{ratio} | {best / tf['cublas']:.2f} |")


if __name__ == "__main__":
    main()
