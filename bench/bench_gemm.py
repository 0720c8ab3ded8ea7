"""GEMM (and friends) through the Tawa GPU backend: correctness on ragged shapes and speed against torch.matmul.

Two steps, so that compilation (which needs MLIR) and execution (which needs a Hopper GPU) may run on different
machines:

    python bench/bench_gemm.py build  [--out DIR]   # compile the kernels, write DIR/<name>.json + .cubin
    python bench/bench_gemm.py run    [--out DIR] [--json OUT] [--plot PATH]   # check against torch, time them
    python bench/bench_gemm.py plot   --json OUT [--plot PATH]                   # redraw the plot of a run

`python bench/bench_gemm.py` does both on one machine. DIR defaults to `.carry/` in the repository root.

The GEMM sweep (bf16 and fp16; M x N x K = 4096^3, 8192^3, 8192x8192x2048, 4096x14336x4096, 512x8192x8192)
times, side by side in one process and alternating over rounds, `examples/gemm.tawa` warp specialized (three tile
shapes, see GEMM_VARIANTS, each with its tile constants spelled out; "Tawa-WS" is 256x128) and uniform-warp,
torch.matmul (cuBLAS) and two Triton matmuls, each with a small autotune set: a tutorial-style one and a persistent
one through TMA descriptors (the "Triton" column is the better of the two per shape); it prints TFLOP/s, ratios to
cuBLAS and to Triton, and their geometric means. The "tuned" column is `tawa.autotune` over the example's declared
space, tuned on each shape in the same process (TUNED; `build` fills DIR/tuned-cache with every candidate).
`run` writes a plot (DIR/gemm.png unless --plot) of the tuned GEMM against cuBLAS and Triton per shape and of the
best fused kernel against its anchors, and with --json the raw TFLOP/s. `run --only waves` times the same
implementations (bf16) on shapes whose tiles leave a sparse last wave (WAVES), where the stream-K variants
("sk_") share it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

#: name -> (example file, constants, compile options)
KERNELS = {
    "gemm_bias_gelu": ("gemm_bias_act.tawa", {}, {}),
    "gemm_fp8": ("gemm_fp8.tawa", {}, {}),
    "softmax": ("softmax.tawa", {}, {}),
    "flash_attention": ("flash_attention.tawa", {}, {}),
    "flash_attention_causal": ("flash_attention.tawa", {"CAUSAL": 1}, {}),
}
#: The GEMM variants of the sweep, each with its tile spelled out (the example's default is 128x256): warp
#: specialized (1 producer + 2 consumer warp groups, the ring depth chosen by the compiler: 6 slots for 128x128
#: tiles, 4 for 128x256 / 256x128) and uniform-warp (software pipelined).
GEMM_VARIANTS = {
    "ws_128x128": ({"BLOCK_N": 128}, {"warp_specialize": True, "schedule": "tile"}),
    "ws_128x256": ({"BLOCK_N": 256}, {"warp_specialize": True, "schedule": "tile"}),
    "ws_256x128": ({"BLOCK_M": 256, "BLOCK_N": 128}, {"warp_specialize": True, "schedule": "tile"}),
    "pers_128x128": ({"BLOCK_N": 128}, {"warp_specialize": True, "schedule": "persistent"}),
    "pers_128x256": ({"BLOCK_N": 256}, {"warp_specialize": True, "schedule": "persistent"}),
    "pers_256x128": ({"BLOCK_M": 256, "BLOCK_N": 128}, {"warp_specialize": True, "schedule": "persistent"}),
    "pp_128x128": ({"BLOCK_N": 128}, {"warp_specialize": True, "schedule": "pingpong"}),
    "pers_128x256_c21": ({"BLOCK_N": 256}, {"warp_specialize": True, "schedule": "persistent", "cluster": "2x1"}),
    "pers_128x256_c12": ({"BLOCK_N": 256}, {"warp_specialize": True, "schedule": "persistent", "cluster": "1x2"}),
    "pp_128x128_c21": ({"BLOCK_N": 128}, {"warp_specialize": True, "schedule": "pingpong", "cluster": "2x1"}),
    "pp_128x128_c12": ({"BLOCK_N": 128}, {"warp_specialize": True, "schedule": "pingpong", "cluster": "1x2"}),
    # a tile 192 wide (not a power of two): 1.5x the programs of a 256-wide tile along N
    "pers_128x192": ({"BLOCK_N": 192}, {"warp_specialize": True, "schedule": "persistent"}),
    # ping-pong with a 128x192 tile per consumer group (192 accumulator registers each)
    "pp_128x192": ({"BLOCK_N": 192}, {"warp_specialize": True, "schedule": "pingpong"}),
    "pp_128x192_c21": ({"BLOCK_N": 192}, {"warp_specialize": True, "schedule": "pingpong", "cluster": "2x1"}),
    # persistent 128x256 with the tiles of a mostly idle last wave shared by K iterations (Stream-K)
    "sk_128x256": ({"BLOCK_N": 256}, {"warp_specialize": True, "schedule": "streamk"}),
    "sk_128x128": ({"BLOCK_N": 128}, {"warp_specialize": True, "schedule": "streamk"}),
    # split-K: the K loop of each tile split over 2 or 4 programs (the tile schedule), partials summed in a workspace
    "split2_128x256": ({"BLOCK_N": 256}, {"warp_specialize": True, "split_k": 2}),
    "split4_128x256": ({"BLOCK_N": 256}, {"warp_specialize": True, "split_k": 4}),
    "split2_128x128": ({"BLOCK_N": 128}, {"warp_specialize": True, "split_k": 2}),
    "split4_128x128": ({"BLOCK_N": 128}, {"warp_specialize": True, "split_k": 4}),
    # 192-row tiles: three consumer warp groups of one 64-row slab each (the tile cuBLAS takes for grids of about
    # one wave, e.g. 1100 rows: 6 x 22 tiles of 192x192 fill 132 SMs once)
    "pers_192x192": ({"BLOCK_M": 192, "BLOCK_N": 192}, {"warp_specialize": True, "schedule": "persistent"}),
    "pers_192x128": ({"BLOCK_M": 192, "BLOCK_N": 128}, {"warp_specialize": True, "schedule": "persistent"}),
    "pers_192x256": ({"BLOCK_M": 192, "BLOCK_N": 256}, {"warp_specialize": True, "schedule": "persistent"}),
    "ws_192x192": ({"BLOCK_M": 192, "BLOCK_N": 192}, {"warp_specialize": True, "schedule": "tile"}),
    "pers_192x192_c12": ({"BLOCK_M": 192, "BLOCK_N": 192}, {"warp_specialize": True, "schedule": "persistent",
                                                          "cluster": "1x2"}),
    "pers_192x192_c21": ({"BLOCK_M": 192, "BLOCK_N": 192}, {"warp_specialize": True, "schedule": "persistent",
                                                          "cluster": "2x1"}),
    "uni_128x128": ({"BLOCK_N": 128}, {"warp_specialize": False, "num_stages": 3}),
    "uni_128x256": ({"BLOCK_N": 256}, {"warp_specialize": False, "num_stages": 3, "num_warps": 8}),
}
for _dt in ("bf16", "f16"):
    for _v, (_c, _o) in GEMM_VARIANTS.items():
        KERNELS[f"gemm_{_dt}_{_v}"] = ("gemm.tawa", {**_c, "DTYPE": _dt}, _o)

#: Fused kernels against their anchors (see fused_sweep): name -> (example, constants, options).
FUSED_VARIANTS = {
    "swiglu_tile_n64": ("swiglu.tawa", {"BLOCK_N": 64}, {"schedule": "tile"}),
    "swiglu_pers_n64": ("swiglu.tawa", {"BLOCK_N": 64}, {"schedule": "persistent"}),
    "swiglu_tile_n128": ("swiglu.tawa", {"BLOCK_N": 128}, {"schedule": "tile"}),
    "swiglu_pers_n128": ("swiglu.tawa", {"BLOCK_N": 128}, {"schedule": "persistent"}),
    "swiglu_pp_n64": ("swiglu.tawa", {"BLOCK_N": 64}, {"schedule": "pingpong"}),
    "linear_tile_n256": ("linear_gelu_residual.tawa", {"BLOCK_N": 256}, {"schedule": "tile"}),
    "linear_pers_n256": ("linear_gelu_residual.tawa", {"BLOCK_N": 256}, {"schedule": "persistent"}),
    "linear_tile_n128": ("linear_gelu_residual.tawa", {"BLOCK_N": 128}, {"schedule": "tile"}),
    "linear_pers_n128": ("linear_gelu_residual.tawa", {"BLOCK_N": 128}, {"schedule": "persistent"}),
    "linear_pp_n128": ("linear_gelu_residual.tawa", {"BLOCK_N": 128}, {"schedule": "pingpong"}),
    "fp8_tile": ("gemm_fp8.tawa", {}, {"schedule": "tile"}),
    "fp8_pers": ("gemm_fp8.tawa", {}, {"schedule": "persistent"}),
    "fp8_pers_n128": ("gemm_fp8.tawa", {"BLOCK_N": 128}, {"schedule": "persistent"}),
    "fp8_pp_n128": ("gemm_fp8.tawa", {"BLOCK_N": 128}, {"schedule": "pingpong"}),
    "swiglu_pers_n128_c21": ("swiglu.tawa", {"BLOCK_N": 128}, {"schedule": "persistent", "cluster": "2x1"}),
    "swiglu_pers_n128_c12": ("swiglu.tawa", {"BLOCK_N": 128}, {"schedule": "persistent", "cluster": "1x2"}),
    "swiglu_pp_n64_c21": ("swiglu.tawa", {"BLOCK_N": 64}, {"schedule": "pingpong", "cluster": "2x1"}),
    "linear_pp_n128_c21": ("linear_gelu_residual.tawa", {"BLOCK_N": 128}, {"schedule": "pingpong", "cluster": "2x1"}),
    "linear_pers_n256_c21": ("linear_gelu_residual.tawa", {"BLOCK_N": 256}, {"schedule": "persistent",
                                                                            "cluster": "2x1"}),
    # ping-pong with 64-row tiles: each consumer group's two (SwiGLU) or one wide (linear) accumulator fits its
    # registers at the tensor cores' efficient N (128 / 256), where 128-row tiles would need BLOCK_N 64
    "swiglu_pp_m64n128": ("swiglu.tawa", {"BLOCK_M": 64, "BLOCK_N": 128}, {"schedule": "pingpong"}),
    "swiglu_pp_m64n128_c21": ("swiglu.tawa", {"BLOCK_M": 64, "BLOCK_N": 128}, {"schedule": "pingpong",
                                                                              "cluster": "2x1"}),
    "swiglu_pers_m256n64": ("swiglu.tawa", {"BLOCK_M": 256, "BLOCK_N": 64}, {"schedule": "persistent"}),
    "linear_pp_m64n256": ("linear_gelu_residual.tawa", {"BLOCK_M": 64, "BLOCK_N": 256}, {"schedule": "pingpong"}),
    "linear_pp_m64n256_c21": ("linear_gelu_residual.tawa", {"BLOCK_M": 64, "BLOCK_N": 256},
                              {"schedule": "pingpong", "cluster": "2x1"}),
    # tiles 192 wide (not a power of two): SwiGLU's default, and the linear layer's at the same width
    "swiglu_pers_n192": ("swiglu.tawa", {"BLOCK_N": 192}, {"schedule": "persistent"}),
    "swiglu_pers_n192_c21": ("swiglu.tawa", {"BLOCK_N": 192}, {"schedule": "persistent", "cluster": "2x1"}),
    "linear_pers_n192": ("linear_gelu_residual.tawa", {"BLOCK_N": 192}, {"schedule": "persistent"}),
    "linear_pp_n192": ("linear_gelu_residual.tawa", {"BLOCK_N": 192}, {"schedule": "pingpong"}),
    "linear_pp_n192_c21": ("linear_gelu_residual.tawa", {"BLOCK_N": 192}, {"schedule": "pingpong",
                                                                          "cluster": "2x1"}),
    "swiglu_pp_m64n192": ("swiglu.tawa", {"BLOCK_M": 64, "BLOCK_N": 192}, {"schedule": "pingpong"}),
    # 192-row tiles (three consumer warp groups): B's tiles shared by 192 rows instead of 128
    "swiglu_pers_m192n128": ("swiglu.tawa", {"BLOCK_M": 192, "BLOCK_N": 128}, {"schedule": "persistent"}),
    "swiglu_pers_m192n128_c21": ("swiglu.tawa", {"BLOCK_M": 192, "BLOCK_N": 128}, {"schedule": "persistent",
                                                                                  "cluster": "2x1"}),
    "linear_pers_m192n192": ("linear_gelu_residual.tawa", {"BLOCK_M": 192, "BLOCK_N": 192}, {"schedule": "persistent"}),
    "fp8_pers_m192n192": ("gemm_fp8.tawa", {"BLOCK_M": 192, "BLOCK_N": 192}, {"schedule": "persistent"}),
    "fp8_pers_c21": ("gemm_fp8.tawa", {}, {"schedule": "persistent", "cluster": "2x1"}),
    "fp8_pers_c12": ("gemm_fp8.tawa", {}, {"schedule": "persistent", "cluster": "1x2"}),
}
KERNELS.update(FUSED_VARIANTS)

#: Examples tuned end to end by `tawa.autotune` over their declared `@autotune` space, in the same process as the
#: anchors (the "tuned" column): name -> (example, constants fixed for every candidate). `build` compiles each
#: space into DIR/tuned-cache, so that `run` needs no compiler.
TUNED = {
    "gemm_bf16": ("gemm.tawa", {"DTYPE": "bf16"}),
    "gemm_f16": ("gemm.tawa", {"DTYPE": "f16"}),
    "swiglu": ("swiglu.tawa", {}),
    "linear": ("linear_gelu_residual.tawa", {}),
}

SWEEP = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 2048), (16384, 8192, 1024), (4096, 14336, 4096),
         (512, 8192, 8192), (2048, 2048, 8192), (3000, 5000, 2000)]
#: `--only waves` (bf16): shapes whose 128x256 tiles leave a sparse last wave on 132 SMs (136, 144, 272, 144 and
#: 180 tiles), where stream-K shares it, one of 2.9 waves where it does not, and 1152x4224 (exactly 132 tiles of 192x192).
WAVES = [(2112, 2048, 8192), (1100, 4096, 4096), (2176, 4096, 4096), (2200, 2048, 4096), (1200, 5120, 5120),
         (3000, 4096, 11008), (1152, 4224, 4096)]


def build(out: str, pattern: str = "") -> None:
    import re
    from tawa.compiler import compile_source
    from tawa.options import CompileOptions
    os.makedirs(out, exist_ok=True)
    for name, (src, consts, opts) in KERNELS.items():
        if pattern and not re.search(pattern, name):
            continue
        path = os.path.join(ROOT, "examples", src)
        t = time.time()
        try:
            k = compile_source(open(path).read(), path, CompileOptions(constants=dict(consts), **opts))
        except Exception as e:  # report and go on: one failing kernel must not hide the others
            print(f"{name}: BUILD FAILED: {str(e)[:400]}")
            continue
        with open(os.path.join(out, name + ".json"), "w") as f:
            d = k.to_json()
            d.pop("ir", None)
            json.dump(d, f)
        with open(os.path.join(out, name + ".cubin"), "wb") as f:
            f.write(k.cubin)
        print(f"{name}: {time.time() - t:.2f}s {k.notes} smem={k.shared_bytes} threads={k.num_threads}")
    tuned = [(n, spec) for n, spec in TUNED.items() if not pattern or re.search(pattern, "tuned_" + n)]
    if tuned:
        os.environ["TAWA_CACHE_DIR"] = _tuned_cache(out)
        import tawa
    for name, (src, fixed) in tuned:
        t = time.time()
        outcomes = tawa.autotune.compile_space(os.path.join(ROOT, "examples", src), show_progress=False, **fixed)
        ok = sum(o.kernel is not None for o in outcomes)
        print(f"tuned_{name}: {ok} of {len(outcomes)} candidates compiled in {time.time() - t:.1f}s")


def _tuned_cache(out: str) -> str:
    return os.path.join(out, "tuned-cache")


def _tuner(out: str, name: str):
    """`tawa.autotune` over the example's space from the cache `build` filled, or None where it was not built.
    Results stored earlier are ignored (`TAWA_AUTOTUNE=force`): every shape is tuned in this process."""
    cache = _tuned_cache(out)
    if not os.path.isdir(cache):
        return None
    os.environ["TAWA_CACHE_DIR"] = cache
    os.environ["TAWA_AUTOTUNE"] = "force"
    import tawa
    src, fixed = TUNED[name]
    return tawa.autotune(os.path.join(ROOT, "examples", src), show_progress=False, **fixed)


def _tuned(tuner, args: list, label: str):
    """A launch of the tuner's choice for these arguments (tuning them first), or None; prints the choice."""
    if tuner is None:
        return None
    try:
        choice = tuner.tune(*args)
    except Exception as e:  # a tuner that cannot run must not hide the other columns
        print(f"  tuned {label}: FAILED {str(e)[:300]}")
        return None
    print(f"  tuned {label}: " + " ".join(f"{k}={v}" for k, v in choice.config.items()))
    return lambda: tuner(*args)


