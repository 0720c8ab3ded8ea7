"""protocol_check rejects every hand-broken aref protocol with an error naming the aref and the source line."""
from __future__ import annotations

import re

import pytest
from mlir import ir
from mlir.dialects import arith, scf

from tawa.errors import CompilationError
from tawa.ir.dialect import make_context
from tawa.lowering import aref_insertion, partition, protocol_check, ws_ir

from ws_support import example_module, ops_named, region, run_passes

AREF = r"aref #0 <tensor<128x64xbf16>, tensor<64x256xbf16>; depth \d+>"   # gemm.tawa at its default 128x256x64 tile


@pytest.fixture
def gemm():
    """The warp-specialized GEMM (not yet checked), and handles on its ops."""
    m = run_passes(example_module("gemm"), passes=(aref_insertion, partition))
    prod, cons = region(m, "producer"), region(m, "consumer")
    return m, prod, cons


def expect_error(m, pattern: str, line: int | None = None):
    with pytest.raises(CompilationError) as e:
        protocol_check.run(m)
    err = e.value
    assert re.search(pattern, err.message), err.message
    assert re.search(AREF, err.message) or "aref" in err.message
    if line is not None:
        assert err.location is not None and err.location.filename.endswith("gemm.tawa"), str(err)
        assert err.location.line == line, str(err)
        assert err.location.source_line.strip(), "the offending source line is shown"
    return err


def test_specialized_examples_pass():
    for name in ("gemm", "swiglu", "gemm_bias_act", "gemm_fp8", "flash_attention"):
        run_passes(example_module(name))   # includes protocol_check


def test_get_without_consumed(gemm):
    m, prod, cons = gemm
    ops_named(cons, "tawa.aref_consumed")[0].erase()
    err = expect_error(m, AREF + r": aref_get at .*gemm\.tawa:14:\d+ is not matched by exactly one aref_consumed "
                       r"in the same iteration of the loop", line=14)
    assert "b = load(B" in err.location.source_line


def test_consumed_on_one_branch_only(gemm):
    m, prod, cons = gemm
    consumed = ops_named(cons, "tawa.aref_consumed")[0]
    loop = ops_named(cons, "scf.for")[0]
    iv = loop.regions[0].blocks[0].arguments[0]
    with m.context, consumed.location:
        ip = ir.InsertionPoint(consumed)
        zero = arith.ConstantOp(ir.IntegerType.get_signless(32), 0, ip=ip)
        cond = arith.CmpIOp(arith.CmpIPredicate.eq, iv, zero.result, ip=ip)
        branch = scf.IfOp(cond.result, [], has_else=True, ip=ip)
        with ir.InsertionPoint(branch.then_block):
            scf.YieldOp([])
        with ir.InsertionPoint(branch.else_block):
            scf.YieldOp([])
        consumed.move_before(branch.then_block.operations[0])
    expect_error(m, AREF + r": aref_consumed runs on only one branch of the conditional", line=15)


def test_consumed_without_get(gemm):
    m, prod, cons = gemm
    consumed = ops_named(cons, "tawa.aref_consumed")[0]
    store = ops_named(cons, "tawa.store")[0]
    consumed.clone(ip=ir.InsertionPoint(store))
    expect_error(m, AREF + r": aref_consumed releases a slot that no earlier aref_get of the same iteration took",
                 line=15)


def test_mismatched_trip_counts(gemm):
    m, prod, cons = gemm
    loop = ops_named(prod, "scf.for")[0]
    with m.context, loop.location:
        one = arith.ConstantOp(ir.IntegerType.get_signless(32), 1, ip=ir.InsertionPoint(loop))
        ub = arith.AddIOp(loop.operands[1], one.result, ip=ir.InsertionPoint(loop))
    loop.operands[1] = ub.result
    expect_error(m, AREF + r": the producer's loop at .*gemm\.tawa:12:\d+ and the consumer's loop at "
                 r".*gemm\.tawa:12:\d+ may run different trip counts \(upper bounds differ\)", line=12)


def test_same_bounds_from_clones_are_accepted(gemm):
    m, prod, cons = gemm
    # the producer's bound is a clone of the consumer's computation, not the same SSA value
    p_ub = ops_named(prod, "scf.for")[0].operands[1]
    c_ub = ops_named(cons, "scf.for")[0].operands[1]
    assert p_ub != c_ub and ws_ir.values_equivalent(p_ub, c_ub)
    protocol_check.run(m)


def test_nobody_puts(gemm):
    m, prod, cons = gemm
    ops_named(prod, "tawa.aref_put")[0].erase()
    expect_error(m, AREF + r" is read by aref_get but no warp group puts to it", line=14)


