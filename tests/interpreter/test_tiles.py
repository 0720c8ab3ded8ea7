"""Loads/stores at tensor edges, shape ops, reductions and a masked softmax, against numpy."""
import math

import numpy as np
import pytest
from interp_kernels import _params, parse

from tawa.runtime.interpreter import run_kernel


def box_kernel(load_shape, store_shape=None):
    """Y[offs] = X[offs] for a tile of `load_shape` loaded from a 2-D X at (%r, %c) and stored to Y at the same
    place (offsets come in as scalar params, so they may be negative or beyond the edge)."""
    tile = "x".join(map(str, load_shape))
    return f"""module {{
func.func @box(%X: memref<?x?xf32>, %Y: memref<?x?xf32>, %r: i32, %c: i32) attributes {{tawa.kernel,
    tawa.params = {_params(("X", "f32", ["M", "N"]), ("Y", "f32", ["M", "N"]), ("r", "i32", None),
                           ("c", "i32", None))}, tawa.grid = ["1"], tawa.constants = {{}}}} {{
  %t = "tawa.load"(%X, %r, %c) : (memref<?x?xf32>, i32, i32) -> tensor<{tile}xf32>
  "tawa.store"(%Y, %t, %r, %c) : (memref<?x?xf32>, tensor<{tile}xf32>, i32, i32) -> ()
  return
}}
}}"""


@pytest.mark.parametrize("r,c", [(0, 0), (-3, 2), (5, -6), (10, 12), (-8, -8), (13, 0), (0, 20), (3, 3)])
def test_load_reads_zero_outside_and_store_clips(r, c):
    rng = np.random.default_rng(abs(r) * 100 + abs(c))
    x = rng.standard_normal((13, 20)).astype(np.float32)
    y = np.full((13, 20), 42.0, np.float32)
    run_kernel(parse(box_kernel((8, 8))), [x, y, r, c], (1,))
    expected = np.full((13, 20), 42.0, np.float32)
    rows = slice(max(r, 0), max(min(r + 8, 13), 0))
    cols = slice(max(c, 0), max(min(c + 8, 20), 0))
    expected[rows, cols] = x[rows, cols]
    np.testing.assert_array_equal(y, expected)


def test_rank_reducing_load_and_store():
    """A 1-D tile from a 2-D tensor: the leading dim is read with extent 1 and dropped."""
    x = np.arange(60, dtype=np.float32).reshape(6, 10)
    y = np.zeros((6, 10), np.float32)
    run_kernel(parse(box_kernel((8,))), [x, y, 4, 5], (1,))
    expected = np.zeros((6, 10), np.float32)
    expected[4, 5:] = x[4, 5:]
    np.testing.assert_array_equal(y, expected)
    y[:] = 0
    run_kernel(parse(box_kernel((8,))), [x, y, 6, 0], (1,))  # row 6 is outside: nothing read or written
    assert not y.any()


