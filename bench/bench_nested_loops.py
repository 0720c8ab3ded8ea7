"""GEMMs whose K loop is nested in a loop the program writes, against cuBLAS: a hand-written persistent tile loop
(as in Triton's persistent matmul tutorial, `tests/e2e/kernels/user/gemm_user_persistent.tawa`) and a batched GEMM
whose programs loop over the batch (`gemm_batch_loop.tawa`), each warp-specialized (the default) and on the
uniform-warp path, beside the example GEMM.

Two steps, so that compilation (which needs MLIR) and execution (which needs a Hopper GPU) may run on different
machines:

    python bench/bench_nested_loops.py build [--out DIR]    # compile every kernel into DIR (a kernel cache)
    python bench/bench_nested_loops.py run   [--out DIR]

Each kernel is checked against float32 on fresh random inputs with a NaN-poisoned output, then timed against
torch.matmul (cuBLAS) on the same inputs, in one process, over alternating rounds (the best of three each).
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))
USER = os.path.join(ROOT, "tests", "e2e", "kernels", "user")

#: name, kernel file, (M, N, K), batch (None: a plain GEMM), compile options
CASES = [
    ("hand-written persistent, specialized", os.path.join(USER, "gemm_user_persistent.tawa"), (4096, 4096, 4096),
     None, {}),
    ("hand-written persistent, uniform warps", os.path.join(USER, "gemm_user_persistent.tawa"),
     (4096, 4096, 4096), None, {"warp_specialize": False}),
    ("batch loop, specialized", os.path.join(USER, "gemm_batch_loop.tawa"), (2048, 2048, 2048), 4, {}),
    ("batch loop, uniform warps", os.path.join(USER, "gemm_batch_loop.tawa"), (2048, 2048, 2048), 4,
     {"warp_specialize": False}),
    ("batch loop 128x256, specialized", os.path.join(USER, "gemm_batch_loop.tawa"), (2048, 2048, 2048), 4,
     {"BLOCK_N": 256}),
    ("example GEMM (no outer loop)", os.path.join(ROOT, "examples", "gemm.tawa"), (4096, 4096, 4096), None, {}),
]


def _shape(batch, *dims):
    return ((batch,) + dims) if batch else dims


def build() -> None:
    import ml_dtypes
    import numpy as np
    import tawa
    bf16 = ml_dtypes.bfloat16
    for name, path, (m, n, k), batch, options in CASES:
        kernel = tawa.compile(path, **options)
        kernel.variant_for(np.zeros(_shape(batch, m, k), bf16), np.zeros(_shape(batch, k, n), bf16),
                           np.zeros(_shape(batch, m, n), bf16))
        print(f"built {name}")


def run() -> None:
    import torch
    import tawa
    from event_timing import time_ms

    print(f"{'kernel':40s} {'rel err':>9s} {'Tawa TFLOP/s':>13s} {'cuBLAS':>8s} {'Tawa / cuBLAS':>14s}")
    for name, path, (m, n, k), batch, options in CASES:
        kernel = tawa.compile(path, **options)
        a = torch.randn(_shape(batch, m, k), device="cuda", dtype=torch.bfloat16)
        b = torch.randn(_shape(batch, k, n), device="cuda", dtype=torch.bfloat16)
        c = torch.full(_shape(batch, m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        kernel(a, b, c)
        torch.cuda.synchronize()
        ref = a.float() @ b.float()
        err = ((c.float() - ref).norm() / ref.norm()).item()
        if not err < 1e-2:
            sys.exit(f"{name}: relative error {err:.3e}")
        rounds = [(time_ms(lambda: kernel(a, b, c), 100, 20), time_ms(lambda: torch.matmul(a, b), 100, 20))
                  for _ in range(3)]
        ours, theirs = min(r[0] for r in rounds), min(r[1] for r in rounds)
        flops = 2 * m * n * k * (batch or 1)
        print(f"{name:40s} {err:9.2e} {flops / ours / 1e9:13.0f} {flops / theirs / 1e9:8.0f} {theirs / ours:14.3f}")


def main() -> None:
    from event_timing import build_or_run
    build_or_run(__doc__, ROOT, "nested_loops", build, run)


if __name__ == "__main__":
    main()
