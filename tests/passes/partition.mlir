// RUN: tawa-opt %s --passes partition --split-input-file | FileCheck %s
// RUN: tawa-opt %s --passes partition --split-input-file --num-consumer-groups 1 | FileCheck %s --check-prefix=ONE

// The kernel body becomes: the arefs, a producer region (replicated scalar control, the loop without iter_args,
// loads and puts) and a consumer region (everything else). Nothing but the aref is shared between them.

!R = !tawa.aref<[tensor<128x64xbf16>, tensor<64x128xbf16>], 6 : i32>

// CHECK-LABEL: func.func @gemm
// CHECK-NEXT:    %[[R:.*]] = "tawa.aref_create"()
// CHECK-NEXT:    scf.execute_region {
// CHECK-NOT:       "tawa.splat"
// CHECK:           %[[K:.*]] = "tawa.dim"(%arg0) {axis = 1 : i32}
// CHECK:           %[[PM:.*]] = "tawa.program_id"() {axis = 0 : i32}
// CHECK:           %[[PN:.*]] = "tawa.program_id"() {axis = 1 : i32}
// CHECK:           scf.for %[[IV:[a-z0-9]+]] = %{{.*}} to %{{.*}} step %{{.*}}  : i32 {
// CHECK-NEXT:        %[[OFF:.*]] = arith.muli %[[IV]]
// CHECK-NEXT:        %[[TA:.*]] = "tawa.load"(%arg0, %{{.*}}, %[[OFF]])
// CHECK-NEXT:        %[[TB:.*]] = "tawa.load"(%arg1, %[[OFF]], %{{.*}})
// CHECK-NEXT:        "tawa.aref_put"(%[[R]], %[[TA]], %[[TB]])
// CHECK-NEXT:      }
// CHECK-NEXT:      scf.yield
// CHECK-NEXT:    } {tawa.warp_group = "producer"}
// CHECK-NEXT:    scf.execute_region {
// CHECK-NOT:       "tawa.load"
// CHECK-NOT:       "tawa.aref_put"
// CHECK:           "tawa.program_id"() {axis = 0 : i32}
// CHECK:           %[[ACC0:.*]] = "tawa.splat"
// CHECK:           %[[ACC:.*]] = scf.for %{{.*}} iter_args(%[[A:.*]] = %[[ACC0]]) -> (tensor<128x128xf32>)
// CHECK-NEXT:        %[[G:[0-9]+]]:2 = "tawa.aref_get"(%[[R]])
// CHECK-NEXT:        %[[D:.*]] = "tawa.dot"(%[[G]]#0, %[[G]]#1, %[[A]])
// CHECK-NEXT:        "tawa.aref_consumed"(%[[R]])
// CHECK-NEXT:        scf.yield %[[D]]
// CHECK-NEXT:      }
// CHECK-NEXT:      %[[OUT:.*]] = arith.truncf %[[ACC]]
// CHECK-NEXT:      "tawa.store"(%arg2, %[[OUT]]
// CHECK-NEXT:      scf.yield
// CHECK-NEXT:    } {tawa.num_warp_groups = 2 : i32, tawa.warp_group = "consumer"}
// CHECK-NEXT:    return

// ONE-LABEL: func.func @gemm
// ONE:         {tawa.num_warp_groups = 1 : i32, tawa.warp_group = "consumer"}
func.func @gemm(%A: memref<?x?xbf16>, %B: memref<?x?xbf16>, %C: memref<?x?xbf16>) attributes {tawa.kernel} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c63 = arith.constant 63 : i32
  %c64 = arith.constant 64 : i32
  %c128 = arith.constant 128 : i32
  %zero = arith.constant 0.000000e+00 : f32
  %K = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xbf16>) -> i32
  %pm = "tawa.program_id"() {axis = 0 : i32} : () -> i32
  %pn = "tawa.program_id"() {axis = 1 : i32} : () -> i32
  %row = arith.muli %pm, %c128 : i32
  %col = arith.muli %pn, %c128 : i32
  %acc0 = "tawa.splat"(%zero) : (f32) -> tensor<128x128xf32>
  %k63 = arith.addi %K, %c63 : i32
  %n = arith.divsi %k63, %c64 : i32
  %r = "tawa.aref_create"() : () -> !R
  %acc = scf.for %k = %c0 to %n step %c1 iter_args(%a = %acc0) -> (tensor<128x128xf32>) : i32 {
    %off = arith.muli %k, %c64 : i32
    %ta = "tawa.load"(%A, %row, %off) : (memref<?x?xbf16>, i32, i32) -> tensor<128x64xbf16>
    %tb = "tawa.load"(%B, %off, %col) : (memref<?x?xbf16>, i32, i32) -> tensor<64x128xbf16>
    "tawa.aref_put"(%r, %ta, %tb) {operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0>} : (!R, tensor<128x64xbf16>, tensor<64x128xbf16>) -> ()
    %g:2 = "tawa.aref_get"(%r) {resultSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>} : (!R) -> (tensor<128x64xbf16>, tensor<64x128xbf16>)
    %d = "tawa.dot"(%g#0, %g#1, %a) : (tensor<128x64xbf16>, tensor<64x128xbf16>, tensor<128x128xf32>) -> tensor<128x128xf32>
    "tawa.aref_consumed"(%r) : (!R) -> ()
    scf.yield %d : tensor<128x128xf32>
  }
  %out = arith.truncf %acc : tensor<128x128xf32> to tensor<128x128xbf16>
  "tawa.store"(%C, %out, %row, %col) : (memref<?x?xbf16>, tensor<128x128xbf16>, i32, i32) -> ()
  return
}

