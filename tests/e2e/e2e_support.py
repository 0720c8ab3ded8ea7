"""Helpers for the end-to-end GPU tests.

The GPU tests compile through `tawa.compile`, so on a GPU machine without MLIR they run from the kernel cache.
`TAWA_PREFILL=1 TAWA_CACHE_DIR=DIR pytest tests/e2e` on a machine that has the compiler but no GPU fills DIR
with every kernel these tests use and then skips each test (nothing is checked there); on the GPU machine,
`TAWA_TEST_KEEP_CACHE=1 TAWA_CACHE_DIR=DIR pytest -m gpu tests/e2e` then runs them all from the cache.
"""
import json
import math
import os
import pathlib

import pytest

import tawa

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
PREFILL = os.environ.get("TAWA_PREFILL") == "1"


def _unsupported_file() -> pathlib.Path:
    from tawa.runtime.cache import cache_dir
    return cache_dir() / "unsupported.json"


def compiled(example: str, **kwargs):
    """Compile an example for the GPU (a cache hit when prefilled); in prefill mode, skip after compiling.

    A kernel the GPU backend does not support yet is an expected failure, here and (through a list kept next to
    the prefilled cache) on the GPU machine."""
    label = f"{example} {sorted(kwargs.items())}"
    listed = json.loads(_unsupported_file().read_text()) if _unsupported_file().exists() else {}
    if label in listed and not PREFILL:
        pytest.xfail(f"not supported by the GPU backend yet: {listed[label]}")
    try:
        kernel = tawa.compile(str(EXAMPLES / example), **kwargs)
    except tawa.CompilationError as error:
        if not any(s in error.message for s in ("cannot be lowered", "does not support", "must come")):
            raise
        if PREFILL:
            listed[label] = error.message
            _unsupported_file().parent.mkdir(parents=True, exist_ok=True)
            _unsupported_file().write_text(json.dumps(listed, indent=1))
        pytest.xfail(f"not supported by the GPU backend yet: {error.message}")
    except ImportError as error:
        pytest.fail(f"{label} is not in the kernel cache and this machine cannot compile ({error}); "
                    "prefill the cache on a machine with the compiler (see this module's docstring)")
    if PREFILL:
        pytest.skip("kernel compiled into the cache; the check runs on a GPU")
    return kernel


def rel_err(out, ref) -> float:
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm()).item()


def poisoned(torch, shape, dtype):
    """An output buffer full of NaN, so an element the kernel does not write fails the check."""
    return torch.full(shape, float("nan"), device="cuda", dtype=dtype)


def record_launches(monkeypatch, what) -> list:
    """The list of `what(fn, grid, block, shared, cluster)` for every launch made through the driver from now on
    (for a fixture that checks how the runtime launched: cluster sizes, CTAs resident per SM)."""
    from tawa.runtime import driver
    seen, launch = [], driver.launch

    def recording(fn, grid, block, shared, stream, params, cluster=1):
        seen.append(what(fn, grid, block, shared, cluster))
        return launch(fn, grid, block, shared, stream, params, cluster)
    monkeypatch.setattr(driver, "launch", recording)
    return seen


# ---- operands and float64 references of the fused examples (fresh random inputs per seed) -----------------
def _gelu_tanh(torch, x):
    """tanh-approximated GELU (torch's gelu(approximate="tanh")), as the examples compute it."""
    return 0.5 * x * (1 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))


def gemm_case(torch, m, n, k, seed, dtype=None):
    """gemm.tawa: ([a, b], reference of a @ b), in bf16 unless `dtype`."""
    torch.manual_seed(seed)
    dtype = dtype or torch.bfloat16
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    return [a, b], a.double() @ b.double()


def bias_act_case(torch, m, n, k, seed):
    """gemm_bias_act.tawa: ([a, b, bias], reference of the output)."""
    torch.manual_seed(seed)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(n, device="cuda", dtype=torch.float32)
    return [a, b, bias], _gelu_tanh(torch, a.double() @ b.double() + bias.double())


def linear_case(torch, m, n, k, seed):
    """linear_gelu_residual.tawa (W stored [N, K]): ([x, w, bias, r], reference of the output)."""
    torch.manual_seed(seed)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    r = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    return [x, w, bias, r], _gelu_tanh(torch, x.double() @ w.double().T + bias.double()) + r.double()


def swiglu_case(torch, m, n, k, seed):
    """swiglu.tawa: ([a, b1, b2], reference of silu(a @ b1) * (a @ b2))."""
    torch.manual_seed(seed)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b1, b2 = (torch.randn(k, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    return [a, b1, b2], torch.nn.functional.silu(a.double() @ b1.double()) * (a.double() @ b2.double())


def fp8_case(torch, m, n, k, seed):
    """gemm_fp8.tawa (B stored [N, K], row and column scales): ([a, b, sa, sb], reference of the output)."""
    torch.manual_seed(seed)
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
    sa, sb = torch.rand(m, device="cuda") + 0.5, torch.rand(n, device="cuda") + 0.5
    return [a, b, sa, sb], (a.double() @ b.double().T) * sa.double()[:, None] * sb.double()[None, :]


def same_bits_every_launch(torch, kernel, args, out_shape, launches=4) -> bool:
    """Whether `launches` launches on the same arguments (a fresh NaN-poisoned bf16 output each) agree bit for
    bit: partial sums met in a workspace must not depend on which program arrives last."""
    outs = []
    for _ in range(launches):
        c = poisoned(torch, out_shape, torch.bfloat16)
        kernel(*args, c)
        outs.append(c)
    torch.cuda.synchronize()
    return all(torch.equal(outs[0], o) for o in outs[1:])


def check_launch(torch, kernel, args, ref, tol=1e-2, dtype=None, launches=1):
    """Launch on the arguments and a NaN-poisoned output (bf16 unless `dtype`), `launches` times (a persistent or
    split-K kernel must leave its state ready for the next launch); every element written, close to `ref`."""
    for launch in range(launches):
        out = poisoned(torch, tuple(ref.shape), dtype or torch.bfloat16)
        kernel(*args, out)
        torch.cuda.synchronize()
        assert not out.isnan().any(), f"launch {launch}"
        assert rel_err(out, ref) < tol, f"launch {launch}"


def check_attention(torch, kernel, shape, causal, seed, kv_heads=None, tol=2e-2):
    """Attention (flash_attention.tawa, gqa_attention.tawa) on fresh random Q [Z, H, S, D] and K, V [Z, kv_heads,
    S, D] (`kv_heads` default H), scale 1/sqrt(D), a NaN-poisoned output: every element written, close to float64
    SDPA with each key/value head repeated over its group of query heads."""
    z, h, s, d = shape
    hkv = kv_heads or h
    torch.manual_seed(seed)
    q = torch.randn(z, h, s, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(z, hkv, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    o = poisoned(torch, (z, h, s, d), torch.bfloat16)
    scale = 1 / math.sqrt(d)
    kernel(q, k, v, o, scale)
    torch.cuda.synchronize()
    assert not o.isnan().any()
    kk, vv = (x.double().repeat_interleave(h // hkv, dim=1) for x in (k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), kk, vv, is_causal=bool(causal), scale=scale)
    assert rel_err(o, ref) < tol
