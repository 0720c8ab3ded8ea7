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
DOT_EXAMPLES = ["gemm", "gemm_bias_act", "gemm_fp8", "swiglu", "flash_attention", "gqa_attention"]


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
@pytest.mark.parametrize("head_dim,block_n", [(64, None), (64, 128), (128, None)])
def test_attention_wgmma_is_never_serialized(head_dim, block_n, causal, ws):
    """ptxas pipelines every wgmma of attention (no C7519 'wgmma.mma_async instructions are serialized' or any
    other serialization note), for both head dims (with the default key block, `min(HEAD_DIM, 128)`, and with
    128 at head dim 64), causal or not, specialized or not; and nothing spills."""
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


@pytest.mark.parametrize("example", ["flash_attention", "gqa_attention"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_attention_softmax_runs_under_the_previous_pv(example, head_dim):
    """The consumer loop is softmax-pipelined (`ws_softmax_pipeline_loop`): S_0 is issued and awaited before the
    loop (wait 0); in the loop S_k and P·V of block k-1 are committed back to back and only S_k is awaited
    (wait 1) before the softmax, then P·V (wait 0); the last P·V is issued after the loop. Nothing serializes.
    One CTA per SM: at head dim 64 the default (two CTAs, BLOCK_N 64) turns this lookahead off."""
    kernel = tawa.compile(str(EXAMPLES / f"{example}.tawa"), cache=False, HEAD_DIM=head_dim, ctas_per_sm=1)
    events = re.findall(r"wgmma\.(commit_group|wait_group)\.sync\.aligned\s*(\d?)", kernel.ptx)
    sequence = " ".join(kind if kind == "commit_group" else f"wait{n}" for kind, n in events)
    assert sequence == "commit_group wait0 commit_group commit_group wait1 wait0 commit_group wait0", sequence
    report = [n for n in kernel.notes if n.startswith("ptxas")]
    assert report and not any(SERIALIZED.search(n) for n in report), report