// -----

// A 64-row accumulator: one consumer warp group. A loop bound computed from the program id (min of two cdivs,
// as in causal attention) is replicated in the producer; a tile loaded before the loop (Q) stays in the consumer.

!R = !tawa.aref<[tensor<64x64xbf16>], 2 : i32>

// CHECK-LABEL: func.func @attention_like
// CHECK:         scf.execute_region {
// CHECK:           %[[P:.*]] = "tawa.program_id"() {axis = 0 : i32}
// CHECK:           %[[UB:.*]] = arith.minsi
// CHECK:           scf.for %{{.*}} to %[[UB]]
// CHECK-NEXT:        arith.muli
// CHECK-NEXT:        %[[T:.*]] = "tawa.load"(%arg1
// CHECK-NEXT:        "tawa.aref_put"(%{{.*}}, %[[T]])
// CHECK:         } {tawa.warp_group = "producer"}
// CHECK-NEXT:    scf.execute_region {
// CHECK:           "tawa.load"(%arg0
// CHECK:           arith.minsi
// CHECK:           scf.for
// CHECK-NEXT:        "tawa.aref_get"
// CHECK:         } {tawa.num_warp_groups = 1 : i32, tawa.warp_group = "consumer"}
func.func @attention_like(%Q: memref<?x?xbf16>, %Kt: memref<?x?xbf16>, %O: memref<?x?xf32>) attributes {tawa.kernel} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %c2 = arith.constant 2 : i32
  %zero = arith.constant 0.000000e+00 : f32
  %S = "tawa.dim"(%Kt) {axis = 1 : i32} : (memref<?x?xbf16>) -> i32
  %pm = "tawa.program_id"() {axis = 0 : i32} : () -> i32
  %row = arith.muli %pm, %c64 : i32
  %q = "tawa.load"(%Q, %row, %c0) : (memref<?x?xbf16>, i32, i32) -> tensor<64x64xbf16>
  %acc0 = "tawa.splat"(%zero) : (f32) -> tensor<64x64xf32>
  %n = arith.divsi %S, %c64 : i32
  %p1 = arith.addi %pm, %c1 : i32
  %m = arith.minsi %n, %p1 : i32
  %r = "tawa.aref_create"() : () -> !R
  %acc = scf.for %k = %c0 to %m step %c1 iter_args(%a = %acc0) -> (tensor<64x64xf32>) : i32 {
    %off = arith.muli %k, %c64 : i32
    %kt = "tawa.load"(%Kt, %c0, %off) : (memref<?x?xbf16>, i32, i32) -> tensor<64x64xbf16>
    "tawa.aref_put"(%r, %kt) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0>} : (!R, tensor<64x64xbf16>) -> ()
    %g = "tawa.aref_get"(%r) {resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (!R) -> tensor<64x64xbf16>
    %d = "tawa.dot"(%q, %g, %a) : (tensor<64x64xbf16>, tensor<64x64xbf16>, tensor<64x64xf32>) -> tensor<64x64xf32>
    "tawa.aref_consumed"(%r) : (!R) -> ()
    scf.yield %d : tensor<64x64xf32>
  }
  "tawa.store"(%O, %acc, %row, %c0) : (memref<?x?xf32>, tensor<64x64xf32>, i32, i32) -> ()
  return
}
