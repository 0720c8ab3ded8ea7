"""Every example compiled for sm_90a on the CPU: the PTX assembles with ptxas, with no spills, and holds the
Hopper instructions the schedule needs (wgmma for dots, TMA bulk tensor copies, mbarriers); the GEMM's SASS shows
HGMMA and UTMALDG."""
import os
import pathlib
import re
import shutil
import subprocess

import pytest

import tawa

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"
DOT_EXAMPLES = ["gemm", "gemm_bias_act", "gemm_fp8", "swiglu", "flash_attention", "gqa_attention", "batched_gemm"]


def cuda_tool(name):
    """A CUDA binary from PATH or from the `nvidia-cuda-*` wheels."""
    try:
        import nvidia
        for root in nvidia.__path__:
            cand = os.path.join(root, "cu13", "bin", name)
            if os.path.exists(cand):
                return cand
    except ImportError:
        pass
    return shutil.which(name)


def spills(kernel):
    report = " ".join(n for n in kernel.notes if n.startswith("ptxas"))
    found = re.findall(r"(\d+) bytes spill (?:stores|loads)", report)
    assert found, f"no ptxas report in {kernel.notes}"
    return sum(int(x) for x in found)


@pytest.fixture(scope="module", autouse=True)
def _need_ptxas():
    if cuda_tool("ptxas") is None:
        pytest.fail("ptxas not found: install the dev extra (pip install -e '.[dev]')")


@pytest.mark.parametrize("name", DOT_EXAMPLES + ["softmax"])
@pytest.mark.parametrize("ws", [None, False], ids=["auto", "uniform"])
def test_example_assembles_without_spills(name, ws):
    kernel = tawa.compile(str(EXAMPLES / f"{name}.tawa"), warp_specialize=ws, cache=False)
    assert kernel.cubin and kernel.cubin[:4] == b"\x7fELF"
    assert spills(kernel) == 0
    ptx = kernel.ptx
    assert ".target sm_90a" in ptx
    if name in DOT_EXAMPLES:
        assert "mbarrier" in ptx
        assert "wgmma.mma_async" in ptx
        assert "cp.async.bulk.tensor" in ptx


def test_gemm_sass_has_hgmma_and_tma(tmp_path):
    cuobjdump = cuda_tool("cuobjdump")
    if not cuobjdump or not cuda_tool("nvdisasm"):
        pytest.fail("cuobjdump/nvdisasm not found: install the dev extra")
    kernel = tawa.compile(str(EXAMPLES / "gemm.tawa"), cache=False)
    path = tmp_path / "gemm.cubin"
    path.write_bytes(kernel.cubin)
    env = dict(os.environ, PATH=os.path.dirname(cuda_tool("nvdisasm")) + os.pathsep + os.environ.get("PATH", ""))
    sass = subprocess.run([cuobjdump, "-sass", str(path)], capture_output=True, text=True, env=env, check=True).stdout
    assert "HGMMA" in sass and "UTMALDG" in sass
    assert "STL" not in sass and "LDL" not in sass         # no local-memory spills


SERIALIZED = re.compile(r"C75\d\d|serializ", re.IGNORECASE)


