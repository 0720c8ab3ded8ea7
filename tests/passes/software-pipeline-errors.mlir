// RUN: not tawa-opt %s --split-input-file --passes software-pipeline 2>&1 | FileCheck %s

// Loads the uniform-warp pipeline cannot issue ahead are rejected.
// CHECK-NOT: Traceback

// CHECK: error: a load feeding a dot in a loop must have offsets computed from the loop index and values defined before the loop
func.func @offset_from_data(%A: memref<?x?xbf16>, %I: memref<?xi32>, %C: memref<?x?xf32>) attributes {tawa.kernel} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c4 = arith.constant 4 : i32
  %zero = arith.constant 0.000000e+00 : f32
  %acc0 = "tawa.splat"(%zero) {tawa.layout = "mma<64x64,w=4>"} : (f32) -> tensor<64x64xf32>
  %acc = scf.for %k = %c0 to %c4 step %c1 iter_args(%acc1 = %acc0) -> (tensor<64x64xf32>) : i32 {
    %idx = "tawa.load"(%I, %k) {tawa.layout = "blocked<16,w=4>"} : (memref<?xi32>, i32) -> tensor<16xi32>
    %j = "tawa.reduce"(%idx) {axis = 0 : i32, kind = "max"} : (tensor<16xi32>) -> i32
    %a = "tawa.load"(%A, %c0, %j) {tawa.smem} : (memref<?x?xbf16>, i32, i32) -> tensor<64x64xbf16>
    %d = "tawa.dot"(%a, %a, %acc1) {tawa.layout = "mma<64x64,w=4>"} : (tensor<64x64xbf16>, tensor<64x64xbf16>, tensor<64x64xf32>) -> tensor<64x64xf32>
    scf.yield %d : tensor<64x64xf32>
  } {tawa.layouts = ["mma<64x64,w=4>"]}
  "tawa.store"(%C, %acc, %c0, %c0) : (memref<?x?xf32>, tensor<64x64xf32>, i32, i32) -> ()
  return
}
