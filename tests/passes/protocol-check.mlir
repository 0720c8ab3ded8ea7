// RUN: tawa-opt %s --split-input-file --passes protocol-check | FileCheck %s

// protocol-check proves the aref protocol and changes nothing. Each side computes the loop bound itself
// (`tawa.dim` + arith, cloned by partition): not the same SSA value, but the same computation, so accepted.

!R = !tawa.aref<[tensor<16x16xf32>], 2 : i32>

// CHECK-LABEL: func.func @specialized
// CHECK-NEXT:    %[[R:.*]] = "tawa.aref_create"() : () -> !tawa.aref<[tensor<16x16xf32>], 2 : i32>
// CHECK-NEXT:    scf.execute_region {
// CHECK:           %[[N:.*]] = arith.addi
// CHECK-NEXT:      scf.for %{{.*}} to %[[N]]
// CHECK-NEXT:        %[[A:.*]] = "tawa.load"
// CHECK-NEXT:        "tawa.aref_put"(%[[R]], %[[A]])
// CHECK:         } {tawa.warp_group = "producer"}
// CHECK-NEXT:    scf.execute_region {
// CHECK:           %[[M:.*]] = arith.addi
// CHECK-NEXT:      scf.for %{{.*}} to %[[M]]
// CHECK-NEXT:        %[[V:.*]] = "tawa.aref_get"(%[[R]])
// CHECK-NEXT:        "tawa.store"(%arg1, %[[V]]
// CHECK-NEXT:        "tawa.aref_consumed"(%[[R]])
// CHECK:         } {tawa.num_warp_groups = 1 : i32, tawa.warp_group = "consumer"}
func.func @specialized(%A: memref<?x?xf32>, %C: memref<?x?xf32>) attributes {tawa.kernel} {
  %r = "tawa.aref_create"() : () -> !R
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %d = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xf32>) -> i32
    %n = arith.addi %d, %c1 : i32
    scf.for %i = %c0 to %n step %c1 : i32 {
      %a = "tawa.load"(%A, %c0, %i) : (memref<?x?xf32>, i32, i32) -> tensor<16x16xf32>
      "tawa.aref_put"(%r, %a) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0>} : (!R, tensor<16x16xf32>) -> ()
    }
    scf.yield
  } {tawa.warp_group = "producer"}
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %d = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xf32>) -> i32
    %n = arith.addi %d, %c1 : i32
    scf.for %i = %c0 to %n step %c1 : i32 {
      %v = "tawa.aref_get"(%r) {resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (!R) -> tensor<16x16xf32>
      "tawa.store"(%C, %v, %c0, %i) : (memref<?x?xf32>, tensor<16x16xf32>, i32, i32) -> ()
      "tawa.aref_consumed"(%r) : (!R) -> ()
    }
    scf.yield
  } {tawa.warp_group = "consumer", tawa.num_warp_groups = 1 : i32}
  return
}

// -----

// Before partition (after aref-insertion) the kernel is still sequential; the protocol holds in program order.

!R = !tawa.aref<[tensor<16x16xf32>, tensor<16x16xf32>], 3 : i32>

