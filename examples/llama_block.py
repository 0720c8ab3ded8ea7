"""A Llama decoder layer from Hugging Face `transformers` whose attention and SwiGLU MLP run as Tawa kernels, through
torch custom operators (`tawa.torch_ops`): checked against the stock layer, run under torch.compile, and timed
against the stock layer, eager and compiled.

    python examples/llama_block.py build      compile the layer's kernels into the kernel cache (needs the compiler,
                                              no GPU; TAWA_CACHE_DIR chooses the cache, as for tawa.compile)
    python examples/llama_block.py run        check and time on a Hopper GPU (torch and transformers; no compiler
                                              needed once the cache holds the kernels)
    python examples/llama_block.py            both, on a machine that has the compiler and the GPU

`run` options: `--shapes 1x4096,4x2048` (batch x sequence), `--hidden`, `--intermediate`, `--heads`, `--kv-heads`
(defaults: Llama 3 8B's 4096, 14336, 32 and 8; head dim 128), `--no-cudagraphs`, `--iters`.

What runs where, in the Tawa layer (everything else is the stock module's torch code):
- attention: `examples/gqa_attention.tawa` (causal, grouped-query: the kernel reads key/value head h // (H / HKV),
  so K and V are never repeated), registered as the operator `tawa_llama::attention` with the decorator form of
  `tawa.torch_ops.custom_op`; it reads Q, K and V in the [B, H, S, D] views the module makes and writes O into
  [B, S, H, D] memory through a transposed view, which is the layout the output projection reads, so no copy
  follows. It plugs into transformers as the attention implementation "tawa" (`AttentionInterface`).
- MLP: `examples/swiglu.tawa` computes silu(x @ Wg) * (x @ Wu) in one kernel, `examples/gemm.tawa` the down
  projection; both registered from the kernel alone (`custom_op(name, kernel, outputs=["C"])`). The kernels take
  B as [K, N], so the module keeps transposed copies of the three weights, made once.

The check compares each sub-block (attention, MLP) and the whole layer with a float32 copy of the stock layer,
for the stock bf16 layer and the Tawa one; the Tawa error must stay within twice the stock one (plus 1e-3) and
below 2e-2. Timing: CUDA events, the variants alternating over rounds on the same inputs, the median round.
"""
import argparse
import copy
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import tawa  # noqa: E402

EXAMPLES = os.path.join(ROOT, "examples")
HEAD_DIM = 128

#: name -> (example file, constants). Tiles measured on an H200 at 4096 tokens of Llama 3 8B: SwiGLU with BLOCK_N
#: 128 takes 1.39 ms (64: 1.74, 256 rows x 64: 1.45), the down projection with BLOCK_N 256 0.63 ms (128 x 128:
#: 0.77, 256 x 128: 0.71); BLOCK_N 128 is the fastest attention variant (docs/performance.md).
KERNELS = {
    "attention": ("gqa_attention.tawa", {"HEAD_DIM": HEAD_DIM, "CAUSAL": 1, "BLOCK_N": 128}),
    "swiglu": ("swiglu.tawa", {"BLOCK_N": 128}),
    "down": ("gemm.tawa", {"BLOCK_N": 256}),
}


def build() -> None:
    for name, (path, consts) in KERNELS.items():
        t = time.perf_counter()
        k = tawa.compile(os.path.join(EXAMPLES, path), **consts)
        print(f"{name}: {path} {consts} -> {k.compiled.num_threads} threads, {k.compiled.shared_bytes} B shared, "
              f"{time.perf_counter() - t:.2f} s" + "".join(f"\n  {n}" for n in k.notes))


def load_kernels() -> dict:
    """The layer's kernels, from the kernel cache (or compiled, where the compiler is installed)."""
    kernels = {}
    for name, (path, consts) in KERNELS.items():
        try:
            kernels[name] = tawa.compile(os.path.join(EXAMPLES, path), **consts)
        except ImportError as exc:
            sys.exit(f"kernel '{name}' is not in the kernel cache and this machine cannot compile it ({exc}); "
                     "run `python examples/llama_block.py build` where the compiler is installed, with the same "
                     "TAWA_CACHE_DIR")
    return kernels


