// RUN: tawa-opt %s --split-input-file --passes software-pipeline | FileCheck %s
// RUN: tawa-opt %s --split-input-file --passes software-pipeline --num-stages 4 | FileCheck %s --check-prefix=S4
// RUN: tawa-opt %s --split-input-file --passes software-pipeline --num-stages 8 | FileCheck %s --check-prefix=S8

// Uniform warps: the loads of dot operands (tawa.smem) are marked pipelined and the loop gets the ring depth,
// num_stages (default 3), reduced until the rings fit in shared memory: 32 KiB per stage, at most 5 stages next
// to the epilogue.

// CHECK-LABEL: func.func @uniform_gemm
// CHECK:         scf.for
// CHECK-NEXT:      arith.muli
// CHECK-NEXT:      "tawa.load"(%arg0, %{{.*}}) {tawa.pipelined, tawa.smem}
// CHECK-NEXT:      "tawa.load"(%arg1, %{{.*}}) {tawa.pipelined, tawa.smem}
// CHECK-NEXT:      "tawa.dot"
// CHECK-NEXT:      scf.yield
// CHECK-NEXT:    } {tawa.layouts = ["mma<128x128,w=4>"], tawa.num_stages = 3 : i32}
// CHECK-NEXT:    "tawa.load"(%arg2, %{{.*}}) {tawa.layout = "slice<mma<128x128,w=4>,0>"}

// S4-LABEL: func.func @uniform_gemm
// S4:         tawa.num_stages = 4 : i32
// S8-LABEL: func.func @uniform_gemm
// S8:         tawa.num_stages = 5 : i32
func.func @uniform_gemm(%A: memref<?x?xbf16>, %B: memref<?x?xbf16>, %bias: memref<?xf32>, %C: memref<?x?xf32>) attributes {tawa.kernel} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %zero = arith.constant 0.000000e+00 : f32
  %K = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xbf16>) -> i32
  %n = arith.divsi %K, %c64 : i32
  %acc0 = "tawa.splat"(%zero) {tawa.layout = "mma<128x128,w=4>"} : (f32) -> tensor<128x128xf32>
  %acc = scf.for %k = %c0 to %n step %c1 iter_args(%acc1 = %acc0) -> (tensor<128x128xf32>) : i32 {
    %off = arith.muli %k, %c64 : i32
    %a = "tawa.load"(%A, %c0, %off) {tawa.smem} : (memref<?x?xbf16>, i32, i32) -> tensor<128x64xbf16>
    %b = "tawa.load"(%B, %off, %c0) {tawa.smem} : (memref<?x?xbf16>, i32, i32) -> tensor<64x128xbf16>
    %d = "tawa.dot"(%a, %b, %acc1) {tawa.layout = "mma<128x128,w=4>"} : (tensor<128x64xbf16>, tensor<64x128xbf16>, tensor<128x128xf32>) -> tensor<128x128xf32>
    scf.yield %d : tensor<128x128xf32>
  } {tawa.layouts = ["mma<128x128,w=4>"]}
  %bv = "tawa.load"(%bias, %c0) {tawa.layout = "slice<mma<128x128,w=4>,0>"} : (memref<?xf32>, i32) -> tensor<128xf32>
  %be = "tawa.expand_dims"(%bv) {axis = 0 : i32, tawa.layout = "expand<slice<mma<128x128,w=4>,0>,0>"} : (tensor<128xf32>) -> tensor<1x128xf32>
  %bb = "tawa.broadcast"(%be) {tawa.layout = "mma<128x128,w=4>"} : (tensor<1x128xf32>) -> tensor<128x128xf32>
  %out = arith.addf %acc, %bb {tawa.layout = "mma<128x128,w=4>"} : tensor<128x128xf32>
  "tawa.store"(%C, %out, %c0, %c0) : (memref<?x?xf32>, tensor<128x128xf32>, i32, i32) -> ()
  return
}

// -----

// A warp-specialized kernel is left alone: its aref rings are the pipeline.

!R = !tawa.aref<[tensor<64x64xbf16>], 2 : i32>

// CHECK-LABEL: func.func @ws
// CHECK-NOT:     tawa.num_stages
// CHECK-NOT:     tawa.pipelined
// CHECK:         return
// S4-LABEL: func.func @ws
// S4-NOT:     tawa.num_stages
func.func @ws(%A: memref<?x?xbf16>, %C: memref<?x?xbf16>) attributes {tawa.kernel, tawa.num_warps = 8 : i32} {
  %r = "tawa.aref_create"() : () -> !R
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %n = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xbf16>) -> i32
    scf.for %i = %c0 to %n step %c1 : i32 {
      %a = "tawa.load"(%A, %c0, %i) {tawa.aref_load, tawa.smem} : (memref<?x?xbf16>, i32, i32) -> tensor<64x64xbf16>
      "tawa.aref_put"(%r, %a) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0>} : (!R, tensor<64x64xbf16>) -> ()
    }
    scf.yield
  } {tawa.first_warp_group = 0 : i32, tawa.warp_group = "producer"}
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %n = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xbf16>) -> i32
    scf.for %i = %c0 to %n step %c1 : i32 {
      %v = "tawa.aref_get"(%r) {resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (!R) -> tensor<64x64xbf16>
      "tawa.store"(%C, %v, %c0, %i) : (memref<?x?xbf16>, tensor<64x64xbf16>, i32, i32) -> ()
      "tawa.aref_consumed"(%r) : (!R) -> ()
    }
    scf.yield
  } {tawa.first_warp_group = 1 : i32, tawa.warp_group = "consumer", tawa.num_warp_groups = 1 : i32}
  return
}