// CHECK-LABEL: func.func @sequential
// CHECK:         "tawa.aref_put"
// CHECK-NEXT:    "tawa.aref_get"
// CHECK-NEXT:    "tawa.dot"
// CHECK-NEXT:    "tawa.aref_consumed"
func.func @sequential(%A: memref<?x?xf32>, %B: memref<?x?xf32>, %C: memref<?x?xf32>) attributes {tawa.kernel} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c16 = arith.constant 16 : i32
  %z = arith.constant 0.000000e+00 : f32
  %K = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xf32>) -> i32
  %n = arith.divsi %K, %c16 : i32
  %acc0 = "tawa.splat"(%z) : (f32) -> tensor<16x16xf32>
  %r = "tawa.aref_create"() : () -> !R
  %acc = scf.for %k = %c0 to %n step %c1 iter_args(%acc1 = %acc0) -> (tensor<16x16xf32>) : i32 {
    %off = arith.muli %k, %c16 : i32
    %a = "tawa.load"(%A, %c0, %off) : (memref<?x?xf32>, i32, i32) -> tensor<16x16xf32>
    %b = "tawa.load"(%B, %off, %c0) : (memref<?x?xf32>, i32, i32) -> tensor<16x16xf32>
    "tawa.aref_put"(%r, %a, %b) {operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0>} : (!R, tensor<16x16xf32>, tensor<16x16xf32>) -> ()
    %g:2 = "tawa.aref_get"(%r) {resultSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>} : (!R) -> (tensor<16x16xf32>, tensor<16x16xf32>)
    %d = "tawa.dot"(%g#0, %g#1, %acc1) : (tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
    "tawa.aref_consumed"(%r) : (!R) -> ()
    scf.yield %d : tensor<16x16xf32>
  }
  "tawa.store"(%C, %acc, %c0, %c0) : (memref<?x?xf32>, tensor<16x16xf32>, i32, i32) -> ()
  return
}

// -----

// A conditional around the loop (a tile past an expert's row count skips it): each side reads the count itself
// (`tawa.load_scalar` of a tensor the kernel never writes) and takes the same branch, so accepted.

!R = !tawa.aref<[tensor<16x16xf32>], 2 : i32>

// CHECK-LABEL: func.func @conditional_loop
// CHECK:         } {tawa.warp_group = "producer"}
// CHECK:         scf.if %{{.*}} {
// CHECK:           scf.for
// CHECK-NEXT:        "tawa.aref_get"
// CHECK:         } else {
// CHECK:         } {tawa.num_warp_groups = 1 : i32, tawa.warp_group = "consumer"}
func.func @conditional_loop(%A: memref<?x?xf32>, %CNT: memref<?xi32>, %C: memref<?x?xf32>) attributes {tawa.kernel} {
  %r = "tawa.aref_create"() : () -> !R
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %p = "tawa.program_id"() {axis = 0 : i32} : () -> i32
    %cnt = "tawa.load_scalar"(%CNT, %p) : (memref<?xi32>, i32) -> i32
    %go = arith.cmpi slt, %c0, %cnt : i32
    scf.if %go {
      %n = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xf32>) -> i32
      scf.for %i = %c0 to %n step %c1 : i32 {
        %a = "tawa.load"(%A, %c0, %i) : (memref<?x?xf32>, i32, i32) -> tensor<16x16xf32>
        "tawa.aref_put"(%r, %a) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0>} : (!R, tensor<16x16xf32>) -> ()
      }
    }
    scf.yield
  } {tawa.warp_group = "producer"}
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %p = "tawa.program_id"() {axis = 0 : i32} : () -> i32
    %cnt = "tawa.load_scalar"(%CNT, %p) : (memref<?xi32>, i32) -> i32
    %go = arith.cmpi slt, %c0, %cnt : i32
    scf.if %go {
      %n = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xf32>) -> i32
      scf.for %i = %c0 to %n step %c1 : i32 {
        %v = "tawa.aref_get"(%r) {resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (!R) -> tensor<16x16xf32>
        "tawa.store"(%C, %v, %c0, %i) : (memref<?x?xf32>, tensor<16x16xf32>, i32, i32) -> ()
        "tawa.aref_consumed"(%r) : (!R) -> ()
      }
    } else {
      %z = arith.constant 0.0 : f32
      %t = "tawa.splat"(%z) : (f32) -> tensor<16x16xf32>
      "tawa.store"(%C, %t, %c0, %c0) : (memref<?x?xf32>, tensor<16x16xf32>, i32, i32) -> ()
    }
    scf.yield
  } {tawa.warp_group = "consumer", tawa.num_warp_groups = 1 : i32}
  return
}
