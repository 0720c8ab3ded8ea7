"""The main loops' bookkeeping, checked in the PTX (docs/compiler.md, "Issue slots in the main loops"): wgmma
descriptors are computed once per operand and issue, later k-steps adding a constant, and the warp and warp-group
indices pass through `shfl.sync.idx` from lane 0, so that ptxas can keep what derives from them in uniform
registers."""
import pathlib
import re

import pytest

import tawa

ROOT = pathlib.Path(__file__).resolve().parents[2]
WGMMA = re.compile(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k(\d+)")
#: The descriptor's start-address field is `address >> 4`.
ADDRESS_FIELD = re.compile(r"shr\.u32\s+%r\d+, %r\d+, 4;")
LANE0_SHUFFLE = re.compile(r"shfl\.sync\.idx\.b32\s+%r\d+, %r\d+, 0, 31, -1;")

CASES = [
    # (example, constants, k-steps per issue: BLOCK_K (GEMMs) or the head dim / BLOCK_N (attention) over k)
    ("gemm.tawa", {}, 64 // 16),
    ("gemm_fp8.tawa", {}, 128 // 32),
    ("flash_attention.tawa", {}, 128 // 16),
    ("flash_attention.tawa", {"HEAD_DIM": 64}, 64 // 16),
]


@pytest.mark.parametrize("example,constants,steps", CASES, ids=lambda c: str(c))
def test_descriptor_address_once_per_operand(example, constants, steps):
    kernel = tawa.compile((ROOT / "examples" / example).read_text(), cache=False, **constants)
    ptx = kernel.compiled.ptx
    wgmmas = len(WGMMA.findall(ptx))
    issues = wgmmas // steps
    assert wgmmas and issues
    # two operands per issue at most (A and B; A from registers has none): one address field each, not one per
    # k-step
    fields = len(ADDRESS_FIELD.findall(ptx))
    assert 0 < fields <= 2 * issues, (fields, wgmmas, issues)


@pytest.mark.parametrize("example", ["gemm.tawa", "flash_attention.tawa", "swiglu.tawa"])
def test_warp_indices_are_warp_uniform(example):
    ptx = tawa.compile((ROOT / "examples" / example).read_text(), cache=False).compiled.ptx
    # the warp-group index: a thread index (tid.x, or tid.x less the producer's threads) >> 7
    groups = re.findall(r"shr\.u32\s+(%r\d+), %r\d+, 7;", ptx)
    assert groups
    for g in groups:
        uses = re.findall(rf"^\s*(\S+)[^\n]*, {re.escape(g)}\b", ptx, re.M)
        assert uses == ["shfl.sync.idx.b32"], f"{g} (a warp-group index) is used only through a lane-0 shuffle"
    assert LANE0_SHUFFLE.search(ptx)


#: A warp vote whose "no" skips a run of multiplies: the accumulator's rescale marked by `lazy-rescale`.
SKIPPED_RESCALE = re.compile(r"vote\.sync\.any\.pred\s+(%p\d+), %p\d+, -1;\s*not\.pred\s+(%p\d+), \1;\s*"
                             r"@\2 bra\s+\S+;((?:\s*mul\.rn\.f32[^\n]*)+)")


@pytest.mark.parametrize("constants,per_thread", [({}, 64), ({"HEAD_DIM": 64}, 32), ({"CAUSAL": 1}, 64),
                                                  ({"BLOCK_N": 64}, 64)], ids=str)
def test_attention_rescale_is_skipped_when_alpha_is_one(constants, per_thread):
    """The accumulator rescale (one multiply per accumulator register: BLOCK_M x HEAD_DIM over 256 consumer
    threads) sits behind a warp vote, once per key block in the steady-state loop."""
    kernel = tawa.compile((ROOT / "examples" / "flash_attention.tawa").read_text(), cache=False, **constants)
    skips = SKIPPED_RESCALE.findall(kernel.compiled.ptx)
    assert skips, "no vote-guarded rescale in the PTX"
    assert all(body.count("mul.rn.f32") == per_thread for _, _, body in skips), [b.count("mul") for *_, b in skips]


USER = ROOT / "tests" / "e2e" / "kernels" / "user"
EX2 = re.compile(r"^\s*ex2\.approx\.ftz\.f32\s+%r\d+, (%r\d+);", re.M)


@pytest.mark.parametrize("kernel", ["attn_cross.tawa", "attn_noscale.tawa", "softmax_temp.tawa"])
def test_exponential_of_a_shifted_score_is_one_fma(kernel):
    """`exp(s - m[:, None])` as users write it (pass `exp-base2`): each exponential's argument is one FMA of the
    score and the row's scaled maximum, not a subtract followed by a multiply by log2(e)."""
    ptx = tawa.compile((USER / kernel).read_text(), cache=False).compiled.ptx
    defs = dict((m.group(2), m.group(1)) for m in re.finditer(r"^\s*([a-z0-9.]+)\s+(%r\d+),", ptx, re.M))
    args = EX2.findall(ptx)
    assert len(args) >= 32
    kinds = [defs.get(a) for a in args]
    # all but the per-row exponentials (alpha = exp(m_old - m), the row sums) come straight from an FMA
    assert kinds.count("fma.rn.f32") >= 0.9 * len(kinds), sorted(set(kinds))
