"""A 16-bit B operand computed in registers (`dot(a, w.to(bf16))`: a weight-only fp8 GEMM) is written by the
threads into shared memory (`to_nvvm/dot.stage_b`), checked in the PTX: between two barriers of the region's
threads, shared stores then a proxy fence before the wgmmas that read it. In a warp-specialized consumer loop the
dot stays in flight (one group pending) and the iterations write two buffers in turn; elsewhere every such dot
completes before the buffer is written again (no wgmma group left in flight)."""
import pathlib
import re

import pytest

import tawa
from ws_support import spill_bytes

ROOT = pathlib.Path(__file__).resolve().parents[2]
KERNEL = (ROOT / "tests" / "e2e" / "kernels" / "user" / "gemm_fp8_weight.tawa").read_text()


@pytest.mark.parametrize("options,in_flight", [({}, True), ({"schedule": "persistent"}, True),
                                               ({"schedule": "tile"}, True), ({"warp_specialize": False}, False)],
                         ids=["auto", "persistent", "tile", "uniform"])
def test_computed_b_is_staged_and_each_dot_completes(options, in_flight):
    kernel = tawa.compile(KERNEL, cache=False, **options)
    ptx = kernel.ptx
    assert spill_bytes(kernel) == 0
    first_wgmma = ptx.index("wgmma.mma_async")
    before = ptx[:first_wgmma]
    # the converted weight: stored to shared memory, fenced for the async proxy, published by a barrier
    stores = [m.start() for m in re.finditer(r"\bst\.shared\.(v[248]\.)?(b16|u16|b32)", before)]
    assert stores, "the computed B is not written to shared memory before the first wgmma"
    fence = before.rindex("fence.proxy.async.shared::cta")
    assert fence > stores[-1]
    assert re.search(r"\bbar\.sync\b", before[fence:])
    # a dot whose B buffer the next iteration rewrites waits for its wgmmas, unless there are two buffers: then
    # its group stays in flight while the next iteration writes the other (the group two iterations back, which
    # read it, is complete: the barrier before the writes follows every group's wait for all but its latest)
    pending = re.search(r"wgmma\.wait_group\.sync\.aligned\s+1;", ptx)
    assert bool(pending) == in_flight


def test_computed_b_buffer_fits_beside_the_ring():
    """The staging buffer is counted in the shared memory the ring may take: a 128x256 tile (64 KiB of staged B
    and operands) still fits."""
    kernel = tawa.compile(KERNEL, cache=False, BLOCK_N=256)
    assert kernel.compiled.shared_bytes <= 232448
