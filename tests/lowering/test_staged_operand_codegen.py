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


#: A TMA copy completing on a barrier of the reserved region (the staging's; the rings' barriers are in registers).
STAGING_COPY = re.compile(r"cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global\S* \[[^]]+\], \[[^]]+\], "
                          r"\[tawa_smem\+\d+\]")
L2_PREFETCH = re.compile(r"cp\.async\.bulk\.prefetch\.tensor\.2d\.L2\.global")


@pytest.mark.parametrize("options,early,l2_early,l2_late", [
    ({"BLOCK_N": 256, "schedule": "persistent"}, 2, 0, 2),
    ({"BLOCK_N": 256, "schedule": "persistent", "cluster": "2x1"}, 2, 0, 2),
    ({"BLOCK_N": 128, "schedule": "persistent"}, 2, 0, 0),
    ({"BLOCK_N": 256, "schedule": "tile"}, 0, 4, 0),
], ids=["persistent-n256", "persistent-c21", "persistent-n128", "tile-n256"])
def test_residual_is_prefetched_before_the_main_loop(options, early, l2_early, l2_late):
    """`epilogue-prefetch`: a persistent kernel copies the residual's first boxes into the (idle) staging before
    the main loop's first wgmma, and brings the boxes that wait for a staging buffer into L2 at the epilogue's
    start; with one tile per CTA (the staging is the drained ring) the whole tile goes into L2 before the loop."""
    ptx = _compile(LINEAR, **options).ptx
    first_dot = ptx.index("wgmma.mma_async")
    before, after = ptx[:first_dot], ptx[first_dot:]
    assert len(STAGING_COPY.findall(before)) == early
    assert len(L2_PREFETCH.findall(before)) == l2_early
    assert len(L2_PREFETCH.findall(after)) == l2_late
    assert not L2_PREFETCH.search(_compile(WITHOUT_RESIDUAL, **options).ptx)


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


@pytest.mark.parametrize("options", [
    {"BLOCK_N": 256, "schedule": "persistent"},
    {"BLOCK_N": 256, "schedule": "tile"},
    {"BLOCK_N": 128, "schedule": "pingpong"},
    {"BLOCK_N": 256, "schedule": "persistent", "cluster": "2x1"},
], ids=["persistent-n256", "tile-n256", "pingpong-n128", "persistent-c21"])
def test_residual_costs_no_ring_slots(options):
    """The ring is sized as if the residual were not there: it takes no shared memory of its own (it comes through
    the staging boxes), so it must not take ring slots (the 128x256 persistent tile had 2 slots instead of 4)."""
    from tawa.compiler import compile_source
    from tawa.options import CompileOptions
    depth = re.compile(r"tawa\.aref<\[[^\]]*\], (\d+) : i32>")
    consts = {k: v for k, v in options.items() if k.startswith("BLOCK")}
    opts = {k: v for k, v in options.items() if not k.startswith("BLOCK")}
    fused, plain = (str(compile_source(src, "linear.tawa", CompileOptions(constants=consts, **opts), emit="mlir"))
                    for src in (LINEAR, WITHOUT_RESIDUAL))
    assert depth.findall(fused) == depth.findall(plain) != []
    if options == {"BLOCK_N": 256, "schedule": "persistent"}:
        assert set(depth.findall(fused)) == {"4"}
    assert _compile(LINEAR, **options).compiled.shared_bytes == \
        _compile(WITHOUT_RESIDUAL, **options).compiled.shared_bytes


def _loads(path, **constants):
    from tawa.compiler import compile_source
    from tawa.ir.ops import LoadOp
    from tawa.ir.traversal import walk
    from tawa.options import CompileOptions
    module = compile_source(path.read_text(), str(path), CompileOptions(constants=constants), emit="tawa")
    func = next(op for op in walk(module.operation) if op.name == "func.func")
    # the module is returned too: its operations live only as long as it does
    return module, func, [LoadOp(op) for op in walk(func) if op.name == LoadOp.NAME]


def test_only_epilogue_operands_of_a_stored_shape_are_left_out():
    """The tile-level rule (`epilogue.read_through_staging`): the linear layer's residual is left out of the
    ring's budget; its bias (1-D) is not; attention's Q, 128x128 bf16 like the stored O but a dot operand (a
    shared tile of its own), is not either."""
    from tawa.lowering.epilogue import read_through_staging as _read_through_staging, stored_tiles as _stored_tiles
    module, func, loads = _loads(ROOT / "examples" / "linear_gelu_residual.tawa", BLOCK_N=128)
    stored = _stored_tiles(func)
    left_out = [str(ld.result.type) for ld in loads if _read_through_staging(ld, stored)]
    assert left_out == ["tensor<128x128xbf16>"] and len(loads) == 4          # X, W, bias, R: only R
    module, func, loads = _loads(ROOT / "examples" / "flash_attention.tawa")
    stored = _stored_tiles(func)
    assert ((128, 128), 2) in stored
    assert [ld for ld in loads if _read_through_staging(ld, stored)] == []