@pytest.mark.parametrize("ws", [None, False], ids=["auto", "uniform"])
@pytest.mark.parametrize("causal", [0, 1], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim,block_n", [(64, None), (64, 128), (128, None), (128, 176)])
def test_attention_wgmma_is_never_serialized(head_dim, block_n, causal, ws):
    """ptxas pipelines every wgmma of attention (no C7519 'wgmma.mma_async instructions are serialized' or any
    other serialization note), for both head dims (with the default key block, 64 or 128, with
    128 at head dim 64, and with FlashAttention-3's 176 at head dim 128), causal or not, specialized or not; and
    nothing spills."""
    blocks = {} if block_n is None else {"BLOCK_N": block_n}
    kernel = tawa.compile(str(EXAMPLES / "flash_attention.tawa"), warp_specialize=ws, cache=False,
                          HEAD_DIM=head_dim, CAUSAL=causal, **blocks)
    report = [n for n in kernel.notes if n.startswith("ptxas")]
    assert report and not any(SERIALIZED.search(n) for n in report), report
    assert spills(kernel) == 0


def test_register_a_operand_is_not_serialized():
    """A dot whose A operand is computed in registers inside a pipelined loop (its fragments are packed before
    wgmma.fence)."""
    path = pathlib.Path(__file__).resolve().parent / "e2e" / "kernels" / "gemm_register_a.tawa"
    kernel = tawa.compile(str(path), warp_specialize=False, cache=False)
    report = [n for n in kernel.notes if n.startswith("ptxas")]
    assert report and not any(SERIALIZED.search(n) for n in report), report


def _sync_events(ptx: str) -> str:
    """The kernel's wgmma commits and waits and its mbarrier waits and arrivals, in PTX order, as words."""
    found = re.findall(r"wgmma\.(commit_group|wait_group)\.sync\.aligned\s*(\d?)|mbarrier\.(try_wait|arrive)"
                       r"(\.expect_tx)?", ptx)
    words = []
    for kind, n, bar, tx in found:
        words.append(("wait" + n if kind == "wait_group" else "commit") if kind else
                     ("expect_tx" if tx else bar))
    return " ".join(words)


@pytest.mark.parametrize("causal", [0, 1])
def test_attention_k_and_v_rings_of_their_own(causal):
    """At 176 keys only two K/V slots fit, and the example gets a K ring and a V ring (`aref_insertion`): K's slot k
    is released right after S_k is awaited (wait 1) and before P V_{k-1} is (wait 0), and V's slot k-1 is waited for
    just before P V_{k-1} is issued and released after it completes. The consumer's part of the kernel, in order:
    the peeled first block (wait K_0, S_0, release K_0), the loop (wait K_k, wait V_{k-1}, S_k, P V_{k-1}, wait 1,
    release K_k, wait 0, release V_{k-1}), and the last P V (wait V, issue, wait 0, release)."""
    kernel = tawa.compile(str(EXAMPLES / "flash_attention.tawa"), cache=False, BLOCK_N=176, CAUSAL=causal,
                          schedule="tile")
    consumer = ("try_wait commit wait0 arrive "
                "try_wait try_wait commit commit wait1 arrive wait0 arrive "
                "try_wait commit wait0 arrive")
    assert _sync_events(kernel.ptx).endswith(consumer), _sync_events(kernel.ptx)
    # At 128 keys three slots of both fit: one ring, released once P V_{k-1} completes.
    whole = tawa.compile(str(EXAMPLES / "flash_attention.tawa"), cache=False, CAUSAL=causal, schedule="tile")
    assert _sync_events(whole.ptx).endswith("try_wait commit wait0 try_wait commit commit wait1 wait0 arrive "
                                            "commit wait0 arrive"), _sync_events(whole.ptx)


@pytest.mark.parametrize("schedule", ["tile", "persistent"])
@pytest.mark.parametrize("example", ["flash_attention", "gqa_attention"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_attention_softmax_runs_under_the_previous_pv(example, head_dim, schedule):
    """The consumer loop is softmax-pipelined (`ws_softmax_pipeline_loop`): S_0 is issued and awaited before the
    loop (wait 0); in the loop S_k and P·V of block k-1 are committed back to back and only S_k is awaited
    (wait 1) before the softmax, then P·V (wait 0); the last P·V is issued after the loop. Nothing serializes.
    One CTA per SM: at head dim 64 the default (two CTAs, BLOCK_N 64) turns this lookahead off. A persistent
    kernel runs the same loop inside its tile loop, then releases Q's ring slot (a last wait 0)."""
    kernel = tawa.compile(str(EXAMPLES / f"{example}.tawa"), cache=False, HEAD_DIM=head_dim, ctas_per_sm=1,
                          schedule=schedule)
    events = re.findall(r"wgmma\.(commit_group|wait_group)\.sync\.aligned\s*(\d?)", kernel.ptx)
    sequence = " ".join(kind if kind == "commit_group" else f"wait{n}" for kind, n in events)
    expected = "commit_group wait0 commit_group commit_group wait1 wait0 commit_group wait0"
    assert sequence == expected + (" wait0" if schedule == "persistent" else ""), sequence
    report = [n for n in kernel.notes if n.startswith("ptxas")]
    assert report and not any(SERIALIZED.search(n) for n in report), report


@pytest.mark.parametrize("name,constants,options,wgmma", [
    ("gemm", {"BLOCK_N": 192}, {"schedule": "persistent"}, "m64n192k16"),
    ("gemm", {"BLOCK_N": 192}, {"schedule": "persistent", "cluster": "2x1"}, "m64n192k16"),
    ("gemm", {"BLOCK_N": 192}, {"warp_specialize": False, "num_warps": 8}, "m64n192k16"),
    ("gemm", {"BLOCK_N": 192}, {"tma": False}, "m64n192k16"),
    ("swiglu", {"BLOCK_N": 192}, {"schedule": "persistent"}, "m64n192k16"),
    ("linear_gelu_residual", {"BLOCK_N": 192}, {"schedule": "persistent"}, "m64n192k16"),
    ("linear_gelu_residual", {"BLOCK_M": 64, "BLOCK_N": 192}, {"schedule": "pingpong"}, "m64n192k16"),
    ("gemm_fp8", {"BLOCK_N": 192}, {}, "m64n192k32"),
    ("flash_attention", {"BLOCK_N": 176}, {}, "m64n176k16"),
    ("flash_attention", {"HEAD_DIM": 64, "BLOCK_N": 80}, {"ctas_per_sm": 2}, "m64n80k16"),
])
def test_tiles_that_are_not_powers_of_two(name, constants, options, wgmma):
    """Tile extents that are multiples of 16 but not powers of two (192-wide GEMM tiles with their bias and residual
    epilogues, FlashAttention-3's 176-key blocks): wgmmas of that N, no spills, nothing serialized."""
    kernel = tawa.compile(str(EXAMPLES / f"{name}.tawa"), cache=False, **constants, **options)
    assert f"wgmma.mma_async.sync.aligned.{wgmma}" in kernel.ptx
    assert spills(kernel) == 0
    report = [n for n in kernel.notes if n.startswith("ptxas")]
    assert report and not any(SERIALIZED.search(n) for n in report), report


ROW_MAX = """\
def rowmax(Q: bf16[S, 64], K: bf16[S, 64], O: f32[S], BLOCK: const = 64):
    q = load(Q, (program_id(0), 0), (BLOCK, 64))
    m_i = full((BLOCK,), -inf, f32)
    for j in range(cdiv(S, BLOCK)):
        k = load(K, (j, 0), (BLOCK, 64))
        s = dot(q, k.T)
        m_i = maximum(m_i, max(s, axis=1))
    store(O, (program_id(0),), m_i)
"""


@pytest.mark.parametrize("depth", [2, 3])
def test_single_dot_lookahead_waits_before_releasing(depth):
    """A lookahead loop whose only dot feeds math (no later dot completes its wgmmas): the ring's release waits for
    the wgmma groups (S_k, and S_{k+1} issued early) before the slot is freed and before the back edge, so no
    group is in flight where its registers are read (ptxas would serialize every wgmma, C7514)."""
    kernel = tawa.compile(ROW_MAX, cache=False, num_buffers=depth, schedule="tile")
    events = _sync_events(kernel.ptx)
    assert events.endswith("commit wait0 commit wait0 try_wait arrive wait0"), events
    report = [n for n in kernel.notes if n.startswith("ptxas")]
    assert report and not any(SERIALIZED.search(n) for n in report), report
