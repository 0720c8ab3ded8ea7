"""Compile the GEMM example and check it against a reference.

With a Hopper GPU: runs the compiled kernel on random bf16 matrices and compares with torch.matmul.
Without one: compiles it to PTX all the same (printing ptxas's resource report when ptxas is installed) and runs
the kernel in the CPU interpreter against numpy.
"""
import pathlib
import time

import numpy as np

import tawa

GEMM = str(pathlib.Path(__file__).with_name("gemm.tawa"))


def on_gpu():
    import torch
    kernel = tawa.compile(GEMM)
    # Ragged shapes are fine; rows must be a multiple of 16 bytes (8 bf16 elements) for the TMA copies (a launch
    # with other rows is refused with a LaunchError naming the tensor).
    for m, n, k in [(4096, 4096, 4096), (1000, 3000, 712)]:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        kernel(a, b, c)
        ref = a.double() @ b.double()
        err = ((c.double() - ref).norm() / ref.norm()).item()
        print(f"gemm {m}x{n}x{k} bf16 on {torch.cuda.get_device_name()}: relative error {err:.2e}")
        assert err < 1e-2


def on_cpu():
    import ml_dtypes
    t0 = time.perf_counter()
    kernel = tawa.compile(GEMM, cache=False)
    print(f"compiled {kernel.name} for sm_90a in {time.perf_counter() - t0:.2f} s: "
          f"{len(kernel.ptx.splitlines())} lines of PTX")
    for note in kernel.notes:
        print("  " + note)
    small = tawa.interpret(GEMM, BLOCK_M=32, BLOCK_N=32, BLOCK_K=16)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((100, 70)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((70, 90)).astype(ml_dtypes.bfloat16)
    c = np.full((100, 90), np.nan, ml_dtypes.bfloat16)
    small(a, b, c)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    err = np.linalg.norm(c.astype(np.float64) - ref) / np.linalg.norm(ref)
    print(f"interpreter: gemm 100x90x70 bf16, relative error {err:.2e} against numpy")
    assert err < 1e-2


if __name__ == "__main__":
    from tawa.runtime.driver import gpu_available
    usable, why = gpu_available()
    if usable:
        on_gpu()
    else:
        print(f"no usable GPU ({why.split(':')[0]}): compiling for sm_90a and running in the interpreter")
        on_cpu()
