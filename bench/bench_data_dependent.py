"""Kernels whose tile coordinates, loop bounds or branches are read from memory, warp-specialized (the default) and
on the uniform-warp path, against what torch runs for the same result:

- `moe_gemm`: an MoE grouped GEMM, each 128-row tile's expert read from a table (`W[e]`); against a cuBLAS GEMM per
  expert over its rows (torch.matmul in a loop) and one cuBLAS GEMM of the same total size (no routing at all);
- `moe_counts`: MoE in the capacity layout, tiles past an expert's row count skipping the K loop; against
  torch.bmm over the whole capacity (cuBLAS computes the empty rows too) followed by zeroing them;
- `gemm_ragged_k`: a batched GEMM whose K differs per batch (read from memory, the last block masked), over
  several distributions of K and its schedules; against cuBLAS per batch over its own K (torch.matmul in a loop);
- `attn_varlen`: variable-length attention over packed sequences (starts and lengths read from cu_seqlens),
  causal and not; against torch SDPA (cuDNN where it runs) over the same sequences padded to the longest;
- `attn_paged_decode`: decode over a paged KV cache (each page read from a block table), in GB/s of K and V read.

Two steps, so that compilation (which needs MLIR) and execution (which needs a Hopper GPU) may run on different
machines:

    python bench/bench_data_dependent.py build [--out DIR]    # compile every kernel into DIR (a kernel cache)
    python bench/bench_data_dependent.py run   [--out DIR]

Each kernel is first checked on the timed inputs (fresh random values, NaN-poisoned output) against a float32
reference; then the kernel and its anchors are timed in one process, over alternating rounds (the best of 5; for
`gemm_ragged_k`, the median of 7 rotating rounds, each kernel warmed up first).
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))
USER = os.path.join(ROOT, "tests", "e2e", "kernels", "user")
VARIANTS = [("specialized", {}), ("uniform warps", {"warp_specialize": False})]
#: ... and for the MoE capacity layout, the K loop under an `if`: one program per CTA (what it launched before
#: it could persist), and the persistent 128x128 tile.
MOE_COUNTS_VARIANTS = VARIANTS + [("one program per CTA, 128x256", {"schedule": "tile", "BLOCK_N": 256}),
                                  ("persistent 128x128", {"schedule": "persistent"})]

#: (experts, K, N, rows per expert): Mixtral-like routing of 16k tokens over 8 experts, unevenly.
MOE = (8, 4096, 4096, [3000, 1100, 2500, 700, 4100, 1900, 1500, 1584])
#: (experts, capacity, K, N, rows per expert)
MOE_CAP = (8, 4096, 4096, 4096, [3000, 1100, 2500, 700, 4096, 1900, 1500, 0])
#: ... and for a K per batch: the launched kernel (persistent, dynamic tiles) and the other schedules.
RAGGED_K_VARIANTS = [("launched", {}), ("fixed shares 128x256", {"schedule": "persistent", "BLOCK_N": 256,
                                                                  "dynamic_tiles": False}),
                     ("one program per CTA, 128x256", {"schedule": "tile", "BLOCK_N": 256}),
                     ("fixed shares 128x128", {"schedule": "persistent", "dynamic_tiles": False})]
#: (batches, M, N, K of each batch): uneven, skewed, equal, many small batches, batches of few tiles.
RAGGED_K = [(8, 4096, 4096, [4096, 1000, 3000, 500, 2048, 4096, 100, 2500]), (4, 8192, 8192, [4096, 4096, 2048, 1024]),
            (8, 2048, 4096, [16384] + [512] * 7), (4, 4096, 4096, [4096] * 4),
            (32, 1024, 2048, [(1543 * i) % 4033 + 64 for i in range(32)]), (4, 1024, 2048, [8192, 256, 4096, 1024])]
#: (heads, head dim, sequence lengths), each attention case causal and not.
VARLEN = [(16, 128, [4096, 1000, 2500, 300, 3000, 1800, 700, 2200]), (16, 64, [2048] * 4 + [512] * 8 + [100] * 8)]
#: (kv heads, query heads per kv head, head dim, page, sequence lengths)
PAGED = (8, 4, 128, 64, [4000, 1000, 8000, 2500] * 8)


def _cdiv(a, b):
    return -(-a // b)


def _kernel(tawa, name, options, **constants):
    return tawa.compile(os.path.join(USER, f"{name}.tawa"), **options, **constants)


def _moe_rows(counts, block=128):
    tiles = [_cdiv(c, block) for c in counts]
    return tiles, sum(tiles) * block


def build() -> None:
    import ml_dtypes
    import numpy as np
    import tawa
    bf16, i32 = ml_dtypes.bfloat16, np.int32
    e, k, n, counts = MOE
    tiles, m = _moe_rows(counts)
    e2, cap, k2, n2, _ = MOE_CAP
    for label, options in MOE_COUNTS_VARIANTS:
        _kernel(tawa, "moe_counts", options).variant_for(
            np.zeros((e2, cap, k2), bf16), np.zeros((e2, k2, n2), bf16), np.zeros(e2, i32),
            np.zeros((e2, cap, n2), bf16))
    for z, m2, n3, klen in RAGGED_K:
        kmax = _cdiv(max(klen), 64) * 64
        for label, options in RAGGED_K_VARIANTS:
            _kernel(tawa, "gemm_ragged_k", options).variant_for(
                np.zeros((z, m2, kmax), bf16), np.zeros((z, kmax, n3), bf16), np.zeros(z, i32),
                np.zeros((z, n3), np.float32), np.zeros((z, m2, n3), bf16))
    for label, options in VARIANTS:
        _kernel(tawa, "moe_gemm", options).variant_for(np.zeros((m, k), bf16), np.zeros((e, k, n), bf16),
                                                       np.zeros(sum(tiles), i32), np.zeros((m, n), bf16))
        for h, d, lens in VARLEN:
            t = sum(_cdiv(x, 128) * 128 for x in lens)
            for causal in (0, 1):
                q = np.zeros((h, t, d), bf16)
                _kernel(tawa, "attn_varlen", options, D=d, CAUSAL=causal).variant_for(
                    q, q, q, q, np.zeros(len(lens) + 1, i32), np.zeros(len(lens), i32), np.float32(0.1))
        hkv, g, d, page, lens = PAGED
        pages = sum(_cdiv(x, page) for x in lens)
        _kernel(tawa, "attn_paged_decode", options, D=d, PAGE=page).variant_for(
            np.zeros((len(lens), hkv, g, d), bf16), np.zeros((pages, hkv, page, d), bf16),
            np.zeros((pages, hkv, page, d), bf16), np.zeros((len(lens), max(_cdiv(x, page) for x in lens)), i32),
            np.zeros(len(lens), i32), np.zeros((len(lens), hkv, g, d), bf16), np.float32(0.1))
        print(f"built the {label} kernels")


def run() -> None:
    import torch
    import torch.nn.functional as F
    import tawa
    from event_timing import check_close, race, report_against_torch

    check, report = check_close, report_against_torch

    bf = torch.bfloat16
    dev = "cuda"

    # ---- MoE grouped GEMM: the expert of each tile read from a table --------------------------------------
    e, k, n, counts = MOE
    tiles, m = _moe_rows(counts)
    order = torch.arange(e, device=dev)
    expert = torch.repeat_interleave(order.to(torch.int32), torch.tensor(tiles, device=dev))
    x = torch.randn(m, k, device=dev, dtype=bf)
    w = torch.randn(e, k, n, device=dev, dtype=bf) / 64
    starts = [0]
    for t in tiles:
        starts.append(starts[-1] + t * 128)
    y_ref = torch.empty(m, n, device=dev, dtype=bf)

    def torch_moe():
        for i in range(e):
            torch.matmul(x[starts[i]:starts[i + 1]], w[i], out=y_ref[starts[i]:starts[i + 1]])
    torch_moe()
    ref = y_ref.float()
    fns = {}
    for label, options in VARIANTS:
        kern = _kernel(tawa, "moe_gemm", options)
        y = torch.full((m, n), float("nan"), device=dev, dtype=bf)
        kern(x, w, expert, y)
        torch.cuda.synchronize()
        check(f"moe_gemm {label}", y, ref)
        fns[f"Tawa {label}"] = lambda kern=kern, y=y: kern(x, w, expert, y)
    fns["cuBLAS per expert (torch.matmul loop)"] = torch_moe
    fns["one cuBLAS GEMM of the same size"] = lambda: torch.matmul(x, w[0])
    report(f"moe_gemm: {m} routed rows over {e} experts, K={k}, N={n}", "TFLOP/s", 2 * m * n * k, race(fns))

    # ---- MoE in the capacity layout: tiles past an expert's count skip the K loop -------------------------
    e, cap, k, n, counts = MOE_CAP
    x = torch.randn(e, cap, k, device=dev, dtype=bf)
    w = torch.randn(e, k, n, device=dev, dtype=bf) / 64
    cnt = torch.tensor(counts, device=dev, dtype=torch.int32)
    keep = (torch.arange(cap, device=dev)[None, :, None] < cnt[:, None, None])
    ref = torch.where(keep, torch.bmm(x, w).float(), 0.0)
    fns = {}
    for label, options in MOE_COUNTS_VARIANTS:
        kern = _kernel(tawa, "moe_counts", options)
        y = torch.full((e, cap, n), float("nan"), device=dev, dtype=bf)
        kern(x, w, cnt, y)
        torch.cuda.synchronize()
        check(f"moe_counts {label}", y, ref)
        fns[f"Tawa {label}"] = lambda kern=kern, y=y: kern(x, w, cnt, y)
    fns["torch.bmm over the capacity, then zeroing"] = lambda: torch.bmm(x, w).masked_fill_(~keep, 0.0)
    valid = sum(_cdiv(c, 128) * 128 for c in counts)
    report(f"moe_counts: {e} experts of capacity {cap}, {sum(counts)} valid rows, K={k}, N={n} (FLOPs of the "
           f"valid tiles)", "TFLOP/s", 2 * valid * n * k, race(fns))

    # ---- a K per batch: the loop bound read from memory, the last block masked ------------------------------
    # (timed as bench_gemm times GEMMs: each kernel warmed up for 100 ms, 7 rounds in rotating order, the median:
    # a kernel timed right after a slower one borrows the power headroom it left)
    from bench_gemm import _side_by_side
    for z, m, n, klen in RAGGED_K:
        kmax = _cdiv(max(klen), 64) * 64        # (A's rows a multiple of 16 bytes: the copies go through TMA)
        a = torch.randn(z, m, kmax, device=dev, dtype=bf)
        b = torch.randn(z, kmax, n, device=dev, dtype=bf) / 64
        kl = torch.tensor(klen, device=dev, dtype=torch.int32)
        bias = torch.randn(z, n, device=dev)
        y_ref = torch.empty(z, m, n, device=dev, dtype=bf)

        def torch_ragged(a=a, b=b, bias=bias, y_ref=y_ref, klen=klen):
            for i, kk in enumerate(klen):
                torch.add(torch.matmul(a[i, :, :kk], b[i, :kk]), bias[i], out=y_ref[i])
        ref = torch.stack([a[i, :, :kk].float() @ b[i, :kk].float() for i, kk in enumerate(klen)]) + bias[:, None]
        fns = {}
        for label, options in RAGGED_K_VARIANTS:
            kern = _kernel(tawa, "gemm_ragged_k", options)
            y = torch.full((z, m, n), float("nan"), device=dev, dtype=bf)
            kern(a, b, kl, bias, y)
            torch.cuda.synchronize()
            check(f"gemm_ragged_k {label}", y, ref)
            fns[f"Tawa {label}"] = lambda kern=kern, y=y, a=a, b=b, kl=kl, bias=bias: kern(a, b, kl, bias, y)
        fns["cuBLAS per batch (torch.matmul loop)"] = torch_ragged
        flops = 2 * m * n * sum(klen)
        tflops = _side_by_side(fns, flops, rounds=7)
        report(f"gemm_ragged_k: {z} x {m}x{n}, K per batch {min(klen)}-{max(klen)}", "TFLOP/s", flops,
               {name: flops / (v * 1e9) for name, v in tflops.items()})

    # ---- variable-length attention ------------------------------------------------------------------------
    for h, d, lens in VARLEN:
        padded = [_cdiv(s, 128) * 128 for s in lens]
        t = sum(padded)
        q, kk, v = (torch.randn(h, t, d, device=dev, dtype=bf) for _ in range(3))
        cu = torch.tensor([0] + list(torch.tensor(padded).cumsum(0).tolist()), device=dev, dtype=torch.int32)
        ln = torch.tensor(lens, device=dev, dtype=torch.int32)
        scale = d ** -0.5
        longest = max(lens)
        grid = (_cdiv(longest, 128), h, len(lens))
        # the same sequences padded to the longest, as a batch for SDPA
        qp, kp, vp = (torch.zeros(len(lens), h, longest, d, device=dev, dtype=bf) for _ in range(3))
        start = 0
        for i, (s, ps) in enumerate(zip(lens, padded)):
            qp[i, :, :s], kp[i, :, :s], vp[i, :, :s] = q[:, start:start + s], kk[:, start:start + s], \
                v[:, start:start + s]
            start += ps
        for causal in (0, 1):
            ref = torch.zeros(h, t, d, device=dev)
            start = 0
            for s, ps in zip(lens, padded):
                sl = slice(start, start + s)
                ref[:, sl] = F.scaled_dot_product_attention(q[None, :, sl].float(), kk[None, :, sl].float(),
                                                            v[None, :, sl].float(), is_causal=bool(causal))[0]
                start += ps
            rows = torch.zeros(t, dtype=torch.bool, device=dev)
            start = 0
            for s, ps in zip(lens, padded):
                rows[start:start + s] = True
                start += ps
            fns = {}
            for label, options in VARIANTS:
                kern = _kernel(tawa, "attn_varlen", options, D=d, CAUSAL=causal)
                o = torch.full((h, t, d), float("nan"), device=dev, dtype=bf)
                kern[grid](q, kk, v, o, cu, ln, scale)
                torch.cuda.synchronize()
                check(f"attn_varlen {label}", o[:, rows], ref[:, rows])
                fns[f"Tawa {label}"] = lambda kern=kern, o=o: kern[grid](q, kk, v, o, cu, ln, scale)
            from torch.nn.attention import SDPBackend, sdpa_kernel

            def sdpa(backend):
                def fn():
                    with sdpa_kernel(backend):
                        F.scaled_dot_product_attention(qp, kp, vp, is_causal=bool(causal), scale=scale)
                return fn
            for name, backend in (("SDPA cuDNN, padded to the longest", SDPBackend.CUDNN_ATTENTION),
                                  ("SDPA FlashAttention-2, padded to the longest", SDPBackend.FLASH_ATTENTION)):
                try:
                    sdpa(backend)()
                    fns[name] = sdpa(backend)
                except RuntimeError:
                    pass
            flops = sum(4 * s * s * d * h // (2 if causal else 1) for s in lens)
            report(f"attn_varlen: {len(lens)} sequences of {min(lens)}-{longest} tokens, {h} heads, head dim {d}, "
                   f"causal={causal} (FLOPs of the valid rows)", "TFLOP/s", flops, race(fns))

    # ---- paged decode -------------------------------------------------------------------------------------
    hkv, g, d, page, lens = PAGED
    npg = [_cdiv(s, page) for s in lens]
    pages = sum(npg)
    perm = torch.randperm(pages, device=dev).to(torch.int32)
    bt = torch.zeros(len(lens), max(npg), device=dev, dtype=torch.int32)
    used = 0
    for i, c in enumerate(npg):
        bt[i, :c] = perm[used:used + c]
        used += c
    q = torch.randn(len(lens), hkv, g, d, device=dev, dtype=bf)
    kc, vc = (torch.randn(pages, hkv, page, d, device=dev, dtype=bf) for _ in range(2))
    sl = torch.tensor(lens, device=dev, dtype=torch.int32)
    scale = d ** -0.5
    ref = torch.zeros(len(lens), hkv, g, d, device=dev)
    for i, s in enumerate(lens):
        keys = kc[bt[i, :npg[i]].long()].permute(1, 0, 2, 3).reshape(hkv, -1, d)[:, :s].float()
        vals = vc[bt[i, :npg[i]].long()].permute(1, 0, 2, 3).reshape(hkv, -1, d)[:, :s].float()
        ref[i] = torch.softmax(q[i].float() @ keys.transpose(-1, -2) * scale, -1) @ vals
    fns = {}
    for label, options in VARIANTS:
        kern = _kernel(tawa, "attn_paged_decode", options, D=d, PAGE=page)
        o = torch.full((len(lens), hkv, g, d), float("nan"), device=dev, dtype=bf)
        kern(q, kc, vc, bt, sl, o, scale)
        torch.cuda.synchronize()
        check(f"attn_paged_decode {label}", o, ref)
        fns[f"Tawa {label}"] = lambda kern=kern, o=o: kern(q, kc, vc, bt, sl, o, scale)
    # (the anchor: SDPA over K and V gathered into a dense batch, padded to the longest, the G query heads of a kv
    # head as its G query rows; the gather not timed)
    longest = max(npg) * page
    kd = kc[bt.long()].permute(0, 2, 1, 3, 4).reshape(len(lens), hkv, longest, d)
    vd = vc[bt.long()].permute(0, 2, 1, 3, 4).reshape(len(lens), hkv, longest, d)
    mask = torch.arange(longest, device=dev)[None, None, None, :] < sl[:, None, None, None]
    fns["SDPA over the gathered cache (gather not timed)"] = lambda: F.scaled_dot_product_attention(
        q, kd, vd, attn_mask=mask, scale=scale)
    kv_bytes = 2 * sum(lens) * hkv * d * 2
    report(f"attn_paged_decode: {len(lens)} sequences of {min(lens)}-{max(lens)} cached tokens, {hkv} kv heads x "
           f"{g}, head dim {d}, pages of {page} (GB/s of K and V)", "GB/s", kv_bytes * 1e3, race(fns))


def main() -> None:
    from event_timing import build_or_run
    build_or_run(__doc__, ROOT, "data_dependent", build, run)


if __name__ == "__main__":
    main()
