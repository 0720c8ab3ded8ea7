"""FlashAttention forward through the Tawa GPU backend: correctness on ragged shapes, then speed against torch SDPA
(cuDNN and FlashAttention-2 backends) and a Triton fused-attention kernel.

Two steps, so that compilation (which needs MLIR) and execution (which needs a Hopper GPU) may run on different
machines:

    python bench/bench_attention.py build [--out DIR] [--variants REGEX] [--shapes BxHxSxD,...]
        compile the variants of examples/flash_attention.tawa, write DIR/<name>.json + .cubin, and (unless REGEX
        does not match "tuned") the example's declared tuning space per head dim and causal setting into
        DIR/tuned-cache
    python bench/bench_attention.py run   [--out DIR] [--variants REGEX] [--quick] [--json OUT] [--plot PATH]
                                          [--shapes BxHxSxD,...]
        load them, check against torch, time them next to the anchors, print Markdown tables (on SHAPES, or the
        shapes given)

`python bench/bench_attention.py` (or `all`) does both on one machine. DIR defaults to `.carry/` in the repository
root. The run step imports neither `mlir` nor `lark`.

Variants (VARIANTS, named fa_d{HEAD_DIM}_c{CAUSAL}_n{BLOCK_N}_{ws|uni|...}, BLOCK_M = 128 throughout): head dim 64,
96 and 128 (`--shapes` adds the head dims of its shapes), causal 0 and 1, BLOCK_N 64 and 128, warp specialization
auto ("ws": the compiler specializes where it applies; the build prints the thread count, 384 = producer + 2
consumer warp groups) and off ("uni": the uniform-warp software pipeline, two warp groups).

The "tuned" column is `tawa.autotune` over the example's declared space, tuned on each timed shape in the same
process (from DIR/tuned-cache, so the run step needs no compiler). The "launched" column is what
`tawa.compile(example, HEAD_DIM=D, CAUSAL=c)` launches without tuning: the kernel's own configuration or the
variant its per-shape rule picks for the shape (`tawa.autotune.launch_defaults`; build compiles them for SHAPES,
or the shapes given, into DIR/launch-cache).

Correctness comes before timing: every variant on the ragged shapes (RAGGED) of its head dim and causal setting
and on every timed shape (SHAPES) it serves, with fresh bf16 torch.randn inputs and a NaN-poisoned output; the
reference is float64 softmax attention for small problems and torch SDPA (math backend, float32, in chunks) for big
ones; rel err (Frobenius) < 2e-2. A variant that fails any check is not timed. The anchors are checked on the timed
shapes the same way. All implementations are timed in one process on the same inputs, alternating over rounds
(CUDA events; the median round). FLOPs: 4 * B * H * S^2 * D, halved when causal.
"""
import argparse
import json
import math
import os
import re
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# None of these needs MLIR: CompiledKernel + GpuLauncher, CUDA events.
from bench_gemm import _load, _time, rotated  # noqa: E402

SOURCE = os.path.join(ROOT, "examples", "flash_attention.tawa")
BLOCK_M = 128
HEAD_DIMS = (64, 96, 128)
TOL = 2e-2


def variant_name(d: int, causal: int, block_n: int, ws) -> str:
    kind = ws if isinstance(ws, str) else ("ws" if ws else "uni")
    return f"fa_d{d}_c{causal}_n{block_n}_{kind}"


#: name -> (constants, compile options). "ws": warp_specialize=None (auto; specializes: 1 producer + 2 consumer warp
#: groups, 384 threads); "uni": warp_specialize=False with two warp groups (num_warps=8, 64 query rows each, the
#: same math warp groups as WS; with 4 warps the d128/n128 kernel spills and ptxas serializes its wgmmas, C7512).
VARIANTS = {}


