"""What a kernel compiled without tile constants launches per shape (`tawa.autotune.launch_defaults`: the tile,
schedule and clusters chosen from the shape, no timing) against the kernel's own tile and the anchors, on
shapes outside the GEMM sweep: ragged and rows off the 32-byte sector grid, few tiles, grids of a few waves.

Two steps, so that compilation (which needs MLIR) and execution (which needs a Hopper GPU) may run on different
machines:

    python bench/bench_defaults.py build [--out DIR] [--only SET]   # compile every variant the shapes pick
    python bench/bench_defaults.py run   [--out DIR] [--only SET] [--json OUT] [--plot PATH]

`build` fills DIR/cache (the kernel cache: `TAWA_CACHE_DIR`) by asking each example's kernel which variant it
launches for each shape; `run` launches through the same API (`kernel(*args)`) with that cache. SET is `all`
(default), `gemm`, `few` (grids of fewer tiles than SMs), `fp8`, `linear`, `bias_act`, `batched`, `sweep` (the
GEMM sweep of `bench_gemm.py` and its two linear-layer shapes), `ffn` (LLM feed-forward GEMMs) or `random` (32
shapes drawn at random, seeded); the last three are not part of `all`. DIR defaults to `.carry/defaults`.

For each shape, in one process and alternating over rounds: "default" is `kernel(*args)` (the variant the shape
picks), "own" the kernel's own tile (`kernel[grid](*args)` with the grid of its own constants, which keeps the
kernel itself), and the anchor: torch.matmul (cuBLAS) for bf16, torch._scaled_mm with row-wise scales for FP8, the
cuBLAS GEMM of the same shape (no epilogue) for the linear layer and the GEMM + bias + GELU, torch.bmm for the
batched GEMM. Each default is first
checked against float32 on fresh random inputs with a NaN-poisoned output.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))
EXAMPLES = os.path.join(ROOT, "examples")

#: bf16 GEMM shapes (M, N, K): rows of B (N of 8 mod 16) off the sector grid, grids of one to five waves whose
#: 128x256 tiles fill them badly, and shapes the default tile suits.
GEMM = [(3072, 5000, 2048), (4096, 3000, 4096), (8192, 5000, 4096), (3000, 3000, 3000), (5000, 5000, 5000),
        (4000, 5000, 3000), (2000, 7000, 2000), (1800, 9000, 3000), (6504, 2696, 2000), (2504, 3496, 4504),
        (1536, 6144, 2048), (2560, 12288, 2560), (2176, 4096, 4096), (2304, 4096, 4096), (1536, 4096, 8192),
        (3072, 3072, 4096), (2816, 5120, 3072), (768, 8192, 4096), (4200, 8400, 1200), (2112, 2048, 8192),
        (1100, 4096, 4096), (2200, 2048, 4096), (1200, 5120, 5120), (1280, 10240, 2048), (3072, 5120, 2008),
        (4096, 4096, 3000), (8192, 4096, 1000), (6000, 6000, 1000), (6144, 2560, 5120), (7168, 3584, 1536),
        (4000, 4000, 4096), (4096, 11008, 4096), (4096, 4096, 11008), (16384, 4096, 4096), (2048, 8192, 2048),
        (1792, 7168, 2048), (1024, 4096, 8192), (2048, 6144, 1024), (3584, 3584, 2048), (4608, 4608, 4608),
        (960, 7680, 5120), (3328, 3328, 3328), (5120, 1280, 8192), (640, 12800, 4096), (2600, 6000, 6000)]
#: Grids of fewer 128x256 tiles than SMs.
FEW = [(1024, 2048, 8192), (512, 4096, 8192), (1024, 1024, 8192), (768, 768, 16384), (2048, 512, 8192),
       (256, 4096, 4096), (128, 8192, 8192), (1024, 1024, 4096), (2048, 1000, 8192), (1000, 1000, 8192),
       (1400, 1400, 14000), (3000, 1000, 4096), (1536, 1536, 8192), (4096, 1024, 4096), (2048, 2048, 2048)]
FP8 = [(1536, 6144, 2048), (2176, 4096, 4096), (3072, 3072, 4096), (768, 8192, 4096), (2560, 12288, 2560),
       (4096, 4096, 4096), (8192, 4112, 4096), (4096, 8192, 4112), (1024, 2048, 8192), (1024, 1024, 8192),
       (512, 4096, 8192), (256, 4096, 8192), (2048, 512, 8192)]
LINEAR = [(4096, 4096, 4104), (8192, 4096, 3000), (1536, 6144, 2048), (4096, 14336, 4096), (3000, 5000, 2000),
          (1024, 4096, 4096), (512, 4096, 4096), (2048, 4096, 4096), (1024, 14336, 4096), (4096, 4096, 4096),
          (1024, 11008, 4096), (512, 11008, 4096)]
BIAS_ACT = [(4096, 4096, 4096), (8192, 8192, 4096), (1536, 6144, 2048), (2048, 2048, 8192), (1024, 4096, 4096),
            (512, 4096, 4096), (3072, 3072, 4096), (16384, 4096, 1024), (4096, 14336, 4096), (2176, 4096, 4096)]
#: Batched GEMMs (Z, M, N, K): `examples/batched_gemm.tawa`, the batch as grid axis 2.
BATCHED = [(2, 1536, 6144, 2048), (3, 1536, 4096, 4096), (2, 2112, 2048, 4096), (3, 1000, 3000, 2048),
           (4, 1024, 4096, 4096), (16, 512, 512, 4096), (4, 4096, 4096, 1024)]
SETS = {"gemm": [("gemm", s) for s in GEMM], "few": [("gemm", s) for s in FEW],
        "fp8": [("fp8", s) for s in FP8], "linear": [("linear", s) for s in LINEAR],
        "bias_act": [("bias_act", s) for s in BIAS_ACT], "batched": [("batched", s) for s in BATCHED]}
#: The GEMM sweep of `bench_gemm.py` (`SWEEP`) and its fused linear-layer shapes: what launches without tuning there.
SWEEP_GEMM = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 2048), (16384, 8192, 1024), (4096, 14336, 4096),
              (512, 8192, 8192), (2048, 2048, 8192), (3000, 5000, 2000)]
SETS["sweep"] = [("gemm", s) for s in SWEEP_GEMM] + [("linear", s) for s in ((4096, 14336, 4096), (8192, 8192, 4096))]
#: LLM feed-forward GEMMs (Llama-3 8B and 70B up and down projections at 2048 to 16384 tokens; not part of `all`).
FFN = [(2048, 14336, 4096), (4096, 14336, 4096), (8192, 14336, 4096), (16384, 14336, 4096), (4096, 4096, 14336),
       (8192, 4096, 14336), (4096, 28672, 8192), (4096, 8192, 28672)]
SETS["ffn"] = [("gemm", s) for s in FFN]


def random_shapes(count: int, seed: int = 2026, lo: int = 256, hi: int = 16384, max_flop: float = 2 * 8192 ** 3):
    """`count` bf16 GEMM shapes drawn log-uniformly from [lo, hi] per extent, each a multiple of 8 (TMA's 16-byte
    row rule; half of them then put A's or B's rows off the 32-byte sector grid, as sizes chosen by a model's
    dimensions often do), redrawn above `max_flop`: shapes no rule of the launch defaults was fitted to."""
    import random
    rng, shapes = random.Random(seed), []
    while len(shapes) < count:
        m, n, k = (8 * round(math.exp(rng.uniform(math.log(lo), math.log(hi))) / 8) for _ in range(3))
        if 2 * m * n * k <= max_flop:
            shapes.append((m, n, k))
    return shapes


#: Shapes outside every set above (`random_shapes`; not part of `all`).
SETS["random"] = [("gemm", s) for s in random_shapes(32)]
SETS["all"] = SETS["gemm"] + SETS["few"] + SETS["fp8"] + SETS["linear"] + SETS["bias_act"] + SETS["batched"]
SOURCES = {"gemm": "gemm.tawa", "fp8": "gemm_fp8.tawa", "linear": "linear_gelu_residual.tawa",
           "bias_act": "gemm_bias_act.tawa", "batched": "batched_gemm.tawa"}
#: The kernels' own tiles (their constants' defaults), for the grid that keeps the kernel itself.
OWN_BLOCK_N = {"gemm": 256, "fp8": 256, "linear": 192, "bias_act": 128, "batched": 256}


class Shaped:
    """An argument's shape and its strides in bytes (a contiguous tensor), for choosing without a GPU."""

    def __init__(self, shape, itemsize):
        self.shape = shape
        self.strides = tuple(itemsize * math.prod(shape[i + 1:]) for i in range(len(shape)))


