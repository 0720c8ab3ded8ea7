"""When warp specialization does not apply, the compiler says why (ws_analysis) and the passes decline cleanly."""
from __future__ import annotations

import pytest

from tawa.compiler import decide
from tawa.errors import CompilationError
from tawa.options import CompileOptions
from mlir import ir

from tawa.errors import CompilationError
from tawa.ir.dialect import make_context
from tawa.lowering import scalar_loads, ws_analysis
from tawa.ir.traversal import walk
from tawa.options import CompileOptions

from ws_support import example_module, kernel, region, run_passes, source_module

HEADER = """
@grid(cdiv(M, BLOCK), cdiv(N, BLOCK))
def k(A: f32[M, K], B: f32[K, N], I: i32[K], C: f32[M, N], BLOCK: const = 32):
    pid_m = program_id(0)
    pid_n = program_id(1)
    acc = zeros((BLOCK, BLOCK), f32)
"""
STORE = "    store(C, (pid_m, pid_n), acc)\n"


def reason_of(body: str) -> tuple:
    m = source_module(HEADER + body + STORE)
    return ws_analysis.can_specialize(kernel(m))


def test_examples_that_specialize():
    for name in ("gemm", "swiglu", "gemm_bias_act", "gemm_fp8", "flash_attention"):
        m = example_module(name)   # keep the module alive while its ops are used
        assert ws_analysis.can_specialize(kernel(m)) == (True, ""), name


def test_no_dot_in_a_loop():
    m = example_module("softmax")
    ok, reason = ws_analysis.can_specialize(kernel(m))
    assert not ok and reason == "no tile loads feed a dot inside a loop"
    # a dot outside any loop does not count either
    ok, reason = reason_of("""    a = load(A, (pid_m, 0), (BLOCK, BLOCK))
    b = load(B, (0, pid_n), (BLOCK, BLOCK))
    acc = dot(a, b, acc)
""")
    assert not ok and reason == "no tile loads feed a dot inside a loop"


def test_load_inside_conditional():
    ok, reason = reason_of("""    for k in range(cdiv(K, BLOCK)):
        if k % 2 == 0:
            a = load(A, (pid_m, k), (BLOCK, BLOCK))
            b = load(B, (k, pid_n), (BLOCK, BLOCK))
            acc = dot(a, b, acc)
""")
    assert not ok and "inside a conditional" in reason and "kernel.tawa:" in reason


def test_nested_loops():
    """A K loop nested in a loop the program writes is specialized: the producer runs both loops, its offsets may
    read the outer loop's induction variable."""
    ok, reason = reason_of("""    for r in range(2):
        for k in range(cdiv(K, BLOCK)):
            a = load(A, (pid_m + r, k), (BLOCK, BLOCK))
            b = load(B, (k, pid_n), (BLOCK, BLOCK))
            acc = dot(a, b, acc)
""")
    assert ok, reason


def test_offset_carried_by_an_outer_loop():
    ok, reason = reason_of("""    kk = 0
    for r in range(2):
        for k in range(cdiv(K, BLOCK)):
            a = load(A, (pid_m, k + kk), (BLOCK, BLOCK))
            b = load(B, (k, pid_n), (BLOCK, BLOCK))
            acc = dot(a, b, acc)
        kk = kk + 1
""")
    assert not ok and "carried across iterations of the loop" in reason and "kernel.tawa:" in reason


def test_loop_under_a_branch_in_an_outer_loop():
    """A K loop under an `if` on the index of a loop around it: the producer runs the outer loop and takes the
    branch, and the protocol check pairs the two copies of the outer loop's index."""
    m = source_module(HEADER + """    for r in range(2):
        if r < 1:
            for k in range(cdiv(K, BLOCK)):
                a = load(A, (pid_m, k), (BLOCK, BLOCK))
                b = load(B, (k, pid_n), (BLOCK, BLOCK))
                acc = dot(a, b, acc)
""" + STORE)
    assert ws_analysis.can_specialize(kernel(m)) == (True, "")
    run_passes(m)
    assert [op.name for op in walk(region(m, "producer")) if op.name in ("scf.if", "scf.for")] == \
        ["scf.for", "scf.if", "scf.for"]


def test_offset_carried_across_iterations():
    ok, reason = reason_of("""    kk = 0
    for k in range(cdiv(K, BLOCK)):
        a = load(A, (pid_m, kk), (BLOCK, BLOCK))
        b = load(B, (kk, pid_n), (BLOCK, BLOCK))
        acc = dot(a, b, acc)
        kk = kk + 1
""")
    assert not ok and "carried across iterations" in reason


def test_offset_computed_from_tile_data():
    ok, reason = reason_of("""    for k in range(cdiv(K, BLOCK)):
        j = max(load(I, k, BLOCK), axis=0)
        a = load(A, (pid_m, j), (BLOCK, BLOCK))
        b = load(B, (j, pid_n), (BLOCK, BLOCK))
        acc = dot(a, b, acc)
""")
    assert not ok and "tawa.reduce" in reason and "only the consumer" in reason