def define_variants(head_dims) -> None:
    """Add the variants of these head dims to VARIANTS (the defaults at import; `--shapes` adds its own)."""
    for _d in head_dims:
        for _c in (0, 1):
            for _n in (64, 128):
                for _ws in (True, False):
                    VARIANTS[variant_name(_d, _c, _n, _ws)] = (
                        {"HEAD_DIM": _d, "BLOCK_M": BLOCK_M, "BLOCK_N": _n, "CAUSAL": _c},
                        {"warp_specialize": None} if _ws else {"warp_specialize": False, "num_warps": 8})
                # Ablations: warp specialized with the consumer ping-pong turned on ("pp"), or the intra-warpgroup
                # overlap turned off ("nola": no lookahead).
                VARIANTS[variant_name(_d, _c, _n, "pp")] = (
                    {"HEAD_DIM": _d, "BLOCK_M": BLOCK_M, "BLOCK_N": _n, "CAUSAL": _c},
                    {"warp_specialize": None, "consumer_pingpong": True})
                VARIANTS[variant_name(_d, _c, _n, "nola")] = (
                    {"HEAD_DIM": _d, "BLOCK_M": BLOCK_M, "BLOCK_N": _n, "CAUSAL": _c},
                    {"warp_specialize": None, "consumer_lookahead": False})
        # Key blocks that are not powers of two: FlashAttention-3's 176 at head dim 128 (two slots each of K and V
        # fit beside Q, in rings of their own), and 80 at head dim 64 with two CTAs per SM ("two": forced, the
        # compiler's estimate keeps one).
        for _c in (0, 1):
            if _d == 128:
                VARIANTS[variant_name(_d, _c, 176, True)] = (
                    {"HEAD_DIM": _d, "BLOCK_M": BLOCK_M, "BLOCK_N": 176, "CAUSAL": _c}, {"warp_specialize": None})
            elif _d == 64:
                VARIANTS[variant_name(_d, _c, 80, "two")] = (
                    {"HEAD_DIM": _d, "BLOCK_M": BLOCK_M, "BLOCK_N": 80, "CAUSAL": _c},
                    {"warp_specialize": None, "ctas_per_sm": 2})
            elif _d > 128:
                # above head dim 128 a 128-key slot of K and V leaves room for one slot beside Q: key blocks of
                # 64 to 96 keep two or more (FlashAttention-3 takes 80 at head dim 256)
                for _n in (80, 96, 112):
                    VARIANTS[variant_name(_d, _c, _n, True)] = (
                        {"HEAD_DIM": _d, "BLOCK_M": BLOCK_M, "BLOCK_N": _n, "CAUSAL": _c}, {"warp_specialize": None})
        # The schedules side by side: one query block per CTA ("tile") and persistent CTAs looping over query blocks,
        # Q through a ring of its own ("pers").
        for _c in (0, 1):
            for _n in (64, 128):
                for _s in ("tile", "pers"):
                    VARIANTS[variant_name(_d, _c, _n, _s)] = (
                        {"HEAD_DIM": _d, "BLOCK_M": BLOCK_M, "BLOCK_N": _n, "CAUSAL": _c},
                        {"warp_specialize": None, "schedule": "persistent" if _s == "pers" else "tile"})
        # 192-row query blocks: three consumer warp groups of 64 rows each (FlashAttention-3's tile at head dim 64)
        for _c in (0, 1):
            for _n in (64, 128):
                VARIANTS[variant_name(_d, _c, _n, "m192")] = (
                    {"HEAD_DIM": _d, "BLOCK_M": 192, "BLOCK_N": _n, "CAUSAL": _c}, {"warp_specialize": None})
                VARIANTS[variant_name(_d, _c, _n, "m192t")] = (
                    {"HEAD_DIM": _d, "BLOCK_M": 192, "BLOCK_N": _n, "CAUSAL": _c},
                    {"warp_specialize": None, "schedule": "tile"})
        if _d == 64:
            # Ablation of two CTAs per SM: at head dim 64 with BLOCK_N 64 the compiler keeps two CTAs resident per SM
            # ("ws"); "one" holds the same kernel to one (ctas_per_sm=1).
            for _c in (0, 1):
                VARIANTS[variant_name(_d, _c, 64, "one")] = (
                    {"HEAD_DIM": _d, "BLOCK_M": BLOCK_M, "BLOCK_N": 64, "CAUSAL": _c},
                    {"warp_specialize": None, "ctas_per_sm": 1})



define_variants(HEAD_DIMS)


#: Timed shapes (B, H, S, D); each is run non-causal and causal.
SHAPES = [(4, 16, 4096, 128), (2, 16, 8192, 128), (8, 16, 2048, 64)]
#: Correctness-only shapes (ragged S, tiny S, odd head counts); each non-causal and causal.
RAGGED = [(1, 2, 1000, 128), (1, 3, 77, 64), (2, 1, 1, 128), (1, 1, 129, 64), (1, 2, 300, 96), (2, 1, 1, 96)]
#: The Tawa columns of the tables, per (shape, causal): the variant of that head dim and causal setting.
TAWA_COLS = [("WS n64", 64, True), ("WS n128", 128, True), ("uni n64", 64, False), ("uni n128", 128, False),
             ("WS+pp n64", 64, "pp"), ("WS+pp n128", 128, "pp"),
             ("WS-nola n64", 64, "nola"), ("WS-nola n128", 128, "nola"),
             ("WS 1 CTA/SM n64", 64, "one"),
             ("tile n64", 64, "tile"), ("tile n128", 128, "tile"), ("pers n64", 64, "pers"), ("pers n128", 128, "pers"),
             ("M192 n64", 64, "m192"), ("M192 n128", 128, "m192"), ("M192 tile n64", 64, "m192t"),
             ("M192 tile n128", 128, "m192t"), ("WS n176", 176, True), ("WS 2 CTAs/SM n80", 80, "two"),
             ("WS n80", 80, True), ("WS n96", 96, True), ("WS n112", 112, True)]
ANCHORS = ["cudnn", "fa2", "triton"]
ANCHOR_LABEL = {"cudnn": "cuDNN", "fa2": "FA2", "triton": "Triton"}
#: Problems with at most this many score elements (B * H * S * S) get the float64 reference.
SMALL_SCORES = 1 << 26


def flops(B, H, S, D, causal) -> float:
    f = 4.0 * B * H * S * S * D
    return f / 2 if causal else f


def select(regex):
    return [n for n in VARIANTS if regex is None or re.search(regex, n)]


