"""Hand-written tawa-IR kernels (MLIR text) shared by the interpreter tests.

Each builder returns the text of one module; `parse` turns it into an `mlir.ir.Module` in a context with the
`tawa` dialect loaded.
"""
from __future__ import annotations

from mlir import ir

from tawa.ir.dialect import make_context

_CONTEXT = None


def parse(text: str) -> ir.Module:
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = make_context()
    return ir.Module.parse(text, _CONTEXT)


def _params(*entries) -> str:
    out = []
    for name, dtype, shape in entries:
        if shape is None:
            out.append(f'{{name = "{name}", kind = "scalar", dtype = "{dtype}"}}')
        else:
            dims = ", ".join(f'"{s}"' if isinstance(s, str) else str(s) for s in shape)
            out.append(f'{{name = "{name}", kind = "tensor", dtype = "{dtype}", shape = [{dims}]}}')
    return "[" + ", ".join(out) + "]"


def put_seg(n: int) -> str:
    """The segment attribute of an aref_put of n values (8 optional value operands, see docs/ir.md)."""
    return "{operandSegmentSizes = array<i32: 1, " + ", ".join(["1"] * n + ["0"] * (8 - n)) + ">}"


def get_seg(n: int) -> str:
    return "{resultSegmentSizes = array<i32: " + ", ".join(["1"] * n + ["0"] * (8 - n)) + ">}"


def _gemm_header(name: str, dt: str, bm: int, bn: int, bk: int) -> str:
    params = _params(("A", dt, ["M", "K"]), ("B", dt, ["K", "N"]), ("C", "f32", ["M", "N"]))
    return f"""
func.func @{name}(%A: memref<?x?x{dt}>, %B: memref<?x?x{dt}>, %C: memref<?x?xf32>) attributes {{tawa.kernel,
    tawa.params = {params}, tawa.grid = ["cdiv(M, {bm})", "cdiv(N, {bn})"],
    tawa.constants = {{BM = {bm} : i32, BN = {bn} : i32, BK = {bk} : i32}}}} {{
  %pm = "tawa.program_id"() {{axis = 0 : i32}} : () -> i32
  %pn = "tawa.program_id"() {{axis = 1 : i32}} : () -> i32
  %c0 = arith.constant 0 : i32
  %cbm = arith.constant {bm} : i32
  %cbn = arith.constant {bn} : i32
  %cbk = arith.constant {bk} : i32
  %om = arith.muli %pm, %cbm : i32
  %on = arith.muli %pn, %cbn : i32
  %K = "tawa.dim"(%A) {{axis = 1 : i32}} : (memref<?x?x{dt}>) -> i32
  %zero = arith.constant 0.0 : f32
  %acc0 = "tawa.splat"(%zero) : (f32) -> tensor<{bm}x{bn}xf32>
"""


def gemm(dt: str = "bf16", bm: int = 32, bn: int = 32, bk: int = 16) -> str:
    """C = A @ B, one program per BMxBN output tile, K loop with step BK."""
    return "module {" + _gemm_header("gemm", dt, bm, bn, bk) + f"""
  %acc = scf.for %k = %c0 to %K step %cbk iter_args(%acc_i = %acc0) -> (tensor<{bm}x{bn}xf32>) : i32 {{
    %a = "tawa.load"(%A, %om, %k) : (memref<?x?x{dt}>, i32, i32) -> tensor<{bm}x{bk}x{dt}>
    %b = "tawa.load"(%B, %k, %on) : (memref<?x?x{dt}>, i32, i32) -> tensor<{bk}x{bn}x{dt}>
    %d = "tawa.dot"(%a, %b, %acc_i) : (tensor<{bm}x{bk}x{dt}>, tensor<{bk}x{bn}x{dt}>, tensor<{bm}x{bn}xf32>) -> tensor<{bm}x{bn}xf32>
    scf.yield %d : tensor<{bm}x{bn}xf32>
  }}
  "tawa.store"(%C, %acc, %om, %on) : (memref<?x?xf32>, tensor<{bm}x{bn}xf32>, i32, i32) -> ()
  return
}}
}}"""


