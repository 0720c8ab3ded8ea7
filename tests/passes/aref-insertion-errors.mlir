// RUN: not tawa-opt %s --split-input-file --passes aref-insertion 2>&1 | FileCheck %s

// A pipelined loop that is an scf.while cannot be specialized: the error names the load, at the location the IR
// gives it (here an explicit loc), and the reason.
// CHECK: w.tawa:7:13: error: cannot warp-specialize kernel 'w': {{.*}}scf.while
// CHECK: note: compile with warp_specialize=False
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

// -----

// Without explicit locations, ops are located in this file (as mlir-opt does), and the error shows the line.
func.func @loaded_tile_carried(%A: memref<?x?xf32>, %C: memref<?x?xf32>) attributes {tawa.kernel} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c8 = arith.constant 8 : i32
  %z = arith.constant 0.0 : f32
  %zero = "tawa.splat"(%z) : (f32) -> tensor<16x16xf32>
  %r:2 = scf.for %k = %c0 to %c8 step %c1 iter_args(%acc = %zero, %prev = %zero) -> (tensor<16x16xf32>, tensor<16x16xf32>) : i32 {
// CHECK: aref-insertion-errors.mlir:[[# @LINE + 1]]:10: error: cannot warp-specialize kernel 'loaded_tile_carried': the tile loaded at {{.*}}aref-insertion-errors.mlir:[[# @LINE + 1]]:10 is carried to the next iteration
    %a = "tawa.load"(%A, %c0, %k) : (memref<?x?xf32>, i32, i32) -> tensor<16x16xf32>
// CHECK-NEXT: %a = "tawa.load"(%A, %c0, %k)
    %d = "tawa.dot"(%prev, %a, %acc) : (tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
    scf.yield %d, %a : tensor<16x16xf32>, tensor<16x16xf32>
  }
  "tawa.store"(%C, %r#0, %c0, %c0) : (memref<?x?xf32>, tensor<16x16xf32>, i32, i32) -> ()
  return
}