def parse_name(name):
    m = re.fullmatch(r"fa_d(\d+)_c([01])_n(\d+)_(ws|uni|pp|nola|one|two|tile|pers|m192|m192t)", name)
    return int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4) != "uni"


# -- build -------------------------------------------------------------------------------------------------------

def build(out: str, regex=None) -> None:
    from tawa.compiler import compile_source
    from tawa.options import CompileOptions
    os.makedirs(out, exist_ok=True)
    src = open(SOURCE).read()
    total, failed = time.time(), []
    for name in select(regex):
        consts, opts = VARIANTS[name]
        t = time.time()
        try:
            k = compile_source(src, SOURCE, CompileOptions(constants=dict(consts), **opts))
        except Exception as e:  # report and go on: one failing kernel must not hide the others
            print(f"{name}: BUILD FAILED: {str(e)[:400]}")
            failed.append(name)
            continue
        d = k.to_json()
        d.pop("ir", None)
        with open(os.path.join(out, name + ".json"), "w") as f:
            json.dump(d, f)
        with open(os.path.join(out, name + ".cubin"), "wb") as f:
            f.write(k.cubin)
        print(f"{name}: {time.time() - t:.2f}s threads={k.num_threads} smem={k.shared_bytes} notes={k.notes}")
        for n in k.notes:
            if "C75" in n:
                print(f"  WARNING {name}: ptxas performance note (wgmma serialization?): {n}")
    print(f"built {len(select(regex)) - len(failed)} attention kernels in {time.time() - total:.1f}s"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    if regex is None or re.search(regex, "launched"):
        # What tawa.compile launches for each timed shape, for the "launched" column of `run`.
        for d in HEAD_DIMS:
            for c in (0, 1):
                kernel = _launched_build(out, d, c)
                for (B, H, S, D) in [shape for shape in SHAPES if shape[3] == d]:
                    q = _Shape(B, H, S, D)
                    variant = kernel.variant_for(q, q, q, q, D ** -0.5)
                    print(f"launched d{d} c{c} {B}x{H}x{S}x{D}: "
                          f"{'own' if variant is kernel else 'variant'} {variant.compiled.constants}")
    if regex is None or re.search(regex, "tuned"):
        # The example's declared space per head dim and causal setting, for the "tuned" column of `run`.
        os.environ["TAWA_CACHE_DIR"] = _tuned_cache(out)
        import tawa
        for d in HEAD_DIMS:
            for c in (0, 1):
                outcomes = tawa.autotune.compile_space(SOURCE, show_progress=False, HEAD_DIM=d, CAUSAL=c)
                # the kernel of the fixed constants alone, whose traits the tuner's launch-default candidate reads
                tawa.compile(SOURCE, HEAD_DIM=d, CAUSAL=c)
                print(f"tuned d{d} c{c}: {sum(o.kernel is not None for o in outcomes)} of {len(outcomes)} "
                      f"candidates compiled")


def _tuned_cache(out: str) -> str:
    return os.path.join(out, "tuned-cache")


def _launch_cache(out: str) -> str:
    return os.path.join(out, "launch-cache")


class _Shape:
    """An argument's shape alone: what the per-shape rule reads to pick a variant at build time."""

    def __init__(self, *shape):
        self.shape = shape


def _launched_build(out: str, head_dim: int, causal: int):
    os.makedirs(_launch_cache(out), exist_ok=True)
    return _launched(out, head_dim, causal)


def _launched(out: str, head_dim: int, causal: int):
    """`tawa.compile` of the example at this head dim and causal setting, from the cache `build` filled (None where
    it did not): the "launched" column, the kernel a user gets without tuning, with its per-shape variants."""
    if not os.path.isdir(_launch_cache(out)):
        return None
    os.environ["TAWA_CACHE_DIR"] = _launch_cache(out)
    import tawa
    return tawa.compile(SOURCE, HEAD_DIM=head_dim, CAUSAL=causal)


def _tuner(out: str, head_dim: int, causal: int):
    """`tawa.autotune` over the example's declared space from the cache `build` filled (None where it did not):
    the "tuned" column, tuned on each shape in this process (`TAWA_AUTOTUNE=force`)."""
    if not os.path.isdir(_tuned_cache(out)):
        return None
    os.environ["TAWA_CACHE_DIR"] = _tuned_cache(out)
    os.environ["TAWA_AUTOTUNE"] = "force"
    import tawa
    return tawa.autotune(SOURCE, show_progress=False, HEAD_DIM=head_dim, CAUSAL=causal)


# -- references and checks (torch; CPU-testable) --------------------------------------------------------------------

def reference_f64(q, k, v, causal, scale):
    """softmax(Q K^T * scale [col <= row]) V in float64 (for small problems)."""
    import torch
    q, k, v = q.double(), k.double(), v.double()
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    if causal:
        S = q.shape[-2]
        rows = torch.arange(S, device=q.device)[:, None]
        cols = torch.arange(k.shape[-2], device=q.device)[None, :]
        s = s.masked_fill(~(cols <= rows), float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), v)