def gemm_ws(dt: str = "bf16", bm: int = 32, bn: int = 32, bk: int = 16, depth: int = 2,
            consumed: bool = True, producer: bool = True) -> str:
    """The GEMM after warp specialization: a producer region loads A/B tiles into an aref ring, a consumer
    region takes them, accumulates the dot and stores C. `consumed=False` / `producer=False` break the protocol.
    """
    aref = f"!tawa.aref<[tensor<{bm}x{bk}x{dt}>, tensor<{bk}x{bn}x{dt}>], {depth} : i32>"
    release = f'"tawa.aref_consumed"(%ar) : ({aref}) -> ()' if consumed else ""
    produce = f"""
  scf.execute_region {{
    scf.for %k = %c0 to %K step %cbk : i32 {{
      %a = "tawa.load"(%A, %om, %k) : (memref<?x?x{dt}>, i32, i32) -> tensor<{bm}x{bk}x{dt}>
      %b = "tawa.load"(%B, %k, %on) : (memref<?x?x{dt}>, i32, i32) -> tensor<{bk}x{bn}x{dt}>
      "tawa.aref_put"(%ar, %a, %b) {put_seg(2)} : ({aref}, tensor<{bm}x{bk}x{dt}>, tensor<{bk}x{bn}x{dt}>) -> ()
    }}
    scf.yield
  }} {{tawa.warp_group = "producer"}}""" if producer else ""
    return "module {" + _gemm_header("gemm_ws", dt, bm, bn, bk) + f"""
  %ar = "tawa.aref_create"() : () -> {aref}
{produce}
  scf.execute_region {{
    %acc = scf.for %k = %c0 to %K step %cbk iter_args(%acc_i = %acc0) -> (tensor<{bm}x{bn}xf32>) : i32 {{
      %a, %b = "tawa.aref_get"(%ar) {get_seg(2)} : ({aref}) -> (tensor<{bm}x{bk}x{dt}>, tensor<{bk}x{bn}x{dt}>)
      %d = "tawa.dot"(%a, %b, %acc_i) : (tensor<{bm}x{bk}x{dt}>, tensor<{bk}x{bn}x{dt}>, tensor<{bm}x{bn}xf32>) -> tensor<{bm}x{bn}xf32>
      {release}
      scf.yield %d : tensor<{bm}x{bn}xf32>
    }}
    "tawa.store"(%C, %acc, %om, %on) : (memref<?x?xf32>, tensor<{bm}x{bn}xf32>, i32, i32) -> ()
    scf.yield
  }} {{tawa.warp_group = "consumer", tawa.num_warp_groups = 1 : i32}}
  return
}}
}}"""


def elementwise(inputs: list, out: str, body: str, block: int = 64, scalars: list = ()) -> str:
    """A 1-D kernel: program p loads `%x0, %x1, ...` (tiles of BLOCK elements of each input, types `inputs`)
    at offset p*BLOCK, runs `body` (MLIR text that defines `%y` of element type `out`), stores `%y` to the
    output. `scalars` are extra scalar params `%s0, %s1, ...` (types). `T` in body is the tile shape prefix.
    """
    params = [(f"X{i}", t, ["N"]) for i, t in enumerate(inputs)] + [("Y", out, ["N"])]
    params += [(f"s{i}", t, None) for i, t in enumerate(scalars)]
    args = [f"%X{i}: memref<?x{t}>" for i, t in enumerate(inputs)] + [f"%Y: memref<?x{out}>"]
    args += [f"%s{i}: {t}" for i, t in enumerate(scalars)]
    loads = "\n".join(f'  %x{i} = "tawa.load"(%X{i}, %off) : (memref<?x{t}>, i32) -> tensor<{block}x{t}>'
                      for i, t in enumerate(inputs))
    body = body.replace("T<", f"tensor<{block}x").strip()
    return f"""module {{
func.func @ew({", ".join(args)}) attributes {{tawa.kernel, tawa.params = {_params(*params)},
    tawa.grid = ["cdiv(N, {block})"], tawa.constants = {{}}}} {{
  %pid = "tawa.program_id"() {{axis = 0 : i32}} : () -> i32
  %cblock = arith.constant {block} : i32
  %off = arith.muli %pid, %cblock : i32
{loads}
  {body}
  "tawa.store"(%Y, %y, %off) : (memref<?x{out}>, tensor<{block}x{out}>, i32) -> ()
  return
}}
}}"""


