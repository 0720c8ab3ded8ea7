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


#: 4-byte global loads without a predicate: the residual's late boxes, read inside the tensor.
WORD_LOAD = re.compile(r"^\s*ld\.global\.nc\.b32", re.M)
#: TMA copies into shared memory, and prefetches into L2, in the NVVM dialect.
TMA_COPY, L2_COPY = "nvvm.cp.async.bulk.tensor.shared.cluster.global", "nvvm.cp.async.bulk.tensor.prefetch"


def _nvvm(source, **options):
    """The kernel after `convert-to-nvvm`: one op per copy the lowering emitted (LLVM may duplicate code later)."""
    from tawa.compiler import compile_module
    from tawa.frontend import parse_and_lower
    from tawa.options import CompileOptions
    consts = {k: v for k, v in options.items() if k.startswith("BLOCK")}
    opts = CompileOptions(constants=consts, **{k: v for k, v in options.items() if not k.startswith("BLOCK")})
    return compile_module(parse_and_lower(source, "linear.tawa", opts.constants), opts, stop_after="convert-to-nvvm")


def _issues_wgmma(op) -> bool:
    return any(o.name == "nvvm.wgmma.commit.group.sync.aligned" or _issues_wgmma(o)
               for r in op.regions for blk in r.blocks for o in blk.operations)


def _copies(module, name: str) -> tuple:
    """(ops named `name` inside a consumer main loop: an scf.for issuing wgmmas with no such loop inside it,
    ops named `name` elsewhere)."""
    counts = [0, 0]

    def visit(op, in_main):
        for r in op.regions:
            for blk in r.blocks:
                for o in blk.operations:
                    if o.name == name:
                        counts[0 if in_main else 1] += 1
                    main = in_main or (o.name == "scf.for" and _issues_wgmma(o) and not any(
                        i.name == "scf.for" and _issues_wgmma(i) for rr in o.regions for bb in rr.blocks
                        for i in bb.operations))
                    visit(o, main)
    visit(module.operation, False)
    return tuple(counts)


@pytest.mark.parametrize("options,boxes,late", [
    ({"BLOCK_N": 256, "schedule": "persistent"}, 2, 32),
    ({"BLOCK_N": 128, "schedule": "persistent"}, 2, 0),
    ({"BLOCK_N": 256, "schedule": "tile"}, 4, 0),
    ({"BLOCK_N": 128, "schedule": "pingpong"}, 2 * 2, 0),          # each consumer group stages its own tiles
    ({"BLOCK_N": 256, "schedule": "persistent", "cluster": "2x1"}, 2, 32),
    ({"BLOCK_N": 192, "schedule": "pingpong"}, 2 * 3, 0),          # no room for a late box beside 192 registers
    ({"BLOCK_N": 128, "warp_specialize": False}, 2, 0),             # the uniform pipeline's TMA store too
], ids=["persistent-n256", "persistent-n128", "tile-n256", "pingpong-n128", "persistent-c21", "pingpong-n192",
        "uniform"])
def test_linear_residual_comes_through_the_staging(options, boxes, late):
    """R's boxes come by TMA into the staging, or, for the boxes of a persistent 4-box tile that wait for a
    staging buffer, into registers before the main loop (`late` pairs per thread: one 4-byte load each inside
    the tensor, two 2-byte loads at its edge); no other global load of R remains. `boxes` copies per tile; a
    prefetched box's copy is emitted twice (in the main loop, and before it for a loop too short to reach it)."""
    fused = _compile(LINEAR, **options)
    plain = _compile(WITHOUT_RESIDUAL, **options)
    assert len(GLOBAL_LOAD.findall(fused.ptx)) == len(GLOBAL_LOAD.findall(plain.ptx)) + 3 * late
    assert len(WORD_LOAD.findall(fused.ptx)) == late
    _, elsewhere = _copies(_nvvm(LINEAR, **options), TMA_COPY)
    _, plain_elsewhere = _copies(_nvvm(WITHOUT_RESIDUAL, **options), TMA_COPY)
    assert elsewhere - plain_elsewhere == boxes
    assert [(p.box, p.swizzle) for p in _residual_maps(fused)] == [([128, 64], 128)]
    assert len(SHARED_LOAD.findall(fused.ptx)) > len(SHARED_LOAD.findall(plain.ptx))
    assert spill_bytes(fused) == 0