_OPS = {}


def ops() -> dict:
    """The layer's torch operators, registered once per process."""
    if _OPS:
        return _OPS
    import torch
    from tawa import torch_ops
    kernels = load_kernels()
    gqa = kernels["attention"]

    @torch_ops.custom_op("tawa_llama::attention", mutates_args=())
    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
        B, H, S, D = q.shape
        o = q.new_empty(B, S, H, D)                  # the layout the output projection reads
        gqa(q, k, v, o.transpose(1, 2), scale)
        return o

    _OPS["attention"] = attention
    _OPS["swiglu"] = torch_ops.custom_op("tawa_llama::swiglu", kernels["swiglu"], outputs=["C"])
    _OPS["gemm"] = torch_ops.custom_op("tawa_llama::gemm", kernels["down"], outputs=["C"])
    return _OPS


def tawa_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None,
                   **kwargs):
    """A transformers attention implementation ("tawa"): causal self-attention over the whole sequence, as a
    prefill runs it; query [B, H, S, D], key and value [B, HKV, S, D]; returns ([B, S, H, D], None)."""
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    if attention_mask is not None or not causal or dropout or key.shape[2] != query.shape[2]:
        raise NotImplementedError("the Tawa attention here is causal self-attention without a mask, dropout or "
                                  "a key/value cache")
    if query.shape[-1] != HEAD_DIM:
        raise NotImplementedError(f"the Tawa attention here is compiled for head dim {HEAD_DIM}, not "
                                  f"{query.shape[-1]}")
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    return ops()["attention"](query, key, value, scale), None


def make_tawa_mlp(mlp):
    """The Tawa version of a LlamaMLP: silu(x Wg^T) * (x Wu^T) in one kernel, then the down projection."""
    import torch

    class TawaLlamaMLP(torch.nn.Module):
        def __init__(self, mlp):
            super().__init__()
            if getattr(mlp.gate_proj, "bias", None) is not None:
                raise NotImplementedError("the Tawa MLP here has no biases (mlp_bias=False)")
            # The kernels take B as [K, N]: transposed copies of the [out, in] weights, made once.
            self.register_buffer("w_gate", mlp.gate_proj.weight.detach().t().contiguous())
            self.register_buffer("w_up", mlp.up_proj.weight.detach().t().contiguous())
            self.register_buffer("w_down", mlp.down_proj.weight.detach().t().contiguous())

        def forward(self, x):
            o = ops()
            h = o["swiglu"](x.reshape(-1, x.shape[-1]), self.w_gate, self.w_up)
            return o["gemm"](h, self.w_down).view(*x.shape[:-1], self.w_down.shape[1])

    return TawaLlamaMLP(mlp)


def make_tawa_layer(stock):
    """A copy of a LlamaDecoderLayer whose attention and MLP run as Tawa kernels."""
    from transformers import AttentionInterface
    if hasattr(stock.mlp, "act_fn") and type(stock.mlp.act_fn).__name__ not in ("SiLU", "SiLUActivation"):
        raise NotImplementedError(f"the Tawa MLP computes SwiGLU; this layer's activation is {stock.mlp.act_fn}")
    ops()
    AttentionInterface.register("tawa", tawa_attention)
    layer = copy.deepcopy(stock)
    layer.self_attn.config._attn_implementation = "tawa"
    layer.mlp = make_tawa_mlp(layer.mlp)
    return layer


# -- the stock layer and its inputs ----------------------------------------------------------------------------

def make_config(hidden=4096, intermediate=14336, heads=32, kv_heads=8):
    from transformers import LlamaConfig
    return LlamaConfig(hidden_size=hidden, intermediate_size=intermediate, num_attention_heads=heads,
                       num_key_value_heads=kv_heads, head_dim=HEAD_DIM, num_hidden_layers=1,
                       max_position_embeddings=16384, rms_norm_eps=1e-5, attn_implementation="sdpa")


