"""The `tawa` verifier (tawa/ir/verify.py): the compiler's own IR passes it after every pass, each rule rejects
IR that breaks it (naming the rule, the op and the source location), and a pass that breaks an invariant fails at
that pass, by name."""
from __future__ import annotations

import dataclasses
import pathlib

import pytest
from mlir import ir

from tawa import compiler
from tawa.compiler import compile_source
from tawa.errors import CompilationError, InternalCompilerError
from tawa.frontend import parse_and_lower
from tawa.ir import attrs, verify as verify_mod
from tawa.ir.dialect import make_context
from tawa.ir.kernel_info import kernel_function
from tawa.ir.ops import ArefCreateOp, create_get, warp_groups
from tawa.ir.traversal import ops_of, walk
from tawa.ir.verify import verify
from tawa.options import CompileOptions

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.tawa"))


# ---- (a) the compiler's own IR verifies after every pass ----------------------------------------------------
@pytest.fixture
def verify_calls(monkeypatch):
    """The `after` of every verifier call the compiler makes."""
    calls = []

    def counting(module, after=None):
        calls.append(after)
        verify(module, after)

    monkeypatch.setattr(verify_mod, "verify", counting)
    return calls


@pytest.mark.parametrize("target,ws", [("cuda", None), ("cuda", False), ("cpu", None), ("cpu", True)],
                         ids=["cuda-auto", "cuda-uniform", "cpu", "cpu-ws"])
@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=[p.stem for p in EXAMPLE_FILES])
def test_examples_verify_after_every_pass(path, target, ws, verify_calls):
    options = CompileOptions(verify_each=True, target=target, warp_specialize=ws)
    try:
        compile_source(path.read_text(), str(path), options)
    except CompilationError as e:   # warp_specialize=True on a kernel without a pipelined dot loop
        assert ws is True and "cannot warp-specialize" in e.message
        return
    assert verify_calls[0] == "frontend"
    assert verify_calls[1] == "canonicalize"
    if target == "cuda":
        assert verify_calls[-2:] == ["convert-to-nvvm", "lower-to-llvm"]
    if ws:
        assert "partition" in verify_calls


def test_nvvm_module_is_accepted():
    path = EXAMPLES / "gemm.tawa"
    module = parse_and_lower(path.read_text(), str(path))
    module = compiler.compile_module(module, CompileOptions(), stop_after="convert-to-nvvm")
    assert any(op.name == "gpu.module" for op in ops_of(module.body))
    verify(module, after="convert-to-nvvm")


# ---- (b) one violation per rule ----------------------------------------------------------------------------
AREF = "!tawa.aref<[tensor<64x64xbf16>], 2 : i32>"
TILE = "tensor<64x64xbf16>"
MEM = "memref<?x?xbf16>"
PUT_SEG = "{operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0>}"
GET_SEG = "{resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>}"


def kernel(body: str, kernel_attrs: str = "", args: str = f"%A: {MEM}, %C: {MEM}") -> str:
    """A kernel function around `body`, with %c0 (i32) and %f0 (f32) defined."""
    return f"""
func.func @k({args}) attributes {{tawa.kernel{kernel_attrs}}} {{
  %c0 = arith.constant 0 : i32
  %f0 = arith.constant 0.0 : f32
  {body}
  return
}}"""


