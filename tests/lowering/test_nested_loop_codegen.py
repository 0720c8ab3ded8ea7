"""A K loop nested in a loop the program writes (a batch loop; a persistent tile loop written by hand, as in
Triton's persistent matmul tutorial), compiled for sm_90a and assembled by ptxas on the CPU. Warp specialization
does not apply (it says why); the uniform-warp pipeline rings the inner loop's loads and initialises its barriers
again each time the inner loop starts (tawa/lowering/to_nvvm/uniform_pipeline.py). Before, the kernel was refused.
The GPU runs are in tests/e2e/test_user_kernels_gpu.py (gemm_batch_loop, gemm_user_persistent)."""
import pathlib
import re

import pytest

import tawa
from ws_support import SERIALIZED, spill_bytes

USER = pathlib.Path(__file__).resolve().parents[1] / "e2e" / "kernels" / "user"


@pytest.mark.parametrize("kernel,options", [
    ("gemm_batch_loop", {}),
    ("gemm_batch_loop", {"num_stages": 4}),
    ("gemm_batch_loop", {"num_stages": 2, "BLOCK_N": 256}),
    ("gemm_user_persistent", {}),
])
def test_the_inner_loop_is_pipelined_and_its_barriers_restart(kernel, options):
    k = tawa.compile(str(USER / f"{kernel}.tawa"), cache=False, **options)
    assert k.cubin[:4] == b"\x7fELF"
    notes = " ".join(k.compiled.notes)
    assert "uniform-warp schedule" in notes and "nested inside another loop" in notes, notes
    stages = options.get("num_stages", 3)
    # each of the ring's barriers: initialised at the start of the kernel, invalidated and initialised again
    # before every run of the inner loop
    assert len(re.findall(r"mbarrier\.inval\.shared\.b64", k.ptx)) == stages
    assert len(re.findall(r"mbarrier\.init\.shared\.b64", k.ptx)) == 2 * stages
    # the ring is in flight: the loads of later iterations are issued inside the loop, the wgmmas stay async
    assert "cp.async.bulk.tensor" in k.ptx and re.search(r"wgmma\.wait_group\.sync\.aligned\s+1;", k.ptx)
    assert not SERIALIZED.search(notes) and spill_bytes(k) == 0


def test_warp_specialization_asked_for_says_why_not():
    with pytest.raises(tawa.CompilationError, match="nested inside another loop"):
        tawa.compile(str(USER / "gemm_batch_loop.tawa"), cache=False, warp_specialize=True)
