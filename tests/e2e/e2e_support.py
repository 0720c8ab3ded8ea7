"""Helpers for the end-to-end GPU tests.

The GPU tests compile through `tawa.compile`, so on a GPU machine without MLIR they run from the kernel cache.
`TAWA_PREFILL=1 TAWA_CACHE_DIR=DIR pytest tests/e2e` on a machine that has the compiler but no GPU fills DIR
with every kernel these tests use and then skips each test (nothing is checked there); pointing TAWA_CACHE_DIR at
DIR on the GPU machine then runs them all from the cache.
"""
import json
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


# ---- operands and float64 references of the fused examples (fresh random inputs per seed) -----------------
def _gelu_tanh(torch, x):
    """tanh-approximated GELU, written as the examples write it: x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3))."""
    return x * torch.sigmoid(1.5957691216057308 * (x + 0.044715 * x ** 3))


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


def check_launch(torch, kernel, args, ref, tol=1e-2):
    """Launch on the arguments and a NaN-poisoned bf16 output; every element written, close to `ref`."""
    out = poisoned(torch, tuple(ref.shape), torch.bfloat16)
    kernel(*args, out)
    torch.cuda.synchronize()
    assert not out.isnan().any()
    assert rel_err(out, ref) < tol
