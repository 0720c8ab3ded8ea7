"""User-style kernels (`tests/e2e/kernels/user`) as launched, against what torch runs for the same computation.

The GEMM benchmarks measure the examples; these are kernels written the way a Triton or CUDA user writes them
(epilogues with alpha/beta, masks, residuals of other types, an A scaled in registers, tf32, fp8 in and out, a dual
GEMM, a batched GEMM, attention with a bias, without a scale, at head dims 96 and 256, cross attention, a sliding window,
soft-capped logits, fp8). Each is launched as a user
would, `kernel(*args)`, so the launch defaults pick its tile per shape.

Two steps, so that compilation (which needs MLIR) and execution (which needs a Hopper GPU) may run on different
machines:

    python bench/bench_user_kernels.py build [--out DIR] [--only REGEX]   # compile what each shape launches
    python bench/bench_user_kernels.py run   [--out DIR] [--only REGEX] [--json OUT] [--plot PATH]

`build` fills DIR/cache (the kernel cache: `TAWA_CACHE_DIR`); `run` launches from it. For each kernel and shape,
in one process, alternating over 5 rounds: the kernel and its torch anchors (cuBLAS through torch.matmul /
addmm / baddbmm / F.linear, torch._scaled_mm, SDPA; "unfused" is torch's sequence of kernels for the same result,
"gemm" the bare cuBLAS GEMM of the shape); "ratio" is the kernel over the fastest anchor. Every kernel is first
checked on the timed inputs (fresh random values, NaN-poisoned output) against a float32 or float64 reference.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))
USER = os.path.join(ROOT, "tests", "e2e", "kernels", "user")

from bench_defaults import Shaped  # noqa: E402  (an argument's shape and byte strides, for choosing without a GPU)

#: GEMM shapes (M, N, K): square, a grid the 128x192 tile suits, and a tall-skinny one.
GEMM_SHAPES = [(4096, 4096, 4096), (3072, 5120, 2560), (8192, 2048, 6144)]
GEMMS = ["gemm_at", "gemm_alpha_beta", "geglu", "gemm_tf32", "gemm_f16_residual", "linear_silu", "gemm_scale_a",
         "gemm_mask", "gemm_hasbias", "gemm_bias_init", "gemm_e5m2", "gemm_fp8_out", "gemm_fp8_weight",
         "gemm_fp8_weight_nk"]
#: (Z, M, N, K) of the batched GEMM with an epilogue.
BATCHED = [(8, 2048, 2048, 1024), (16, 1024, 1024, 4096)]
#: (Z, H, S, D) per attention kernel; attn_cross takes (Z, H, SQ, SK, D), attn_window (Z, H, S, WINDOW, D).
ATTENTION = {"attn_bias": [(4, 16, 2048, 64)], "attn_noscale": [(4, 16, 4096, 96), (16, 16, 1024, 96)],
             "attn_causal_scale": [(4, 16, 2048, 256)],
             "attn_cross": [(4, 16, 1024, 4096, 128), (2, 16, 4096, 1024, 128), (8, 16, 512, 2048, 64)],
             "attn_window": [(2, 16, 8192, 2048, 128), (4, 32, 4096, 1024, 128), (4, 16, 8192, 4096, 64)],
             "attn_softcap": [(4, 16, 4096, 128), (8, 16, 2048, 64)],
             "attn_fp8": [(4, 16, 4096, 128), (2, 16, 8192, 128)]}
#: The attention kernels whose head dim is a constant `D` taken from the shape, and whose anchors are not SDPA alone
#: (`_attention_variant`); their softmax scale.
VARIANTS, VARIANT_SCALE = ("attn_cross", "attn_window", "attn_softcap"), 0.088


def gemm_arguments(name, m, n, k) -> list:
    """[(shape, bytes per element) or a scalar] per argument of the GEMM-family kernel `name`."""
    bf = 2
    return {
        "gemm_at": [((k, m), bf), ((k, n), bf), ((m, n), bf)],
        "gemm_alpha_beta": [((m, k), bf), ((k, n), bf), ((m, n), bf), ((m, n), bf), 0.75, -1.5],
        "geglu": [((m, k), bf), ((k, n), bf), ((k, n), bf), ((m, n), bf)],
        "gemm_tf32": [((m, k), 4), ((n, k), 4), ((m, n), 4)],
        "gemm_f16_residual": [((m, k), bf), ((k, n), bf), ((m, n), bf), ((m, n), bf)],
        "linear_silu": [((m, k), bf), ((n, k), bf), ((n,), bf), ((m, n), bf)],
        "gemm_scale_a": [((m, k), bf), ((k, n), bf), ((m,), bf), ((m, n), bf)],
        "gemm_mask": [((m, k), bf), ((k, n), bf), ((m, n), 4), ((m, n), bf)],
        "gemm_hasbias": [((m, k), bf), ((k, n), bf), ((n,), bf), ((m, n), bf)],
        "gemm_bias_init": [((m, k), bf), ((k, n), bf), ((n,), 4), ((m, n), bf)],
        "gemm_e5m2": [((m, k), 1), ((n, k), 1), ((m, n), 2), 0.25],
        "gemm_fp8_out": [((m, k), bf), ((k, n), bf), ((m, n), 1), 0.01],
        "gemm_fp8_weight": [((m, k), bf), ((k, n), 1), ((n,), 4), ((m, n), bf)],
        "gemm_fp8_weight_nk": [((m, k), bf), ((n, k), 1), ((n,), 4), ((m, n), bf)],
    }[name]


def attention_arguments(name, *shape) -> list:
    if name == "attn_cross":
        z, h, sq, sk, d = shape
        return [((z, h, sq, d), 2), ((z, h, sk, d), 2), ((z, h, sk, d), 2), ((z, h, sq, d), 2), VARIANT_SCALE]
    if name == "attn_window":
        z, h, s, window, d = shape
        return [((z, h, s, d), 2)] * 4 + [VARIANT_SCALE, window]
    z, h, s, d = shape
    act = [((z, h, s, d), 2)]
    if name == "attn_softcap":
        return act * 4 + [VARIANT_SCALE, 20.0]
    if name == "attn_bias":
        return act * 3 + [((s, s), 4), ((z, h, s, d), 2), 0.125]
    if name == "attn_noscale":
        return act * 4
    if name == "attn_fp8":                  # Q, K and V transposed in e4m3, O in bf16
        return [((z, h, s, d), 1), ((z, h, s, d), 1), ((z, h, d, s), 1), ((z, h, s, d), 2), d ** -0.5, 1.0]
    return act * 4 + [0.0625]


def _shaped(arguments) -> list:
    return [Shaped(*a) if isinstance(a, tuple) else a for a in arguments]


def _cases(only: str) -> list:
    """(kernel name, shape, arguments for choosing the variant) of every case `only` selects."""
    cases = [(name, shape, gemm_arguments(name, *shape)) for name in GEMMS for shape in GEMM_SHAPES]
    cases += [("batched_gemm_epi", (z, m, n, k), [((z, m, k), 2), ((z, k, n), 2), ((z, n), 4), ((z, m, n), 2), 0.5])
              for (z, m, n, k) in BATCHED]
    cases += [(name, shape, attention_arguments(name, *shape)) for name, shapes in ATTENTION.items()
              for shape in shapes]
    return [c for c in cases if re.search(only, c[0])]


def _kernel(tawa, kernels: dict, name: str, shape):
    """The kernel `name` as a user compiles it: its own defaults, but the head dim of the variants taken from the
    shape (their `D` is a constant checked against the tensors)."""
    constants = {"D": shape[-1]} if name in VARIANTS else {}
    key = (name, tuple(constants.items()))
    if key not in kernels:
        kernels[key] = tawa.compile(os.path.join(USER, name + ".tawa"), **constants)
    return kernels[key]


def build(out: str, only: str) -> None:
    os.environ["TAWA_CACHE_DIR"] = os.path.join(out, "cache")
    import tawa
    kernels = {}
    for name, shape, arguments in _cases(only):
        kernel = _kernel(tawa, kernels, name, shape)
        variant = kernel.variant_for(*_shaped(arguments))
        print(f"{name} {'x'.join(map(str, shape))}: "
              f"{'own' if variant is kernel else variant.compiled.constants}", flush=True)


def _inputs(torch, name, shape):
    """(launch arguments, the output, its reference, {anchor: launch}, FLOPs, tolerance) of one case."""
    import torch.nn.functional as F
    dev, bf = "cuda", torch.bfloat16

    def rnd(*s, dtype=bf, scale=1.0):
        return (torch.randn(*s, device=dev) * scale).to(dtype)

    def empty(*s, dtype=bf):
        return torch.empty(*s, device=dev, dtype=dtype)

    if name in VARIANTS:
        return _attention_variant(torch, name, shape, rnd, empty)
    if name == "attn_fp8":
        return _fp8_attention(torch, shape)
    if name in ATTENTION:
        z, h, s, d = shape
        dt = torch.float16 if name == "attn_causal_scale" else bf
        q, k, v = rnd(z, h, s, d, dtype=dt), rnd(z, h, s, d, dtype=dt), rnd(z, h, s, d, dtype=dt)
        o = empty(z, h, s, d, dtype=dt)
        sdpa = F.scaled_dot_product_attention
        flops = 4 * z * h * s * s * d
        if name == "attn_bias":
            bias = torch.randn(s, s, device=dev)
            biasb = bias.to(bf)
            ref = sdpa(q.float(), k.float(), v.float(), attn_mask=bias, scale=0.125)
            return ([q, k, v, bias, o, 0.125], o, ref,
                    {"sdpa_mask": lambda: sdpa(q, k, v, attn_mask=biasb, scale=0.125)}, flops, 2e-2)
        if name == "attn_noscale":
            ref = sdpa(q.float(), k.float(), v.float(), scale=1.0)
            return [q, k, v, o], o, ref, {"sdpa": lambda: sdpa(q, k, v, scale=1.0)}, flops, 2e-2
        ref = sdpa(q.float(), k.float(), v.float(), is_causal=True, scale=0.0625)
        return ([q, k, v, o, 0.0625], o, ref, {"sdpa": lambda: sdpa(q, k, v, is_causal=True, scale=0.0625)},
                flops // 2, 2e-2)
    if name == "batched_gemm_epi":
        z, m, n, k = shape
        a, b, bias, c = rnd(z, m, k), rnd(z, k, n), rnd(z, n, dtype=torch.float32), empty(z, m, n)
        biasb = bias.to(bf)[:, None, :]
        ref = 0.5 * (a.float() @ b.float()) + bias[:, None, :]
        return ([a, b, bias, c, 0.5], c, ref, {"baddbmm": lambda: torch.baddbmm(biasb, a, b, alpha=0.5),
                                                "bmm": lambda: torch.bmm(a, b)}, 2 * z * m * n * k, 2e-2)
    m, n, k = shape
    flops = 2 * m * n * k
    if name == "gemm_at":
        at, b, c, c2 = rnd(k, m), rnd(k, n), empty(m, n), empty(m, n)
        return [at, b, c], c, at.T.float() @ b.float(), {"torch": lambda: torch.matmul(at.T, b, out=c2)}, flops, 2e-2
    if name == "gemm_alpha_beta":
        a, b, c, d = rnd(m, k), rnd(k, n), rnd(m, n), empty(m, n)
        return ([a, b, c, d, 0.75, -1.5], d, 0.75 * (a.float() @ b.float()) - 1.5 * c.float(),
                {"addmm": lambda: torch.addmm(c, a, b, beta=-1.5, alpha=0.75)}, flops, 2e-2)
    if name == "geglu":
        a, b1, b2, c = rnd(m, k), rnd(k, n, scale=0.05), rnd(k, n, scale=0.05), empty(m, n)
        bc = torch.cat([b1, b2], 1)
        ref = F.gelu(a.float() @ b1.float(), approximate="tanh") * (a.float() @ b2.float())
        return ([a, b1, b2, c], c, ref,
                {"unfused": lambda: F.gelu(a @ b1, approximate="tanh") * (a @ b2),
                 "concatenated": lambda: (lambda h: F.gelu(h[:, :n], approximate="tanh") * h[:, n:])(a @ bc)},
                2 * flops, 2e-2)
    if name == "gemm_tf32":
        a, b, c = rnd(m, k, dtype=torch.float32), rnd(n, k, dtype=torch.float32), empty(m, n, dtype=torch.float32)
        return [a, b, c], c, a.double() @ b.double().T, {"matmul_tf32": lambda: torch.matmul(a, b.T)}, flops, 5e-3
    if name == "gemm_f16_residual":
        h = torch.float16
        a, b, r, c = rnd(m, k, dtype=h), rnd(k, n, dtype=h), rnd(m, n, dtype=h), empty(m, n, dtype=h)
        return [a, b, r, c], c, a.float() @ b.float() + r.float(), {"addmm": lambda: torch.addmm(r, a, b)}, flops, 2e-2
    if name == "linear_silu":
        x, w, bias, y = rnd(m, k), rnd(n, k, scale=0.05), rnd(n), empty(m, n)
        return ([x, w, bias, y], y, F.silu(x.float() @ w.float().T + bias.float()),
                {"unfused": lambda: F.silu(F.linear(x, w, bias)), "gemm": lambda: F.linear(x, w)}, flops, 2e-2)
    if name == "gemm_scale_a":
        a, b, c = rnd(m, k), rnd(k, n), empty(m, n)
        s = (torch.rand(m, device=dev) + 0.5).to(bf)
        return ([a, b, s, c], c, (a * s[:, None]).float() @ b.float(),
                {"unfused": lambda: torch.matmul(a * s[:, None], b), "gemm": lambda: torch.matmul(a, b)}, flops, 2e-2)
    if name == "gemm_mask":
        a, b, c = rnd(m, k), rnd(k, n), empty(m, n)
        mask = torch.randint(-2, 3, (m, n), device=dev, dtype=torch.int32)
        return ([a, b, mask, c], c, torch.where(mask != 0, a.float() @ b.float(), 0.0),
                {"unfused": lambda: torch.where(mask != 0, a @ b, 0.0), "gemm": lambda: torch.matmul(a, b)}, flops,
                2e-2)
    if name == "gemm_hasbias":
        a, b, bias, c = rnd(m, k), rnd(k, n, scale=0.05), rnd(n), empty(m, n)
        return ([a, b, bias, c], c, F.silu(a.float() @ b.float() + bias.float()),
                {"unfused": lambda: F.silu(torch.addmm(bias, a, b)), "gemm": lambda: torch.matmul(a, b)}, flops, 2e-2)
    if name == "gemm_bias_init":
        a, b, bias, c = rnd(m, k), rnd(k, n), rnd(n, dtype=torch.float32), empty(m, n)
        biasb = bias.to(bf)
        return ([a, b, bias, c], c, a.float() @ b.float() + bias, {"addmm": lambda: torch.addmm(biasb, a, b)},
                flops, 2e-2)
    if name == "gemm_e5m2":
        a, b = rnd(m, k, dtype=torch.float8_e5m2), rnd(n, k, dtype=torch.float8_e5m2)
        c = empty(m, n, dtype=torch.float16)
        a4, b4 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)     # cuBLAS takes no e5m2 x e5m2
        one, sc = torch.ones((), device=dev), torch.full((), 0.25, device=dev)
        return ([a, b, c, 0.25], c, 0.25 * (a.float() @ b.float().T),
                {"scaled_mm_e4m3": lambda: torch._scaled_mm(a4, b4.T, scale_a=sc, scale_b=one,
                                                            out_dtype=torch.float16)}, flops, 5e-3)
    if name == "gemm_fp8_out":
        a, b, c = rnd(m, k), rnd(k, n), empty(m, n, dtype=torch.float8_e4m3fn)
        inv = 200.0 / k ** 0.5
        ref = (inv * (a.float() @ b.float())).clamp(-448, 448).to(torch.float8_e4m3fn)
        return ([a, b, c, inv], c, ref,
                {"unfused": lambda: (inv * torch.matmul(a, b)).clamp(-448, 448).to(torch.float8_e4m3fn),
                 "gemm": lambda: torch.matmul(a, b)}, flops, 5e-2)
    if name == "gemm_fp8_weight":
        a, c = rnd(m, k), empty(m, n)
        w = rnd(k, n, scale=0.5, dtype=torch.float8_e4m3fn)
        wb = w.to(bf)               # the weight already in bf16: the GEMM alone
        scale = torch.rand(n, device=dev) + 0.5
        return ([a, w, scale, c], c, (a.float() @ w.float()) * scale,
                {"unfused": lambda: (torch.matmul(a, w.to(bf)) * scale).to(bf),
                 "gemm_bf16_weight": lambda: torch.matmul(a, wb)}, flops, 2e-2)
    if name == "gemm_fp8_weight_nk":       # nn.Linear's [N, K] weight
        a, c = rnd(m, k), empty(m, n)
        w = rnd(n, k, scale=0.5, dtype=torch.float8_e4m3fn)
        wb = w.to(bf)
        scale = torch.rand(n, device=dev) + 0.5
        return ([a, w, scale, c], c, (a.float() @ w.float().T) * scale,
                {"unfused": lambda: (torch.nn.functional.linear(a, w.to(bf)) * scale).to(bf),
                 "gemm_bf16_weight": lambda: torch.nn.functional.linear(a, wb)}, flops, 2e-2)
    raise KeyError(name)


def _fp8_attention(torch, shape):
    """_inputs of fp8 attention (Q, K, V in e4m3, V stored transposed, P rounded to e4m3). torch has no fp8
    attention: the anchors are SDPA's cuDNN and FlashAttention-2 backends on the same values in bf16."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    z, h, s, d = shape
    scale = d ** -0.5
    q, k, v = (torch.randn(z, h, s, d, device="cuda").to(torch.float8_e4m3fn) for _ in range(3))
    vt = v.transpose(-1, -2).contiguous()
    o = torch.empty(z, h, s, d, device="cuda", dtype=torch.bfloat16)
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), scale=scale)
    qb, kb, vb = q.to(torch.bfloat16), k.to(torch.bfloat16), v.to(torch.bfloat16)

    def backend(b):
        def call():
            with sdpa_kernel([b]):
                return F.scaled_dot_product_attention(qb, kb, vb, scale=scale)
        return call

    return ([q, k, vt, o, scale, 1.0], o, ref, {"cudnn_bf16": backend(SDPBackend.CUDNN_ATTENTION),
                                                 "fa2_bf16": backend(SDPBackend.FLASH_ATTENTION)},
            4 * z * h * s * s * d, 5e-2)


