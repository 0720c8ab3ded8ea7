"""Row kernels written as a user would (`tests/e2e/kernels/user/`: RMSNorm, LayerNorm, softmax, logsumexp, a
tiled transpose) against torch, in GB/s of the bytes each must move.

Two steps, so that compilation (which needs MLIR) and execution (which needs a Hopper GPU) may run on different
machines:

    python bench/bench_rows.py build [--out DIR]                         # compile into DIR/cache
    python bench/bench_rows.py run   [--out DIR] [--json OUT] [--plot PATH]

Each kernel is compiled with its own constants and launched as `kernel(*args)`; the anchor is the torch call a
user would make (`F.rms_norm`, `F.layer_norm`, `torch.softmax`, `torch.logsumexp`, a transposed copy), timed
alternately in one process on the same inputs. Every output is first checked against float32 torch with the
output poisoned (NaN). Shapes include rows shorter than the kernel's tile (ragged columns).
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))
USER = os.path.join(ROOT, "tests", "e2e", "kernels", "user")

from bench_user_kernels import save_results  # noqa: E402  (the table's JSON, plot and exit status)

#: (kernel, (rows, columns)).
CASES = [("rmsnorm", (16384, 4096)), ("rmsnorm", (4000, 4096)), ("rmsnorm", (16384, 4000)),
         ("layernorm", (16384, 1024)), ("layernorm", (16384, 1000)),
         ("softmax_temp", (16384, 2048)), ("softmax_temp", (16384, 2000)),
         ("logsumexp", (4096, 50264)), ("transpose", (8192, 8192))]


def build(out: str) -> None:
    os.environ["TAWA_CACHE_DIR"] = os.path.join(out, "cache")
    import tawa
    for name in dict(CASES):
        kernel = tawa.compile(os.path.join(USER, name + ".tawa"))
        print(name, "compiled", kernel.compiled.notes[-1] if kernel.compiled.notes else "")


def _inputs(torch, name: str, m: int, n: int):
    """(arguments, output, float32 reference, torch anchor, bytes moved)."""
    import torch.nn.functional as F
    bf, h, dev = torch.bfloat16, torch.float16, "cuda"
    if name == "rmsnorm":
        x, w, y = torch.randn(m, n, device=dev, dtype=bf), torch.randn(n, device=dev, dtype=bf), \
            torch.empty(m, n, device=dev, dtype=bf)
        return [x, w, y, 1e-5], y, F.rms_norm(x.float(), (n,), w.float(), 1e-5), \
            lambda: F.rms_norm(x, (n,), w, 1e-5), 4 * m * n
    if name == "layernorm":
        x, w, b = torch.randn(m, n, device=dev, dtype=h), torch.randn(n, device=dev), torch.randn(n, device=dev)
        y, wh, bh = torch.empty(m, n, device=dev, dtype=h), w.to(h), b.to(h)
        return [x, w, b, y, 1e-5], y, F.layer_norm(x.float(), (n,), w, b, 1e-5), \
            lambda: F.layer_norm(x, (n,), wh, bh, 1e-5), 4 * m * n
    if name == "softmax_temp":
        x, y = torch.randn(m, n, device=dev, dtype=bf) * 3, torch.empty(m, n, device=dev, dtype=bf)
        return [x, y, 0.7], y, torch.softmax(x.float() / 0.7, -1), lambda: torch.softmax(x / 0.7, -1), 4 * m * n
    if name == "logsumexp":
        x, y = torch.randn(m, n, device=dev, dtype=bf) * 3, torch.empty(m, device=dev)
        return [x, y], y, torch.logsumexp(x.float(), -1), lambda: torch.logsumexp(x, -1), 2 * m * n
    if name == "transpose":
        x, y = torch.randn(m, n, device=dev, dtype=bf), torch.empty(n, m, device=dev, dtype=bf)
        return [x, y], y, x.float().T, lambda: y.copy_(x.T), 4 * m * n
    raise KeyError(name)


def run(out: str, json_out=None, plot=None) -> None:
    os.environ["TAWA_CACHE_DIR"] = os.path.join(out, "cache")
    import torch
    import tawa
    from bench_gemm import _side_by_side
    torch.manual_seed(0)
    gpu = torch.cuda.get_device_name()
    rows, wrong, kernels = [], 0, {}
    print(f"{gpu}\n| kernel | rows x columns | Tawa GB/s | torch GB/s | Tawa / torch |\n|---|---|---:|---:|---:|")
    for name, (m, n) in CASES:
        kernel = kernels.setdefault(name, tawa.compile(os.path.join(USER, name + ".tawa")))
        args, output, ref, anchor, nbytes = _inputs(torch, name, m, n)
        output.fill_(float("nan"))
        kernel(*args)
        torch.cuda.synchronize()
        err = ((output.float() - ref).norm() / ref.norm()).item()
        if not err < 2e-2:
            wrong += 1
            print(f"WRONG {name} {m}x{n}: relative error {err}")
            continue
        # (_side_by_side gives work / ms / 1e9: bytes x 1e3 makes that GB/s)
        res = _side_by_side({"tawa": lambda: kernel(*args), "torch": anchor}, nbytes * 1e3)
        rows.append({"kernel": name, "shape": [m, n], "gbps": res, "ratio": res["tawa"] / res["torch"]})
        print(f"| {name} | {m}x{n} | {res['tawa']:.0f} | {res['torch']:.0f} | {res['tawa'] / res['torch']:.2f} |",
              flush=True)
    save_results({"gpu": gpu, "rows": rows}, wrong, json_out, plot or os.path.join(out, "rows.png"),
                 ylabel="Tawa / torch (GB/s)", title="Row kernels")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("step", choices=["build", "run"])
    ap.add_argument("--out", default=os.path.join(ROOT, ".carry", "rows"))
    ap.add_argument("--json", default=None, metavar="OUT")
    ap.add_argument("--plot", default=None, metavar="PATH")
    a = ap.parse_args()
    if a.step == "build":
        build(a.out)
    else:
        run(a.out, a.json, a.plot)


if __name__ == "__main__":
    main()
