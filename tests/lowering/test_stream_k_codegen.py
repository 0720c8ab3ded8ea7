"""Stream-K code generation, compiled for sm_90a and assembled by ptxas on the CPU: a CTA that shares a tile stores
its partial, counts its arrival at the boundary's record, and the second to arrive adds the other's partial to its
own registers and runs the epilogue; the workspace has one record per CTA. The GPU runs are in
tests/e2e/test_stream_k_gpu.py; the interpreter's (every tile once, any CTA count) in tests/interleavings."""
import re

import pytest

from tawa.errors import CompilationError
from ws_support import SERIALIZED, compile_example, spill_bytes


@pytest.mark.parametrize("block_n", [256, 128])
def test_partial_counter_and_other_half(block_n):
    k = compile_example("gemm", schedule="streamk", BLOCK_N=block_n)
    ptx, c = k.ptx, k.compiled
    assert c.stream_k and c.persistent and c.split_k == 1
    # two 128 x BLOCK_N f32 partials (two consumer warp groups, 256 threads) and the counter
    assert c.workspace_per_tile == 2 * 128 * block_n * 4 + 128
    assert [p.kind for p in c.abi].count("workspace") == 1
    groups = 128 * block_n // 256 // 4
    assert ptx.count("st.global.v4.b32") == groups           # this CTA's partial, four registers at a time
    assert ptx.count("ld.global.v4.b32") == groups           # only the other CTA's: its own is in its registers
    assert ptx.count("atom.add.acq_rel.gpu.global.u32") == 1
    order = [m.group(0) for m in re.finditer(r"st\.global\.v4|fence\.acq_rel\.gpu|atom\.add|ld\.global\.v4", ptx)]
    assert order.index("atom.add") > order.index("fence.acq_rel.gpu") > max(
        i for i, x in enumerate(order) if x == "st.global.v4")
    assert order.index("ld.global.v4") > order.index("atom.add")
    assert spill_bytes(k) == 0
    assert not SERIALIZED.search("\n".join(c.notes))
    assert any("uses the streamk schedule" in n for n in c.notes)


def test_first_iteration_still_peeled():
    """The K loop keeps its lower bound (the body sees the shifted iteration), so the first iteration, which
    overwrites the zero accumulator, is peeled as in the persistent kernel: the same wgmma count."""
    sk = compile_example("gemm", schedule="streamk").ptx
    pers = compile_example("gemm", schedule="persistent").ptx
    assert sk.count("wgmma.mma_async") == pers.count("wgmma.mma_async")


def test_swiglu_shares_both_accumulators():
    k = compile_example("swiglu", schedule="streamk", BLOCK_N=64)
    assert k.compiled.stream_k
    assert k.compiled.workspace_per_tile == 2 * 2 * 128 * 64 * 4 + 128
    assert k.ptx.count("atom.add.acq_rel.gpu.global.u32") == 1
    assert spill_bytes(k) == 0


def test_two_way_split_k_loads_only_the_other_split():
    """Split-K with two splits takes the same path: the last program's own partial is added from registers."""
    k = compile_example("gemm", split_k=2, BLOCK_M=64, BLOCK_N=128)
    assert k.ptx.count("ld.global.v4.b32") == 16 and k.ptx.count("st.global.v4.b32") == 16


EPILOGUES = {
    # a column mask from arange, no load at all
    "column_mask": """
@grid(cdiv(M, 128), cdiv(N, 256))
def k(A: bf16[M, K], B: bf16[K, N], C: bf16[M, N], alpha: f32):
    acc = zeros((128, 256), f32)
    for kk in range(cdiv(K, 64)):
        acc = dot(load(A, (program_id(0), kk), (128, 64)), load(B, (kk, program_id(1)), (64, 256)), acc)
    cols = program_id(1) * 256 + arange(0, 256)
    store(C, (program_id(0), program_id(1)), where(cols[None, :] % 2 == 0, acc * alpha, acc).to(bf16))
""",
    # a bias loaded before the K loop (after it would be refused)
    "bias_before_the_loop": """
@grid(cdiv(M, 128), cdiv(N, 256))
def k(A: bf16[M, K], B: bf16[K, N], bias: f32[N], C: bf16[M, N]):
    b = load(bias, (program_id(1),), (256,))
    acc = zeros((128, 256), f32)
    for kk in range(cdiv(K, 64)):
        acc = dot(load(A, (program_id(0), kk), (128, 64)), load(B, (kk, program_id(1)), (64, 256)), acc)
    store(C, (program_id(0), program_id(1)), (acc + b[None, :]).to(bf16))
""",
}


@pytest.mark.parametrize("name", sorted(EPILOGUES))
def test_epilogue_tiles_take_the_accumulator_layout(name):
    """The accumulator leaves the shared-tile branch in its wgmma layout, and the epilogue's other tiles (a mask,
    a bias) follow it: no conversion through shared memory (which did not fit beside the ring)."""
    import tawa
    sk = tawa.compile(EPILOGUES[name], cache=False, schedule="streamk")
    persistent = tawa.compile(EPILOGUES[name], cache=False, schedule="persistent")
    assert sk.compiled.stream_k
    assert sk.compiled.shared_bytes == persistent.compiled.shared_bytes
    assert spill_bytes(sk) == 0


def test_epilogue_loads_are_refused():
    with pytest.raises(CompilationError, match="its epilogue loads a tensor after the K loop"):
        compile_example("gemm_bias_act", schedule="streamk")


def test_gpu_test_shapes_exercise_both_paths():
    """The GPU tests' shapes: the shared ones share their tail on 132 SMs (H100 SXM, H200), the others do not, by
    the plan's rule."""
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[1] / "e2e" / "test_stream_k_gpu.py"
    spec = importlib.util.spec_from_file_location("stream_k_gpu", path)
    module = importlib.util.module_from_spec(spec)
    import sys
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    assert all(module._shares(*s, 132) for s in module.SHARED)
    assert not any(module._shares(*s, 132) for s in module.WHOLE)