def test_nobody_gets(gemm):
    m, prod, cons = gemm
    ops_named(cons, "tawa.aref_consumed")[0].erase()
    get = ops_named(cons, "tawa.aref_get")[0]
    # replace the borrowed tiles by zeros so the get can go
    with m.context, get.location:
        for r in get.results:
            zero = arith.ConstantOp(ir.F32Type.get(), 0.0, ip=ir.InsertionPoint(get))
            z = ir.Operation.create("tawa.splat", results=[r.type], operands=[zero.result],
                                    ip=ir.InsertionPoint(get))
            r.replace_all_uses_with(z.results[0])
    get.erase()
    expect_error(m, AREF + r" is filled by aref_put but no warp group gets from it", line=14)


def test_puts_and_gets_per_iteration_differ(gemm):
    m, prod, cons = gemm
    put = ops_named(prod, "tawa.aref_put")[0]
    put.clone(ip=ir.InsertionPoint(put))
    expect_error(m, AREF + r": 2 aref_put per iteration at .* but 1 aref_get per iteration", line=14)


def test_put_inside_conditional(gemm):
    m, prod, cons = gemm
    put = ops_named(prod, "tawa.aref_put")[0]
    with m.context, put.location:
        ip = ir.InsertionPoint(put)
        true = arith.ConstantOp(ir.IntegerType.get_signless(1), 1, ip=ip)
        branch = scf.IfOp(true.result, [], ip=ip)
        with ir.InsertionPoint(branch.then_block):
            scf.YieldOp([])
        put.move_before(branch.then_block.operations[0])
    expect_error(m, r"tawa\.aref_put is inside 'scf\.if' at .*; aref puts and gets run unconditionally in their "
                    r"loop \(a conditional may stand only around a whole loop", line=14)


def test_get_outside_the_mirrored_loop(gemm):
    m, prod, cons = gemm
    get = ops_named(cons, "tawa.aref_get")[0]
    loop = ops_named(cons, "scf.for")[0]
    get.move_before(loop)
    ops_named(cons, "tawa.aref_consumed")[0].move_before(loop)
    expect_error(m, AREF + r": aref_put at .* runs inside 1 loop\(s\) and conditional\(s\) but aref_get at .* "
                    r"inside 0", line=14)


HANDWRITTEN = """
func.func @k(%A: memref<?x?xf32>, %C: memref<?x?xf32>) attributes {tawa.kernel} {
  %r = "tawa.aref_create"() : () -> !tawa.aref<[tensor<16x16xf32>], 2 : i32> loc("k.tawa":3:5)
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %n = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xf32>) -> i32
    %c1 = arith.constant 1 : i32
    scf.for %i = %c0 to %n step %c1 : i32 {
      %a = "tawa.load"(%A, %c0, %i) : (memref<?x?xf32>, i32, i32) -> tensor<16x16xf32>
      "tawa.aref_put"(%r, %a) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0>} : (!tawa.aref<[tensor<16x16xf32>], 2 : i32>, tensor<16x16xf32>) -> () loc("k.tawa":6:9)
    }
    scf.yield
  } {tawa.warp_group = "producer"}
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %n = "tawa.dim"(%A) {axis = 0 : i32} : (memref<?x?xf32>) -> i32
    %c1 = arith.constant 1 : i32
    scf.for %i = %c0 to %n step %c1 : i32 {
      %v = "tawa.aref_get"(%r) {resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (!tawa.aref<[tensor<16x16xf32>], 2 : i32>) -> tensor<16x16xf32> loc("k.tawa":8:13)
      "tawa.store"(%C, %v, %c0, %i) : (memref<?x?xf32>, tensor<16x16xf32>, i32, i32) -> ()
      "tawa.aref_consumed"(%r) : (!tawa.aref<[tensor<16x16xf32>], 2 : i32>) -> ()
    } loc("k.tawa":7:5)
    scf.yield
  } {tawa.warp_group = "consumer", tawa.num_warp_groups = 1 : i32}
  return
}
"""


def test_handwritten_bounds_of_different_dims():
    # dim(A, 1) in the producer, dim(A, 0) in the consumer: equal only for square A, so rejected.
    with make_context():
        m = ir.Module.parse(HANDWRITTEN)
        with pytest.raises(CompilationError) as e:
            protocol_check.run(m)
        assert "aref #0 <tensor<16x16xf32>; depth 2>" in e.value.message
        assert "upper bounds differ" in e.value.message
        assert str(e.value.location) == "k.tawa:7:5"
        fixed = ir.Module.parse(HANDWRITTEN.replace("{axis = 0 : i32}", "{axis = 1 : i32}"))
        protocol_check.run(fixed)
