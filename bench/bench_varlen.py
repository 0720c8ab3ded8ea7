"""Kernels over packed variable-length rows (FlashAttention's `cu_seqlens` layout, sequences back to back at any
offsets), written with tensor views (`Q[h, start:]`, `O[h, start:end]`), against what torch runs for the same
result:

- `attn_varlen_packed`: variable-length attention, causal and not, at head dims 128 and 64; against the padded
  layout's kernel (`attn_varlen`: every sequence starting at a multiple of 128 rows, which the packed tensors must
  first be copied into: timed with and without that copy), SDPA over nested (jagged) tensors, which runs
  FlashAttention-2's varlen kernel, and SDPA (cuDNN) over the sequences padded to the longest;
- `grouped_wgrad`: an MoE layer's weight gradients, DW[g] = X_g^T @ DY_g over each group's packed rows; against
  cuBLAS per group (torch.matmul in a loop).

Two steps, so that compilation (which needs MLIR) and execution (which needs a Hopper GPU) may run on different
machines:

    python bench/bench_varlen.py build [--out DIR]    # compile every kernel into DIR (a kernel cache)
    python bench/bench_varlen.py run   [--out DIR]

Each kernel is first checked on the timed inputs (fresh random values, NaN-poisoned output) against a float32
reference; then the kernels and anchors are timed in one process, over alternating rounds (the best of 7).
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))
USER = os.path.join(ROOT, "tests", "e2e", "kernels", "user")
#: (heads, head dim, sequence lengths): uneven sequences at head dim 128; many short ones at 64; an LLM prefill
#: batch of 2k-8k prompts.
VARLEN = [(16, 128, [4096, 1000, 2500, 300, 3000, 1800, 700, 2200]),
          (16, 64, [2048] * 4 + [512] * 8 + [100] * 8),
          (32, 128, [8192, 2048, 5000, 3333])]
VARIANTS = [("launched", {}), ("uniform warps", {"warp_specialize": False})]
#: (K, N, rows per group): an MoE layer of 8 experts over 16k routed tokens, unevenly.
WGRAD = (4096, 4096, [3000, 1100, 2500, 700, 4100, 1900, 1500, 1584])
WGRAD_VARIANTS = [{}, {"BLOCK_N": 256}, {"BLOCK_T": 128}, {"BLOCK_N": 256, "BLOCK_T": 32}]


def _cdiv(a, b):
    return -(-a // b)


def _kernel(tawa, name, options, **constants):
    return tawa.compile(os.path.join(USER, f"{name}.tawa"), **options, **constants)


def build() -> None:
    import ml_dtypes
    import numpy as np
    import tawa
    bf16, i32 = ml_dtypes.bfloat16, np.int32
    for h, d, lens in VARLEN:
        for causal in (0, 1):
            for _, options in VARIANTS:
                q = np.zeros((h, sum(lens), d), bf16)
                _kernel(tawa, "attn_varlen_packed", options, D=d, CAUSAL=causal).variant_for(
                    q, q, q, q, np.zeros(len(lens) + 1, i32), np.float32(0.1))
            q = np.zeros((h, sum(_cdiv(x, 128) * 128 for x in lens), d), bf16)
            _kernel(tawa, "attn_varlen", {}, D=d, CAUSAL=causal).variant_for(
                q, q, q, q, np.zeros(len(lens) + 1, i32), np.zeros(len(lens), i32), np.float32(0.1))
    k, n, counts = WGRAD
    t = sum(counts)
    for options in WGRAD_VARIANTS:
        _kernel(tawa, "grouped_wgrad", options).variant_for(np.zeros((t, k), bf16), np.zeros((t, n), bf16),
                                                            np.zeros((len(counts), k, n), np.float32),
                                                            np.zeros(len(counts) + 1, i32))
    print("built")


def run() -> None:
    import torch
    import torch.nn.functional as F
    import tawa
    from event_timing import check_close, race, report_against_torch

    def check(name, out, ref, tol=2e-2):
        check_close(name, out, ref, tol, verbose=True)

    def report(title, unit, work, times: dict):
        report_against_torch(title, unit, work, times, width=58)

    bf = torch.bfloat16
    dev = "cuda"
    torch.manual_seed(0)
    for h, d, lens in VARLEN:
        t = sum(lens)
        cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), device=dev, dtype=torch.int32)
        q, kk, v = (torch.randn(h, t, d, device=dev, dtype=bf) for _ in range(3))
        scale = d ** -0.5
        longest = max(lens)
        grid = (_cdiv(longest, 128), h, len(lens))
        # the padded layout: each sequence from a multiple of 128 rows
        padded = [_cdiv(x, 128) * 128 for x in lens]
        pstart = [0]
        for p in padded:
            pstart.append(pstart[-1] + p)
        pcu = torch.tensor(pstart, device=dev, dtype=torch.int32)
        ln = torch.tensor(lens, device=dev, dtype=torch.int32)
        rows = torch.cat([torch.arange(pstart[i], pstart[i] + x, device=dev) for i, x in enumerate(lens)])
        qp, kp, vp = (torch.zeros(h, pstart[-1], d, device=dev, dtype=bf) for _ in range(3))
        op = torch.empty(h, pstart[-1], d, device=dev, dtype=bf)

        def repack():
            qp[:, rows], kp[:, rows], vp[:, rows] = q, kk, v
        repack()
        # nested (jagged) tensors: SDPA runs FlashAttention-2's varlen kernel on them
        offsets = cu.to(torch.int64)

        def jagged(x):
            return torch.nested.nested_tensor_from_jagged(x.transpose(0, 1).contiguous(), offsets).transpose(1, 2)
        qj, kj, vj = jagged(q), jagged(kk), jagged(v)
        # the padded batch for cuDNN, and a key-padding mask
        qb, kb, vb = (torch.zeros(len(lens), h, longest, d, device=dev, dtype=bf) for _ in range(3))
        for i, x in enumerate(lens):
            qb[i, :, :x], kb[i, :, :x], vb[i, :, :x] = q[:, cu[i]:cu[i + 1]], kk[:, cu[i]:cu[i + 1]], \
                v[:, cu[i]:cu[i + 1]]
        for causal in (0, 1):
            ref = torch.empty(h, t, d, device=dev)
            for i in range(len(lens)):
                part = slice(int(cu[i]), int(cu[i + 1]))
                ref[:, part] = F.scaled_dot_product_attention(q[None, :, part].float(), kk[None, :, part].float(),
                                                              v[None, :, part].float(), is_causal=bool(causal))[0]
            fns = {}
            for label, options in VARIANTS:
                kern = _kernel(tawa, "attn_varlen_packed", options, D=d, CAUSAL=causal)
                o = torch.full((h, t, d), float("nan"), device=dev, dtype=bf)
                kern[grid](q, kk, v, o, cu, scale)
                torch.cuda.synchronize()
                check(f"attn_varlen_packed {label}", o, ref)
                fns[f"Tawa packed, {label}"] = lambda kern=kern, o=o: kern[grid](q, kk, v, o, cu, scale)
            pad = _kernel(tawa, "attn_varlen", {}, D=d, CAUSAL=causal)
            op.fill_(float("nan"))
            pad[grid](qp, kp, vp, op, pcu, ln, scale)
            torch.cuda.synchronize()
            check("attn_varlen (padded layout)", op[:, rows], ref)
            fns["Tawa padded layout (sequences at multiples of 128)"] = \
                lambda pad=pad: pad[grid](qp, kp, vp, op, pcu, ln, scale)

            def padded_with_copy(pad=pad):
                repack()
                pad[grid](qp, kp, vp, op, pcu, ln, scale)
                return op[:, rows]
            fns["Tawa padded layout, with the copies in and out"] = padded_with_copy
            from torch.nn.attention import SDPBackend, sdpa_kernel

            def sdpa(backend, args):
                def fn():
                    with sdpa_kernel(backend):
                        return F.scaled_dot_product_attention(*args, is_causal=bool(causal), scale=scale)
                return fn
            for name, backend, args in (
                    ("SDPA FlashAttention-2 varlen (nested jagged tensors)", SDPBackend.FLASH_ATTENTION,
                     (qj, kj, vj)),
                    ("SDPA cuDNN, padded to the longest", SDPBackend.CUDNN_ATTENTION, (qb, kb, vb)),
                    ("SDPA FlashAttention-2, padded to the longest", SDPBackend.FLASH_ATTENTION, (qb, kb, vb))):
                try:
                    sdpa(backend, args)()
                    torch.cuda.synchronize()
                    fns[name] = sdpa(backend, args)
                except (RuntimeError, NotImplementedError) as e:
                    print(f"  ({name} not run: {str(e).splitlines()[0][:100]})")
            flops = sum(4 * s * s * d * h // (2 if causal else 1) for s in lens)
            report(f"attn_varlen_packed: {len(lens)} sequences of {min(lens)}-{longest} tokens, {h} heads, head dim "
                   f"{d}, causal={causal} (FLOPs of the valid rows)", "TFLOP/s", flops, race(fns, rounds=7))

    # ---- grouped weight gradients -----------------------------------------------------------------------------
    k, n, counts = WGRAD
    t = sum(counts)
    cu_list = [0]
    for c in counts:
        cu_list.append(cu_list[-1] + c)
    cu = torch.tensor(cu_list, device=dev, dtype=torch.int32)
    x = torch.randn(t, k, device=dev, dtype=bf)
    dy = torch.randn(t, n, device=dev, dtype=bf) / 64
    out = torch.empty(len(counts), k, n, device=dev, dtype=bf)
    out32 = torch.empty(len(counts), k, n, device=dev)

    def torch_loop():
        for g in range(len(counts)):
            torch.matmul(x[cu_list[g]:cu_list[g + 1]].T, dy[cu_list[g]:cu_list[g + 1]], out=out[g])

    def torch_loop_f32():
        for g in range(len(counts)):
            torch.mm(x[cu_list[g]:cu_list[g + 1]].T, dy[cu_list[g]:cu_list[g + 1]], out_dtype=torch.float32,
                     out=out32[g])
    ref = torch.stack([x[cu_list[g]:cu_list[g + 1]].T.float() @ dy[cu_list[g]:cu_list[g + 1]].float()
                       for g in range(len(counts))])
    fns = {}
    for options in WGRAD_VARIANTS:
        kern = _kernel(tawa, "grouped_wgrad", options)
        dw = torch.full((len(counts), k, n), float("nan"), device=dev)
        wgrid = (_cdiv(k, options.get("BLOCK_M", 128)), _cdiv(n, options.get("BLOCK_N", 128)), len(counts))
        kern[wgrid](x, dy, dw, cu)
        torch.cuda.synchronize()
        label = ", ".join(f"{key}={val}" for key, val in options.items()) or "defaults"
        check(f"grouped_wgrad {label}", dw, ref)
        fns[f"Tawa grouped_wgrad {label} (f32 out)"] = lambda kern=kern, dw=dw, wgrid=wgrid: kern[wgrid](x, dy, dw, cu)
    fns["cuBLAS per group (torch.matmul loop, bf16 out)"] = torch_loop
    try:
        torch_loop_f32()
        fns["cuBLAS per group (torch.mm loop, f32 out)"] = torch_loop_f32
    except (RuntimeError, TypeError) as e:
        print(f"  (torch.mm with out_dtype not run: {str(e).splitlines()[0][:100]})")
    report(f"grouped_wgrad: {len(counts)} groups of {min(counts)}-{max(counts)} rows, K={k}, N={n}", "TFLOP/s",
           2 * t * k * n, race(fns, rounds=7))


def main() -> None:
    from event_timing import build_or_run
    build_or_run(__doc__, ROOT, "varlen", build, run)


if __name__ == "__main__":
    main()
