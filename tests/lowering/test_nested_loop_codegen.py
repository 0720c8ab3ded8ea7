"""A K loop nested in a loop the program writes (a batch loop; a persistent tile loop written by hand, as in
Triton's persistent matmul tutorial), compiled for sm_90a and assembled by ptxas on the CPU. Both were refused
before.
- Warp-specialized (the default): the producer runs the program's loop around its copy of the K loop, and the ring
  runs on across the outer loop's iterations (`partition`); one program per CTA (`persistent-tiles` does not
  apply), the epilogue's staging beside the ring rather than in it.
- Uniform warps (`warp_specialize=False`): the K loop's ring is pipelined, its barriers initialised again each
  time the inner loop starts (tawa/lowering/to_nvvm/uniform_pipeline.py).
The GPU runs are in tests/e2e/test_user_kernels_gpu.py (gemm_batch_loop, gemm_user_persistent); the interleaving
tests in tests/interleavings/test_ws_interleavings.py."""
import pathlib
import re

import pytest

import tawa
from ws_support import SERIALIZED, spill_bytes

USER = pathlib.Path(__file__).resolve().parents[1] / "e2e" / "kernels" / "user"


@pytest.mark.parametrize("kernel,options", [
    ("gemm_batch_loop", {}),
    ("gemm_batch_loop", {"BLOCK_N": 256}),
    ("gemm_user_persistent", {}),
])
def test_warp_specialized_across_the_outer_loop(kernel, options):
    k = tawa.compile(str(USER / f"{kernel}.tawa"), cache=False, **options)
    notes = " ".join(k.compiled.notes)
    assert "uniform-warp" not in notes and "nested in a loop the program writes" in notes, notes
    assert k.compiled.num_threads == 384                      # a producer and two consumer groups
    assert re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+40;", k.ptx)
    # the producer's loop nest: two loops, a TMA copy per operand in the inner one; no barrier re-initialised
    assert "mbarrier.inval" not in k.ptx
    assert not SERIALIZED.search(notes) and spill_bytes(k) == 0


@pytest.mark.parametrize("kernel,options", [
    ("gemm_batch_loop", {}),
    ("gemm_batch_loop", {"num_stages": 4}),
    ("gemm_batch_loop", {"num_stages": 2, "BLOCK_N": 256}),
    ("gemm_user_persistent", {}),
])
def test_uniform_warps_pipeline_the_inner_loop_and_restart_its_barriers(kernel, options):
    k = tawa.compile(str(USER / f"{kernel}.tawa"), cache=False, warp_specialize=False, **options)
    assert k.cubin[:4] == b"\x7fELF"
    stages = options.get("num_stages", 3)
    # each of the ring's barriers: initialised at the start of the kernel, invalidated and initialised again
    # before every run of the inner loop
    assert len(re.findall(r"mbarrier\.inval\.shared\.b64", k.ptx)) == stages
    assert len(re.findall(r"mbarrier\.init\.shared\.b64", k.ptx)) == 2 * stages
    # the ring is in flight: the loads of later iterations are issued inside the loop, the wgmmas stay async
    assert "cp.async.bulk.tensor" in k.ptx and re.search(r"wgmma\.wait_group\.sync\.aligned\s+1;", k.ptx)
    assert not SERIALIZED.search(" ".join(k.compiled.notes)) and spill_bytes(k) == 0


@pytest.mark.parametrize("warp_specialize", [None, False])
def test_an_epilogue_operand_in_the_loop_is_read_into_registers(warp_specialize):
    """gemm_batch_epilogue adds a residual after each batch's K loop: one program per CTA stages such an operand
    through the store's staging boxes with barriers waited on once, which a second batch found complete (stale
    data, or a hang). In a loop the operand is loaded into registers: the only barriers are the ring's."""
    options = {"num_buffers": 4} if warp_specialize is None else {"warp_specialize": False}
    k = tawa.compile(str(USER / "gemm_batch_epilogue.tawa"), cache=False, **options)
    inits = len(re.findall(r"mbarrier\.init\.shared\.b64", k.ptx))
    if warp_specialize is None:     # a full and an empty barrier per ring slot, initialised once
        assert inits == 8 and "mbarrier.inval" not in k.ptx
    else:                           # the ring's full barriers, at the start and again before each K loop
        assert inits == 2 * len(re.findall(r"mbarrier\.inval\.shared\.b64", k.ptx)) == 6
    assert spill_bytes(k) == 0
