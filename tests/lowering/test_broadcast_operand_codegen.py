"""1-D epilogue operands broadcast over the tile (`to_nvvm/broadcast_operand.py`), checked in the PTX: a bias or a
per-column scale is loaded once per element by the threads of each consumer region, before the main loop, and
read back from shared memory in the epilogue, instead of every thread loading each column its registers hold
after the loop. A row scale held in two registers per thread keeps its register loads."""
import pathlib
import re

import pytest

import tawa
from ws_support import spill_bytes

ROOT = pathlib.Path(__file__).resolve().parents[2]
LINEAR = (ROOT / "examples" / "linear_gelu_residual.tawa").read_text()
WITHOUT_RESIDUAL = LINEAR.replace("y = g + load(R, (pid_m, pid_n), (BLOCK_M, BLOCK_N)).to(f32)", "y = g")
GLOBAL_LOAD = re.compile(r"\bld\.global")
SHARED_STORE_16 = re.compile(r"\bst\.shared\.[bu]16")


def _compile(source, **options):
    return tawa.compile(source, cache=False, **options)


@pytest.mark.parametrize("options,regions", [
    ({"BLOCK_N": 256, "schedule": "persistent"}, 1),
    ({"BLOCK_N": 256, "schedule": "tile"}, 1),
    ({"BLOCK_N": 128, "schedule": "pingpong"}, 2),
    ({"BLOCK_N": 256, "schedule": "persistent", "cluster": "2x1"}, 1),
], ids=["persistent-n256", "tile-n256", "pingpong-n128", "persistent-c21"])
def test_bias_is_loaded_once_per_element_before_the_main_loop(options, regions):
    """The linear layer's bias (bf16, 128 or 256 columns, 128 or 256 threads per consumer region): one
    predicated 2-byte load per thread and region, before the region's first wgmma, written to shared memory
    once; the 64 (n256) or 32 per-thread loads of the register tile are gone."""
    kernel = _compile(WITHOUT_RESIDUAL, **options)
    ptx = kernel.ptx
    assert len(GLOBAL_LOAD.findall(ptx)) == regions
    assert GLOBAL_LOAD.search(ptx[:ptx.index("wgmma.mma_async")])
    assert len(SHARED_STORE_16.findall(ptx)) == regions
    assert spill_bytes(kernel) == 0


def test_fp8_column_scale_is_shared_and_row_scale_stays_in_registers():
    """FP8 GEMM, 128x256 tile: sb (256 columns, 64 registers per thread) comes through shared memory, one load
    per thread; sa (2 registers per thread) keeps its 2 register loads."""
    kernel = _compile(str(ROOT / "examples" / "gemm_fp8.tawa"), schedule="persistent")
    assert len(GLOBAL_LOAD.findall(kernel.ptx)) == 3
    assert spill_bytes(kernel) == 0


def test_without_warp_specialization_the_bias_is_a_register_load():
    """The uniform-warp pipeline has no consumer region to prefetch in: its bias stays a register tile."""
    kernel = _compile(WITHOUT_RESIDUAL, warp_specialize=False)
    assert len(GLOBAL_LOAD.findall(kernel.ptx)) > 1 and not SHARED_STORE_16.search(kernel.ptx)
