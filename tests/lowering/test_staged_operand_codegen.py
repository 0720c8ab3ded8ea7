"""Epilogue operands read through the TMA store's staging boxes (`to_nvvm/staged_operand.py`), checked in the
PTX: the linear layer's residual is copied by TMA box by box and read from shared memory (its global loads are
gone: the kernel loads from global memory exactly what the same kernel without the residual loads), for every
schedule; operands the store cannot stage keep their global loads. ptxas assembles each kernel without spills."""
import pathlib
import re

import pytest

import tawa
from ws_support import spill_bytes

ROOT = pathlib.Path(__file__).resolve().parents[2]
LINEAR = (ROOT / "examples" / "linear_gelu_residual.tawa").read_text()
WITHOUT_RESIDUAL = LINEAR.replace("y = g + load(R, (pid_m, pid_n), (BLOCK_M, BLOCK_N)).to(f32)", "y = g")
KERNELS = ROOT / "tests" / "e2e" / "kernels"
TMA_LOAD = re.compile(r"cp\.async\.bulk\.tensor\.\dd\.shared::cluster\.global")
GLOBAL_LOAD = re.compile(r"\bld\.global")
SHARED_LOAD = re.compile(r"\bld\.shared")


def _compile(source, **options):
    return tawa.compile(source, cache=False, **options)


def _residual_maps(kernel):
    """The tensor maps of argument 3 (R) in the kernel's parameters."""
    return [p for p in kernel.compiled.abi if p.kind == "tensormap" and p.arg == 3]


@pytest.mark.parametrize("options,boxes", [
    ({"BLOCK_N": 256, "schedule": "persistent"}, 4),
    ({"BLOCK_N": 128, "schedule": "persistent"}, 2),
    ({"BLOCK_N": 256, "schedule": "tile"}, 4),
    ({"BLOCK_N": 128, "schedule": "pingpong"}, 2 * 2),             # each consumer group stages its own tiles
    ({"BLOCK_N": 256, "schedule": "persistent", "cluster": "2x1"}, 4),
    ({"warp_specialize": False}, 2),                                # the uniform pipeline's TMA store too
], ids=["persistent-n256", "persistent-n128", "tile-n256", "pingpong-n128", "persistent-c21", "uniform"])
def test_linear_residual_comes_through_the_staging(options, boxes):
    fused = _compile(LINEAR, **options)
    plain = _compile(WITHOUT_RESIDUAL, **options)
    assert len(GLOBAL_LOAD.findall(fused.ptx)) == len(GLOBAL_LOAD.findall(plain.ptx))
    assert len(TMA_LOAD.findall(fused.ptx)) == len(TMA_LOAD.findall(plain.ptx)) + boxes
    assert [(p.box, p.swizzle) for p in _residual_maps(fused)] == [([128, 64], 128)]
    assert SHARED_LOAD.search(fused.ptx) and not SHARED_LOAD.search(plain.ptx)
    assert spill_bytes(fused) == 0


def test_f32_residual_used_twice():
    kernel = _compile(str(KERNELS / "gemm_residual_f32.tawa"), schedule="persistent")
    assert not GLOBAL_LOAD.search(kernel.ptx)
    assert [p.box for p in kernel.compiled.abi if p.kind == "tensormap" and p.arg == 2] == [[128, 32]]
    assert spill_bytes(kernel) == 0


def test_residual_reduced_first_is_loaded_from_global_memory():
    """A reduction needs R's registers before the store: R keeps its global loads and gets no tensor map."""
    kernel = _compile(str(KERNELS / "gemm_residual_rowsum.tawa"), schedule="persistent")
    assert GLOBAL_LOAD.search(kernel.ptx)
    assert not [p for p in kernel.compiled.abi if p.kind == "tensormap" and p.arg == 2]


def test_operand_the_kernel_stores_is_not_staged():
    """C = A @ B + C reads the tensor it stores: its loads stay ahead of the store, from global memory."""
    source = (KERNELS / "gemm_residual_f32.tawa").read_text()
    source = source.replace("R: f32[M, N], C: f32[M, N]", "C: f32[M, N]").replace("load(R,", "load(C,")
    kernel = _compile(source, schedule="persistent")
    assert GLOBAL_LOAD.search(kernel.ptx)
