"""What attention's two row reductions cost: examples/flash_attention.tawa timed beside copies of itself with the
row maximum or the row sum taken out of the key loop (timing only; docs/performance.md, "what the row maximum and
the row sum cost").

    python bench/ablate_softmax_reductions.py build [--out DIR]   # writes the variants' .tawa and compiles them
    python bench/ablate_softmax_reductions.py run   [--out DIR]   # times them beside cuDNN and FA2 (SDPA)

Variants, each a text substitution of the example:
- **nosum**: the row sum adds `alpha` instead of `sum(p, axis=1)`; the output is wrong (reported, not checked);
- **nomax**: the running maximum is `maximum(m_i, 8.0)`, a constant that the scaled scores of these inputs
  (randn Q and K, scale D^-0.5) never exceed, so the output stays right (checked) and is never rescaled;
- **neither**: both.

DIR defaults to `.carry/ablate-softmax` in the repository root; `run` needs no compiler (the kernel cache).
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

EXAMPLE = os.path.join(ROOT, "examples", "flash_attention.tawa")
SUM = ("l_i = l_i * alpha + sum(p, axis=1)", "l_i = l_i * alpha + alpha")
MAX = ("m_new = maximum(m_i, max(qk, axis=1) * qk_scale)", "m_new = maximum(m_i, full((BLOCK_M,), 8.0, f32))")
EDITS = {"example": [], "nosum": [SUM], "nomax": [MAX], "neither": [SUM, MAX]}
#: (name, compile options, the shapes it is timed on): 192-row and 128-row tiles at head dim 64, the default at 128.
CONFIGS = [("d64_m192", dict(HEAD_DIM=64, BLOCK_M=192, BLOCK_N=128, schedule="tile"), [(8, 16, 2048, 64), (2, 16, 8192, 64)]),
           ("d64", dict(HEAD_DIM=64, BLOCK_N=64), [(8, 16, 2048, 64)]),
           ("d128", dict(HEAD_DIM=128), [(4, 16, 4096, 128)])]


def _source(variant: str) -> str:
    text = open(EXAMPLE).read()
    for old, new in EDITS[variant]:
        assert old in text, f"the example no longer has {old!r}"
        text = text.replace(old, new)
    return text


def build(out: str) -> None:
    os.environ["TAWA_CACHE_DIR"] = os.path.join(out, "cache")
    import tawa
    from tawa.runtime import cache
    os.makedirs(out, exist_ok=True)
    for variant in EDITS:
        path = os.path.join(out, f"{variant}.tawa")
        with open(path, "w") as f:
            f.write(_source(variant))
        for name, options, _ in CONFIGS:
            kernel = tawa.compile(path, **options)
            cache.store(f"ablate_{variant}_{name}", kernel.compiled)
            print(variant, name, [n for n in kernel.compiled.notes if n.startswith("ptxas")], flush=True)


def run(out: str) -> None:
    os.environ["TAWA_CACHE_DIR"] = os.path.join(out, "cache")
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from bench_gemm import _side_by_side
    from tawa.runtime import cache
    from tawa.runtime.kernel import Kernel
    torch.manual_seed(0)
    for name, _, shapes in CONFIGS:
        kernels = {v: Kernel(cache.load(f"ablate_{v}_{name}"), from_cache=True) for v in EDITS}
        for z, h, s, d in shapes:
            q, k, v = (torch.randn(z, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            scale = d ** -0.5

            def sdpa(backend):
                def f():
                    with sdpa_kernel(backend):
                        return torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scale)
                return f
            ref = sdpa(SDPBackend.CUDNN_ATTENTION)().float()
            impls = {"cudnn": sdpa(SDPBackend.CUDNN_ATTENTION), "fa2": sdpa(SDPBackend.FLASH_ATTENTION)}
            for variant, kernel in kernels.items():
                o = torch.full_like(q, float("nan"))
                kernel(q, k, v, o, scale)
                torch.cuda.synchronize()
                err = ((o.float() - ref).norm() / ref.norm()).item()
                expected_right = "sum" not in variant and variant != "neither"
                if expected_right and not err < 2e-2:
                    raise SystemExit(f"{variant} {name}: relative error {err:.3g}")
                impls[variant] = (lambda kernel=kernel, o=o: kernel(q, k, v, o, scale))
            res = _side_by_side(impls, 4 * z * h * s * s * d, rounds=7)
            print(f"{name} {z}x{h}x{s}x{d}: " + ", ".join(f"{n} {x:.0f}" for n, x in res.items())
                  + f" | example / FA2 {res['example'] / res['fa2']:.2f}, neither / FA2 {res['neither'] / res['fa2']:.2f}",
                  flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("build", "run"))
    parser.add_argument("--out", default=os.path.join(ROOT, ".carry", "ablate-softmax"))
    args = parser.parse_args()
    (build if args.step == "build" else run)(args.out)