@pytest.mark.parametrize("options,early,late,l2_early", [
    ({"BLOCK_N": 256, "schedule": "persistent"}, 2, 32, 0),
    ({"BLOCK_N": 256, "schedule": "persistent", "cluster": "2x1"}, 2, 32, 0),
    ({"BLOCK_N": 128, "schedule": "persistent"}, 2, 0, 0),
    ({"BLOCK_N": 192, "schedule": "pingpong"}, 2 * 2, 0, 0),
    ({"BLOCK_N": 256, "schedule": "tile"}, 0, 0, 4),
], ids=["persistent-n256", "persistent-c21", "persistent-n128", "pingpong-n192", "tile-n256"])
def test_residual_copies_start_in_the_main_loop(options, early, late, l2_early):
    """`epilogue-prefetch`: a persistent kernel copies the residual's first boxes into the (idle) staging from
    inside the main loop (at its second iteration: before the loop, the wait for the previous tile's stores held
    the first wgmma back) and loads the boxes that would wait for a staging buffer into registers before the loop
    (the epilogue then waits for no copy of R); with one tile per CTA (the staging is the drained ring) the whole
    tile goes into L2 from inside the loop. A loop too short to reach its second iteration starts them before
    it: each is emitted there once more."""
    fused = _nvvm(LINEAR, **options)
    plain_in_loop, _ = _copies(_nvvm(WITHOUT_RESIDUAL, **options), TMA_COPY)
    assert plain_in_loop == 0
    assert _copies(fused, TMA_COPY)[0] == early
    assert _copies(fused, L2_COPY)[0] == l2_early
    ptx = _compile(LINEAR, **options).ptx
    first_dot = ptx.index("wgmma.mma_async")
    assert len(WORD_LOAD.findall(ptx[:first_dot])) == late and not WORD_LOAD.search(ptx[first_dot:])
    assert _copies(_nvvm(WITHOUT_RESIDUAL, **options), L2_COPY) == (0, 0)


def test_f32_residual_used_twice():
    """128x128 f32: 4 boxes of 32 columns; the first two come by TMA, the late two into 32 registers (one
    4-byte load per element inside the tensor, a predicated one at its edge)."""
    kernel = _compile(str(KERNELS / "gemm_residual_f32.tawa"), schedule="persistent")
    assert len(WORD_LOAD.findall(kernel.ptx)) == 32 and len(GLOBAL_LOAD.findall(kernel.ptx)) == 64
    assert [p.box for p in kernel.compiled.abi if p.kind == "tensormap" and p.arg == 2] == [[128, 32]]
    assert spill_bytes(kernel) == 0


def test_residual_reduced_first_is_loaded_from_global_memory():
    """A reduction needs R's registers before the store: R keeps its global loads and gets no tensor map."""
    kernel = _compile(str(KERNELS / "gemm_residual_rowsum.tawa"), schedule="persistent")
    assert GLOBAL_LOAD.search(kernel.ptx)
    assert not [p for p in kernel.compiled.abi if p.kind == "tensormap" and p.arg == 2]


def test_operand_held_by_two_threads_is_not_staged():
    """64 rows over 8 uniform warps: each element has two owners (warps w and w + 4). Each owner overwrites what it
    read with no barrier between, so one could read the other's result: R keeps its global loads, no tensor map."""
    fused = _compile(LINEAR, BLOCK_M=64, BLOCK_N=128, warp_specialize=False, num_warps=8)
    assert _residual_maps(fused) == [] and GLOBAL_LOAD.search(fused.ptx)
    assert _residual_maps(_compile(LINEAR, BLOCK_N=128, warp_specialize=False, num_warps=8)) != []


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
    # (no more: the two may place the bias's small shared buffer at differently aligned offsets)
    assert _compile(LINEAR, **options).compiled.shared_bytes <= \
        _compile(WITHOUT_RESIDUAL, **options).compiled.shared_bytes


def test_registers_loaded_residual_costs_no_shared_memory_per_group():
    """An f32 residual added to a bf16 result cannot come through the bf16 staging: it is loaded into registers,
    so it takes no shared memory, once or per ping-pong group (counted twice, the 128x128 ping-pong kernel was
    refused: two ring slots and two stagings of 97 KiB did not fit)."""
    source = LINEAR.replace("R: bf16[M, N]", "R: f32[M, N]").replace("(BLOCK_M, BLOCK_N)).to(f32)",
                                                                     "(BLOCK_M, BLOCK_N))")
    kernel = _compile(source, BLOCK_N=128, schedule="pingpong")
    assert "uses the pingpong schedule" in "\n".join(kernel.compiled.notes) and _residual_maps(kernel) == []


def test_broadcast_vectors_are_counted_per_group():
    """FP8 ping-pong 256x64 stages its two scale vectors once per group, each 1024-aligned: counted once and
    unaligned, the ring took a fourth slot and the kernel needed 229 KiB of shared memory."""
    kernel = _compile(str(ROOT / "examples" / "gemm_fp8.tawa"), BLOCK_M=256, BLOCK_N=64, schedule="pingpong")
    assert kernel.compiled.shared_bytes <= 227 * 1024


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