// -----

// Loads under an `scf.if` in the loop body (skipped key blocks, block-sparse K) are pipelined like the others:
// issued ahead for every iteration (a TMA copy never faults; every slot is waited for at the top of each
// iteration), while only the dot stays conditional.

// CHECK-LABEL: func.func @conditional_loads
// CHECK:         scf.for
// CHECK:           scf.if
// CHECK-NEXT:        arith.muli
// CHECK-NEXT:        "tawa.load"(%arg0, %{{.*}}) {tawa.pipelined, tawa.smem}
// CHECK-NEXT:        "tawa.load"(%arg1, %{{.*}}) {tawa.pipelined, tawa.smem}
// CHECK:         } {tawa.layouts = ["mma<128x128,w=4>"], tawa.num_stages = 3 : i32}
// S4-LABEL: func.func @conditional_loads
// S4:         tawa.num_stages = 4 : i32
// S8-LABEL: func.func @conditional_loads
func.func @conditional_loads(%A: memref<?x?xbf16>, %B: memref<?x?xbf16>, %C: memref<?x?xf32>, %kmax: i32) attributes {tawa.kernel} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %zero = arith.constant 0.000000e+00 : f32
  %K = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xbf16>) -> i32
  %n = arith.divsi %K, %c64 : i32
  %acc0 = "tawa.splat"(%zero) {tawa.layout = "mma<128x128,w=4>"} : (f32) -> tensor<128x128xf32>
  %acc = scf.for %k = %c0 to %n step %c1 iter_args(%acc1 = %acc0) -> (tensor<128x128xf32>) : i32 {
    %run = arith.cmpi slt, %k, %kmax : i32
    %next = scf.if %run -> (tensor<128x128xf32>) {
      %off = arith.muli %k, %c64 : i32
      %a = "tawa.load"(%A, %c0, %off) {tawa.smem} : (memref<?x?xbf16>, i32, i32) -> tensor<128x64xbf16>
      %b = "tawa.load"(%B, %off, %c0) {tawa.smem} : (memref<?x?xbf16>, i32, i32) -> tensor<64x128xbf16>
      %d = "tawa.dot"(%a, %b, %acc1) {tawa.layout = "mma<128x128,w=4>"} : (tensor<128x64xbf16>, tensor<64x128xbf16>, tensor<128x128xf32>) -> tensor<128x128xf32>
      scf.yield %d : tensor<128x128xf32>
    } else {
      scf.yield %acc1 : tensor<128x128xf32>
    } {tawa.layouts = ["mma<128x128,w=4>"]}
    scf.yield %next : tensor<128x128xf32>
  } {tawa.layouts = ["mma<128x128,w=4>"]}
  "tawa.store"(%C, %acc, %c0, %c0) : (memref<?x?xf32>, tensor<128x128xf32>, i32, i32) -> ()
  return
}

// -----

// A K loop nested in another loop (a batch or tile loop the program writes) is pipelined too: the conversion
// initialises its ring's barriers again each time it starts. The outer loop, with no loads of its own, is left
// alone.
// CHECK-LABEL: func.func @nested
// CHECK:         scf.for
// CHECK:           scf.for
// CHECK-NEXT:        "tawa.load"(%arg0, %{{.*}}) {tawa.pipelined, tawa.smem}
// CHECK:           } {tawa.layouts = ["mma<64x64,w=4>"], tawa.num_stages = 3 : i32}
// CHECK:         } {tawa.layouts = ["mma<64x64,w=4>"]}
func.func @nested(%A: memref<?x?xbf16>, %C: memref<?x?xf32>) attributes {tawa.kernel} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c4 = arith.constant 4 : i32
  %zero = arith.constant 0.000000e+00 : f32
  %acc0 = "tawa.splat"(%zero) {tawa.layout = "mma<64x64,w=4>"} : (f32) -> tensor<64x64xf32>
  %acc = scf.for %r = %c0 to %c4 step %c1 iter_args(%acc1 = %acc0) -> (tensor<64x64xf32>) : i32 {
    %acc2 = scf.for %k = %c0 to %c4 step %c1 iter_args(%acc3 = %acc1) -> (tensor<64x64xf32>) : i32 {
      %a = "tawa.load"(%A, %c0, %k) {tawa.smem} : (memref<?x?xbf16>, i32, i32) -> tensor<64x64xbf16>
      %d = "tawa.dot"(%a, %a, %acc3) {tawa.layout = "mma<64x64,w=4>"} : (tensor<64x64xbf16>, tensor<64x64xbf16>, tensor<64x64xf32>) -> tensor<64x64xf32>
      scf.yield %d : tensor<64x64xf32>
    } {tawa.layouts = ["mma<64x64,w=4>"]}
    scf.yield %acc2 : tensor<64x64xf32>
  } {tawa.layouts = ["mma<64x64,w=4>"]}
  "tawa.store"(%C, %acc, %c0, %c0) : (memref<?x?xf32>, tensor<64x64xf32>, i32, i32) -> ()
  return
}


// -----

// Coordinates read from memory in the loop (a paged KV cache's block table) cannot be computed ahead: the loop is
// left unpipelined (no num_stages, loads not marked), and each iteration copies its tiles and waits for them.
// CHECK-LABEL: func.func @offset_from_data
// CHECK:         scf.for
// CHECK:           "tawa.load"(%arg0, %{{.*}}) {tawa.smem}
// CHECK:         } {tawa.layouts = ["mma<64x64,w=4>"]}
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
