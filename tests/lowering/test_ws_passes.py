"""Aref insertion and partition on the examples: structure of the IR after each pass, asserted on the IR objects
(the textual checks are FileCheck files in tests/passes)."""
from __future__ import annotations

import pytest

from tawa.ir.kernel_info import body_block
from tawa.ir.location import source_location
from tawa.ir.traversal import ops_of
from tawa.options import CompileOptions

from tawa.errors import CompilationError
from tawa.ir import attrs
from tawa.lowering import aref_insertion, partition, protocol_check

from ws_support import example_module, kernel, ops_named, region, run_passes

# The IR of gemm after aref-insertion and partition, line by line: tests/passes/examples/gemm-ws.mlir.


def test_gemm_after_partition():
    m = run_passes(example_module("gemm"), passes=(aref_insertion, partition))
    body = ops_of(body_block(kernel(m)))
    assert [op.name for op in body] == ["tawa.aref_create", "scf.execute_region", "scf.execute_region",
                                        "func.return"]
    # Each region computes its own program ids; nothing but the aref is defined outside them.
    for role in ("producer", "consumer"):
        assert len(ops_named(region(m, role), "tawa.program_id")) == 2
    assert ops_named(region(m, "producer"), "tawa.store") == []
    protocol_check.run(m)


def test_depth_from_option_and_from_shared_memory():
    m = run_passes(example_module("gemm"), num_buffers=3)
    assert ", 3 : i32>" in str(m)
    # The default tile, 128x64 + 64x256 bf16 = 48 KiB per slot: 4 slots fit in the 226 KiB left for tiles (the
    # epilogue tile, stored after the loop, is staged in the drained ring).
    m = run_passes(example_module("gemm"))
    assert ", 4 : i32>" in str(m)
    # BLOCK_K = 128: 96 KiB per slot: 2 slots.
    m = run_passes(example_module("gemm", {"BLOCK_K": 128}))
    assert ", 2 : i32>" in str(m)
    # BLOCK_N = 128: 32 KiB per slot: 7 would fit, the automatic depth stops at 6.
    m = run_passes(example_module("gemm", {"BLOCK_N": 128}))
    assert ", 6 : i32>" in str(m)
    with pytest.raises(CompilationError, match="num_buffers"):
        run_passes(example_module("gemm"), num_buffers=0)


def test_consumer_group_count():
    m = run_passes(example_module("gemm", {"BLOCK_M": 64}))
    assert attrs.NUM_WARP_GROUPS.get(region(m, "consumer")) == 1
    m = run_passes(example_module("gemm"), num_consumer_groups=1)
    assert attrs.NUM_WARP_GROUPS.get(region(m, "consumer")) == 1
    with pytest.raises(CompilationError, match="num_consumer_groups=3 needs dots of 192 rows"):
        run_passes(example_module("gemm"), num_consumer_groups=3)
    with pytest.raises(CompilationError, match="num_consumer_groups"):
        run_passes(example_module("gemm"), num_consumer_groups=4)
    # 192 rows: three consumer warp groups of one 64-row slab each, by default
    m = run_passes(example_module("gemm", {"BLOCK_M": 192, "BLOCK_N": 192}))
    assert attrs.NUM_WARP_GROUPS.get(region(m, "consumer")) == 3
    m = run_passes(example_module("flash_attention", {"BLOCK_M": 192, "HEAD_DIM": 64}))
    assert attrs.NUM_WARP_GROUPS.get(region(m, "consumer")) == 3


def test_flash_attention_k_and_v_share_one_slot():
    m = run_passes(example_module("flash_attention", {"CAUSAL": 1}))
    # the order of the ops in both regions: tests/passes/examples/flash-attention-ws.mlir
    # the causal bound (min of two cdivs of the program id) is replicated in the producer
    assert len(ops_named(region(m, "producer"), "arith.minsi")) == 1


def test_swiglu_three_tiles_per_slot_and_fp8_and_epilogue_kernels():
    m = run_passes(example_module("swiglu"))
    assert len(ops_named(region(m, "producer"), "tawa.load")) == 3
    put = ops_named(region(m, "producer"), "tawa.aref_put")[0]
    assert len(put.operands) == 4
    assert len(ops_named(region(m, "consumer"), "tawa.dot")) == 2
    m = run_passes(example_module("gemm_fp8"))
    assert "tensor<128x128xf8E4M3FN>, tensor<256x128xf8E4M3FN>" in str(m)
    assert len(ops_named(region(m, "consumer"), "tawa.trans")) == 1
    # row/column scales are loaded after the loop by the consumer; they are not part of the ring
    assert len(ops_named(region(m, "consumer"), "tawa.load")) == 2
    m = run_passes(example_module("gemm_bias_act"))
    assert len(ops_named(region(m, "consumer"), "tawa.load")) == 1   # the bias


def test_locations_survive():
    m = run_passes(example_module("gemm"))
    put = ops_named(region(m, "producer"), "tawa.aref_put")[0]
    loc = source_location(put)
    assert loc is not None and loc.filename.endswith("gemm.tawa") and loc.line == 14


def test_warp_specialize_false_runs_no_ws_pass():
    from tawa.compiler import compile_module
    m = compile_module(example_module("gemm"), CompileOptions(warp_specialize=False), tile_level_only=True)
    assert "aref" not in str(m) and "execute_region" not in str(m)
