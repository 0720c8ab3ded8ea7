// RUN: tawa-opt %s --split-input-file --passes assign-layouts | FileCheck %s
// RUN: tawa-opt %s --split-input-file --passes assign-layouts --num-warps 8 | FileCheck %s --check-prefix=W8

// Warp specialized: the consumer region is laid out over its 2 warp groups (8 warps): the accumulator in the
// wgmma layout, the bias straight in its column slice (no conversion); the producer holds no register tiles.

!R = !tawa.aref<[tensor<128x64xbf16>, tensor<64x128xbf16>], 4 : i32>

// CHECK-LABEL: func.func @ws_gemm_bias
// CHECK:         scf.execute_region {
// CHECK-NOT:       tawa.layout
// CHECK:         } {tawa.first_warp_group = 0 : i32, {{.*}}"producer"}
// CHECK:           %[[ACC0:.*]] = "tawa.splat"(%{{.*}}) {tawa.layout = "mma<128x128,w=8>"}
// CHECK:           scf.for
// CHECK:             "tawa.dot"(%{{.*}}) {tawa.layout = "mma<128x128,w=8>"}
// CHECK:           } {tawa.layouts = ["mma<128x128,w=8>"]}
// CHECK-NEXT:      "tawa.load"(%arg2, %{{.*}}) {tawa.layout = "slice<mma<128x128,w=8>,0>"} : (memref<?xf32>, i32) -> tensor<128xf32>
// CHECK-NEXT:      "tawa.expand_dims"(%{{.*}}) {axis = 0 : i32, tawa.layout = "expand<slice<mma<128x128,w=8>,0>,0>"}
// CHECK-NEXT:      "tawa.broadcast"(%{{.*}}) {tawa.layout = "mma<128x128,w=8>"}
// CHECK-NEXT:      arith.addf %{{.*}} {tawa.layout = "mma<128x128,w=8>"}
// CHECK:         } {tawa.first_warp_group = 1 : i32, {{.*}}"consumer"}
func.func @ws_gemm_bias(%A: memref<?x?xbf16>, %B: memref<?x?xbf16>, %bias: memref<?xf32>, %C: memref<?x?xf32>) attributes {tawa.kernel, tawa.num_warps = 12 : i32} {
  %r = "tawa.aref_create"() : () -> !R
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %c64 = arith.constant 64 : i32
    %K = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xbf16>) -> i32
    %n = arith.divsi %K, %c64 : i32
    scf.for %k = %c0 to %n step %c1 : i32 {
      %off = arith.muli %k, %c64 : i32
      %a = "tawa.load"(%A, %c0, %off) {tawa.aref_load, tawa.smem} : (memref<?x?xbf16>, i32, i32) -> tensor<128x64xbf16>
      %b = "tawa.load"(%B, %off, %c0) {tawa.aref_load, tawa.smem} : (memref<?x?xbf16>, i32, i32) -> tensor<64x128xbf16>
      "tawa.aref_put"(%r, %a, %b) {operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0>} : (!R, tensor<128x64xbf16>, tensor<64x128xbf16>) -> ()
    }
    scf.yield
  } {tawa.first_warp_group = 0 : i32, tawa.max_registers = 40 : i32, tawa.warp_group = "producer"}
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %c64 = arith.constant 64 : i32
    %zero = arith.constant 0.000000e+00 : f32
    %K = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xbf16>) -> i32
    %n = arith.divsi %K, %c64 : i32
    %acc0 = "tawa.splat"(%zero) : (f32) -> tensor<128x128xf32>
    %acc = scf.for %k = %c0 to %n step %c1 iter_args(%acc1 = %acc0) -> (tensor<128x128xf32>) : i32 {
      %g:2 = "tawa.aref_get"(%r) {resultSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>} : (!R) -> (tensor<128x64xbf16>, tensor<64x128xbf16>)
      %d = "tawa.dot"(%g#0, %g#1, %acc1) : (tensor<128x64xbf16>, tensor<64x128xbf16>, tensor<128x128xf32>) -> tensor<128x128xf32>
      "tawa.aref_consumed"(%r) : (!R) -> ()
      scf.yield %d : tensor<128x128xf32>
    }
    %bv = "tawa.load"(%bias, %c0) : (memref<?xf32>, i32) -> tensor<128xf32>
    %be = "tawa.expand_dims"(%bv) {axis = 0 : i32} : (tensor<128xf32>) -> tensor<1x128xf32>
    %bb = "tawa.broadcast"(%be) : (tensor<1x128xf32>) -> tensor<128x128xf32>
    %out = arith.addf %acc, %bb : tensor<128x128xf32>
    "tawa.store"(%C, %out, %c0, %c0) : (memref<?x?xf32>, tensor<128x128xf32>, i32, i32) -> ()
    scf.yield
  } {tawa.first_warp_group = 1 : i32, tawa.max_registers = 232 : i32, tawa.num_warp_groups = 2 : i32, tawa.warp_group = "consumer"}
  return
}

