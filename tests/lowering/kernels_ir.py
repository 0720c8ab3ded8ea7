"""Hand-written tawa IR (docs/ir.md) of the kernels the backend tests compile: GEMM (+ fused epilogue),
row softmax. Used until/besides the frontend; each function returns MLIR text."""
from __future__ import annotations


def gemm_ir(bm=128, bn=128, bk=64, dtype="bf16", out="bf16", num_warps=4, bias=False, relu=False,
            b_kmajor=False) -> str:
    """C = A @ B (+ bias[N]) (relu); A [M, K], B [K, N] (or [N, K] with b_kmajor, used transposed)."""
    t = f"memref<?x?x{dtype}>"
    tc = f"memref<?x?x{out}>"
    args = [f"%A: {t}", f"%B: {t}", f"%C: {tc}"]
    bshape = '["N", "K"]' if b_kmajor else '["K", "N"]'
    params = [f'{{name = "A", kind = "tensor", dtype = "{dtype}", shape = ["M", "K"]}}',
              f'{{name = "B", kind = "tensor", dtype = "{dtype}", shape = {bshape}}}',
              f'{{name = "C", kind = "tensor", dtype = "{out}", shape = ["M", "N"]}}']
    if bias:
        args.append("%Bias: memref<?xf32>")
        params.append('{name = "bias", kind = "tensor", dtype = "f32", shape = ["N"]}')
    acc = f"tensor<{bm}x{bn}xf32>"
    if b_kmajor:
        bload = (f'%bt = "tawa.load"(%B, %on, %k) : ({t}, i32, i32) -> tensor<{bn}x{bk}x{dtype}>\n'
                 f'    %b = "tawa.trans"(%bt) : (tensor<{bn}x{bk}x{dtype}>) -> tensor<{bk}x{bn}x{dtype}>')
    else:
        bload = f'%b = "tawa.load"(%B, %k, %on) : ({t}, i32, i32) -> tensor<{bk}x{bn}x{dtype}>'
    cur = "%acc"
    epilogue = []
    if bias:
        epilogue += [
            f'%bv = "tawa.load"(%Bias, %on) : (memref<?xf32>, i32) -> tensor<{bn}xf32>',
            f'%bv2 = "tawa.expand_dims"(%bv) {{axis = 0 : i32}} : (tensor<{bn}xf32>) -> tensor<1x{bn}xf32>',
            f'%bvb = "tawa.broadcast"(%bv2) : (tensor<1x{bn}xf32>) -> {acc}',
            f"%withb = arith.addf {cur}, %bvb : {acc}",
        ]
        cur = "%withb"
    if relu:
        epilogue += [f"%relu = arith.maximumf {cur}, %acc0 : {acc}"]
        cur = "%relu"
    conv = (f"%c = arith.truncf {cur} : {acc} to tensor<{bm}x{bn}x{out}>" if out != "f32"
            else f"%c = arith.addf {cur}, %acc0 : {acc}")
    epilogue.append(conv)
    body = "\n    ".join(epilogue)
    return f"""
func.func @gemm({", ".join(args)}) attributes {{tawa.kernel, tawa.params = [{", ".join(params)}],
    tawa.grid = ["cdiv(M, {bm})", "cdiv(N, {bn})"], tawa.constants = {{BLOCK_M = {bm} : i32, BLOCK_N = {bn} : i32,
    BLOCK_K = {bk} : i32}}, tawa.num_warps = {num_warps} : i32}} {{
    %pm = "tawa.program_id"() {{axis = 0 : i32}} : () -> i32
    %pn = "tawa.program_id"() {{axis = 1 : i32}} : () -> i32
    %K = "tawa.dim"(%A) {{axis = 1 : i32}} : ({t}) -> i32
    %cbm = arith.constant {bm} : i32
    %cbn = arith.constant {bn} : i32
    %cbk = arith.constant {bk} : i32
    %c0 = arith.constant 0 : i32
    %om = arith.muli %pm, %cbm : i32
    %on = arith.muli %pn, %cbn : i32
    %z = arith.constant 0.0 : f32
    %acc0 = "tawa.splat"(%z) : (f32) -> {acc}
    %acc = scf.for %k = %c0 to %K step %cbk iter_args(%acc_i = %acc0) -> ({acc}) : i32 {{
      %a = "tawa.load"(%A, %om, %k) : ({t}, i32, i32) -> tensor<{bm}x{bk}x{dtype}>
      {bload}
      %r = "tawa.dot"(%a, %b, %acc_i) : (tensor<{bm}x{bk}x{dtype}>, tensor<{bk}x{bn}x{dtype}>, {acc}) -> {acc}
      scf.yield %r : {acc}
    }}
    {body}
    "tawa.store"(%C, %c, %om, %on) : ({tc}, tensor<{bm}x{bn}x{out}>, i32, i32) -> ()
    return
}}
"""