def make_stock_layer(config, seed=0, device="cuda"):
    """A LlamaDecoderLayer with random weights (normal, std = initializer_range, as a Llama checkpoint is
    initialised), bf16, on `device`."""
    import torch
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer
    torch.manual_seed(seed)
    layer = LlamaDecoderLayer(config, layer_idx=0)
    with torch.no_grad():
        for m in layer.modules():
            if isinstance(m, torch.nn.Linear):
                m.weight.normal_(0.0, config.initializer_range)
            elif hasattr(m, "weight") and m.weight is not None and m.weight.dim() == 1:
                m.weight.uniform_(0.5, 1.5)          # RMSNorm scales, not all ones so that they matter
    return layer.to(device, torch.bfloat16).eval()


def make_inputs(config, batch, seq, seed=1, device="cuda"):
    """Hidden states [batch, seq, hidden] and the rotary (cos, sin) the model computes for positions 0..seq-1."""
    import torch
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(batch, seq, config.hidden_size, device=device, dtype=torch.bfloat16, generator=g)
    rotary = LlamaRotaryEmbedding(config).to(device)
    positions = torch.arange(seq, device=device)[None].expand(batch, -1)
    return x, rotary(x, positions)


def forward(layer, x, rope):
    out = layer(x, position_embeddings=rope)
    return out[0] if isinstance(out, tuple) else out


def rel_err(got, ref) -> float:
    import torch
    g = got.double()
    if not torch.isfinite(g).all().item():
        return float("inf")
    r = ref.double()
    return ((g - r).norm() / r.norm().clamp_min(1e-30)).item()


def check(stock, tawa_layer, x, rope, compiled=None) -> list:
    """[(block, stock error, tawa error, ok)] against a float32 copy of the stock layer: the attention block, the
    MLP block and the whole layer, plus the compiled Tawa layers given as {label: module}. Each compiled layer is
    called twice on other data first (under CUDA graphs: a warm-up and the recording), so the checked call is a
    replay on new data."""
    import torch
    ref = copy.deepcopy(stock).float()
    rope32 = tuple(r.float() for r in rope)
    rows = []
    with torch.no_grad():
        h = stock.input_layernorm(x)
        attn = [m.self_attn(hidden_states=h, position_embeddings=rope, attention_mask=None)[0]
                for m in (stock, tawa_layer)]
        attn_ref = ref.self_attn(hidden_states=h.float(), position_embeddings=rope32, attention_mask=None)[0]
        rows.append(("attention", rel_err(attn[0], attn_ref), rel_err(attn[1], attn_ref)))
        h2 = stock.post_attention_layernorm(x)
        rows.append(("mlp", rel_err(stock.mlp(h2), ref.mlp(h2.float())),
                     rel_err(tawa_layer.mlp(h2), ref.mlp(h2.float()))))
        out_ref = forward(ref, x.float(), rope32)
        stock_err = rel_err(forward(stock, x, rope), out_ref)
        rows.append(("layer", stock_err, rel_err(forward(tawa_layer, x, rope), out_ref)))
        other = torch.randn_like(x)
        for label, module in (compiled or {}).items():
            forward(module, other, rope)
            forward(module, other, rope)
            rows.append((f"layer, {label}", stock_err, rel_err(forward(module, x, rope).clone(), out_ref)))
    return [(name, s, t, t <= 2 * s + 1e-3 and t < 2e-2) for name, s, t in rows]