def reference_sdpa_f32(q, k, v, causal, scale, max_scores=1 << 28):
    """torch SDPA, math backend, float32, in chunks of (batch, heads) of at most `max_scores` score elements."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    B, H, S, _ = q.shape
    out = torch.empty(q.shape, device=q.device, dtype=torch.float32)
    hc = max(1, min(H, max_scores // max(S * S, 1)))
    with sdpa_kernel(SDPBackend.MATH):
        for b in range(B):
            for h in range(0, H, hc):
                sl = (b, slice(h, h + hc))
                out[sl] = F.scaled_dot_product_attention(q[sl].float(), k[sl].float(), v[sl].float(),
                                                         is_causal=bool(causal), scale=scale)
    return out


def reference(q, k, v, causal, scale):
    B, H, S, _ = q.shape
    if B * H * S * S <= SMALL_SCORES:
        return reference_f64(q, k, v, causal, scale)
    return reference_sdpa_f32(q, k, v, causal, scale)


def rel_err(got, ref) -> float:
    """||got - ref|| / ||ref|| in float64; inf when got has a NaN or Inf (the output is poisoned with NaN)."""
    import torch
    g = got.double()
    if not torch.isfinite(g).all().item():
        return float("inf")
    r = ref.double()
    return ((g - r).norm() / r.norm().clamp_min(1e-12)).item()


class Checks:
    """Prints PASS/FAIL per check and keeps them for the JSON."""

    def __init__(self):
        self.records = []

    def __call__(self, label, got, ref, tol=TOL, error=None) -> bool:
        if error is not None:
            print(f"  {label}: FAIL ({error})")
            self.records.append({"check": label, "ok": False, "error": error})
            return False
        err = rel_err(got, ref)
        ok = err < tol
        print(f"  {label}: rel err {err:.2e} {'PASS' if ok else 'FAIL'}")
        self.records.append({"check": label, "ok": ok, "rel_err": err})
        return ok


def shape_str(shape, causal) -> str:
    return f"{'x'.join(map(str, shape))}{' causal' if causal else ''}"


# -- Triton anchor ------------------------------------------------------------------------------------------------
# Defined at module level (when Triton imports) so that the jit functions see `tl` and each other as globals.

_TRITON_ERROR = None
try:
    import triton
    import triton.language as tl

    @triton.jit
    def _tri_attn_inner(acc, l_i, m_i, q, k_base, v_base, stride_ks, stride_vs, start, end, rows, S, qk_scale,
                        D: tl.constexpr, BN: tl.constexpr, MASK: tl.constexpr):
        # MASK: 0 = none (all keys in range), 1 = keys < S, 2 = keys < S and causal (col <= row)
        offs_d = tl.arange(0, D)
        for start_n in range(start, end, BN):
            start_n = tl.multiple_of(start_n, BN)
            cols = start_n + tl.arange(0, BN)
            kp = k_base + cols[None, :] * stride_ks + offs_d[:, None]
            vp = v_base + cols[:, None] * stride_vs + offs_d[None, :]
            if MASK == 0:
                kt = tl.load(kp)
                vv = tl.load(vp)
            else:
                kt = tl.load(kp, mask=cols[None, :] < S, other=0.0)
                vv = tl.load(vp, mask=cols[:, None] < S, other=0.0)
            qk = tl.dot(q, kt) * qk_scale
            if MASK == 1:
                qk = tl.where(cols[None, :] < S, qk, float("-inf"))
            if MASK == 2:
                qk = tl.where((cols[None, :] < S) & (cols[None, :] <= rows[:, None]), qk, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            p = tl.math.exp2(qk - m_new[:, None])
            alpha = tl.math.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None]
            acc = tl.dot(p.to(vv.dtype), vv, acc)
            m_i = m_new
        return acc, l_i, m_i

    # BLOCK_N <= BLOCK_M and BLOCK_M % BLOCK_N == 0 in every config (the causal split below relies on it).
    _TRI_CONFIGS = [triton.Config({"BM": bm, "BN": bn}, num_warps=w, num_stages=s)
                    for bm, bn, w, s in ((128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 2), (128, 128, 8, 3),
                                         (128, 64, 4, 4), (64, 64, 4, 4))]

    @triton.autotune(configs=_TRI_CONFIGS, key=["S", "D", "CAUSAL"])
    @triton.jit
    def _tri_attn_fwd(Q, K, V, O, sm_scale, H, S,
                      sqz, sqh, sqs, skz, skh, sks, svz, svh, svs, soz, soh, sos,
                      D: tl.constexpr, CAUSAL: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
        pid_m = tl.program_id(0)
        off_hz = tl.program_id(1)
        z = off_hz // H
        h = off_hz % H
        q_base = Q + z.to(tl.int64) * sqz + h.to(tl.int64) * sqh
        k_base = K + z.to(tl.int64) * skz + h.to(tl.int64) * skh
        v_base = V + z.to(tl.int64) * svz + h.to(tl.int64) * svh
        o_base = O + z.to(tl.int64) * soz + h.to(tl.int64) * soh
        rows = pid_m * BM + tl.arange(0, BM)
        offs_d = tl.arange(0, D)
        q = tl.load(q_base + rows[:, None] * sqs + offs_d[None, :], mask=rows[:, None] < S, other=0.0)
        qk_scale = sm_scale * 1.4426950408889634
        m_i = tl.full([BM], float("-inf"), tl.float32)
        l_i = tl.zeros([BM], tl.float32)
        acc = tl.zeros([BM, D], tl.float32)
        if CAUSAL:
            # off the diagonal: keys [0, pid_m * BM), all < S and <= every row of the block; then the diagonal
            lo = pid_m * BM
            acc, l_i, m_i = _tri_attn_inner(acc, l_i, m_i, q, k_base, v_base, sks, svs, 0, lo, rows, S,
                                            qk_scale, D, BN, 0)
            acc, l_i, m_i = _tri_attn_inner(acc, l_i, m_i, q, k_base, v_base, sks, svs, lo,
                                            tl.minimum(lo + BM, S), rows, S, qk_scale, D, BN, 2)
        else:
            full = (S // BN) * BN
            acc, l_i, m_i = _tri_attn_inner(acc, l_i, m_i, q, k_base, v_base, sks, svs, 0, full, rows, S,
                                            qk_scale, D, BN, 0)
            acc, l_i, m_i = _tri_attn_inner(acc, l_i, m_i, q, k_base, v_base, sks, svs, full, S, rows, S,
                                            qk_scale, D, BN, 1)
        out = acc / l_i[:, None]
        tl.store(o_base + rows[:, None] * sos + offs_d[None, :], out.to(O.dtype.element_ty),
                 mask=rows[:, None] < S)

    def triton_attention(q, k, v, o, causal, scale):
        """Tutorial-style fused attention forward (non-causal: full key blocks unmasked, a masked tail; causal:
        off-diagonal blocks unmasked, the diagonal block masked); autotuned over BLOCK_M/BLOCK_N/warps/stages."""
        B, H, S, D = q.shape
        grid = lambda meta: (triton.cdiv(S, meta["BM"]), B * H)
        _tri_attn_fwd[grid](q, k, v, o, scale, H, S, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3],
                            *o.stride()[:3], D=D, CAUSAL=int(causal))
        return o
except Exception as _e:  # Triton missing or too old: the other columns still mean something
    _TRITON_ERROR = f"{type(_e).__name__}: {_e}"
    triton_attention = None


# -- run ----------------------------------------------------------------------------------------------------------

def _impls_for_shape(q, k, v, causal, scale, tawa):
    """name -> (fn, context factory or None): the Tawa variants of this shape, then the anchors. Each fn returns
    its output tensor."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    o = torch.empty_like(q)
    impls = {}
    for name, launcher in tawa.items():
        impls[name] = ((lambda L: lambda: (L.launch([q, k, v, o, scale]), o)[1])(launcher), None)
    sdpa = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal), scale=scale)
    impls["cudnn"] = (sdpa, lambda: sdpa_kernel(SDPBackend.CUDNN_ATTENTION))
    impls["fa2"] = (sdpa, lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION))
    if triton_attention is not None:
        o_t = torch.empty_like(q)
        impls["triton"] = (lambda: triton_attention(q, k, v, o_t, causal, scale), None)
    return impls


