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


NK = (ROOT / "tests" / "e2e" / "kernels" / "user" / "gemm_fp8_weight_nk.tawa").read_text()
WGMMA_TRANSPOSE_B = re.compile(r"wgmma\.mma_async\.sync\.aligned\.[^;]*?,\s*(\d)\s*;")


@pytest.mark.parametrize("source,k_major", [(KERNEL, False), (NK, True)], ids=["w_kn", "w_nk"])
@pytest.mark.parametrize("options", [{}, {"BLOCK_N": 256}, {"BLOCK_M": 192}], ids=["auto", "n256", "m192"])
def test_computed_b_read_and_staged_in_vectors(source, k_major, options):
    """The fp8 weight tile is read four bytes a load along its stored rows and the converted B written eight bytes
    a store: along N for W [K, N] (staged N-major), along K for nn.Linear's W [N, K] used as `w.T` (staged K-major,
    read by wgmma without transpose). Read along the used tile's rows, W [N, K] took one byte load per element,
    four rows apart, and two-byte stores (87 TFLOP/s against 475 at 4096^3, H200)."""
    kernel = tawa.compile(source, cache=False, **options)
    ptx = kernel.ptx
    assert spill_bytes(kernel) == 0
    before = ptx[:ptx.index("wgmma.mma_async")]
    assert not re.search(r"\bld\.shared\.(u8|b8|s8)\b", before), "fp8 weight read a byte at a time"
    assert re.search(r"\bld\.shared\.(b32|v2\.b16|v4\.b8)\b", before)
    assert not re.search(r"\bst\.shared\.(b16|u16)\b", before), "converted B written two bytes at a time"
    assert re.search(r"\bst\.shared\.v2\.b32\b", before)
    flags = set(WGMMA_TRANSPOSE_B.findall(ptx))
    assert flags == {"0" if k_major else "1"}, flags


@pytest.mark.parametrize("source", [KERNEL, NK], ids=["w_kn", "w_nk"])
def test_fp8_weight_converted_two_elements_a_conversion(source):
    """Each `cvt.rn.f16x2.e4m3x2` converts two weight elements: to bf16 each then goes through f32, so there are
    two f16 -> f32 conversions for each fp8 pair conversion (one each, element by element, before)."""
    ptx = tawa.compile(source, cache=False, BLOCK_N=256).ptx
    pairs = len(re.findall(r"cvt\.rn\.f16x2\.e4m3x2", ptx))
    widened = len(re.findall(r"cvt\.f32\.f16", ptx))
    assert pairs and widened == 2 * pairs, (pairs, widened)


def test_register_overlap_off_keeps_the_waiting_dot():
    """`register_overlap=False`: the dot with a computed B waits for its wgmmas every iteration (one buffer), and
    the kernel's notes name no overlap; on (auto) the notes name the double-buffered B."""
    on = tawa.compile(KERNEL, cache=False, BLOCK_N=256)
    off = tawa.compile(KERNEL, cache=False, BLOCK_N=256, register_overlap=False)
    assert re.search(r"wgmma\.wait_group\.sync\.aligned\s+1;", on.ptx)
    assert not re.search(r"wgmma\.wait_group\.sync\.aligned\s+1;", off.ptx)
    assert any("B double-buffered" in n for n in on.compiled.notes)
    assert not any("register_overlap" in n for n in off.compiled.notes)
    assert spill_bytes(off) == 0


def test_three_consumer_groups_keep_the_waiting_dot():
    """A 192-row tile's three consumer groups (160 registers each) do not double-buffer a computed B: converting
    the next B beside the accumulators in flight spilled 144 bytes and ran slower than waiting."""
    kernel = tawa.compile(KERNEL, cache=False, BLOCK_M=192)
    assert not re.search(r"wgmma\.wait_group\.sync\.aligned\s+1;", kernel.ptx)
    assert spill_bytes(kernel) == 0


def _ring_depths(source, **options) -> list:
    from tawa.lowering import aref_insertion
    depths, choose = [], aref_insertion.choose_depth

    def spy(*args, **kw):
        depths.append(choose(*args, **kw))
        return depths[-1]
    aref_insertion.choose_depth = spy
    try:
        tawa.compile(source, cache=False, **options)
    finally:
        aref_insertion.choose_depth = choose
    return depths


@pytest.mark.parametrize("options", [{}, {"BLOCK_N": 256}, {"BLOCK_M": 256, "BLOCK_K": 128}],
                         ids=["auto", "n256", "m256k128"])
def test_a_transposed_weight_costs_no_ring_slots(options):
    """`w.T` of a ring slot relabels the slot (no scratch shared memory): the [N, K] weight gets the ring the
    [K, N] one gets (counted as a register transpose it lost a slot, and at 256x128x128 its double buffer)."""
    assert _ring_depths(NK, **options) == _ring_depths(KERNEL, **options)


SCALED = """
@grid(cdiv(M, BLOCK_M), cdiv(N, BLOCK_N))
def scaled_weight(A: bf16[M, K], W: f8e4m3[N, K], s: bf16[N], C: bf16[M, N],
                  BLOCK_M: const = 128, BLOCK_N: const = 128, BLOCK_K: const = 64):
    acc = zeros((BLOCK_M, BLOCK_N), f32)
    sc = load(s, program_id(1), BLOCK_N)
    for k in range(cdiv(K, BLOCK_K)):
        a = load(A, (program_id(0), k), (BLOCK_M, BLOCK_K))
        w = load(W, (program_id(1), k), (BLOCK_N, BLOCK_K))
        acc = dot(a, {b}, acc)
    store(C, (program_id(0), program_id(1)), acc.to(bf16))
"""


@pytest.mark.parametrize("b", ["w.T.to(bf16) * sc[None, :]", "sc[None, :] * w.T.to(bf16)", "w.T.T.T.to(bf16)"])
def test_math_on_a_shared_tile_takes_its_read_layout(b):
    """A broadcast scale multiplied into the transposed weight is wanted in the layout the weight is read in (it
    was converted through shared memory every K step), and `w.T.T.T` is read as `w.T` (an even number of
    transposes reads the tile as stored)."""
    from tawa.lowering.to_nvvm import shape
    conversions, convert = [], shape.convert

    def spy(ctx, tile, layout):
        if not tile.layout.same_mapping(layout) and len({r.name for r in tile.regs}) > 1:
            conversions.append((tile.layout.desc, layout.desc))
        return convert(ctx, tile, layout)
    shape.convert = spy
    try:
        kernel = tawa.compile(SCALED.replace("{b}", b), cache=False)
    finally:
        shape.convert = convert
    assert conversions == []
    assert spill_bytes(kernel) == 0
    assert not re.search(r"\bld\.shared\.(u8|b8)\b", kernel.ptx)


def test_an_even_number_of_transposes_reads_the_tile_as_stored():
    """`w.T.T` of a [K, N] weight is read along its stored rows, as `w` is (taken as transposed, it was read one
    byte an element, four rows apart)."""
    source = KERNEL.replace("w = load(W, (k, pid_n), (BLOCK_K, BLOCK_N)).to(bf16)",
                            "w = load(W, (k, pid_n), (BLOCK_K, BLOCK_N)).T.T.to(bf16)")
    assert source != KERNEL
    ptx = tawa.compile(source, cache=False).ptx
    assert not re.search(r"\bld\.shared\.(u8|b8)\b", ptx)