def time_variants(fns: dict, iters=10, rounds=7) -> dict:
    """Median milliseconds per call of each function, the functions alternating over rounds (CUDA events)."""
    import torch
    times = {k: [] for k in fns}
    for fn in fns.values():
        fn()
        fn()
    torch.cuda.synchronize()
    for _ in range(rounds):
        for name, fn in fns.items():
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(iters):
                fn()
            e.record()
            torch.cuda.synchronize()
            times[name].append(s.elapsed_time(e) / iters)
    return {k: sorted(v)[len(v) // 2] for k, v in times.items()}


def layer_flops(config, batch, seq) -> float:
    t, h, i = batch * seq, config.hidden_size, config.intermediate_size
    q, kv = config.num_attention_heads * HEAD_DIM, config.num_key_value_heads * HEAD_DIM
    proj = 2 * t * h * (q + 2 * kv + q)
    mlp = 2 * t * h * i * 3
    attn = 4 * batch * config.num_attention_heads * seq * seq * HEAD_DIM / 2
    return proj + mlp + attn


def run(args) -> bool:
    import torch
    # One compiled entry per (layer, mode, shape) on LlamaDecoderLayer.forward: more than dynamo's default 8.
    torch._dynamo.config.cache_size_limit = 64
    config = make_config(args.hidden, args.intermediate, args.heads, args.kv_heads)
    stock = make_stock_layer(config)
    tawa_layer = make_tawa_layer(stock)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; Llama layer: hidden {config.hidden_size}, "
          f"intermediate {config.intermediate_size}, {config.num_attention_heads} heads / "
          f"{config.num_key_value_heads} KV heads of {HEAD_DIM}, bf16")
    modes = [("compiled", {})] + ([] if args.no_cudagraphs else [("compiled + CUDA graphs",
                                                                   {"mode": "reduce-overhead"})])
    ok, results = True, []
    for batch, seq in args.shapes:
        x, rope = make_inputs(config, batch, seq)
        variants = {"stock eager": stock, "tawa eager": tawa_layer}
        t0 = time.perf_counter()
        for label, kw in modes:
            try:
                variants[f"stock {label}"] = torch.compile(stock, fullgraph=True, dynamic=False, **kw)
                with torch.no_grad():
                    forward(variants[f"stock {label}"], x, rope)
            except Exception as exc:                 # the stock layer is the anchor: compile it as far as it goes
                print(f"  stock layer, {label}: fullgraph failed ({type(exc).__name__}); compiled with breaks")
                variants[f"stock {label}"] = torch.compile(stock, dynamic=False, **kw)
            variants[f"tawa {label}"] = torch.compile(tawa_layer, fullgraph=True, dynamic=False, **kw)
        with torch.no_grad():
            rows = check(stock, tawa_layer, x, rope,
                         {label: variants[f"tawa {label}"] for label, _ in modes})
            print(f"\nB={batch} S={seq}: rel err against a float32 copy of the stock layer "
                  f"(compiles took {time.perf_counter() - t0:.0f} s)")
            for name, s, t, good in rows:
                print(f"  {name:34s} stock {s:.2e}  tawa {t:.2e}  {'PASS' if good else 'FAIL'}")
                ok &= good
            fns = {k: (lambda m=m: forward(m, x, rope)) for k, m in variants.items()}
            times = time_variants(fns, iters=args.iters)
        flops = layer_flops(config, batch, seq)
        print(f"  {'variant':34s} {'ms':>8s} {'TFLOP/s':>8s} {'vs stock eager':>15s}")
        for k, ms in times.items():
            print(f"  {k:34s} {ms:8.3f} {flops / ms / 1e9:8.0f} {times['stock eager'] / ms:14.2f}x")
        results.append((batch, seq, times))
    print("\n| B x S | " + " | ".join(results[0][2]) + " |")
    print("|---|" + "---:|" * len(results[0][2]))
    for batch, seq, times in results:
        print(f"| {batch} x {seq} | " + " | ".join(f"{ms:.2f}" for ms in times.values()) + " |")
    return ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("step", nargs="?", default="all", choices=["build", "run", "all"])
    ap.add_argument("--shapes", default="1x4096", help="batch x sequence, comma separated")
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--intermediate", type=int, default=14336)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--no-cudagraphs", action="store_true")
    args = ap.parse_args(argv)
    args.shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    if args.step in ("build", "all"):
        build()
    if args.step in ("run", "all"):
        ok = run(args)
        print("all checks passed" if ok else "SOME CHECKS FAILED")
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