// -----

// Uniform warps (4 by default, 8 with --num-warps 8): the dot operands are staged in shared memory (tawa.smem),
// the accumulator and everything computed from it use the wgmma layout over all the kernel's warps.

// CHECK-LABEL: func.func @uniform_gemm
// CHECK:         "tawa.splat"(%{{.*}}) {tawa.layout = "mma<128x128,w=4>"}
// CHECK:         scf.for
// CHECK-NEXT:      arith.muli
// CHECK-NEXT:      "tawa.load"(%arg0, %{{.*}}) {tawa.smem} : (memref<?x?xbf16>, i32, i32) -> tensor<128x64xbf16>
// CHECK-NEXT:      "tawa.load"(%arg1, %{{.*}}) {tawa.smem} : (memref<?x?xbf16>, i32, i32) -> tensor<64x128xbf16>
// CHECK-NEXT:      "tawa.dot"(%{{.*}}) {tawa.layout = "mma<128x128,w=4>"}
// CHECK:         } {tawa.layouts = ["mma<128x128,w=4>"]}
// CHECK-NEXT:    math.exp %{{.*}} {tawa.layout = "mma<128x128,w=4>"}
// CHECK-NEXT:    arith.truncf %{{.*}} {tawa.layout = "mma<128x128,w=4>"}
// CHECK-NEXT:    "tawa.store"

// W8-LABEL: func.func @uniform_gemm
// W8:         } {tawa.layouts = ["mma<128x128,w=8>"]}
func.func @uniform_gemm(%A: memref<?x?xbf16>, %B: memref<?x?xbf16>, %C: memref<?x?xbf16>) attributes {tawa.kernel} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %zero = arith.constant 0.000000e+00 : f32
  %K = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xbf16>) -> i32
  %n = arith.divsi %K, %c64 : i32
  %acc0 = "tawa.splat"(%zero) : (f32) -> tensor<128x128xf32>
  %acc = scf.for %k = %c0 to %n step %c1 iter_args(%acc1 = %acc0) -> (tensor<128x128xf32>) : i32 {
    %off = arith.muli %k, %c64 : i32
    %a = "tawa.load"(%A, %c0, %off) : (memref<?x?xbf16>, i32, i32) -> tensor<128x64xbf16>
    %b = "tawa.load"(%B, %off, %c0) : (memref<?x?xbf16>, i32, i32) -> tensor<64x128xbf16>
    %d = "tawa.dot"(%a, %b, %acc1) : (tensor<128x64xbf16>, tensor<64x128xbf16>, tensor<128x128xf32>) -> tensor<128x128xf32>
    scf.yield %d : tensor<128x128xf32>
  }
  %e = math.exp %acc : tensor<128x128xf32>
  %out = arith.truncf %e : tensor<128x128xf32> to tensor<128x128xbf16>
  "tawa.store"(%C, %out, %c0, %c0) : (memref<?x?xbf16>, tensor<128x128xbf16>, i32, i32) -> ()
  return
}

// -----

// No dot: tiles are blocked over the warps; a reduction gives the slice of its input's layout along the reduced
// axis, and expand_dims / broadcast bring it back.

// CHECK-LABEL: func.func @row_max
// CHECK:         %[[X:.*]] = "tawa.load"(%arg0, %{{.*}}) {tawa.layout = "blocked<4x1024,w=4>"}
// CHECK-NEXT:    %[[M:.*]] = "tawa.reduce"(%[[X]]) {axis = 1 : i32, kind = "max", tawa.layout = "slice<blocked<4x1024,w=4>,1>"}
// CHECK-NEXT:    "tawa.expand_dims"(%[[M]]) {axis = 1 : i32, tawa.layout = "expand<slice<blocked<4x1024,w=4>,1>,1>"}
// CHECK-NEXT:    "tawa.broadcast"(%{{.*}}) {tawa.layout = "blocked<4x1024,w=4>"}
// CHECK-NEXT:    arith.subf %{{.*}} {tawa.layout = "blocked<4x1024,w=4>"}
func.func @row_max(%X: memref<?x?xf32>, %Y: memref<?x?xf32>) attributes {tawa.kernel} {
  %c0 = arith.constant 0 : i32
  %x = "tawa.load"(%X, %c0, %c0) : (memref<?x?xf32>, i32, i32) -> tensor<4x1024xf32>
  %m = "tawa.reduce"(%x) {axis = 1 : i32, kind = "max"} : (tensor<4x1024xf32>) -> tensor<4xf32>
  %e = "tawa.expand_dims"(%m) {axis = 1 : i32} : (tensor<4xf32>) -> tensor<4x1xf32>
  %b = "tawa.broadcast"(%e) : (tensor<4x1xf32>) -> tensor<4x1024xf32>
  %y = arith.subf %x, %b : tensor<4x1024xf32>
  "tawa.store"(%Y, %y, %c0, %c0) : (memref<?x?xf32>, tensor<4x1024xf32>, i32, i32) -> ()
  return
}
