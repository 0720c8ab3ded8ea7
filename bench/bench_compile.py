"""Compile time: cold compiles of every example (no cache) and cache hits, each in a fresh Python process.

    python bench/bench_compile.py

Prints, per example: the cold `tawa.compile` call (frontend, passes, NVPTX, ptxas), the import of the compiler
it needed, and a cache hit (`tawa.compile` of the same kernel in a new process: reading the cache entry only).
"""
import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = ["gemm", "gemm_bias_act", "gemm_fp8", "swiglu", "linear_gelu_residual", "flash_attention", "softmax"]

PROBE = """
import json, sys, time
t0 = time.perf_counter()
import tawa
t1 = time.perf_counter()
k = tawa.compile(sys.argv[1])
t2 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "compile": t2 - t1, "hit": k.from_cache,
                  "compiler_import": "mlir" in sys.modules}))
"""


def probe(path, cache):
    env = dict(os.environ, TAWA_CACHE_DIR=cache, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", PROBE, path], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main():
    print(f"{'example':18s} {'cold compile (s)':>17s} {'cache hit (ms)':>15s}")
    with tempfile.TemporaryDirectory() as cache:
        for name in EXAMPLES:
            path = str(ROOT / "examples" / f"{name}.tawa")
            cold = probe(path, cache)
            hot = probe(path, cache)
            assert not cold["hit"] and hot["hit"] and not hot["compiler_import"]
            print(f"{name:18s} {cold['compile']:17.3f} {hot['compile'] * 1e3:15.2f}")


if __name__ == "__main__":
    main()
