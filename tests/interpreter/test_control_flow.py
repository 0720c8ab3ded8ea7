"""scf.if / scf.while / scf.for with scalars, 3-D grids, program ids and num_programs."""
import numpy as np
from interp_kernels import _params, parse

from tawa.runtime.interpreter import run_kernel

KERNEL = f"""module {{
func.func @cf(%Y: memref<?x?x?xi32>, %lo: i32) attributes {{tawa.kernel,
    tawa.params = {_params(("Y", "i32", ["Z", "H", "W"]), ("lo", "i32", None))},
    tawa.grid = ["W", "H", "Z"], tawa.constants = {{}}}} {{
  %x = "tawa.program_id"() {{axis = 0 : i32}} : () -> i32
  %y = "tawa.program_id"() {{axis = 1 : i32}} : () -> i32
  %z = "tawa.program_id"() {{axis = 2 : i32}} : () -> i32
  %nx = "tawa.num_programs"() {{axis = 0 : i32}} : () -> i32
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c2 = arith.constant 2 : i32
  %c10 = arith.constant 10 : i32
  %c100 = arith.constant 100 : i32
  %r = arith.remsi %x, %c2 : i32
  %even = arith.cmpi eq, %r, %c0 : i32
  %v = scf.if %even -> (i32) {{
    %a = arith.muli %x, %c100 : i32
    %b = arith.muli %y, %c10 : i32
    %s = arith.addi %a, %b : i32
    %t = arith.addi %s, %z : i32
    scf.yield %t : i32
  }} else {{
    // sum of i for i in [lo, x) with a while loop, plus num_programs(0)
    %w:2 = scf.while (%i = %lo, %acc = %nx) : (i32, i32) -> (i32, i32) {{
      %go = arith.cmpi slt, %i, %x : i32
      scf.condition(%go) %i, %acc : i32, i32
    }} do {{
    ^bb0(%i2: i32, %acc2: i32):
      %n = arith.addi %acc2, %i2 : i32
      %i3 = arith.addi %i2, %c1 : i32
      scf.yield %i3, %n : i32, i32
    }}
    scf.yield %w#1 : i32
  }}
  // a for loop with an odd trip count from a negative start: v - sum(range(-3, y + 2, 2))
  %st = arith.constant -3 : i32
  %ub = arith.addi %y, %c2 : i32
  %u = scf.for %i = %st to %ub step %c2 iter_args(%acc = %v) -> (i32) : i32 {{
    %n = arith.subi %acc, %i : i32
    scf.yield %n : i32
  }}
  %tile = "tawa.splat"(%u) : (i32) -> tensor<1xi32>
  "tawa.store"(%Y, %tile, %z, %y, %x) : (memref<?x?x?xi32>, tensor<1xi32>, i32, i32, i32) -> ()
  return
}}
}}"""


def expected(Z, H, W, lo):
    out = np.zeros((Z, H, W), np.int32)
    for z in range(Z):
        for y in range(H):
            for x in range(W):
                v = x * 100 + y * 10 + z if x % 2 == 0 else W + sum(range(lo, x))
                out[z, y, x] = v - sum(range(-3, y + 2, 2))
    return out


def test_if_while_for_over_a_3d_grid():
    y = np.full((2, 3, 5), -1, np.int32)
    run_kernel(parse(KERNEL), [y, 1], (5, 3, 2))
    np.testing.assert_array_equal(y, expected(2, 3, 5, 1))


def test_numpy_scalar_argument_and_partial_grid():
    y = np.full((1, 2, 4), -1, np.int32)
    run_kernel(parse(KERNEL), [y, np.int32(-2)], (2, 2, 1))  # programs x >= 2 do not run
    full = expected(1, 2, 4, -2)
    want = np.full((1, 2, 4), -1, np.int32)
    for yy in range(2):
        want[0, yy, 0] = full[0, yy, 0]
        want[0, yy, 1] = 2 + sum(range(-2, 1)) - sum(range(-3, yy + 2, 2))
    np.testing.assert_array_equal(y, want)