def _load(out, name):
    from tawa.abi import CompiledKernel
    from tawa.runtime.launcher import GpuLauncher
    with open(os.path.join(out, name + ".json")) as f:
        d = json.load(f)
    with open(os.path.join(out, name + ".cubin"), "rb") as f:
        cubin = f.read()
    return GpuLauncher(CompiledKernel.from_json(d, cubin))


#: Before it is timed, an implementation runs alone for this long (milliseconds). A GPU's clocks follow the power
#: drawn by the kernels just before: a kernel timed right after a slower, cooler one runs up to 8% faster than it
#: does sustained (H200, the same kernel timed after different neighbours). `TAWA_BENCH_WARM_MS` changes it.
WARM_MS = float(os.environ.get("TAWA_BENCH_WARM_MS", "100"))


def _time(fn, reps=30, rounds=5, warm_ms=None):
    """Median over `rounds` of the mean time (ms) of `reps` back-to-back calls of `fn`, each round after `warm_ms`
    of warm-up calls."""
    import torch
    warm_ms = WARM_MS if warm_ms is None else warm_ms
    best = []
    for _ in range(rounds):
        fn()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if warm_ms > 0:
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            for _ in range(min(int(warm_ms / max(s.elapsed_time(e), 1e-3)), 5000)):
                fn()
        s.record()
        for _ in range(reps):
            fn()
        e.record()
        torch.cuda.synchronize()
        best.append(s.elapsed_time(e) / reps)
    best.sort()
    return best[len(best) // 2]


def triton_matmul():
    """A plain Triton matmul in the style of the Triton tutorial (grouped tile order, a small autotune set)."""
    import triton
    import triton.language as tl

    configs = [triton.Config({"BM": bm, "BN": bn, "BK": 64, "G": 8}, num_stages=s, num_warps=w)
               for bm, bn, s, w in ((128, 256, 3, 8), (256, 128, 3, 8), (128, 128, 4, 4), (128, 256, 4, 8))]

    @triton.autotune(configs=configs, key=["M", "N", "K"])
    @triton.jit
    def kernel(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn, BM: tl.constexpr, BN: tl.constexpr,
               BK: tl.constexpr, G: tl.constexpr):
        pid = tl.program_id(0)
        npm, npn = tl.cdiv(M, BM), tl.cdiv(N, BN)
        group = pid // (G * npn)
        first = group * G
        gm = tl.minimum(npm - first, G)
        pm = first + (pid % (G * npn)) % gm
        pn = (pid % (G * npn)) // gm
        rm = (pm * BM + tl.arange(0, BM)) % M
        rn = (pn * BN + tl.arange(0, BN)) % N
        rk = tl.arange(0, BK)
        pa = a + rm[:, None] * sam + rk[None, :] * sak
        pb = b + rk[:, None] * sbk + rn[None, :] * sbn
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            x = tl.load(pa, mask=rk[None, :] < K - k * BK, other=0.0)
            y = tl.load(pb, mask=rk[:, None] < K - k * BK, other=0.0)
            acc = tl.dot(x, y, acc)
            pa += BK * sak
            pb += BK * sbk
        om = pm * BM + tl.arange(0, BM)
        on = pn * BN + tl.arange(0, BN)
        tl.store(c + om[:, None] * scm + on[None, :] * scn, acc.to(c.dtype.element_ty),
                 mask=(om[:, None] < M) & (on[None, :] < N))

    def matmul(a, b, c):
        M, K = a.shape
        N = b.shape[1]
        grid = lambda meta: (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)
        kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
        return c
    return matmul


def triton_persistent_tma_matmul():
    """Triton's persistent TMA matmul (in the style of its persistent-matmul tutorial): about one program per SM
    walking the output tiles in grouped order, A, B and C through host-side TMA tensor descriptors, the K loop
    software pipelined by Triton; a small autotune set. The descriptors' block shapes follow the chosen config
    (set in a pre-hook, as autotuning picks the tile after the descriptors exist)."""
    import torch
    import triton
    import triton.language as tl
    from triton.tools.tensor_descriptor import TensorDescriptor

    def set_block_shapes(nargs):
        bm, bn, bk = nargs["BM"], nargs["BN"], nargs["BK"]
        nargs["a_desc"].block_shape = [bm, bk]
        nargs["b_desc"].block_shape = [bk, bn]
        nargs["c_desc"].block_shape = [bm, bn]

    configs = [triton.Config({"BM": bm, "BN": bn, "BK": 64, "G": 8}, num_stages=s, num_warps=w,
                             pre_hook=set_block_shapes)
               for bm, bn, s, w in ((128, 256, 3, 8), (256, 128, 3, 8), (128, 128, 4, 4), (128, 128, 5, 8))]

    @triton.autotune(configs=configs, key=["M", "N", "K"])
    @triton.jit
    def kernel(a_desc, b_desc, c_desc, M, N, K, NUM_SMS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
               BK: tl.constexpr, G: tl.constexpr):
        npm, npn, nk = tl.cdiv(M, BM), tl.cdiv(N, BN), tl.cdiv(K, BK)
        per_group = G * npn
        for tile in tl.range(tl.program_id(0), npm * npn, NUM_SMS, flatten=True):
            first = (tile // per_group) * G
            rows = tl.minimum(npm - first, G)
            pm = first + (tile % per_group) % rows
            pn = (tile % per_group) // rows
            acc = tl.zeros((BM, BN), dtype=tl.float32)
            for kk in range(nk):
                acc = tl.dot(a_desc.load([pm * BM, kk * BK]), b_desc.load([kk * BK, pn * BN]), acc)
            c_desc.store([pm * BM, pn * BN], acc.to(c_desc.dtype))

    sms = torch.cuda.get_device_properties(0).multi_processor_count

    def matmul(a, b, c):
        M, K = a.shape
        N = b.shape[1]
        # placeholder block shapes; the pre-hook sets the chosen config's
        a_desc = TensorDescriptor.from_tensor(a, [128, 64])
        b_desc = TensorDescriptor.from_tensor(b, [64, 128])
        c_desc = TensorDescriptor.from_tensor(c, [128, 128])
        grid = lambda meta: (min(sms, triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"])),)
        kernel[grid](a_desc, b_desc, c_desc, M, N, K, NUM_SMS=sms)
        return c
    return matmul


def gemm_sweep(out, dev, check, shapes=SWEEP, dtypes=("bf16", "f16")) -> dict:
    """Correctness of every GEMM variant on ragged shapes, then the sweep: all implementations timed side by side
    (alternating over rounds: the clock drifts under sustained load), TFLOP/s and ratios to cuBLAS."""
    import torch
    tri = {}
    for name, make in (("triton", triton_matmul), ("triton_tma", triton_persistent_tma_matmul)):
        try:
            tri[name] = make()
        except Exception as e:  # Triton missing or too old: the other columns still mean something
            print(f"{name} unavailable: {e}")
    ragged = [(1000, 1000, 1000), (777, 1000, 520), (256, 384, 40), (130, 136, 72)]
    table = {}
    for dt_name, dt in (("bf16", torch.bfloat16), ("f16", torch.float16)):
        if dt_name not in dtypes:
            continue
        impls = {}
        for v in GEMM_VARIANTS:
            name = f"gemm_{dt_name}_{v}"
            if not os.path.exists(os.path.join(out, name + ".json")):
                continue
            k = _load(out, name)
            ok = True
            for (M, N, K) in ragged:
                a = torch.randn(M, K, device=dev, dtype=dt)
                b = torch.randn(K, N, device=dev, dtype=dt)
                c = torch.full((M, N), float("nan"), device=dev, dtype=dt)
                try:
                    k.launch([a, b, c])
                    torch.cuda.synchronize()
                except Exception as e:
                    print(f"  {name} {M}x{N}x{K}: LAUNCH FAILED {e}")
                    ok = False
                    break
                ok &= check(f"{name} {M}x{N}x{K}", c, a.float() @ b.float(), 1e-2)
            if ok:
                impls[v] = (lambda k: lambda a, b, c: k.launch([a, b, c]))(k)
        impls["cublas"] = lambda a, b, c: torch.matmul(a, b, out=c)
        impls.update(tri)
        tuner = _tuner(out, f"gemm_{dt_name}")
        for (M, N, K) in shapes:
            a = torch.randn(M, K, device=dev, dtype=dt)
            b = torch.randn(K, N, device=dev, dtype=dt)
            c = torch.empty(M, N, device=dev, dtype=dt)
            ref = a.float() @ b.float()
            shape_impls = dict(impls)
            tuned = _tuned(tuner, [a, b, c], f"{dt_name} {M}x{N}x{K}")
            if tuned is not None:
                shape_impls["tuned"] = lambda a, b, c: tuned()
            live = {}
            for n, f in shape_impls.items():
                c.fill_(float("nan"))
                try:
                    f(a, b, c)
                    torch.cuda.synchronize()
                except Exception as e:  # an anchor that cannot run this shape (e.g. TMA alignment) is left out
                    print(f"  {dt_name} {n} {M}x{N}x{K}: FAILED {str(e)[:300]}")
                    continue
                if check(f"{dt_name} {n} {M}x{N}x{K}", c, ref, 1e-2):
                    live[n] = f
            res = _side_by_side({n: (lambda f: lambda: f(a, b, c))(f) for n, f in live.items()},
                                2 * M * N * K)
            for n, tflops in res.items():
                table[(dt_name, (M, N, K), n)] = tflops
    print_table(table, shapes, dtypes)
    return table


#: The warp-specialized variant reported as "Tawa-WS": one fixed configuration for the whole sweep (gemm.tawa with
#: BLOCK_M=256, BLOCK_N=128: each consumer warp group computes 128x128 of a 256x128 tile). "WS best" picks per shape.
HEADLINE_WS = "ws_256x128"


def print_table(table, shapes=SWEEP, dtypes=("bf16", "f16")) -> None:
    import math
    names = sorted({k[2] for k in table})
    ws = [n for n in names if n.startswith(("ws_", "pers_", "pp_", "sk_"))]
    uni = [n for n in names if n.startswith("uni_")]
    cols = ["Tawa-WS", "WS best", "tuned", "Tawa-uniform", "cuBLAS", "Triton"]
    print(f"\nTFLOP/s; Tawa-WS = {HEADLINE_WS}; ratios to cuBLAS (torch.matmul)")
    print(f"{'dtype':5} {'M x N x K':>16} " + " ".join(f"{c:>12}" for c in cols) +
          "  | " + " ".join(f"{c:>12}" for c in cols if c != "cuBLAS"))
    for dt in dtypes:
        ratios = {c: [] for c in cols}
        vs_triton = {"WS best": [], "tuned": []}
        for shape in shapes:
            row = {"Tawa-WS": table.get((dt, shape, HEADLINE_WS), 0),
                   "WS best": max([table.get((dt, shape, n), 0) for n in ws] or [0]),
                   "tuned": table.get((dt, shape, "tuned"), 0),
                   "Tawa-uniform": max([table.get((dt, shape, n), 0) for n in uni] or [0]),
                   "cuBLAS": table.get((dt, shape, "cublas"), 0),
                   # the Triton anchor: the better of the tutorial-style and the persistent TMA matmul
                   "Triton": max(table.get((dt, shape, "triton"), 0), table.get((dt, shape, "triton_tma"), 0))}
            if not row["cuBLAS"]:
                continue
            for c in cols:
                ratios[c].append(row[c] / row["cuBLAS"] if row[c] else float("nan"))
            for c in vs_triton:
                vs_triton[c].append(row[c] / row["Triton"] if row["Triton"] and row[c] else float("nan"))
            print(f"{dt:5} {'x'.join(map(str, shape)):>16} " + " ".join(f"{row[c]:12.0f}" for c in cols) +
                  "  | " + " ".join(f"{ratios[c][-1]:12.3f}" for c in cols if c != "cuBLAS"))
        gm = {c: math.exp(sum(math.log(r) for r in ratios[c]) / len(ratios[c]))
              if ratios[c] and all(r == r for r in ratios[c]) else float("nan") for c in cols}
        print(f"{dt:5} {'geomean':>16} " + " " * 13 * len(cols) +
              "  | " + " ".join(f"{gm[c]:12.3f}" for c in cols if c != "cuBLAS"))
        for c, rs in vs_triton.items():
            if rs and all(r == r for r in rs):
                print(f"{dt:5} {c} / Triton (best of tutorial and persistent TMA): " +
                      " ".join(f"{r:.3f}" for r in rs) +
                      f"; geomean {math.exp(sum(math.log(r) for r in rs) / len(rs)):.3f}")
    print("\nper variant TFLOP/s (" + ", ".join("x".join(map(str, s)) for s in shapes) + "):")
    for dt in dtypes:
        for n in names:
            print(f"  {dt} {n:12} " + " ".join(f"{table.get((dt, s, n), 0):6.0f}" for s in shapes))


def rotated(items, r: int) -> list:
    """`items` in the order of round `r`: each round starts one later, so that no implementation of a
    side-by-side timing always runs right after the same one (a GPU's clocks follow the previous kernel's power)."""
    items = list(items)
    return items[r % len(items):] + items[:r % len(items)] if items else items


def _side_by_side(impls: dict, flops: float, rounds: int = 5) -> dict:
    """TFLOP/s of each implementation, timed alternately over rounds (median, the order rotating)."""
    times = {n: [] for n in impls}
    for r in range(rounds):
        for n, f in rotated(impls.items(), r):
            times[n].append(_time(f, reps=20, rounds=1))
    return {n: flops / sorted(t)[len(t) // 2] / 1e9 for n, t in times.items()}


#: The fused kernels' side-by-side results of this run, as `_report` printed them (for --json and the plot).
FUSED_RESULTS: list = []


def _report(title: str, shape, res: dict, anchors: list) -> None:
    FUSED_RESULTS.append({"kernel": title, "shape": list(shape), "tflops": res, "anchors": anchors})
    print(f"{title} {'x'.join(map(str, shape))}: " + ", ".join(f"{n} {v:.0f}" for n, v in res.items()))
    tawa = {n: v for n, v in res.items() if n not in anchors}
    if tawa:
        best = max(tawa, key=tawa.get)
        print(f"  best Tawa {best}: " + ", ".join(f"{tawa[best] / res[a]:.3f}x {a}" for a in anchors if a in res))


def _checked(loaded: dict, prefix: str, args: list, out, ref, label: str, check) -> dict:
    """name -> launch of every loaded variant whose name starts with `prefix` and whose output (`out`, poisoned
    first) matches `ref`."""
    import torch
    impls = {}
    for n, k in loaded.items():
        if n.startswith(prefix):
            out.fill_(float("nan"))
            k.launch(args + [out])
            torch.cuda.synchronize()
            if check(f"{n} {label}", out, ref, 2e-2):
                impls[n] = (lambda k: lambda: k.launch(args + [out]))(k)
    return impls


def _add_tuned(impls: dict, name: str, tuner, args: list, ref, label: str, check) -> None:
    """Add the tuner's choice for `args` (its last one the output, poisoned first) to `impls` if it is correct."""
    import torch
    launch = _tuned(tuner, args, label)
    if launch is not None:
        args[-1].fill_(float("nan"))
        launch()
        torch.cuda.synchronize()
        if check(f"{name} {label}", args[-1], ref, 2e-2):
            impls[name] = launch


def fused_sweep(out, dev, check) -> None:
    """SwiGLU dual GEMM, linear + bias + GELU + residual, FP8 GEMM: each Tawa variant checked, then timed side by
    side with its anchors (TFLOP/s of the GEMM work; the anchors do the same math unfused)."""
    import torch
    import torch.nn.functional as F
    bf = torch.bfloat16
    loaded = {n: _load(out, n) for n in FUSED_VARIANTS if os.path.exists(os.path.join(out, n + ".json"))}
    swiglu_tuner, linear_tuner = _tuner(out, "swiglu"), _tuner(out, "linear")

    for (M, N, K) in [(4096, 14336, 4096), (8192, 14336, 4096), (1000, 1000, 520)]:
        a = torch.randn(M, K, device=dev, dtype=bf)
        b1, b2 = (torch.randn(K, N, device=dev, dtype=bf) / K ** 0.5 for _ in range(2))
        bcat = torch.cat([b1, b2], dim=1)
        c = torch.empty(M, N, device=dev, dtype=bf)
        g, u = a.float() @ b1.float(), a.float() @ b2.float()
        ref = F.silu(g) * u
        impls = _checked(loaded, "swiglu", [a, b1, b2], c, ref, f"{M}x{N}x{K}", check)
        _add_tuned(impls, "swiglu_tuned", swiglu_tuner, [a, b1, b2, c], ref, f"{M}x{N}x{K}", check)
        if M < 2048:
            continue
        impls["torch_unfused"] = lambda: F.silu(a @ b1) * (a @ b2)

        def concat():
            h = a @ bcat
            return F.silu(h[:, :N]) * h[:, N:]
        impls["torch_concat"] = concat
        _report("swiglu", (M, N, K), _side_by_side(impls, 4 * M * N * K), ["torch_unfused", "torch_concat"])

    for (M, N, K) in [(4096, 14336, 4096), (8192, 8192, 4096), (1000, 1000, 520)]:
        x = torch.randn(M, K, device=dev, dtype=bf)
        w = torch.randn(N, K, device=dev, dtype=bf) / K ** 0.5
        bias = torch.randn(N, device=dev, dtype=bf)
        r = torch.randn(M, N, device=dev, dtype=bf)
        y = torch.empty(M, N, device=dev, dtype=bf)
        ref = F.gelu(x.float() @ w.float().T + bias.float(), approximate="tanh") + r.float()
        impls = _checked(loaded, "linear", [x, w, bias, r], y, ref, f"{M}x{N}x{K}", check)
        _add_tuned(impls, "linear_tuned", linear_tuner, [x, w, bias, r, y], ref, f"{M}x{N}x{K}", check)
        if M < 2048:
            continue
        impls["cublas_gemm"] = lambda: torch.matmul(x, w.T, out=y)
        impls["torch_unfused"] = lambda: F.gelu(F.linear(x, w, bias), approximate="tanh") + r
        _report("linear+bias+gelu+residual", (M, N, K), _side_by_side(impls, 2 * M * N * K),
                ["cublas_gemm", "torch_unfused"])

    for (M, N, K) in [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096), (1000, 1008, 1024)]:
        a = (torch.randn(M, K, device=dev) * 0.5).to(torch.float8_e4m3fn)
        b = (torch.randn(N, K, device=dev) * 0.5).to(torch.float8_e4m3fn)
        sa, sb = torch.rand(M, device=dev) + 0.5, torch.rand(N, device=dev) + 0.5
        c = torch.empty(M, N, device=dev, dtype=bf)
        ref = (a.float() @ b.float().T) * sa[:, None] * sb[None, :]
        impls = _checked(loaded, "fp8", [a, b, sa, sb], c, ref, f"{M}x{N}x{K}", check)
        if M < 2048:
            continue
        sa2, sb2 = sa[:, None].contiguous(), sb[None, :].contiguous()
        one = torch.tensor(1.0, device=dev)
        impls["scaled_mm_rowwise"] = lambda: torch._scaled_mm(a, b.T, scale_a=sa2, scale_b=sb2, out_dtype=bf)
        impls["scaled_mm_tensor"] = lambda: torch._scaled_mm(a, b.T, scale_a=one, scale_b=one, out_dtype=bf)
        _report("fp8", (M, N, K), _side_by_side(impls, 2 * M * N * K), ["scaled_mm_rowwise", "scaled_mm_tensor"])


def run(out: str, only: str = "all", json_out: str | None = None, plot: str | None = None) -> None:
    import torch
    torch.manual_seed(0)
    dev = torch.device("cuda")
    print("GPU:", torch.cuda.get_device_name())

    def check(name, got, ref, tol):
        err = ((got.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-6)).item()
        ok = err < tol and not torch.isnan(got.float()).any().item()
        print(f"  {name}: rel err {err:.2e} {'OK' if ok else 'FAIL'}")
        return ok

    table = {}
    if only in ("all", "gemm"):
        table = gemm_sweep(out, dev, check)
    if only == "waves":
        table = gemm_sweep(out, dev, check, WAVES, ("bf16",))
    if only in ("all", "fused"):
        fused_sweep(out, dev, check)
    raw = {"gpu": torch.cuda.get_device_name(), "gemm": [{"dtype": k[0], "shape": list(k[1]), "impl": k[2],
                                                          "tflops": v} for k, v in table.items()],
           "fused": FUSED_RESULTS}
    if json_out:
        with open(json_out, "w") as f:
            json.dump(raw, f, indent=1)
        print(f"raw numbers written to {json_out}")
    write_plot(raw, plot or os.path.join(out, "gemm.png"))

    if os.path.exists(os.path.join(out, "gemm_bias_gelu.json")):
        print("gemm_bias_gelu")
        k = _load(out, "gemm_bias_gelu")
        for (M, N, K) in [(1000, 1000, 1000), (4096, 4096, 4096)]:
            a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
            b = torch.randn(K, N, device=dev, dtype=torch.bfloat16)
            bias = torch.randn(N, device=dev, dtype=torch.float32)
            c = torch.full((M, N), float("nan"), device=dev, dtype=torch.bfloat16)
            k.launch([a, b, bias, c])
            torch.cuda.synchronize()
            x = a.float() @ b.float() + bias
            ref = torch.nn.functional.gelu(x, approximate="tanh")
            check(f"{M}x{N}x{K}", c, ref, 2e-2)
        t = _time(lambda: k.launch([a, b, bias, c]))
        print(f"  timing 4096^3: {2 * 4096 ** 3 / t / 1e9:.0f} TFLOP/s")

    if os.path.exists(os.path.join(out, "gemm_fp8.json")):
        print("gemm_fp8")
        k = _load(out, "gemm_fp8")
        for (M, N, K) in [(1000, 1008, 1024), (4096, 4096, 4096)]:
            a = (torch.randn(M, K, device=dev) * 0.5).to(torch.float8_e4m3fn)
            b = (torch.randn(N, K, device=dev) * 0.5).to(torch.float8_e4m3fn)
            sa = torch.rand(M, device=dev) + 0.5
            sb = torch.rand(N, device=dev) + 0.5
            c = torch.full((M, N), float("nan"), device=dev, dtype=torch.bfloat16)
            try:
                k.launch([a, b, sa, sb, c])
                torch.cuda.synchronize()
            except Exception as e:
                print("  LAUNCH FAILED", e)
                break
            ref = (a.float() @ b.float().T) * sa[:, None] * sb[None, :]
            check(f"{M}x{N}x{K}", c, ref, 2e-2)
        else:
            t = _time(lambda: k.launch([a, b, sa, sb, c]))
            sa1 = torch.tensor(1.0, device=dev)
            tr = _time(lambda: torch._scaled_mm(a, b.T, scale_a=sa1, scale_b=sa1, out_dtype=torch.bfloat16))
            print(f"  timing 4096^3: tawa {2 * 4096 ** 3 / t / 1e9:.0f} TFLOP/s, _scaled_mm (per-tensor) "
                  f"{2 * 4096 ** 3 / tr / 1e9:.0f} TFLOP/s")

    if os.path.exists(os.path.join(out, "softmax.json")):
        print("softmax")
        k = _load(out, "softmax")
        with open(os.path.join(out, "softmax.json")) as f:
            params = json.load(f)["params"]
        print("  params:", params)
        for (M, N) in [(123, 781), (4096, 1024), (1, 5)]:
            x = torch.randn(M, N, device=dev)
            y = torch.full((M, N), float("nan"), device=dev)
            try:
                k.launch([x, y])
                torch.cuda.synchronize()
            except Exception as e:
                print("  LAUNCH FAILED", e)
                break
            check(f"{M}x{N}", y, torch.softmax(x, -1), 1e-4)

    for name in ("flash_attention", "flash_attention_causal"):
        if not os.path.exists(os.path.join(out, name + ".json")):
            continue
        print(name)
        causal = name.endswith("causal")
        k = _load(out, name)
        failed = False
        for (Z, H, S, D) in [(1, 2, 1000, 128), (2, 3, 200, 128), (4, 16, 4096, 128)]:
            q, kk, v = (torch.randn(Z, H, S, D, device=dev, dtype=torch.bfloat16) for _ in range(3))
            o = torch.full_like(q, float("nan"))
            scale = D ** -0.5
            try:
                k.launch([q, kk, v, o, scale])
                torch.cuda.synchronize()
            except Exception as e:
                print("  LAUNCH FAILED", e)
                failed = True
                break
            ref = torch.nn.functional.scaled_dot_product_attention(q.float(), kk.float(), v.float(),
                                                                   is_causal=causal)
            check(f"{Z}x{H}x{S}x{D}", o, ref, 2e-2)
        if not failed:
            t = _time(lambda: k.launch([q, kk, v, o, scale]))
            tr = _time(lambda: torch.nn.functional.scaled_dot_product_attention(q, kk, v, is_causal=causal))
            fl = 4 * Z * H * S * S * D / (2 if causal else 1)
            print(f"  timing {Z}x{H}x{S}x{D}: tawa {fl / t / 1e9:.0f} TFLOP/s, torch SDPA {fl / tr / 1e9:.0f} "
                  f"TFLOP/s")


def write_plot(raw: dict, path: str) -> None:
    """Left: the tuned GEMM's TFLOP/s over cuBLAS's and over Triton's (the better of its two matmuls) per sweep
    shape and dtype; right: the best Tawa variant of each fused kernel over each of its anchors."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # matplotlib missing: the printed tables are the result
        print(f"no plot ({type(e).__name__}: {e})")
        return
    gemm = {(r["dtype"], tuple(r["shape"]), r["impl"]): r["tflops"] for r in raw["gemm"]}
    shapes = list(dict.fromkeys(tuple(r["shape"]) for r in raw["gemm"]))       # the sweep's, in its order
    if raw["fused"]:
        fig, (left, right) = plt.subplots(1, 2, figsize=(16, 6.5), gridspec_kw={"width_ratios": [3, 2]})
    else:                   # a GEMM sweep alone (`--only gemm` or `waves`)
        fig, left = plt.subplots(1, 1, figsize=(10, 6.5))
        right = None
    labels, bars = [], {"tuned / cuBLAS": [], "tuned / Triton": []}
    for dt in ("bf16", "f16"):
        for shape in shapes:
            tuned, cublas = gemm.get((dt, shape, "tuned")), gemm.get((dt, shape, "cublas"))
            triton = max(gemm.get((dt, shape, "triton"), 0), gemm.get((dt, shape, "triton_tma"), 0))
            if not (tuned and cublas):
                continue
            labels.append(f"{dt} {'x'.join(map(str, shape))}")
            bars["tuned / cuBLAS"].append(tuned / cublas)
            bars["tuned / Triton"].append(tuned / triton if triton else 0)
    for i, (name, values) in enumerate(bars.items()):
        drawn = left.bar([x + 0.4 * i for x in range(len(values))], values, width=0.4, label=name)
        left.bar_label(drawn, fmt="%.2f", fontsize=5)
    left.set_xticks([x + 0.2 for x in range(len(labels))], labels, fontsize=7, rotation=45, ha="right")
    left.axhline(1.0, color="gray", lw=0.8)
    left.set_ylim(0.6, max([1.1] + [v for vs in bars.values() for v in vs]) * 1.05)
    left.set_ylabel("ratio of TFLOP/s")
    left.set_title(f"GEMM, examples/gemm.tawa tuned ({raw['gpu']})")
    left.legend(fontsize=8)
    names, ratios = [], []
    for r in raw["fused"] if right is not None else ():
        tawa = {n: v for n, v in r["tflops"].items() if n not in r["anchors"]}
        if not tawa:
            continue
        best = max(tawa.values())
        for a in r["anchors"]:
            if a in r["tflops"]:
                names.append(f"{r['kernel'].split('+')[0]} {'x'.join(map(str, r['shape']))} / {a}")
                ratios.append(best / r["tflops"][a])
    if right is not None:
        right.bar_label(right.bar(range(len(ratios)), ratios, color="tab:green"), fmt="%.2f", fontsize=6)
        right.set_ylim(0.6, max([1.1] + ratios) * 1.05)
        right.set_xticks(range(len(names)), names, fontsize=7, rotation=45, ha="right")
        right.axhline(1.0, color="gray", lw=0.8)
        right.set_title("fused kernels: best Tawa variant / anchor")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    print(f"plot written to {path}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("step", nargs="?", default="all", choices=["build", "run", "all", "plot"],
                    help="plot: redraw the plot from a --json file of an earlier run")
    ap.add_argument("--out", default=os.path.join(ROOT, ".carry"))
    ap.add_argument("--kernels", default="", help="build only the kernels whose name matches this regex")
    ap.add_argument("--only", default="all", choices=["all", "gemm", "fused", "waves"],
                    help="run only this sweep (waves: few-wave bf16 shapes, where stream-K shares the last one)")
    ap.add_argument("--json", default=None, metavar="OUT", help="write the raw numbers as JSON to OUT")
    ap.add_argument("--plot", default=None, metavar="PATH", help="PNG plot path (default DIR/gemm.png)")
    ns = ap.parse_args()
    if ns.step in ("build", "all"):
        build(ns.out, ns.kernels)
    if ns.step in ("run", "all"):
        run(ns.out, ns.only, ns.json, ns.plot)
    if ns.step == "plot":
        with open(ns.json) as f:
            write_plot(json.load(f), ns.plot or os.path.join(ns.out, "gemm.png"))