def ws_kernel(producer: str = "", consumer: str = "", producer_attrs: str = "",
              consumer_attrs: str = ", tawa.num_warp_groups = 1 : i32", kernel_attrs: str = "",
              extra: str = "") -> str:
    """A partitioned kernel: an aref, a producer putting one load, a consumer getting and storing it."""
    return kernel(f"""
  %r = "tawa.aref_create"() : () -> {AREF}
  scf.execute_region {{
    %a = "tawa.load"(%A, %c0, %c0) : ({MEM}, i32, i32) -> {TILE}
    "tawa.aref_put"(%r, %a) {PUT_SEG} : ({AREF}, {TILE}) -> ()
    {producer}
    scf.yield
  }} {{tawa.warp_group = "producer"{producer_attrs}}}
  scf.execute_region {{
    %b = "tawa.aref_get"(%r) {GET_SEG} : ({AREF}) -> {TILE}
    "tawa.store"(%C, %b, %c0, %c0) : ({MEM}, {TILE}, i32, i32) -> ()
    "tawa.aref_consumed"(%r) : ({AREF}) -> ()
    {consumer}
    scf.yield
  }} {{tawa.warp_group = "consumer"{consumer_attrs}}}
  {extra}""", kernel_attrs)


def parse(text: str) -> ir.Module:
    return ir.Module.parse(text, make_context())


def load(result: str, n_offsets: int = 2, mem: str = MEM) -> str:
    offs = ", ".join(["%c0"] * n_offsets)
    return f'%x = "tawa.load"(%A{", " if offs else ""}{offs}) : ({mem}{", i32" * n_offsets}) -> {result}'


SCALAR = {"bf16": "%z0", "f16": "%z1", "f32": "%z2"}


def _splat(name: str, tile: str) -> str:
    elem = tile[:-1].rsplit("x", 1)[1]
    return f'{name} = "tawa.splat"({SCALAR[elem]}) : ({elem}) -> {tile}'


def dot_body(a: str, b: str, acc: str, res: str | None = None, loc: str = "") -> str:
    """`tawa.dot` of splatted operands of the given tile types."""
    return f"""
  %z0 = arith.constant 0.0 : bf16
  %z1 = arith.constant 0.0 : f16
  %z2 = arith.constant 0.0 : f32
  {_splat("%ta", a)}
  {_splat("%tb", b)}
  {_splat("%tc", acc)}
  %d = "tawa.dot"(%ta, %tb, %tc) : ({a}, {b}, {acc}) -> {res or acc} {loc}"""


def split_k_body(t="tensor<64x64xf32>", slot=0, splits=2) -> str:
    """The split-K ops on a splatted accumulator of type `t`."""
    splat = _splat("%acc", t) if t.endswith("f32>") else f'%acc = "tawa.splat"(%c0) : (i32) -> {t}'
    return f"""
  %z2 = arith.constant 0.0 : f32
  {splat}
  "tawa.split_k_store"(%acc, %c0, %c0) {{slot = {slot} : i32}} : ({t}, i32, i32) -> ()
  %last = "tawa.split_k_arrive"(%c0) {{splits = {splits} : i32}} : (i32) -> i1
  %sum = "tawa.split_k_sum"(%acc, %c0, %c0) {{slot = 0 : i32, splits = 2 : i32}} : ({t}, i32, i32) -> {t}"""