def _attention_variant(torch, name, shape, rnd, empty):
    """_inputs of the attention variants that SDPA has no argument for (a sliding window, soft-capping): their anchor
    is torch's FlexAttention, compiled (its Triton kernel skips the blocks a block mask leaves out); cross attention
    takes SDPA's cuDNN and FlashAttention-2 backends."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    flex = torch.compile(flex_attention, dynamic=False)
    scale = VARIANT_SCALE

    def backend(b, *qkv):
        def call():
            with sdpa_kernel([b]):
                return F.scaled_dot_product_attention(*qkv, scale=scale)
        return call

    if name == "attn_cross":
        z, h, sq, sk, d = shape
        q, k, v, o = rnd(z, h, sq, d), rnd(z, h, sk, d), rnd(z, h, sk, d), empty(z, h, sq, d)
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), scale=scale)
        return ([q, k, v, o, scale], o, ref, {"cudnn": backend(SDPBackend.CUDNN_ATTENTION, q, k, v),
                                              "fa2": backend(SDPBackend.FLASH_ATTENTION, q, k, v)},
                4 * z * h * sq * sk * d, 2e-2)
    if name == "attn_window":
        z, h, s, window, d = shape
    else:
        z, h, s, d = shape
    q, k, v, o = rnd(z, h, s, d), rnd(z, h, s, d), rnd(z, h, s, d), empty(z, h, s, d)
    i = torch.arange(s, device="cuda")
    if name == "attn_window":
        keep = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - window)
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=keep, scale=scale)
        mask = create_block_mask(lambda b, hh, qi, ki: (ki <= qi) & (ki > qi - window), None, None, s, s)
        pairs = s * window - window * (window - 1) // 2           # (query, key) pairs inside the window
        return ([q, k, v, o, scale, window], o, ref, {"flex": lambda: flex(q, k, v, block_mask=mask, scale=scale)},
                4 * z * h * pairs * d, 2e-2)
    cap = 20.0
    scores = torch.tanh((q.float() @ k.float().transpose(-1, -2)) * scale / cap) * cap
    ref = torch.softmax(scores, -1) @ v.float()
    return ([q, k, v, o, scale, cap], o, ref,
            {"flex": lambda: flex(q, k, v, score_mod=lambda x, b, hh, qi, ki: cap * torch.tanh(x / cap), scale=scale),
             "sdpa_no_cap": lambda: F.scaled_dot_product_attention(q, k, v, scale=scale)}, 4 * z * h * s * s * d, 2e-2)


def run(out: str, only: str, json_out=None, plot=None) -> None:
    os.environ["TAWA_CACHE_DIR"] = os.path.join(out, "cache")
    import torch
    import tawa
    from bench_gemm import _side_by_side
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.manual_seed(0)
    gpu = torch.cuda.get_device_name()
    rows, wrong, kernels = [], 0, {}
    print(f"{gpu}\n| kernel | shape | Tawa TFLOP/s | anchors (TFLOP/s) | Tawa / best anchor |\n|---|---|---:|---|---:|")
    for name, shape, _ in _cases(only):
        kernel = _kernel(tawa, kernels, name, shape)
        args, output, ref, anchors, flops, tol = _inputs(torch, name, shape)
        if output.dtype == torch.float8_e4m3fn:
            output.view(torch.uint8).fill_(0x7F)
        else:
            output.fill_(float("nan"))
        kernel(*args)
        torch.cuda.synchronize()
        err = ((output.float() - ref.float()).norm() / ref.float().norm()).item()
        if not err < tol:
            wrong += 1
            print(f"WRONG {name} {shape}: relative error {err}")
            continue
        res = _side_by_side({"tawa": lambda: kernel(*args), **anchors}, flops)
        best = max(v for a, v in res.items() if a != "tawa")
        rows.append({"kernel": name, "shape": list(shape), "tflops": res, "ratio": res["tawa"] / best})
        print(f"| {name} | {'x'.join(map(str, shape))} | {res['tawa']:.0f} | "
              + ", ".join(f"{a} {v:.0f}" for a, v in res.items() if a != "tawa") + f" | {res['tawa'] / best:.3f} |",
              flush=True)
    save_results({"gpu": gpu, "rows": rows}, wrong, json_out, plot or os.path.join(out, "user_kernels.png"))


def save_results(raw: dict, wrong: int, json_out, plot: str, **plot_kw) -> None:
    """Say whether every kernel was correct, write the JSON and the plot, and exit non-zero if one was not."""
    print("correctness:", "all ok" if not wrong else f"{wrong} WRONG")
    if json_out:
        with open(json_out, "w") as f:
            json.dump(raw, f, indent=1)
    write_plot(raw, plot, **plot_kw)
    if wrong:
        sys.exit(1)


def write_plot(raw: dict, path: str, ylabel: str = "Tawa / fastest torch anchor",
               title: str = "User-style kernels as launched") -> None:
    """Per kernel and shape: each row's `ratio` (Tawa over its anchor)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # matplotlib missing: the printed table is the result
        print(f"no plot ({type(e).__name__}: {e})")
        return
    rows = raw["rows"]
    fig, ax = plt.subplots(1, 1, figsize=(max(8, 0.3 * len(rows)), 5))
    ax.bar(range(len(rows)), [r["ratio"] for r in rows])
    ax.set_xticks(range(len(rows)), [f"{r['kernel']} {'x'.join(map(str, r['shape']))}" for r in rows],
                  fontsize=6, rotation=60, ha="right")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_ylabel(ylabel)
    ax.set_title(f"{title} ({raw['gpu']})")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    print(f"plot written to {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("step", choices=["build", "run"])
    ap.add_argument("--out", default=os.path.join(ROOT, ".carry", "user_kernels"))
    ap.add_argument("--only", default="", metavar="REGEX", help="kernels whose name matches")
    ap.add_argument("--json", default=None, metavar="OUT")
    ap.add_argument("--plot", default=None, metavar="PATH")
    a = ap.parse_args()
    if a.step == "build":
        build(a.out, a.only)
    else:
        run(a.out, a.only, a.json, a.plot)


if __name__ == "__main__":
    main()