def run(out: str, regex=None, quick=False, json_out=None, plot=None) -> None:
    try:
        import torch
    except ImportError:
        sys.exit("bench_attention run: PyTorch is not installed; the run step needs torch with CUDA and a Hopper GPU")
    if not torch.cuda.is_available():
        sys.exit("bench_attention run: no CUDA device visible (torch.cuda.is_available() is False); the run step "
                 "needs a Hopper GPU. Build here (`build`) and run on the GPU machine.")
    from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: F401  (fail early on a torch without it)
    cap = torch.cuda.get_device_capability()
    gpu = torch.cuda.get_device_name()
    print("GPU:", gpu, f"sm_{cap[0]}{cap[1]}", "torch", torch.__version__, "cudnn", torch.backends.cudnn.version(),
          "triton", (sys.modules["triton"].__version__ if triton_attention is not None else f"n/a ({_TRITON_ERROR})"))
    if cap != (9, 0):
        print("WARNING: not an sm_90 device; the Tawa cubins are built for sm_90a")
    run_on(torch.device("cuda"), gpu, out, regex, quick, json_out, plot)


def _sync():
    import torch
    torch.cuda.synchronize()


def run_on(dev, gpu, out, regex=None, quick=False, json_out=None, plot=None) -> None:
    """The body of the run step on device `dev` (run() checks for the GPU first)."""
    from contextlib import nullcontext as nullctx
    import torch
    torch.manual_seed(0)
    rounds, reps = (3, 5) if quick else (7, 20)
    check = Checks()

    # load
    launchers, failed = {}, {}
    for name in select(regex):
        if not os.path.exists(os.path.join(out, name + ".json")):
            print(f"{name}: not built (no {name}.json in {out})")
            continue
        try:
            launchers[name] = _load(out, name)
            kern = launchers[name].kernel
            print(f"{name}: threads={kern.num_threads} smem={kern.shared_bytes} notes={kern.notes}")
        except Exception as e:
            failed[name] = f"load failed: {e}"
            print(f"{name}: LOAD FAILED {e}")
    for mod in ("mlir", "lark"):
        if mod in sys.modules:
            print(f"WARNING: the run step imported '{mod}'")
    # Variants whose options the compiler resolves to the same kernel (the default already has the ping-pong on,
    # so "ws" and "pp" are one kernel at BLOCK_N 128) are timed once: timing copies would only add noise, and a
    # best-of over copies would pick the luckiest of them.
    same_as, first = {}, {}
    for name in launchers:
        with open(os.path.join(out, name + ".cubin"), "rb") as f:
            blob = f.read()
        if blob in first:
            same_as[name] = first[blob]
            print(f"{name}: same kernel as {first[blob]}, timed once")
        else:
            first[blob] = name

    def tawa_ok(name, shape, causal, q, k, v, ref, scale):
        o = torch.full_like(q, float("nan"))
        label = f"{name} {shape_str(shape, causal)}"
        try:
            launchers[name].launch([q, k, v, o, scale])
            _sync()
        except Exception as e:
            return check(label, None, None, error=f"launch failed: {str(e)[:300]}")
        return check(label, o, ref)

    # correctness on the ragged shapes
    print("\n## correctness: ragged shapes")
    for shape in RAGGED:
        B, H, S, D = shape
        for causal in (0, 1):
            names = [n for n in launchers if n not in failed and parse_name(n)[:2] == (D, causal)]
            if not names:
                continue
            q, k, v = (torch.randn(B, H, S, D, device=dev, dtype=torch.bfloat16) for _ in range(3))
            scale = D ** -0.5
            ref = reference(q, k, v, causal, scale)
            for n in names:
                if not tawa_ok(n, shape, causal, q, k, v, ref, scale):
                    failed[n] = f"wrong on {shape_str(shape, causal)}"

    # timed shapes: check everything, then time what passed, alternating over rounds
    results = {}    # (shape, causal) -> {impl: TFLOP/s}
    times_ms = {}   # (shape, causal) -> {impl: ms per call}
    excluded = {}   # (shape, causal) -> {anchor: why}
    for shape in SHAPES:
        B, H, S, D = shape
        for causal in (0, 1):
            key = (shape, causal)
            print(f"\n## {shape_str(shape, causal)}")
            q, k, v = (torch.randn(B, H, S, D, device=dev, dtype=torch.bfloat16) for _ in range(3))
            scale = D ** -0.5
            ref = reference(q, k, v, causal, scale)
            tawa = {}
            for n in launchers:
                if parse_name(n)[:2] != (D, causal) or n in failed:
                    continue
                if tawa_ok(n, shape, causal, q, k, v, ref, scale):
                    tawa[n] = launchers[n]
                else:
                    failed[n] = f"wrong on {shape_str(shape, causal)}"
            impls = _impls_for_shape(q, k, v, causal, scale, tawa)
            tuner = _tuner(out, D, causal)
            if tuner is not None:
                o_t = torch.full_like(q, float("nan"))
                try:
                    choice = tuner.tune(q, k, v, o_t, scale)
                    print("  tuned: " + " ".join(f"{a}={b}" for a, b in choice.config.items()))
                    tuner(q, k, v, o_t, scale)
                    _sync()
                    if check(f"tuned {shape_str(shape, causal)}", o_t, ref):
                        impls["tuned"] = ((lambda t, o: lambda: (t(q, k, v, o, scale), o)[1])(tuner, o_t), None)
                except Exception as e:  # a tuner that cannot run must not hide the other columns
                    print(f"  tuned {shape_str(shape, causal)}: FAILED {str(e)[:300]}")
            launched = _launched(out, D, causal)
            if launched is not None:
                o_l = torch.full_like(q, float("nan"))
                try:
                    print(f"  launched: {launched.variant_for(q, k, v, o_l, scale).compiled.constants}")
                    launched(q, k, v, o_l, scale)
                    _sync()
                    if check(f"launched {shape_str(shape, causal)}", o_l, ref):
                        impls["launched"] = ((lambda t, o: lambda: (t(q, k, v, o, scale), o)[1])(launched, o_l), None)
                except Exception as e:  # as for the tuner
                    print(f"  launched {shape_str(shape, causal)}: FAILED {str(e)[:300]}")
            live = {}
            excluded[key] = {} if triton_attention is not None else {"triton": _TRITON_ERROR}
            for name, (fn, ctx) in impls.items():
                if name not in ANCHORS:
                    live[name] = (fn, ctx)      # checked above
                    continue
                try:
                    with (ctx or nullctx)():
                        got = fn()
                        _sync()
                except Exception as e:
                    msg = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
                    print(f"  {ANCHOR_LABEL[name]} {shape_str(shape, causal)}: unavailable ({msg})")
                    excluded[key][name] = msg
                    continue
                if check(f"{ANCHOR_LABEL[name]} {shape_str(shape, causal)}", got, ref):
                    live[name] = (fn, ctx)
                else:
                    excluded[key][name] = "wrong result"
            del ref
            for name in [n for n in live if n in same_as and same_as[n] in live]:
                live.pop(name)
            times = {n: [] for n in live}
            for r in range(rounds):
                for name, (fn, ctx) in rotated(live.items(), r):
                    try:
                        with (ctx or nullctx)():
                            times[name].append(_time(fn, reps=reps, rounds=1))
                    except Exception as e:  # an anchor failing mid-run drops out, the others go on
                        print(f"  {name}: timing failed ({str(e)[:200]})")
                        live.pop(name)
                        times.pop(name)
            fl = flops(B, H, S, D, causal)
            results[key], times_ms[key] = {}, {}
            for name in [n for n in tawa if n in same_as and same_as[n] in times]:
                times[name] = times[same_as[name]]
            for name, ts in times.items():
                t = sorted(ts)[len(ts) // 2]
                results[key][name] = fl / t / 1e9
                times_ms[key][name] = t
                print(f"  {name:22} {t:8.3f} ms {fl / t / 1e9:7.1f} TFLOP/s")
            del q, k, v, impls, live
            if dev.type == "cuda":
                torch.cuda.empty_cache()

    print("\n" + markdown_tables(results, failed, excluded, rounds=rounds, reps=reps))
    if json_out:
        d = {"gpu": gpu, "torch": torch.__version__,
             "triton": sys.modules["triton"].__version__ if triton_attention is not None else None,
             "rounds": rounds, "reps": reps,
             "variants": {n: {"constants": VARIANTS[n][0], "options": VARIANTS[n][1],
                              "threads": launchers[n].kernel.num_threads if n in launchers else None,
                              "notes": list(launchers[n].kernel.notes) if n in launchers else None}
                          for n in select(regex)},
             "failed": failed, "checks": check.records,
             "results": [{"shape": list(s), "causal": c, "impl": n, "tflops": v, "ms": times_ms[(s, c)][n],
                          "flops": flops(*s, c)}
                         for (s, c), row in results.items() for n, v in row.items()],
             "excluded_anchors": [{"shape": list(s), "causal": c, "anchor": a, "why": w}
                                  for (s, c), row in excluded.items() for a, w in row.items()]}
        with open(json_out, "w") as f:
            json.dump(d, f, indent=1)
        print(f"raw numbers written to {json_out}")
    write_plot(results, plot or os.path.join(out, "attention.png"))


# -- reporting (plain Python; CPU-testable) ---------------------------------------------------------------------

def _row(results, key):
    """The table row of one (shape, causal): Tawa columns, best WS / uni / overall, anchors."""
    (shape, causal) = key
    D = shape[3]
    r = results.get(key, {})
    row = {}
    for label, n, ws in TAWA_COLS:
        row[label] = r.get(variant_name(D, causal, n, ws))
    ws_vals = [r[v] for v in r if v.startswith("fa_") and parse_name(v)[3]]
    uni_vals = [r[v] for v in r if v.startswith("fa_") and not parse_name(v)[3]]
    row["best WS"] = max(ws_vals) if ws_vals else None
    row["best uni"] = max(uni_vals) if uni_vals else None
    row["Tawa best"] = max(ws_vals + uni_vals) if ws_vals + uni_vals else None
    row["tuned"] = r.get("tuned")
    row["launched"] = r.get("launched")
    for a in ANCHORS:
        row[ANCHOR_LABEL[a]] = r.get(a)
    return row


def _ratio(a, b):
    return a / b if a and b else None


def _fmt(x, digits=0):
    return "-" if x is None else f"{x:.{digits}f}"


def _geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def markdown_tables(results, failed=None, excluded=None, rounds=None, reps=None) -> str:
    keys = list(results)
    lines = [f"### FlashAttention forward, bf16, TFLOP/s (BLOCK_M = {BLOCK_M}; FLOPs = 4·B·H·S²·D, /2 causal)", ""]
    if rounds:
        lines += [f"Median of {rounds} alternating rounds of {reps} launches each (CUDA events). Tawa columns: "
                  f"fa_d{{D}}_c{{causal}}_n{{BLOCK_N}}_{{ws|uni}} of the row's D and causal setting; WS = warp "
                  f"specialization auto, uni = forced off.", ""]
    cols = [c for c, _, _ in TAWA_COLS] + ["best WS", "best uni", "Tawa best", "tuned", "launched", "cuDNN", "FA2",
                                           "Triton"]
    rcols = ["best/cuDNN", "best/FA2", "best/Triton", "tuned/cuDNN", "tuned/FA2", "launched/cuDNN", "launched/FA2"]
    lines.append("| B×H×S×D | causal | " + " | ".join(cols + rcols) + " |")
    lines.append("|---|---|" + "---:|" * (len(cols) + len(rcols)))
    ratios = {c: [] for c in rcols}
    for key in keys:
        row = _row(results, key)
        rs = {f"best/{a}": _ratio(row["Tawa best"], row[a]) for a in ("cuDNN", "FA2", "Triton")}
        rs.update({f"{t}/{a}": _ratio(row[t], row[a]) for t in ("tuned", "launched") for a in ("cuDNN", "FA2")})
        for c in rcols:
            ratios[c].append(rs[c])
        lines.append(f"| {'×'.join(map(str, key[0]))} | {key[1]} | " + " | ".join(_fmt(row[c]) for c in cols)
                     + " | " + " | ".join(_fmt(rs[c], 2) for c in rcols) + " |")
    lines.append("| geomean | | " + " | ".join("" for _ in cols) + " | "
                 + " | ".join(_fmt(_geomean(ratios[c]), 2) for c in rcols) + " |")

    lines += ["", "### Ablation (ratios of TFLOP/s)", "",
              "| B×H×S×D | causal | WS/uni (n64) | WS/uni (n128) | n128/n64 (WS) | n128/n64 (uni) | "
              "ping-pong on/off (n64) | ping-pong on/off (n128) | overlap on/off (n64) | overlap on/off (n128) | "
              "2/1 CTAs per SM (n64) |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    abl = {i: [] for i in range(9)}
    for key in keys:
        row = _row(results, key)
        vals = [_ratio(row["WS n64"], row["uni n64"]), _ratio(row["WS n128"], row["uni n128"]),
                _ratio(row["WS n128"], row["WS n64"]), _ratio(row["uni n128"], row["uni n64"]),
                _ratio(row["WS+pp n64"], row["WS n64"]), _ratio(row["WS+pp n128"], row["WS n128"]),
                _ratio(row["WS n64"], row["WS-nola n64"]), _ratio(row["WS n128"], row["WS-nola n128"]),
                _ratio(row["WS n64"], row["WS 1 CTA/SM n64"])]
        for i, x in enumerate(vals):
            abl[i].append(x)
        lines.append(f"| {'×'.join(map(str, key[0]))} | {key[1]} | " + " | ".join(_fmt(x, 2) for x in vals) + " |")
    lines.append("| geomean | | " + " | ".join(_fmt(_geomean(abl[i]), 2) for i in range(9)) + " |")
    if failed:
        lines += ["", "Variants excluded (failed a check or did not load):", ""]
        lines += [f"- `{n}`: {why}" for n, why in failed.items()]
    missing = [(k, a, w) for k, row in (excluded or {}).items() for a, w in row.items()]
    if missing:
        lines += ["", "Anchors missing:", ""]
        lines += [f"- {ANCHOR_LABEL[a]} on {shape_str(*k)}: {w}" for k, a, w in missing]
    return "\n".join(lines)


def write_plot(results, path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        print(f"no plot ({type(e).__name__}: {e})")
        return
    keys = list(results)
    if not keys:
        print("no plot (no results)")
        return
    # The default schedule and its ablations, the uniform-warp schedule, and the anchors.
    series = ["launched", "tuned", "WS n128", "WS+pp n128", "WS-nola n128", "WS n64", "uni n64", "FA2", "Triton",
              "cuDNN"]
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(11, 1.9 * len(keys)), 5))
    for i, s in enumerate(series):
        ys = []
        for key in keys:
            row = _row(results, key)
            ys.append(_ratio(row[s], row["cuDNN"]) or 0.0)
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(keys))]
        ax.bar(xs, ys, width, label=("Tawa " + s) if s not in ("FA2", "Triton", "cuDNN") else s)
    ax.axhline(1.0, color="k", linewidth=0.8)
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels([f"{'x'.join(map(str, k[0]))}\n{'causal' if k[1] else 'full'}" for k in keys], fontsize=8)
    ax.set_ylabel("TFLOP/s / cuDNN")
    ax.set_title("FlashAttention forward (bf16): throughput relative to cuDNN SDPA")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"plot written to {path}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("step", nargs="?", default="all", choices=["build", "run", "all", "plot"],
                    help="plot: redraw the plot from a --json file of an earlier run")
    ap.add_argument("--out", default=os.path.join(ROOT, ".carry"), help="kernel directory (default .carry/)")
    ap.add_argument("--variants", default=None, help="regex: build / run only the variants whose name matches")
    ap.add_argument("--quick", action="store_true", help="fewer rounds and repetitions")
    ap.add_argument("--shapes", default=None, metavar="BxHxSxD,...",
                    help="time (run) or build the launched kernels of these shapes instead of SHAPES (each non-causal "
                         "and causal); a head dim outside the defaults adds its variants")
    ap.add_argument("--json", default=None, metavar="OUT", help="write the raw numbers as JSON to OUT")
    ap.add_argument("--plot", default=None, metavar="PATH", help="PNG plot path (default DIR/attention.png)")
    ns = ap.parse_args()
    if ns.shapes:
        SHAPES[:] = [tuple(int(x) for x in shape.split("x")) for shape in ns.shapes.split(",")]
        # head dims outside the defaults (16, 32, 80, ...): their variants, launched kernels and ragged checks
        extra = sorted({shape[3] for shape in SHAPES} - set(HEAD_DIMS))
        define_variants(extra)
        HEAD_DIMS = HEAD_DIMS + tuple(extra)
        RAGGED += [shape for d in extra for shape in ((1, 3, 77, d), (1, 1, 129, d), (2, 1, 1, d))]
    if ns.step in ("build", "all"):
        build(ns.out, ns.variants)
    if ns.step in ("run", "all"):
        run(ns.out, ns.variants, ns.quick, ns.json, ns.plot)
    if ns.step == "plot":
        with open(ns.json) as f:
            raw = json.load(f)["results"]
        table: dict = {}
        for r in raw:
            table.setdefault((tuple(r["shape"]), r["causal"]), {})[r["impl"]] = r["tflops"]
        write_plot(table, ns.plot or os.path.join(ns.out, "attention.png"))
