"""register_realloc and assign_warp_groups: budgets, annotations, and the NVVM/PTX of a warp-specialized GEMM."""
from __future__ import annotations

import re

import pytest
from mlir import ir

from tawa.errors import CompilationError
from tawa.lowering import assign_warp_groups, register_realloc
from tawa.options import CompileOptions

from ws_support import example_module, kernel, ops_named, region, run_passes

WS_OPTS = dict(warp_specialize=True)


def specialized(name="gemm", constants=None, **options):
    m = run_passes(example_module(name, constants), **{**WS_OPTS, **options})
    opts = CompileOptions(**{**WS_OPTS, **options})
    register_realloc.run(m, opts)
    assign_warp_groups.run(m, opts)
    return m, opts


def int_attr(op, name):
    return ir.IntegerAttr(op.attributes[name]).value


def test_register_budgets():
    m, _ = specialized()
    assert int_attr(region(m, "producer"), "tawa.max_registers") == 40
    assert int_attr(region(m, "consumer"), "tawa.max_registers") == 232
    with pytest.raises(CompilationError, match=r"lower consumer_registers to at most 232"):
        register_realloc.budgets(CompileOptions(consumer_registers=240), 2)
    assert register_realloc.budgets(CompileOptions(consumer_registers=240), 1) == (40, 240)
    # budgets not given are chosen per consumer count; given ones are kept, even where they equal the defaults
    assert register_realloc.budgets(CompileOptions(), 2) == (40, 232)
    assert register_realloc.budgets(CompileOptions(), 3) == (24, 160)
    assert register_realloc.budgets(CompileOptions(ctas_per_sm=2), 2) == (24, 104)      # half the register file
    assert register_realloc.budgets(CompileOptions(producer_registers=64), 2) == (64, 216)
    assert register_realloc.budgets(CompileOptions(producer_registers=40), 3) == (40, 152)
    assert register_realloc.budgets(CompileOptions(producer_registers=24, consumer_registers=152), 3) == (24, 152)
    with pytest.raises(CompilationError, match=r"lower consumer_registers to at most 160"):
        register_realloc.budgets(CompileOptions(producer_registers=24, consumer_registers=232), 3)
    # each count alone is validated with the other options
    with pytest.raises(CompilationError, match="multiple of 8"):
        CompileOptions(producer_registers=42).validate()
    with pytest.raises(CompilationError, match=r"producer_registers=16.*\[24, 256\]"):
        CompileOptions(producer_registers=16).validate()


def test_setmaxnreg_direction():
    from tawa import hopper
    from tawa.lowering.to_nvvm import sync
    from tawa.lowering.to_nvvm.builder import Builder
    assert hopper.entry_registers(384) == 168
    assert hopper.entry_registers(384, 2) == 80      # two CTAs per SM: half the register file each
    b = Builder()
    sync.setmaxnreg(b, 40, 384)
    sync.setmaxnreg(b, 232, 384)
    sync.setmaxnreg(b, 104, 384, 2)                 # above the 80 held at entry with two CTAs per SM
    sync.setmaxnreg(b, 24, 384, 2)
    assert [line.strip() for line in b.lines[-4:]] == [
        "nvvm.setmaxregister decrease 40", "nvvm.setmaxregister increase 232",
        "nvvm.setmaxregister increase 104", "nvvm.setmaxregister decrease 24"]


def test_annotations():
    m, _ = specialized()
    assert int_attr(kernel(m), "tawa.num_warps") == 12
    assert int_attr(region(m, "producer"), "tawa.first_warp_group") == 0
    assert int_attr(region(m, "consumer"), "tawa.first_warp_group") == 1
    loads = ops_named(region(m, "producer"), "tawa.load")
    assert len(loads) == 2 and all("tawa.aref_load" in ld.attributes for ld in loads)
    m, _ = specialized(num_consumer_groups=1)
    assert int_attr(kernel(m), "tawa.num_warps") == 8