def test_loaded_tile_carried_to_next_iteration():
    ok, reason = reason_of("""    prev = zeros((BLOCK, BLOCK), f32)
    for k in range(cdiv(K, BLOCK)):
        a = load(A, (pid_m, k), (BLOCK, BLOCK))
        acc = dot(prev, a, acc)
        prev = a
""")
    assert not ok and "carried to the next iteration" in reason


WHILE_IR = """
func.func @w(%A: memref<?x?xf32>, %B: memref<?x?xf32>, %C: memref<?x?xf32>) attributes {tawa.kernel} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c4 = arith.constant 4 : i32
  %z = arith.constant 0.0 : f32
  %acc0 = "tawa.splat"(%z) : (f32) -> tensor<16x16xf32>
  %r:2 = scf.while (%i = %c0, %acc = %acc0) : (i32, tensor<16x16xf32>) -> (i32, tensor<16x16xf32>) {
    %c = arith.cmpi slt, %i, %c4 : i32
    scf.condition(%c) %i, %acc : i32, tensor<16x16xf32>
  } do {
  ^bb0(%j: i32, %acc2: tensor<16x16xf32>):
    %a = "tawa.load"(%A, %c0, %j) : (memref<?x?xf32>, i32, i32) -> tensor<16x16xf32> loc("w.tawa":7:13)
    %b = "tawa.load"(%B, %j, %c0) : (memref<?x?xf32>, i32, i32) -> tensor<16x16xf32>
    %d = "tawa.dot"(%a, %b, %acc2) : (tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
    %n = arith.addi %j, %c1 : i32
    scf.yield %n, %d : i32, tensor<16x16xf32>
  }
  "tawa.store"(%C, %r#1, %c0, %c0) : (memref<?x?xf32>, tensor<16x16xf32>, i32, i32) -> ()
  return
}
"""


def test_while_loop():
    with make_context():
        m = ir.Module.parse(WHILE_IR)
        ok, reason = ws_analysis.can_specialize(kernel(m))
        assert not ok and "scf.while" in reason and "w.tawa:7:13" in reason
        # the driver decides once: under the default policy it falls back with the reason as a note ...
        plan, notes = decide(m, CompileOptions())
        assert not plan.warp_specialize and "scf.while" in notes[0]
        # ... and the pass, run by hand on such a kernel, rejects it at the source line instead of guessing
        with pytest.raises(CompilationError, match=r"w\.tawa:7:13.*scf\.while"):
            run_passes(m)


def test_policy():
    m = example_module("softmax")
    f = kernel(m)
    assert ws_analysis.decide(f, CompileOptions(warp_specialize=False)) == (None, "")
    ok, note = ws_analysis.decide(f, CompileOptions())
    assert not ok and "uniform-warp" in note and "no tile loads feed a dot" in note
    with pytest.raises(CompilationError, match="cannot warp-specialize kernel 'softmax': no tile loads") as e:
        ws_analysis.decide(f, CompileOptions(warp_specialize=True))
    assert "softmax.tawa" in str(e.value)
    with pytest.raises(CompilationError, match="cannot warp-specialize"):
        run_passes(example_module("softmax"), warp_specialize=True)
    m = example_module("gemm")
    plans, note = ws_analysis.decide(kernel(m), CompileOptions(warp_specialize=True))
    assert plans and note == ""


def test_loads_chosen_by_a_branch_in_the_loop():
    """Operands loaded under a run-time `if` in the loop (a concatenated K): the reason names the load and the `if`
    (it used to say that no tile loads feed a dot)."""
    ok, reason = reason_of("""    for k in range(cdiv(K, BLOCK)):
        if k < 2:
            a = load(A, (pid_m, k), (BLOCK, BLOCK))
            b = load(B, (k, pid_n), (BLOCK, BLOCK))
        else:
            a = load(A, (pid_m, k + 1), (BLOCK, BLOCK))
            b = load(B, (k + 1, pid_n), (BLOCK, BLOCK))
        acc = dot(a, b, acc)
""")
    assert not ok and "feeds a dot through a run-time `if` in the loop" in reason and "kernel.tawa:" in reason


def test_inner_trip_count_from_the_outer_index():
    """A K loop whose bound reads the index of the loop around it (a hand-written persistent causal attention) is
    specialized: the protocol check pairs the producer's and the consumers' copies of the outer loop, so the inner
    bounds are seen to be the same computation of the same index."""
    m = source_module(HEADER + """    for r in range(3):
        for k in range(min(r, cdiv(K, BLOCK))):
            a = load(A, (pid_m, k), (BLOCK, BLOCK))
            b = load(B, (k, pid_n), (BLOCK, BLOCK))
            acc = dot(a, b, acc)
""" + STORE)
    assert ws_analysis.can_specialize(kernel(m)) == (True, "")
    run_passes(m)       # protocol-check accepts it
    assert str(m).count("scf.for") >= 4


def scalar_loads_reason(body: str) -> tuple:
    m = source_module(HEADER + body + STORE)
    scalar_loads.run(m)
    return ws_analysis.can_specialize(kernel(m)), m


