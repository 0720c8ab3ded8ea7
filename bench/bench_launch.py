"""Host-side cost of one kernel launch: a Tawa kernel against a torch op and a Triton kernel, in one process.

    python bench/bench_launch.py build              # compile the Tawa kernel into the kernel cache (needs MLIR)
    python bench/bench_launch.py [run] [-n 20000]   # time launches on the GPU (needs no MLIR once cached)
    python bench/bench_launch.py run --profile      # also print a cProfile of the Tawa launches

The Tawa kernel is `examples/softmax.tawa` (BLOCK_M=2, BLOCK_N=1024) on a 1 x 1024 f32 row: one CTA, so the GPU
finishes each launch long before the host issues the next and the loop measures the host. It is loaded through
`tawa.compile`, i.e. the disk kernel cache (TAWA_CACHE_DIR): `build` on a machine with MLIR, copy the cache, `run`
on the GPU machine. Timed, per launch, over N launches after a warm-up, the median of several rounds:

    tawa kernel(*args)        the public call, every argument check included
    tawa kernel[grid](*args)  with an explicit grid
    tawa launcher.launch      GpuLauncher directly (what kernel(*args) adds on top is the difference)
    torch x.add_(1)           one small torch op on a 1 x 1024 tensor
    triton add                a 1-CTA Triton kernel on the same tensor (when triton imports)
    tawa GEMM kernel(*args)   `examples/gemm.tawa` compiled without tile constants on a small bf16 GEMM (GEMM_SHAPE,
                              a few µs of GPU work): the call that picks the shape's variant and launches it
    torch.matmul              the same GEMM through cuBLAS

Prints microseconds per launch (host time of the launch loop, and with the final synchronize) and ratios to the
torch op (the GEMM's to torch.matmul). Exits with a message (status 0) when there is no GPU.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SOFTMAX = os.path.join(ROOT, "examples", "softmax.tawa")
CONSTANTS = {"BLOCK_M": 4, "BLOCK_N": 1024}
ROWS, COLS = 1, 1024
GEMM = os.path.join(ROOT, "examples", "gemm.tawa")
#: M, N, K of a GEMM whose GPU time (under 10 µs) is shorter than a launch's host time
GEMM_SHAPE = (872, 784, 296)


class _Shaped:
    """An argument's shape and byte strides (a contiguous bf16 tensor), for choosing the variant at build time."""

    def __init__(self, *shape):
        self.shape = shape
        self.strides = tuple(2 * _product(shape[i + 1:]) for i in range(len(shape)))


def _product(extents) -> int:
    out = 1
    for e in extents:
        out *= e
    return out


def compile_gemm():
    """The GEMM example without tile constants, its variant for GEMM_SHAPE compiled (or read from the cache)."""
    import tawa
    kernel = tawa.compile(GEMM)
    m, n, k = GEMM_SHAPE
    kernel.variant_for(_Shaped(m, k), _Shaped(k, n), _Shaped(m, n))
    return kernel


def compile_kernel():
    import tawa
    return tawa.compile(SOFTMAX, **CONSTANTS)


def _gpu_or_exit():
    try:
        import torch
    except ImportError:
        print("bench_launch: torch is not installed; it needs torch with CUDA and a Hopper GPU. Nothing timed.")
        sys.exit(0)
    if not torch.cuda.is_available():
        print("bench_launch: no CUDA GPU is available (torch.cuda.is_available() is False). Nothing timed.")
        sys.exit(0)
    from tawa.runtime.driver import gpu_available
    ok, why = gpu_available()
    if not ok:
        print(f"bench_launch: the GPU cannot run tawa kernels: {why}. Nothing timed.")
        sys.exit(0)
    return torch


def _time(fn, n, rounds, torch):
    """(median host us per call over the loop, median us per call including the final synchronize)."""
    for _ in range(min(n, 1000)):
        fn()
    torch.cuda.synchronize()
    host, total = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        host.append((t1 - t0) / n * 1e6)
        total.append((t2 - t0) / n * 1e6)
    return statistics.median(host), statistics.median(total)