def ring(depth: int, puts: int, consumers: list, producer: bool = True) -> str:
    """A tiny aref kernel over tiles of 4 f32: the producer loads X[4i:4i+4] and puts it, `puts` times. Each
    consumer is a list of steps run `gets` times in a loop: "get", "consumed", "acc" (add the last gotten tile
    to an accumulator), "horner" (accumulator * 2 + tile); at the end consumer j stores its accumulator to Y[4j:4j+4]. A consumer entry is
    (gets, steps).
    """
    aref = f"!tawa.aref<[tensor<4xf32>], {depth} : i32>"
    regions = []
    if producer:
        regions.append(f"""
  scf.execute_region {{
    scf.for %i = %c0 to %cputs step %c1 : i32 {{
      %o = arith.muli %i, %c4 : i32
      %t = "tawa.load"(%X, %o) : (memref<?xf32>, i32) -> tensor<4xf32>
      "tawa.aref_put"(%ar, %t) {put_seg(1)} : ({aref}, tensor<4xf32>) -> ()
    }}
    scf.yield
  }} {{tawa.warp_group = "producer"}}""")
    for j, (gets, steps) in enumerate(consumers):
        lines = []
        have = "%zero_t"
        for n, step in enumerate(steps):
            if step == "get":
                lines.append(f'%g{n} = "tawa.aref_get"(%ar) {get_seg(1)} : ({aref}) -> tensor<4xf32>')
                have = f"%g{n}"
            elif step == "consumed":
                lines.append(f'"tawa.aref_consumed"(%ar) : ({aref}) -> ()')
            elif step == "acc":
                lines.append(f"%a{n} = arith.addf %acc, {have} : tensor<4xf32>")
            elif step == "horner":  # acc * 2 + tile: the result depends on the order tiles arrive in
                lines.append(f"%h{n} = arith.addf %acc, %acc : tensor<4xf32>")
                lines.append(f"%a{n} = arith.addf %h{n}, {have} : tensor<4xf32>")
        last_acc = [f"%a{n}" for n, s in enumerate(steps) if s in ("acc", "horner")]
        result = last_acc[-1] if last_acc else "%acc"
        body = "\n      ".join(lines)
        regions.append(f"""
  scf.execute_region {{
    %cg = arith.constant {gets} : i32
    %sum = scf.for %i = %c0 to %cg step %c1 iter_args(%acc = %zero_t) -> (tensor<4xf32>) : i32 {{
      {body}
      scf.yield {result} : tensor<4xf32>
    }}
    %oy = arith.constant {4 * j} : i32
    "tawa.store"(%Y, %sum, %oy) : (memref<?xf32>, tensor<4xf32>, i32) -> ()
    scf.yield
  }} {{tawa.warp_group = "consumer"}}""")
    params = _params(("X", "f32", ["N"]), ("Y", "f32", ["M"]))
    return f"""module {{
func.func @ring(%X: memref<?xf32>, %Y: memref<?xf32>) attributes {{tawa.kernel, tawa.params = {params},
    tawa.grid = ["1"], tawa.constants = {{}}}} {{
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c4 = arith.constant 4 : i32
  %cputs = arith.constant {puts} : i32
  %zero = arith.constant 0.0 : f32
  %zero_t = "tawa.splat"(%zero) : (f32) -> tensor<4xf32>
  %ar = "tawa.aref_create"() : () -> {aref}
{"".join(regions)}
  return
}}
}}"""
