// RUN: tawa-opt %s --split-input-file --passes assign-warp-groups | FileCheck %s

// The producer is warp group 0 and the consumers follow; the kernel is launched with 4 warps per warp group
// (1 producer + 2 consumers: 12 warps). The producer's loads, whose tiles only go into the aref_put, are marked:
// the put issues their TMA copies into the ring slot. The consumer's own load (the bias) is not.

!R = !tawa.aref<[tensor<128x64xbf16>, tensor<64x128xbf16>], 4 : i32>

// CHECK-LABEL: func.func @gemm_bias
// CHECK-SAME:    tawa.num_warps = 12 : i32
// CHECK:           "tawa.load"(%arg0, %{{.*}}) {tawa.aref_load, tawa.smem}
// CHECK-NEXT:      "tawa.load"(%arg1, %{{.*}}) {tawa.aref_load, tawa.smem}
// CHECK-NEXT:      "tawa.aref_put"
// CHECK:         } {tawa.first_warp_group = 0 : i32, tawa.max_registers = 40 : i32, tawa.warp_group = "producer"}
// CHECK:           "tawa.load"(%arg2, %{{.*}}) : (memref<?xf32>, i32) -> tensor<128xf32>
// CHECK:         } {tawa.first_warp_group = 1 : i32, tawa.max_registers = 232 : i32, tawa.num_warp_groups = 2 : i32, tawa.warp_group = "consumer"}
func.func @gemm_bias(%A: memref<?x?xbf16>, %B: memref<?x?xbf16>, %bias: memref<?xf32>, %C: memref<?x?xf32>) attributes {tawa.kernel} {
  %r = "tawa.aref_create"() : () -> !R
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %c64 = arith.constant 64 : i32
    %c128 = arith.constant 128 : i32
    %K = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xbf16>) -> i32
    %n = arith.divsi %K, %c64 : i32
    %pm = "tawa.program_id"() {axis = 0 : i32} : () -> i32
    %row = arith.muli %pm, %c128 : i32
    %pn = "tawa.program_id"() {axis = 1 : i32} : () -> i32
    %col = arith.muli %pn, %c128 : i32
    scf.for %k = %c0 to %n step %c1 : i32 {
      %off = arith.muli %k, %c64 : i32
      %a = "tawa.load"(%A, %row, %off) : (memref<?x?xbf16>, i32, i32) -> tensor<128x64xbf16>
      %b = "tawa.load"(%B, %off, %col) : (memref<?x?xbf16>, i32, i32) -> tensor<64x128xbf16>
      "tawa.aref_put"(%r, %a, %b) {operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0>} : (!R, tensor<128x64xbf16>, tensor<64x128xbf16>) -> ()
    }
    scf.yield
  } {tawa.max_registers = 40 : i32, tawa.warp_group = "producer"}
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %c64 = arith.constant 64 : i32
    %c128 = arith.constant 128 : i32
    %zero = arith.constant 0.000000e+00 : f32
    %K = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xbf16>) -> i32
    %n = arith.divsi %K, %c64 : i32
    %pm = "tawa.program_id"() {axis = 0 : i32} : () -> i32
    %row = arith.muli %pm, %c128 : i32
    %pn = "tawa.program_id"() {axis = 1 : i32} : () -> i32
    %col = arith.muli %pn, %c128 : i32
    %acc0 = "tawa.splat"(%zero) : (f32) -> tensor<128x128xf32>
    %acc = scf.for %k = %c0 to %n step %c1 iter_args(%acc1 = %acc0) -> (tensor<128x128xf32>) : i32 {
      %g:2 = "tawa.aref_get"(%r) {resultSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>} : (!R) -> (tensor<128x64xbf16>, tensor<64x128xbf16>)
      %d = "tawa.dot"(%g#0, %g#1, %acc1) : (tensor<128x64xbf16>, tensor<64x128xbf16>, tensor<128x128xf32>) -> tensor<128x128xf32>
      "tawa.aref_consumed"(%r) : (!R) -> ()
      scf.yield %d : tensor<128x128xf32>
    }
    %bv = "tawa.load"(%bias, %col) : (memref<?xf32>, i32) -> tensor<128xf32>
    %be = "tawa.expand_dims"(%bv) {axis = 0 : i32} : (tensor<128xf32>) -> tensor<1x128xf32>
    %bb = "tawa.broadcast"(%be) : (tensor<1x128xf32>) -> tensor<128x128xf32>
    %out = arith.addf %acc, %bb : tensor<128x128xf32>
    "tawa.store"(%C, %out, %row, %col) : (memref<?x?xf32>, tensor<128x128xf32>, i32, i32) -> ()
    scf.yield
  } {tawa.max_registers = 232 : i32, tawa.num_warp_groups = 2 : i32, tawa.warp_group = "consumer"}
  return
}

// -----

// One consumer warp group: 8 warps.

!R = !tawa.aref<[tensor<64x64xbf16>], 2 : i32>

// CHECK-LABEL: func.func @one_consumer
// CHECK-SAME:    tawa.num_warps = 8 : i32
// CHECK:         } {tawa.first_warp_group = 0 : i32, tawa.warp_group = "producer"}
// CHECK:         } {tawa.first_warp_group = 1 : i32, tawa.num_warp_groups = 1 : i32, tawa.warp_group = "consumer"}
func.func @one_consumer(%A: memref<?x?xbf16>, %C: memref<?x?xbf16>) attributes {tawa.kernel} {
  %r = "tawa.aref_create"() : () -> !R
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %n = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xbf16>) -> i32
    scf.for %i = %c0 to %n step %c1 : i32 {
      %a = "tawa.load"(%A, %c0, %i) : (memref<?x?xbf16>, i32, i32) -> tensor<64x64xbf16>
      "tawa.aref_put"(%r, %a) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0>} : (!R, tensor<64x64xbf16>) -> ()
    }
    scf.yield
  } {tawa.warp_group = "producer"}
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
  } {tawa.warp_group = "consumer", tawa.num_warp_groups = 1 : i32}
  return
}