GOOD = {
    "load": kernel(load(TILE)),
    "prefetch": kernel(f'"tawa.prefetch"(%A, %c0, %c0) {{shape = array<i64: 64, 64>}} : ({MEM}, i32, i32) -> ()'),
    "split-k": kernel(split_k_body()),
    "load-fewer-dims": kernel(load("tensor<64xbf16>", 3, "memref<?x?x?xbf16>"),
                              args=f"%A: memref<?x?x?xbf16>, %C: {MEM}"),
    "store": kernel(load(TILE) + f'\n  "tawa.store"(%C, %x, %c0, %c0) : ({MEM}, {TILE}, i32, i32) -> ()'),
    "dot": kernel(dot_body("tensor<64x32xbf16>", "tensor<32x16xbf16>", "tensor<64x16xf32>")),
    "load-scalar": kernel('%s = "tawa.load_scalar"(%I, %c0) : (memref<?xi32>, i32) -> i32',
                          args=f"%A: {MEM}, %C: {MEM}, %I: memref<?xi32>"),
    "shape-ops": kernel("""
  %r = "tawa.arange"() {start = 16 : i32, end = 48 : i32} : () -> tensor<32xi32>
  %e = "tawa.expand_dims"(%r) {axis = 1 : i32} : (tensor<32xi32>) -> tensor<32x1xi32>
  %b = "tawa.broadcast"(%e) : (tensor<32x1xi32>) -> tensor<32x8xi32>
  %t = "tawa.trans"(%b) : (tensor<32x8xi32>) -> tensor<8x32xi32>
  %s = "tawa.reduce"(%t) {axis = 0 : i32, kind = "max"} : (tensor<8x32xi32>) -> tensor<32xi32>
  %v = "tawa.reduce"(%s) {axis = 0 : i32, kind = "sum"} : (tensor<32xi32>) -> i32
  %p = "tawa.program_id"() {axis = 2 : i32} : () -> i32
  %n = "tawa.num_programs"() {axis = 0 : i32} : () -> i32
  %dm = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xbf16>) -> i32"""),
    "ws": ws_kernel(),
    "ws-assigned": ws_kernel(producer_attrs=", tawa.first_warp_group = 0 : i32, tawa.max_registers = 40 : i32",
                             consumer_attrs=", tawa.num_warp_groups = 2 : i32, tawa.first_warp_group = 1 : i32, "
                                            "tawa.max_registers = 232 : i32",
                             kernel_attrs=", tawa.num_warps = 12 : i32"),
    "attrs": kernel(f'%x = "tawa.load"(%A, %c0, %c0) {{tawa.smem, tawa.layout = "blocked"}} : ({MEM}, i32, i32) '
                    f'-> {TILE}', kernel_attrs=', tawa.grid = ["1"], tawa.params = [], tawa.constants = {}, '
                                               'tawa.num_warps = 4 : i32'),
}


@pytest.mark.parametrize("name", GOOD)
def test_valid_ir_passes(name):
    verify(parse(GOOD[name]), after="test")