def argument_shapes(kind, m, n, k, z=1) -> list:
    """[(shape, bytes per element)] of the kernel's arguments, the output last."""
    if kind == "batched":
        return [((z, m, k), 2), ((z, k, n), 2), ((z, m, n), 2)]
    if kind == "gemm":
        return [((m, k), 2), ((k, n), 2), ((m, n), 2)]
    if kind == "fp8":
        return [((m, k), 1), ((n, k), 1), ((m,), 4), ((n,), 4), ((m, n), 2)]
    if kind == "bias_act":
        return [((m, k), 2), ((k, n), 2), ((n,), 4), ((m, n), 2)]
    return [((m, k), 2), ((n, k), 2), ((n,), 2), ((m, n), 2), ((m, n), 2)]


def describe(kernel, variant) -> str:
    """The launched variant in a few words: tile, schedule, split, clusters ("own": the kernel itself)."""
    if variant is kernel:
        return "own"
    c = variant.compiled
    schedule = next((w for w in ("streamk", "pingpong", "persistent", "tile")
                     if any(f"the {w} schedule" in n for n in variant.notes)), "?")
    split = f" split{c.split_k}" if c.split_k > 1 else ""
    pairs = " 2x1" if c.cluster and list(c.cluster) != [1, 1] else ""
    return f"{c.constants.get('BLOCK_M')}x{c.constants.get('BLOCK_N')} {schedule}{split}{pairs}"


