"""Split-K code generation, compiled for sm_90a and assembled by ptxas on the CPU: each program stores its partial
as 16-byte vectors, fences, counts its arrival with one acquire-release atomic, and only the last sums the
partials and runs the epilogue; the workspace is a kernel parameter the runtime fills. The GPU runs of the same
kernels are in tests/e2e/test_split_k_gpu.py."""
import re

import pytest

from ws_support import SERIALIZED, compile_example, spill_bytes



@pytest.mark.parametrize("ws,schedule", [(None, None), (None, "tile"), (False, None)],
                         ids=["persistent", "ws-tile", "uniform"])
def test_partials_counter_and_sum(ws, schedule):
    k = compile_example("gemm", split_k=4, warp_specialize=ws, schedule=schedule, BLOCK_M=64, BLOCK_N=128)
    ptx, c = k.ptx, k.compiled
    assert c.split_k == 4
    # 64 x 128 f32 per split for one consumer warp group (128 threads x 64 registers), plus the counter.
    assert c.workspace_per_tile == 4 * 64 * 128 * 4 + 128
    assert [p.kind for p in c.abi].count("workspace") == 1
    assert ptx.count("st.global.v4.b32") == 16              # 64 registers per thread, four at a time
    assert ptx.count("ld.global.v4.b32") == 4 * 16           # every split's partial, in split order
    assert ptx.count("atom.add.acq_rel.gpu.global.u32") == 1
    assert ptx.count("fence.acq_rel.gpu") == 2
    # The partial is stored and fenced before the count; the sum after it.
    order = [m.group(0) for m in re.finditer(r"st\.global\.v4|fence\.acq_rel\.gpu|atom\.add|ld\.global\.v4", ptx)]
    assert order.index("atom.add") > order.index("fence.acq_rel.gpu") > max(
        i for i, x in enumerate(order) if x == "st.global.v4")
    assert order.index("ld.global.v4") > order.index("atom.add")
    assert not SERIALIZED.search("\n".join(c.notes))
    assert any("splits its K loop over 4 programs" in n for n in c.notes)


def test_warp_specialized_split_has_no_spills():
    """The sum loads one register group of every split at a time: loading all partials first (what LLVM would
    schedule) needs 4 x 64 registers and spilled."""
    assert spill_bytes(compile_example("gemm", split_k=4, BLOCK_M=64, BLOCK_N=128)) == 0
    assert spill_bytes(compile_example("gemm", split_k=2, BLOCK_M=64, BLOCK_N=256)) == 0


def test_two_accumulators_share_one_counter():
    k = compile_example("swiglu", split_k=3, BLOCK_M=64, BLOCK_N=64)
    assert k.ptx.count("atom.add.acq_rel.gpu.global.u32") == 1
    assert k.compiled.workspace_per_tile == 3 * 2 * 64 * 64 * 4 + 128
    assert spill_bytes(k) == 0


def test_unsplit_kernels_have_no_workspace():
    k = compile_example("gemm", BLOCK_M=64, BLOCK_N=128)
    assert k.compiled.split_k == 1 and k.compiled.workspace_per_tile == 0
    assert "atom.add" not in k.ptx and all(p.kind != "workspace" for p in k.compiled.abi)