def _swap(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


WS = ws_kernel()

BAD = {
    # shapes and dtypes
    "load-offsets": kernel(load(TILE, 1)),
    "load-shape": kernel(load("tensor<2x64x64xbf16>")),
    "load-dtype": kernel(load("tensor<64x64xf16>")),
    "load-scalar": kernel('%s = "tawa.load_scalar"(%I, %c0, %c0) : (memref<?xi32>, i32, i32) -> i32',
                          args=f"%A: {MEM}, %C: {MEM}, %I: memref<?xi32>"),
    "load-scalar:dtype": kernel('%s = "tawa.load_scalar"(%I, %c0) : (memref<?xi32>, i32) -> f32',
                                args=f"%A: {MEM}, %C: {MEM}, %I: memref<?xi32>"),
    "load-scalar:bf16": kernel(f'%s = "tawa.load_scalar"(%A, %c0, %c0) : ({MEM}, i32, i32) -> bf16'),
    "prefetch": kernel(f'"tawa.prefetch"(%A, %c0) {{shape = array<i64: 64, 64>}} : ({MEM}, i32) -> ()'),
    "prefetch:shape": kernel(f'"tawa.prefetch"(%A, %c0, %c0) {{shape = array<i64: 64, 0>}} : ({MEM}, i32, i32) '
                             '-> ()'),
    "store-offsets": kernel(load(TILE) + f'\n  "tawa.store"(%C, %x, %c0) : ({MEM}, {TILE}, i32) -> ()'),
    "store-shape": kernel(load(TILE) + '\n  %y = "tawa.expand_dims"(%x) {axis = 0 : i32} : '
                          f'({TILE}) -> tensor<1x64x64xbf16>\n  "tawa.store"(%C, %y, %c0, %c0) : '
                          f'({MEM}, tensor<1x64x64xbf16>, i32, i32) -> ()'),
    "store-dtype": kernel(f'%t = "tawa.splat"(%f0) : (f32) -> tensor<64x64xf32>\n  "tawa.store"(%C, %t, %c0, '
                          f'%c0) : ({MEM}, tensor<64x64xf32>, i32, i32) -> ()'),
    "dot-shape": kernel(dot_body("tensor<64x32xbf16>", "tensor<16x16xbf16>", "tensor<64x16xf32>")),
    "dot-shape:acc": kernel(dot_body("tensor<64x32xbf16>", "tensor<32x16xbf16>", "tensor<64x32xf32>")),
    "dot-shape:result": kernel(dot_body("tensor<64x32xbf16>", "tensor<32x16xbf16>", "tensor<64x16xf32>",
                                        "tensor<16x64xf32>")),
    "dot-dtype": kernel(dot_body("tensor<64x32xbf16>", "tensor<32x16xf16>", "tensor<64x16xf32>")),
    "dot-dtype:acc": kernel(dot_body("tensor<64x32xbf16>", "tensor<32x16xbf16>", "tensor<64x16xf16>")),
    "expand-dims-shape": kernel('%r = "tawa.arange"() {start = 0 : i32, end = 32 : i32} : () -> tensor<32xi32>\n'
                                '  %e = "tawa.expand_dims"(%r) {axis = 2 : i32} : (tensor<32xi32>) -> '
                                'tensor<32x1xi32>'),
    "expand-dims-shape:result": kernel(
        '%r = "tawa.arange"() {start = 0 : i32, end = 32 : i32} : () -> tensor<32xi32>\n'
        '  %e = "tawa.expand_dims"(%r) {axis = 0 : i32} : (tensor<32xi32>) -> tensor<32x1xi32>'),
    "broadcast-shape": kernel('%t = "tawa.splat"(%c0) : (i32) -> tensor<2x8xi32>\n'
                              '  %b = "tawa.broadcast"(%t) : (tensor<2x8xi32>) -> tensor<4x8xi32>'),
    "broadcast-shape:dtype": kernel('%t = "tawa.splat"(%c0) : (i32) -> tensor<1x8xi32>\n'
                                    '  %b = "tawa.broadcast"(%t) : (tensor<1x8xi32>) -> tensor<4x8xf32>'),
    "trans-shape": kernel('%t = "tawa.splat"(%c0) : (i32) -> tensor<2x8xi32>\n'
                          '  %b = "tawa.trans"(%t) : (tensor<2x8xi32>) -> tensor<2x8xi32>'),
    "reduce-kind": kernel('%t = "tawa.splat"(%f0) : (f32) -> tensor<8xf32>\n'
                          '  %s = "tawa.reduce"(%t) {axis = 0 : i32, kind = "prod"} : (tensor<8xf32>) -> f32'),
    "reduce-shape": kernel('%t = "tawa.splat"(%f0) : (f32) -> tensor<4x8xf32>\n'
                           '  %s = "tawa.reduce"(%t) {axis = 2 : i32, kind = "sum"} : (tensor<4x8xf32>) -> '
                           'tensor<4xf32>'),
    "reduce-shape:result": kernel('%t = "tawa.splat"(%f0) : (f32) -> tensor<4x8xf32>\n'
                                  '  %s = "tawa.reduce"(%t) {axis = 1 : i32, kind = "sum"} : (tensor<4x8xf32>) -> '
                                  'tensor<8xf32>'),
    "splat-type": kernel('%t = "tawa.splat"(%f0) : (f32) -> tensor<8xi32>'),
    "arange-range": kernel('%r = "tawa.arange"() {start = 0 : i32, end = 16 : i32} : () -> tensor<32xi32>'),
    "program-axis": kernel('%p = "tawa.program_id"() {axis = 3 : i32} : () -> i32'),
    "program-axis:num_programs": kernel('%p = "tawa.num_programs"() {axis = -1 : i32} : () -> i32'),
    "dim-axis": kernel(f'%d = "tawa.dim"(%A) {{axis = 2 : i32}} : ({MEM}) -> i32'),
    "split-k": kernel(split_k_body("tensor<64x64xi32>")),
    "split-k:slot": kernel(split_k_body(slot=-1)),
    "split-k:splits": kernel(split_k_body(splits=1)),
    # aref payloads
    "aref-payload:empty": kernel('%r = "tawa.aref_create"() : () -> !tawa.aref<[], 2 : i32>'),
    "aref-payload:too-many": kernel('%r = "tawa.aref_create"() : () -> !tawa.aref<[' +
                                    ", ".join(["tensor<8xf32>"] * 9) + '], 2 : i32>'),
    "aref-payload:scalar": kernel('%r = "tawa.aref_create"() : () -> !tawa.aref<[f32], 2 : i32>'),
    "aref-type": kernel('%r = "tawa.aref_create"() : () -> !tawa.aref<3 : i32, 2 : i32>'),
    "aref-type:depth": kernel(f'%r = "tawa.aref_create"() : () -> !tawa.aref<[{TILE}], "two">'),
    "aref-depth": kernel(f'%r = "tawa.aref_create"() : () -> !tawa.aref<[{TILE}], 0 : i32>'),
    "aref-put-values": _swap(WS, f'"tawa.aref_put"(%r, %a) {PUT_SEG} : ({AREF}, {TILE}) -> ()',
                             '"tawa.aref_put"(%r, %a, %a) {operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, '
                             f'0, 0>}} : ({AREF}, {TILE}, {TILE}) -> ()'),
    "aref-put-values:type": _swap(WS, f'"tawa.aref_put"(%r, %a) {PUT_SEG} : ({AREF}, {TILE}) -> ()',
                                  '%h = "tawa.splat"(%f0) : (f32) -> tensor<64x64xf32>\n'
                                  f'    "tawa.aref_put"(%r, %h) {PUT_SEG} : ({AREF}, tensor<64x64xf32>) -> ()'),
    "aref-get-results": _swap(_swap(WS, f'%b = "tawa.aref_get"(%r) {GET_SEG} : ({AREF}) -> {TILE}',
                                    f'%b = "tawa.aref_get"(%r) {GET_SEG} : ({AREF}) -> tensor<64x64xf16>'),
                              f'"tawa.store"(%C, %b, %c0, %c0) : ({MEM}, {TILE}, i32, i32) -> ()', ""),
    "aref-operand": kernel(f'"tawa.aref_consumed"(%R) : ({AREF}) -> ()', args=f"%A: {MEM}, %C: {MEM}, %R: {AREF}"),
    # warp-group structure
    "warp-group-role": _swap(WS, 'tawa.warp_group = "producer"', 'tawa.warp_group = "worker"'),
    "warp-group-placement": kernel('scf.for %i = %c0 to %c0 step %c0 : i32 {\n'
                                   '    scf.execute_region { scf.yield } {tawa.warp_group = "consumer"}\n  }'),
    "warp-group-placement:not-a-kernel": """
func.func @helper() {
  scf.execute_region { scf.yield } {tawa.warp_group = "consumer"}
  return
}""",
    "warp-group-nesting": ws_kernel(consumer='scf.execute_region { scf.yield } {tawa.warp_group = "consumer"}'),
    "warp-group-count:two-producers": ws_kernel(
        extra='scf.execute_region { scf.yield } {tawa.warp_group = "producer"}'),
    "warp-group-count:no-consumer": kernel('scf.execute_region { scf.yield } {tawa.warp_group = "producer"}'),
    "num-warp-groups": ws_kernel(consumer_attrs=", tawa.num_warp_groups = 0 : i32"),
    "warp-group-attr": kernel('scf.for %i = %c0 to %c0 step %c0 : i32 {\n  } {tawa.num_warp_groups = 2 : i32}'),
    "warp-group-op": kernel('scf.for %i = %c0 to %c0 step %c0 : i32 {\n  } {tawa.warp_group = "consumer"}'),
    "aref-role:get-in-producer": ws_kernel(
        producer=f'%g = "tawa.aref_get"(%r) {GET_SEG} : ({AREF}) -> {TILE}'),
    "aref-role:put-in-consumer": ws_kernel(
        consumer=f'"tawa.aref_put"(%r, %b) {PUT_SEG} : ({AREF}, {TILE}) -> ()'),
    "aref-role:outside": ws_kernel(extra=f'"tawa.aref_consumed"(%r) : ({AREF}) -> ()'),
    "tile-channel-role:get-in-producer": ws_kernel(producer='%t = "tawa.tile_get"() : () -> i32'),
    "tile-channel-role:fetch-in-consumer": ws_kernel(consumer='%t = "tawa.next_tile"() : () -> i32'),
    "tile-channel-role:outside": ws_kernel(extra='"tawa.tile_put"(%c0) : (i32) -> ()'),
    "first-warp-group:producer": ws_kernel(producer_attrs=", tawa.first_warp_group = 1 : i32",
                                           consumer_attrs=", tawa.first_warp_group = 0 : i32",
                                           kernel_attrs=", tawa.num_warps = 8 : i32"),
    "first-warp-group:gap": ws_kernel(producer_attrs=", tawa.first_warp_group = 0 : i32",
                                      consumer_attrs=", tawa.first_warp_group = 2 : i32",
                                      kernel_attrs=", tawa.num_warps = 12 : i32"),
    "first-warp-group:partial": ws_kernel(producer_attrs=", tawa.first_warp_group = 0 : i32"),
    "num-warps": ws_kernel(producer_attrs=", tawa.first_warp_group = 0 : i32",
                           consumer_attrs=", tawa.num_warp_groups = 2 : i32, tawa.first_warp_group = 1 : i32",
                           kernel_attrs=", tawa.num_warps = 8 : i32"),
    "max-registers": ws_kernel(producer_attrs=", tawa.max_registers = 44 : i32"),
    "max-registers:low": ws_kernel(producer_attrs=", tawa.max_registers = 16 : i32"),
    "max-registers:high": ws_kernel(consumer_attrs=", tawa.max_registers = 264 : i32"),
    # attribute kinds
    "attr-kind": kernel(f'%x = "tawa.load"(%A, %c0, %c0) {{tawa.layout = 3 : i32}} : ({MEM}, i32, i32) -> {TILE}'),
    "attr-kind:i64": kernel("", kernel_attrs=", tawa.num_warps = 4"),
    "attr-kind:unit": kernel(f'%x = "tawa.load"(%A, %c0, %c0) {{tawa.smem = "yes"}} : ({MEM}, i32, i32) -> {TILE}'),
    "attr-kind:grid": kernel("", kernel_attrs=", tawa.grid = [1, 2]"),
    "attr-kind:constants": kernel("", kernel_attrs=", tawa.constants = [1]"),
    "attr-unknown": kernel(f'%x = "tawa.load"(%A, %c0, %c0) {{tawa.layuot = "blocked"}} : ({MEM}, i32, i32) '
                           f'-> {TILE}'),
}


@pytest.mark.parametrize("case", BAD)
def test_violation_names_rule(case):
    rule = case.split(":")[0]
    module = parse(BAD[case])
    with pytest.raises(InternalCompilerError) as info:
        verify(module, after="some-pass")
    e = info.value
    assert f"[{rule}]" in e.message, e.message
    assert e.pass_name == "some-pass" and "after 'some-pass'" in e.message
    assert e.op and f"on '{e.op}'" in e.message


def test_every_rule_is_tested():
    assert {case.split(":")[0] for case in BAD} == set(verify_mod.RULES)


def test_error_carries_op_and_location():
    text = kernel(dot_body("tensor<64x32xbf16>", "tensor<16x16xbf16>", "tensor<64x16xf32>",
                           loc='loc("mm.tawa":7:9)'))
    with pytest.raises(InternalCompilerError) as info:
        verify(parse(text), after="canonicalize")
    e = info.value
    assert e.op == "tawa.dot" and e.pass_name == "canonicalize"
    assert "in pass 'canonicalize' on 'tawa.dot'" in str(e) and "[dot-shape]" in str(e)
    assert (e.location.filename, e.location.line, e.location.column) == ("mm.tawa", 7, 9)


def test_without_pass_name():
    with pytest.raises(InternalCompilerError, match=r"the IR breaks rule \[dim-axis\]"):
        verify(parse(BAD["dim-axis"]))


def test_mlir_verification_runs_first():
    module = parse(kernel(""))
    body = kernel_function(module).regions[0].blocks[0]
    ops_of(body)[-1].erase()     # the func.return: MLIR's own verifier rejects a block without terminator
    with pytest.raises(InternalCompilerError, match="does not verify"):
        verify(module, after="x")


def test_mutated_frontend_module():
    path = EXAMPLES / "gemm.tawa"
    module = parse_and_lower(path.read_text(), str(path))
    verify(module, after="frontend")
    dot_op = next(op for op in walk(module.operation) if op.name == "tawa.dot")
    with module.context:
        dot_op.attributes["tawa.layout"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 1)
    with pytest.raises(InternalCompilerError, match=r"\[attr-kind\].*tawa\.layout") as info:
        verify(module, after="frontend")
    assert info.value.location is not None and info.value.location.filename == str(path)


# ---- (c) a pass that breaks an invariant fails at that pass ---------------------------------------------------
def _break_pass(monkeypatch, name, corrupt):
    index = next(i for i, p in enumerate(compiler.PIPELINE) if p.name == name)
    original = compiler.PIPELINE[index]

    def run(module, options):
        module = original.run(module, options)
        with module.context, ir.Location.unknown(module.context):
            corrupt(module)
        return module

    pipeline = list(compiler.PIPELINE)
    pipeline[index] = dataclasses.replace(original, run=run)
    monkeypatch.setattr(compiler, "PIPELINE", pipeline)


def _get_in_producer(module):
    func = kernel_function(module)
    producer = next(g for g in warp_groups(func) if attrs.WARP_GROUP.get(g) == attrs.PRODUCER)
    aref = next(op for op in ops_of(func.regions[0].blocks[0]) if op.name == ArefCreateOp.NAME).results[0]
    block = producer.regions[0].blocks[0]
    create_get(aref, ip=ir.InsertionPoint(ops_of(block)[-1]))


@pytest.mark.parametrize("target", ["cuda", "cpu"])
def test_broken_partition_fails_at_partition(monkeypatch, target):
    _break_pass(monkeypatch, "partition", _get_in_producer)
    path = EXAMPLES / "gemm.tawa"
    with pytest.raises(InternalCompilerError) as info:
        compile_source(path.read_text(), str(path),
                       CompileOptions(verify_each=True, target=target, warp_specialize=True))
    e = info.value
    assert e.pass_name == "partition" and "partition" in str(e)
    assert e.op == "tawa.aref_get" and "[aref-role]" in e.message


def test_broken_assign_warp_groups_fails_there(monkeypatch):
    def shift_consumer(module):
        func = kernel_function(module)
        consumer = next(g for g in warp_groups(func) if attrs.WARP_GROUP.get(g) == attrs.CONSUMER)
        attrs.FIRST_WARP_GROUP.set(consumer, 2)

    _break_pass(monkeypatch, "assign-warp-groups", shift_consumer)
    path = EXAMPLES / "gemm.tawa"
    with pytest.raises(InternalCompilerError, match=r"in pass 'assign-warp-groups'.*\[first-warp-group\]"):
        compile_source(path.read_text(), str(path), CompileOptions(verify_each=True, warp_specialize=True))