def test_scalar_read_from_memory_in_tile_coordinates():
    """`sum(load(I, k, 1))` reads one element of a tensor the kernel never writes (`scalar-loads`): scalar control
    the producer reads for itself, here in the coordinates of the tiles it loads (a block table)."""
    (ok, reason), m = scalar_loads_reason("""    for k in range(cdiv(K, BLOCK)):
        j = sum(load(I, k, 1))
        a = load(A, (pid_m, j), (BLOCK, BLOCK))
        b = load(B, (j, pid_n), (BLOCK, BLOCK))
        acc = dot(a, b, acc)
""")
    assert (ok, reason) == (True, "")
    run_passes(m)
    producer = str(region(m, "producer"))
    assert "tawa.load_scalar" in producer and "tawa.reduce" not in producer


def test_conditional_around_the_loop():
    """An `if` on scalar control around the K loop (tiles past an expert's rows skip it): the producer takes the
    same branch."""
    (ok, reason), m = scalar_loads_reason("""    if pid_m * BLOCK < sum(load(I, pid_n, 1)):
        for k in range(cdiv(K, BLOCK)):
            a = load(A, (pid_m, k), (BLOCK, BLOCK))
            b = load(B, (k, pid_n), (BLOCK, BLOCK))
            acc = dot(a, b, acc)
""")
    assert (ok, reason) == (True, "")
    run_passes(m)
    producer = region(m, "producer")
    assert [op.name for op in walk(producer) if op.name in ("scf.if", "scf.for")] == ["scf.if", "scf.for"]


def test_conditional_on_tile_data_or_a_written_tensor():
    """A condition the producer cannot compute: a reduction of a whole block, or an element of a tensor the kernel
    writes (its value depends on when it is read)."""
    (ok, reason), _ = scalar_loads_reason("""    if max(load(I, 0, BLOCK), axis=0) > 0:
        for k in range(cdiv(K, BLOCK)):
            acc = dot(load(A, (pid_m, k), (BLOCK, BLOCK)), load(B, (k, pid_n), (BLOCK, BLOCK)), acc)
""")
    assert not ok and "condition of the conditional" in reason and "tawa.reduce" in reason
    (ok, reason), _ = scalar_loads_reason("""    if sum(load(C[0], 0, 1)) > 0.0:
        for k in range(cdiv(K, BLOCK)):
            acc = dot(load(A, (pid_m, k), (BLOCK, BLOCK)), load(B, (k, pid_n), (BLOCK, BLOCK)), acc)
""")
    assert not ok and "condition of the conditional" in reason and "tawa.reduce" in reason


def test_split_k_with_a_loop_under_a_conditional_falls_back():
    """Split-K puts the code after its loop under a condition on the other programs' arrivals: a second K loop
    under an `if` after it cannot be followed by the producer, so the kernel takes the uniform path and says why
    (it used to fail in aref-insertion, naming a conditional the user never wrote)."""
    from tawa.compiler import compile_source
    source = HEADER.replace("f32[M, K], B: f32[K, N]", "bf16[M, K], B: bf16[K, N]").replace(
        "I: i32[K]", "I: i32[K], V: bf16[M, K], U: bf16[K, N]") + """    for k in range(cdiv(K, BLOCK)):
        acc = dot(load(A, (pid_m, k), (BLOCK, BLOCK)), load(B, (k, pid_n), (BLOCK, BLOCK)), acc)
    if sum(load(I, pid_m, 1)) > 0:
        for k in range(cdiv(K, BLOCK)):
            acc = dot(load(V, (pid_m, k), (BLOCK, BLOCK)), load(U, (k, pid_n), (BLOCK, BLOCK)), acc)
""" + STORE
    k = compile_source(source, "kernel.tawa", CompileOptions(split_k=2))
    notes = "\n".join(k.notes)
    assert "uses the uniform-warp schedule: with split_k" in notes and "kernel.tawa:" in notes


def test_persistent_refusal_says_why_the_kernel_is_not_specialized():
    """`schedule="persistent"` on a kernel that cannot be specialized names the reason (a load under an `if` in
    the loop), not only that it is not specialized."""
    import tawa
    source = '''
@grid(cdiv(M, 128), cdiv(N, 128))
def k(A: bf16[M, K], B1: bf16[K, N], B2: bf16[K, N], C: f32[M, N]):
    acc = zeros((128, 128), f32)
    for k in range(cdiv(K, 64)):
        a = load(A, (program_id(0), k), (128, 64))
        if k % 2 == 0:
            acc = dot(a, load(B1, (k, program_id(1)), (64, 128)), acc)
        else:
            acc = dot(a, load(B2, (k, program_id(1)), (64, 128)), acc)
    store(C, (program_id(0), program_id(1)), acc)
'''
    with pytest.raises(tawa.CompilationError, match=r"it is not warp-specialized \(the tile load at .*:8:.* is "
                                                    r"inside a conditional"):
        tawa.compile(source, cache=False, schedule="persistent")