def softmax_kernel(bm: int, bn: int) -> str:
    """Row softmax of a (M, N) matrix with N <= bn: columns >= N are masked with -inf via arange/cmpi/select."""
    T = f"tensor<{bm}x{bn}xf32>"
    R = f"tensor<{bm}xf32>"
    return f"""module {{
func.func @softmax(%X: memref<?x?xf32>, %Y: memref<?x?xf32>) attributes {{tawa.kernel,
    tawa.params = {_params(("X", "f32", ["M", "N"]), ("Y", "f32", ["M", "N"]))}, tawa.grid = ["cdiv(M, {bm})"],
    tawa.constants = {{}}}} {{
  %pid = "tawa.program_id"() {{axis = 0 : i32}} : () -> i32
  %cbm = arith.constant {bm} : i32
  %c0 = arith.constant 0 : i32
  %om = arith.muli %pid, %cbm : i32
  %x = "tawa.load"(%X, %om, %c0) : (memref<?x?xf32>, i32, i32) -> {T}
  %n = "tawa.dim"(%X) {{axis = 1 : i32}} : (memref<?x?xf32>) -> i32
  %cols = "tawa.arange"() {{start = 0 : i32, end = {bn} : i32}} : () -> tensor<{bn}xi32>
  %ns = "tawa.splat"(%n) : (i32) -> tensor<{bn}xi32>
  %ok1 = arith.cmpi slt, %cols, %ns : tensor<{bn}xi32>
  %ok2 = "tawa.expand_dims"(%ok1) {{axis = 0 : i32}} : (tensor<{bn}xi1>) -> tensor<1x{bn}xi1>
  %ok = "tawa.broadcast"(%ok2) : (tensor<1x{bn}xi1>) -> tensor<{bm}x{bn}xi1>
  %ninf = arith.constant 0xFF800000 : f32
  %ninf_t = "tawa.splat"(%ninf) : (f32) -> {T}
  %xm = arith.select %ok, %x, %ninf_t : tensor<{bm}x{bn}xi1>, {T}
  %mx = "tawa.reduce"(%xm) {{axis = 1 : i32, kind = "max"}} : ({T}) -> {R}
  %mx2 = "tawa.expand_dims"(%mx) {{axis = 1 : i32}} : ({R}) -> tensor<{bm}x1xf32>
  %mxb = "tawa.broadcast"(%mx2) : (tensor<{bm}x1xf32>) -> {T}
  %d = arith.subf %xm, %mxb : {T}
  %e = math.exp %d : {T}
  %s = "tawa.reduce"(%e) {{axis = 1 : i32, kind = "sum"}} : ({T}) -> {R}
  %s2 = "tawa.expand_dims"(%s) {{axis = 1 : i32}} : ({R}) -> tensor<{bm}x1xf32>
  %sb = "tawa.broadcast"(%s2) : (tensor<{bm}x1xf32>) -> {T}
  %y = arith.divf %e, %sb : {T}
  "tawa.store"(%Y, %y, %om, %c0) : (memref<?x?xf32>, {T}, i32, i32) -> ()
  return
}}
}}"""


def test_masked_softmax():
    m, n = 37, 50
    x = np.random.default_rng(7).standard_normal((m, n)).astype(np.float32) * 3
    y = np.zeros((m, n), np.float32)
    run_kernel(parse(softmax_kernel(16, 64)), [x, y], (math.ceil(m / 16),))
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_trans_reduce_min_to_scalar():
    """Y[0, j] = min_i X[i, j] via trans and a reduce to a 1-D tile; Y[1, 0] = total sum (a reduce to scalar)."""
    text = f"""module {{
func.func @k(%X: memref<?x?xf32>, %Y: memref<?x?xf32>) attributes {{tawa.kernel,
    tawa.params = {_params(("X", "f32", [8, 16]), ("Y", "f32", [2, 16]))}, tawa.grid = ["1"], tawa.constants = {{}}}} {{
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %x = "tawa.load"(%X, %c0, %c0) : (memref<?x?xf32>, i32, i32) -> tensor<8x16xf32>
  %t = "tawa.trans"(%x) : (tensor<8x16xf32>) -> tensor<16x8xf32>
  %mn = "tawa.reduce"(%t) {{axis = 1 : i32, kind = "min"}} : (tensor<16x8xf32>) -> tensor<16xf32>
  "tawa.store"(%Y, %mn, %c0, %c0) : (memref<?x?xf32>, tensor<16xf32>, i32, i32) -> ()
  %rows = "tawa.reduce"(%x) {{axis = 0 : i32, kind = "sum"}} : (tensor<8x16xf32>) -> tensor<16xf32>
  %all = "tawa.reduce"(%rows) {{axis = 0 : i32, kind = "sum"}} : (tensor<16xf32>) -> f32
  %one = "tawa.splat"(%all) : (f32) -> tensor<1xf32>
  "tawa.store"(%Y, %one, %c1, %c0) : (memref<?x?xf32>, tensor<1xf32>, i32, i32) -> ()
  return
}}
}}"""
    x = np.random.default_rng(8).standard_normal((8, 16)).astype(np.float32)
    y = np.zeros((2, 16), np.float32)
    run_kernel(parse(text), [x, y], (1,))
    np.testing.assert_array_equal(y[0], x.min(0))
    np.testing.assert_allclose(y[1, 0], x.sum(), rtol=1e-5)
    assert not y[1, 1:].any()
