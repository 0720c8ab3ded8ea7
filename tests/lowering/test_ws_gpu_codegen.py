"""The warp-specialized GPU path end to end on the CPU: the full pass list, PTX, ptxas and (when the CUDA tools are
installed) the SASS. FileCheck-style checks that the schedule the passes decided is what the hardware will run."""
from __future__ import annotations

import pathlib
import re
import shutil
import subprocess

import pytest

from tawa.compiler import compile_source
from tawa.lowering import emit_ptx
from tawa.options import CompileOptions

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
needs_ptxas = pytest.mark.skipif(emit_ptx.find_ptxas() is None, reason="ptxas not installed")


def build(name, constants=None, **options):
    path = EXAMPLES / f"{name}.tawa"
    return compile_source(path.read_text(), str(path), CompileOptions(constants=dict(constants or {}), **options))


def ptxas_notes(kernel) -> list:
    return [n for n in kernel.notes if n.startswith("ptxas")]


def assert_clean_ptxas(kernel, allow_serialized=False):
    notes = ptxas_notes(kernel)
    assert notes, "ptxas did not run"
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", notes[0]), notes
    bad = [n for n in notes[1:] if allow_serialized is False or "C7519" not in n]
    assert not bad, bad


def sass(cubin: bytes) -> str | None:
    tool = shutil.which("cuobjdump")
    ptxas = emit_ptx.find_ptxas()
    if tool is None and ptxas:
        cand = pathlib.Path(ptxas).with_name("cuobjdump")
        tool = str(cand) if cand.exists() else None
    if tool is None:
        return None
    path = pathlib.Path(__file__).parent / ".ws_codegen.cubin"
    try:
        path.write_bytes(cubin)
        env = {"PATH": f"{pathlib.Path(tool).parent}:/usr/bin:/bin"}
        try:
            import nvidia  # the nvdisasm wheel installs next to cuobjdump or in its own package
            for root in nvidia.__path__:
                for sub in ("cu13", "cuda_nvdisasm"):
                    env["PATH"] += f":{root}/{sub}/bin"
        except ImportError:
            pass
        proc = subprocess.run([tool, "-sass", str(path)], capture_output=True, text=True, env=env)
        return proc.stdout if proc.returncode == 0 else None
    finally:
        path.unlink(missing_ok=True)


@needs_ptxas
# the default 128x256 tile, 128x128 and 256x128 (f16): the three tile shapes bench/bench_gemm.py times
# (128x128 tiles take the ping-pong schedule: a setmaxnreg per consumer group, three in all)
@pytest.mark.parametrize("constants,regions", [({}, 2), ({"BLOCK_N": 128}, 3),
                                               ({"BLOCK_M": 256, "BLOCK_N": 128, "DTYPE": "f16"}, 2)])
def test_gemm_ws_ptx(constants, regions):
    k = build("gemm", constants)
    assert k.num_threads == 384           # 1 producer + 2 consumer warp groups
    assert k.shared_bytes <= 227 * 1024
    assert_clean_ptxas(k)                 # no spills, wgmmas not serialized, setmaxnreg honoured
    # the PTX, line by line (barriers, setmaxnreg, TMA, wgmma, named barrier): tests/passes/examples/gemm-ws-ptx.mlir
    code = sass(k.cubin)
    if code is None:
        pytest.skip("cuobjdump/nvdisasm not installed")
    assert "HGMMA.64x" in code and "UTMALDG" in code and "UTMASTG" in code
    assert len(re.findall(r"USETMAXREG", code)) == regions
    assert not re.search(r"\bSTL\b|\bLDL\b", code)


@needs_ptxas
@pytest.mark.parametrize("name,constants", [("gemm_fp8", {}), ("gemm_bias_act", {}), ("swiglu", {}),
                                            ("flash_attention", {}), ("flash_attention", {"CAUSAL": 1})])
def test_other_examples_specialize(name, constants):
    k = build(name, constants)
    assert k.num_threads == 384
    assert "setmaxnreg.inc.sync.aligned.u32" in k.ptx and "mbarrier.try_wait.parity" in k.ptx
    assert_clean_ptxas(k, allow_serialized=name == "flash_attention")


@needs_ptxas
@pytest.mark.parametrize("constants,threads", [({}, 256), ({"BLOCK_N": 128}, 128)])
def test_uniform_fallback_not_serialized(constants, threads):
    """The uniform-warp schedule: 8 warps for the default 128x256 tile, 4 for 128x128."""
    k = build("gemm", constants, warp_specialize=False)
    assert k.num_threads == threads and "setmaxnreg" not in k.ptx
    assert_clean_ptxas(k)


# `tawac --dump-ir-after-all` on the WS GEMM: tests/passes/examples/gemm-ws-ptx.mlir (DUMP).