def softmax_ir(rows=4, cols=1024, num_warps=4) -> str:
    """out[r, :] = softmax(x[r, :]) for a block of `rows` rows of at most `cols` columns (masked with -inf)."""
    t = "memref<?x?xf32>"
    tile = f"tensor<{rows}x{cols}xf32>"
    row = f"tensor<{rows}xf32>"
    return f"""
func.func @softmax(%X: {t}, %Y: {t}) attributes {{tawa.kernel, tawa.params = [
    {{name = "X", kind = "tensor", dtype = "f32", shape = ["M", "N"]}},
    {{name = "Y", kind = "tensor", dtype = "f32", shape = ["M", "N"]}}],
    tawa.grid = ["cdiv(M, {rows})"], tawa.constants = {{ROWS = {rows} : i32}}, tawa.num_warps = {num_warps} : i32}} {{
    %p = "tawa.program_id"() {{axis = 0 : i32}} : () -> i32
    %N = "tawa.dim"(%X) {{axis = 1 : i32}} : ({t}) -> i32
    %crows = arith.constant {rows} : i32
    %c0 = arith.constant 0 : i32
    %or = arith.muli %p, %crows : i32
    %x = "tawa.load"(%X, %or, %c0) : ({t}, i32, i32) -> {tile}
    %cols = "tawa.arange"() {{start = 0 : i32, end = {cols} : i32}} : () -> tensor<{cols}xi32>
    %cols2 = "tawa.expand_dims"(%cols) {{axis = 0 : i32}} : (tensor<{cols}xi32>) -> tensor<1x{cols}xi32>
    %colsb = "tawa.broadcast"(%cols2) : (tensor<1x{cols}xi32>) -> tensor<{rows}x{cols}xi32>
    %Nt = "tawa.splat"(%N) : (i32) -> tensor<{rows}x{cols}xi32>
    %inb = arith.cmpi slt, %colsb, %Nt : tensor<{rows}x{cols}xi32>
    %ninf = arith.constant 0xFF800000 : f32
    %ninft = "tawa.splat"(%ninf) : (f32) -> {tile}
    %xm = arith.select %inb, %x, %ninft : tensor<{rows}x{cols}xi1>, {tile}
    %mx = "tawa.reduce"(%xm) {{axis = 1 : i32, kind = "max"}} : ({tile}) -> {row}
    %mx2 = "tawa.expand_dims"(%mx) {{axis = 1 : i32}} : ({row}) -> tensor<{rows}x1xf32>
    %mxb = "tawa.broadcast"(%mx2) : (tensor<{rows}x1xf32>) -> {tile}
    %d = arith.subf %xm, %mxb : {tile}
    %e = math.exp %d : {tile}
    %s = "tawa.reduce"(%e) {{axis = 1 : i32, kind = "sum"}} : ({tile}) -> {row}
    %s2 = "tawa.expand_dims"(%s) {{axis = 1 : i32}} : ({row}) -> tensor<{rows}x1xf32>
    %sb = "tawa.broadcast"(%s2) : (tensor<{rows}x1xf32>) -> {tile}
    %y = arith.divf %e, %sb : {tile}
    "tawa.store"(%Y, %y, %or, %c0) : ({t}, {tile}, i32, i32) -> ()
    return
}}
"""