def kernels() -> dict:
    import tawa
    return {kind: tawa.compile(os.path.join(EXAMPLES, src)) for kind, src in SOURCES.items()}


def build(out: str, only: str) -> None:
    os.environ["TAWA_CACHE_DIR"] = os.path.join(out, "cache")
    ks = kernels()
    for kind, shape in SETS[only]:
        z, m, n, k = _zmnk(shape)
        variant = ks[kind].variant_for(*[Shaped(s, b) for s, b in argument_shapes(kind, m, n, k, z)])
        print(f"{kind} {'x'.join(map(str, shape))}: {describe(ks[kind], variant)}", flush=True)


def _zmnk(shape) -> tuple:
    """(batch, M, N, K) of a set's shape: (M, N, K), or (Z, M, N, K) for the batched GEMM."""
    return tuple(shape) if len(shape) == 4 else (1, *shape)


def _case(torch, kind, m, n, k, z=1):
    """(arguments without the output, float32 reference, anchor launch)."""
    if kind == "batched":
        a = torch.randn(z, m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(z, k, n, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(z, m, n, device="cuda", dtype=torch.bfloat16)
        return [a, b], a.float() @ b.float(), lambda: torch.bmm(a, b, out=out)
    if kind == "gemm":
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        return [a, b], a.float() @ b.float(), lambda: torch.matmul(a, b, out=out)
    if kind == "fp8":
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
        sa, sb = torch.rand(m, device="cuda") + 0.5, torch.rand(n, device="cuda") + 0.5
        sa2, sb2 = sa[:, None].contiguous(), sb[None, :].contiguous()
        ref = (a.float() @ b.float().T) * sa[:, None] * sb[None, :]
        return [a, b, sa, sb], ref, lambda: torch._scaled_mm(a, b.T, scale_a=sa2, scale_b=sb2,
                                                             out_dtype=torch.bfloat16)
    if kind == "bias_act":
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16) * 0.05
        bias = torch.randn(n, device="cuda", dtype=torch.float32)
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        ref = torch.nn.functional.gelu(a.float() @ b.float() + bias, approximate="tanh")
        return [a, b, bias], ref, lambda: torch.matmul(a, b, out=out)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.05
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    r = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    ref = torch.nn.functional.gelu(x.float() @ w.float().T + bias.float(), approximate="tanh") + r.float()
    return [x, w, bias, r], ref, lambda: torch.matmul(x, w.T, out=out)


def run(out: str, only: str, json_out=None, plot=None) -> None:
    os.environ["TAWA_CACHE_DIR"] = os.path.join(out, "cache")
    import torch
    from bench_gemm import _side_by_side
    ks = kernels()
    gpu = torch.cuda.get_device_name()
    rows, wrong = [], 0
    torch.manual_seed(0)
    print("| set | M x N x K | launched | default | own tile | anchor | default / own | default / anchor |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for kind, shape in SETS[only]:
        z, m, n, k = _zmnk(shape)
        label = "x".join(map(str, shape))
        args, ref, anchor = _case(torch, kind, m, n, k, z)
        kernel = ks[kind]
        y = torch.full(tuple(ref.shape), float("nan"), device="cuda", dtype=torch.bfloat16)
        variant = kernel.variant_for(*args, y)
        kernel(*args, y)
        torch.cuda.synchronize()
        err = ((y.float() - ref).norm() / ref.norm()).item()
        if not err < 2e-2:
            wrong += 1
            print(f"WRONG {kind} {label} ({describe(kernel, variant)}): rel err {err}")
            continue
        y0 = torch.empty_like(y)
        grid = (-(-m // 128), -(-n // OWN_BLOCK_N[kind])) + ((z,) if kind == "batched" else ())
        res = _side_by_side({"default": lambda: kernel(*args, y), "own": lambda: kernel[grid](*args, y0),
                             "anchor": anchor}, 2 * z * m * n * k)
        rows.append({"set": kind, "shape": list(shape), "launched": describe(kernel, variant), "tflops": res})
        print(f"| {kind} | {label} | {describe(kernel, variant)} | {res['default']:.0f} | {res['own']:.0f} | "
              f"{res['anchor']:.0f} | {res['default'] / res['own']:.3f} | {res['default'] / res['anchor']:.3f} |",
              flush=True)
    geo = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")
    for kind in SOURCES:
        mine = [r["tflops"] for r in rows if r["set"] == kind]
        if mine:
            print(f"{kind}: geomean default / anchor {geo([t['default'] / t['anchor'] for t in mine]):.3f}, own tile / "
                  f"anchor {geo([t['own'] / t['anchor'] for t in mine]):.3f} over {len(mine)} shapes")
    print("correctness:", "all ok" if not wrong else f"{wrong} WRONG")
    raw = {"gpu": gpu, "rows": rows}
    if json_out:
        with open(json_out, "w") as f:
            json.dump(raw, f, indent=1)
    write_plot(raw, plot or os.path.join(out, "defaults.png"))
    if wrong:
        sys.exit(1)


def write_plot(raw: dict, path: str) -> None:
    """Per shape: the default's and the own tile's TFLOP/s over the anchor's."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # matplotlib missing: the printed table is the result
        print(f"no plot ({type(e).__name__}: {e})")
        return
    rows = raw["rows"]
    fig, ax = plt.subplots(1, 1, figsize=(max(8, 0.28 * len(rows)), 6))
    for i, (name, label) in enumerate((("default", "launched by default"), ("own", "the kernel's own tile"))):
        ax.bar([x + 0.4 * i for x in range(len(rows))], [r["tflops"][name] / r["tflops"]["anchor"] for r in rows],
               width=0.4, label=label)
    ax.set_xticks([x + 0.2 for x in range(len(rows))],
                  [f"{r['set']} {'x'.join(map(str, r['shape']))}" for r in rows], fontsize=6, rotation=60, ha="right")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_ylabel("TFLOP/s / anchor (cuBLAS, _scaled_mm, cuBLAS GEMM)")
    ax.set_title(f"Launch-time defaults ({raw['gpu']})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    print(f"plot written to {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("step", choices=["build", "run"])
    ap.add_argument("--out", default=os.path.join(ROOT, ".carry", "defaults"))
    ap.add_argument("--only", default="all", choices=sorted(SETS))
    ap.add_argument("--json", default=None, metavar="OUT")
    ap.add_argument("--plot", default=None, metavar="PATH")
    a = ap.parse_args()
    if a.step == "build":
        build(a.out, a.only)
    else:
        run(a.out, a.only, a.json, a.plot)


if __name__ == "__main__":
    main()