def _triton_add(torch):
    try:
        import triton
        import triton.language as tl
    except Exception:
        return None

    @triton.jit
    def add_one(X, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(X + offs, tl.load(X + offs, mask=mask) + 1.0, mask=mask)

    x = torch.zeros(ROWS * COLS, device="cuda")
    try:
        add_one[(1,)](x, x.numel(), BLOCK=1024)
        torch.cuda.synchronize()
    except Exception as exc:
        print(f"(triton is importable but its kernel failed: {exc}; skipped)")
        return None
    return lambda: add_one[(1,)](x, x.numel(), BLOCK=1024)


def run(n: int, rounds: int, profile: bool) -> None:
    torch = _gpu_or_exit()
    try:
        kernel = compile_kernel()
    except Exception as exc:
        print(f"bench_launch: could not load or compile {SOFTMAX}: {exc}\n"
              "Run `python bench/bench_launch.py build` on a machine with MLIR and reuse its kernel cache "
              "(TAWA_CACHE_DIR).")
        sys.exit(1)
    x = torch.randn(ROWS, COLS, device="cuda")
    y = torch.empty_like(x)
    kernel(x, y)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, torch.softmax(x, dim=1), rtol=1e-5, atol=1e-6)
    launcher = kernel._launcher
    grid = (-(-ROWS // CONSTANTS["BLOCK_M"]),)
    gridded = kernel[grid]
    t = torch.zeros(ROWS, COLS, device="cuda")

    cases = [("tawa kernel(*args)", lambda: kernel(x, y)),
             ("tawa kernel[grid](*args)", lambda: gridded(x, y)),
             ("tawa launcher.launch", lambda: launcher.launch((x, y))),
             ("torch x.add_(1)", lambda: t.add_(1))]
    triton_fn = _triton_add(torch)
    if triton_fn is not None:
        cases.append(("triton add (1 CTA)", triton_fn))
    else:
        print("(triton not importable: its row is skipped)")
    try:
        gemm = compile_gemm()
    except Exception as exc:
        print(f"bench_launch: could not load or compile {GEMM}: {exc}\n"
              "Run `python bench/bench_launch.py build` on a machine with MLIR and reuse its kernel cache "
              "(TAWA_CACHE_DIR).")
        sys.exit(1)
    gm, gn, gk = GEMM_SHAPE
    a = torch.randn(gm, gk, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(gk, gn, device="cuda", dtype=torch.bfloat16)
    c = torch.full((gm, gn), float("nan"), device="cuda", dtype=torch.bfloat16)
    gemm(a, b, c)
    torch.cuda.synchronize()
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2e-2, atol=2e-2)
    cases += [(f"tawa GEMM kernel(*args) {gm}x{gn}x{gk}", lambda: gemm(a, b, c)),
              ("torch.matmul, same GEMM", lambda: torch.matmul(a, b, out=c))]

    print(f"{n} launches per round, median of {rounds} rounds; kernel from cache: {kernel.from_cache}")
    print(f"{'case':28s} {'host us/launch':>15s} {'with sync':>10s} {'vs torch':>9s}")
    results = {name: _time(fn, n, rounds, torch) for name, fn in cases}
    # (each Tawa case against its torch counterpart: the GEMM against torch.matmul, the rest against x.add_(1))
    for name, (host, total) in results.items():
        base = results["torch.matmul, same GEMM" if "GEMM" in name else "torch x.add_(1)"][0]
        print(f"{name:28s} {host:15.2f} {total:10.2f} {host / base:8.2f}x")

    if profile:
        import cProfile
        import pstats
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(n):
            kernel(x, y)
        prof.disable()
        torch.cuda.synchronize()
        pstats.Stats(prof).sort_stats("tottime").print_stats(20)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", nargs="?", default="run", choices=["build", "run"])
    ap.add_argument("-n", type=int, default=20000, help="launches per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--profile", action="store_true", help="print a cProfile of the Tawa launches")
    opts = ap.parse_args()
    if opts.mode == "build":
        for kernel in (compile_kernel(), compile_gemm()):
            print(f"compiled {kernel.name} into the kernel cache (from cache: {kernel.from_cache})")
        return
    run(opts.n, opts.rounds, opts.profile)


if __name__ == "__main__":
    main()
