"""Loops that skip work with a run-time `if` inside them, the dot's loads under the condition.

- A bound on the loop index (`if k < kmax`, causal attention's `if j * BLOCK_N < (pid_m + 1) * BLOCK_M`):
  `loop-guards` makes the loop run over those iterations only, and the kernel is warp specialized as if it had
  been written so.
- Any other condition (`if k != skip`): the `if` stays, warp specialization does not apply (its producer issues
  the same loads every iteration), and the uniform-warp pipeline loads every iteration's operands ahead while only
  the dots stay conditional (`software_pipeline`). Both were internal compiler errors before.

Ragged shapes, NaN-poisoned outputs, float64 references; the interpreter agrees with the same references."""
import pathlib

import numpy as np
import pytest

import tawa
from e2e_support import PREFILL, check_attention, compiled, poisoned, rel_err

KERNELS = pathlib.Path(__file__).resolve().parent / "kernels"
BOUNDED = str(KERNELS / "gemm_skip_blocks.tawa")
SKIP_ONE = str(KERNELS / "gemm_skip_one_block.tawa")
ATTENTION = str(KERNELS / "attention_skip_blocks.tawa")
M, N, K = 200, 136, 304                        # 5 K blocks of 64, the last one ragged (48)
#: K of 300: A's rows 600 bytes apart break TMA's 16-byte rule, and the launch runs the variant without TMA
K_UNALIGNED = 300


def _k_blocks(kernel_path: str, value: int, k: int = K) -> list:
    """The K blocks the kernel adds up for its scalar argument `value`."""
    blocks = range(-(-k // 64))
    return [k for k in blocks if (k < value if kernel_path == BOUNDED else k != value)]


def _reference(a, b, blocks):
    ref = a[:, :0].double() @ b[:0].double()
    for k in blocks:
        ref = ref + a[:, 64 * k:64 * (k + 1)].double() @ b[64 * k:64 * (k + 1)].double()
    return ref


@pytest.mark.gpu
@pytest.mark.parametrize("path,value", [(BOUNDED, v) for v in (0, 1, 3, 99)] + [(SKIP_ONE, v) for v in (0, 2, 4, 9)],
                         ids=[f"kmax{v}" for v in (0, 1, 3, 99)] + [f"skip{v}" for v in (0, 2, 4, 9)])
@pytest.mark.parametrize("options", [{}, {"num_stages": 1}, {"tma": False}], ids=["auto", "stages1", "no-tma"])
@pytest.mark.parametrize("k", [K, K_UNALIGNED], ids=["k304", "k300"])
def test_gemm_skipping_k_blocks(path, value, options, k):
    if PREFILL and k == K_UNALIGNED:
        tawa.compile(path, **dict(options, tma=False))       # the variant the unaligned launch runs
    kernel = compiled(path, **options)
    import torch
    torch.manual_seed(value)
    a = torch.randn(M, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, N, device="cuda", dtype=torch.bfloat16)
    c = poisoned(torch, (M, N), torch.bfloat16)
    kernel(a, b, value, c)
    torch.cuda.synchronize()
    assert not c.isnan().any()
    blocks = _k_blocks(path, value, k)
    if blocks:
        assert rel_err(c, _reference(a, b, blocks)) < 1e-2
    else:
        assert (c == 0).all()


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 2, 77, 64), (2, 3, 200, 64), (1, 2, 1000, 64), (1, 1, 1, 64),
                                   (2, 2, 300, 128)], ids=lambda s: "x".join(map(str, s)))
def test_attention_skipping_blocks_above_the_diagonal(shape):
    kernel = compiled(ATTENTION, D=shape[3], BLOCK_N=64 if shape[3] == 64 else 128)
    import torch
    check_attention(torch, kernel, shape, causal=1, seed=sum(shape))


def test_a_bound_on_the_index_keeps_warp_specialization():
    """`if k < kmax` and causal attention's `if` become loop bounds: the kernels are warp specialized, and the
    attention's loop length is seen to grow with the query block (dynamic tiles, as for flash_attention.tawa)."""
    notes = "\n".join(tawa.compile(BOUNDED, cache=False).notes)
    assert "uniform-warp" not in notes and "schedule" in notes
    notes = "\n".join(tawa.compile(ATTENTION, D=128, BLOCK_N=128, cache=False).notes)
    assert "uniform-warp" not in notes and "dynamic tiles" in notes


def test_another_condition_takes_the_uniform_pipeline_with_a_note():
    notes = "\n".join(tawa.compile(SKIP_ONE, cache=False).notes)
    assert "uniform-warp schedule" in notes and "inside a conditional" in notes


@pytest.mark.parametrize("path,value", [(BOUNDED, 0), (BOUNDED, 2), (BOUNDED, 99), (SKIP_ONE, 1), (SKIP_ONE, 9)])
def test_interpreter_matches_the_reference(path, value):
    import ml_dtypes
    rng = np.random.default_rng(value)
    a = rng.standard_normal((70, K)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((K, 40)).astype(ml_dtypes.bfloat16)
    kernel = tawa.compile(path, BLOCK_M=64, BLOCK_N=64, target="cpu")
    c = np.full((70, 40), np.nan, dtype=ml_dtypes.bfloat16)
    kernel(a, b, value, c)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = np.zeros((70, 40))
    for k in _k_blocks(path, value):
        ref += a64[:, 64 * k:64 * (k + 1)] @ b64[64 * k:64 * (k + 1)]
    got = c.astype(np.float64)
    assert np.isfinite(got).all()
    assert np.abs(got - ref).max() <= 1e-2 * max(1.0, np.abs(ref).max())