def convert(m, opts, monkeypatch=None):
    """The backend's layout assignment and NVVM conversion on a specialized kernel."""
    from tawa.lowering import assign_layouts
    from tawa.lowering.to_nvvm import kernel as nvvm_kernel
    with m.context:
        m = assign_layouts.run(m, opts)
    return nvvm_kernel.convert_kernel(m, opts)


def test_gemm_nvvm(monkeypatch):
    m, opts = specialized(num_buffers=4)
    out = convert(m, opts, monkeypatch)
    text = str(out)
    assert "nvvm.maxntid = array<i32: 384, 1, 1>" in text and "nvvm.minctasm = 1" in text
    # 4 full barriers (count 1), then 4 empty barriers (count 2: one arrival per consumer warp group)
    counts = re.findall(r"nvvm\.mbarrier\.init %\S+, %c(\d+)_i32", text)
    assert counts == ["1"] * 4 + ["2"] * 4
    producer = text[text.index("setmaxregister  decrease 40"):text.index("setmaxregister  increase 232")]
    consumer = text[text.index("setmaxregister  increase 232"):]
    # producer: wait empty with the flipped phase, expect-tx of the slot (the default 128x256x64 bf16 tile: A 16 KiB
    # + B 32 KiB), the TMA copies (A: 1 box, B: 4 boxes of 64 columns)
    assert re.search(r"arith\.xori %\S+, %c1_i32 : i32\n\s+nvvm\.mbarrier\.try_wait\.parity", producer)
    assert "nvvm.elect.sync" in producer
    assert "nvvm.mbarrier.arrive.expect_tx %" in producer and "%c49152_i32" in producer
    assert producer.count("nvvm.cp.async.bulk.tensor.shared.cluster.global") == 5
    assert "wgmma" not in producer
    # stage = k & 3 and phase = (k >> 2) & 1 for depth 4
    assert re.search(r"arith\.andi %\S+, %c3_i32", producer) and re.search(r"arith\.shrui %\S+, %c2_i32", producer)
    # consumer: wait full, wgmma, keep that group in flight (wait until at most 1 pending), then one elected
    # thread per warp group releases the PREVIOUS iteration's slot; after the loop all groups are awaited and the
    # last slot is released
    loop = consumer[:consumer.index("scf.yield")]
    order = [loop.index(s) for s in ("nvvm.mbarrier.try_wait.parity", "wgmma.mma_async",
                                     "nvvm.wgmma.wait.group.sync.aligned 1", "arith.cmpi sgt", "nvvm.elect.sync",
                                     "nvvm.mbarrier.arrive %")]
    assert order == sorted(order)
    assert "wait.group.sync.aligned 0" not in loop
    after = consumer[consumer.index("scf.yield"):]
    assert after.index("nvvm.wgmma.wait.group.sync.aligned 0") < after.index("nvvm.mbarrier.arrive %")
    assert "cp.async.bulk.tensor.shared.cluster.global" not in consumer
    # the epilogue synchronises the consumer warp groups only (named barrier 2 over 256 threads), never bar 0
    assert re.search(r"nvvm.barrier id = %c2_i32 number_of_threads = %c256_i32", after)
    assert "nvvm.barrier0" not in consumer


def test_gemm_ptx(monkeypatch):
    from tawa.lowering import emit_ptx, lower_to_llvm
    m, opts = specialized(num_buffers=3)   # depth 3: stage and phase through remainder and division
    out = convert(m, opts, monkeypatch)
    assert "arith.remui" in str(out)
    out = lower_to_llvm.run(out, opts)
    ptx = emit_ptx.emit_ptx(out)
    assert re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+40;", ptx)
    assert re.search(r"setmaxnreg\.inc\.sync\.aligned\.u32\s+232;", ptx)
    assert re.search(r"mbarrier\.try_wait\.parity", ptx)
    if not emit_ptx.find_ptxas():
        pytest.skip("ptxas not installed")
    _cubin, report = emit_ptx.assemble(ptx)
    # setmaxnreg is honoured (no C7508 note) and nothing spills
    assert not any("setmaxnreg" in w or "C7508" in w for w in report.warnings), report.warnings
    assert report.spill_stores == 0 and report.registers <= 168
