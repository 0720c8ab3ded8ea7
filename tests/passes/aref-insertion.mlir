// RUN: tawa-opt %s --passes aref-insertion --split-input-file | FileCheck %s
// RUN: tawa-opt %s --passes aref-insertion --split-input-file --num-buffers 3 | FileCheck %s --check-prefix=DEPTH3

// The loads feeding the dot go through one aref: created before the loop, put right after the loads, taken by a
// get whose results replace every use of the loaded tiles, released after their last use. Depth by default: as
// many 32 KiB slots as fit in shared memory next to the 32 KiB epilogue tile (6); --num-buffers sets it.

// CHECK-LABEL: func.func @gemm
// CHECK:         %[[R:.*]] = "tawa.aref_create"() : () -> !tawa.aref<[tensor<128x64xbf16>, tensor<64x128xbf16>], 6 : i32>
// CHECK-NEXT:    %[[ACC:.*]] = scf.for
// CHECK-NEXT:      %[[OFF:.*]] = arith.muli
// CHECK-NEXT:      %[[TA:.*]] = "tawa.load"(%arg0, %{{.*}}, %[[OFF]])
// CHECK-NEXT:      %[[TB:.*]] = "tawa.load"(%arg1, %[[OFF]], %{{.*}})
// CHECK-NEXT:      "tawa.aref_put"(%[[R]], %[[TA]], %[[TB]]) {operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0>}
// CHECK-NEXT:      %[[G:[0-9]+]]:2 = "tawa.aref_get"(%[[R]]) {resultSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>}
// CHECK-SAME:        -> (tensor<128x64xbf16>, tensor<64x128xbf16>)
// CHECK-NEXT:      %[[D:.*]] = "tawa.dot"(%[[G]]#0, %[[G]]#1, %arg{{[0-9]+}})
// CHECK-NEXT:      "tawa.aref_consumed"(%[[R]])
// CHECK-NEXT:      scf.yield %[[D]]
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[OUT:.*]] = arith.truncf %[[ACC]]
// CHECK-NEXT:    "tawa.store"(%arg2, %[[OUT]], %{{.*}}, %{{.*}})
// CHECK-NOT:     tawa.aref
// CHECK:         return

// DEPTH3-LABEL: func.func @gemm
// DEPTH3:         "tawa.aref_create"() : () -> !tawa.aref<[tensor<128x64xbf16>, tensor<64x128xbf16>], 3 : i32>
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
  %acc = scf.for %k = %c0 to %n step %c1 iter_args(%a = %acc0) -> (tensor<128x128xf32>) : i32 {
    %off = arith.muli %k, %c64 : i32
    %ta = "tawa.load"(%A, %row, %off) : (memref<?x?xbf16>, i32, i32) -> tensor<128x64xbf16>
    %tb = "tawa.load"(%B, %off, %col) : (memref<?x?xbf16>, i32, i32) -> tensor<64x128xbf16>
    %d = "tawa.dot"(%ta, %tb, %a) : (tensor<128x64xbf16>, tensor<64x128xbf16>, tensor<128x128xf32>) -> tensor<128x128xf32>
    scf.yield %d : tensor<128x128xf32>
  }
  %out = arith.truncf %acc : tensor<128x128xf32> to tensor<128x128xbf16>
  "tawa.store"(%C, %out, %row, %col) : (memref<?x?xbf16>, tensor<128x128xbf16>, i32, i32) -> ()
  return
}

// -----

// SwiGLU: three tiles per slot; the A tile feeds both dots and is loaded (and put) once. The elementwise epilogue
// after the loop stays as it was.

// CHECK-LABEL: func.func @swiglu
// CHECK:         %[[R:.*]] = "tawa.aref_create"() : () -> !tawa.aref<[tensor<128x64xbf16>, tensor<64x64xbf16>, tensor<64x64xbf16>], 6 : i32>
// CHECK:         scf.for
// CHECK-COUNT-3:   "tawa.load"
// CHECK-NEXT:      "tawa.aref_put"(%[[R]], %{{.*}}, %{{.*}}, %{{.*}}) {operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 0, 0, 0>}
// CHECK-NEXT:      %[[G:[0-9]+]]:3 = "tawa.aref_get"(%[[R]])
// CHECK-NEXT:      "tawa.dot"(%[[G]]#0, %[[G]]#1, %{{.*}})
// CHECK-NEXT:      "tawa.dot"(%[[G]]#0, %[[G]]#2, %{{.*}})
// CHECK-NEXT:      "tawa.aref_consumed"(%[[R]])
// CHECK-NEXT:      scf.yield
// CHECK-NOT:     "tawa.load"
// CHECK:         math.exp
// CHECK:         "tawa.store"

// DEPTH3-LABEL: func.func @swiglu
// DEPTH3:         "tawa.aref_create"() : () -> !tawa.aref<[tensor<128x64xbf16>, tensor<64x64xbf16>, tensor<64x64xbf16>], 3 : i32>
func.func @swiglu(%A: memref<?x?xbf16>, %W: memref<?x?xbf16>, %V: memref<?x?xbf16>, %C: memref<?x?xbf16>) attributes {tawa.kernel} {
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
  %col = arith.muli %pn, %c64 : i32
  %init = "tawa.splat"(%zero) : (f32) -> tensor<128x64xf32>
  %k63 = arith.addi %K, %c63 : i32
  %n = arith.divsi %k63, %c64 : i32
  %r:2 = scf.for %k = %c0 to %n step %c1 iter_args(%g = %init, %u = %init) -> (tensor<128x64xf32>, tensor<128x64xf32>) : i32 {
    %off = arith.muli %k, %c64 : i32
    %ta = "tawa.load"(%A, %row, %off) : (memref<?x?xbf16>, i32, i32) -> tensor<128x64xbf16>
    %tw = "tawa.load"(%W, %off, %col) : (memref<?x?xbf16>, i32, i32) -> tensor<64x64xbf16>
    %tv = "tawa.load"(%V, %off, %col) : (memref<?x?xbf16>, i32, i32) -> tensor<64x64xbf16>
    %g2 = "tawa.dot"(%ta, %tw, %g) : (tensor<128x64xbf16>, tensor<64x64xbf16>, tensor<128x64xf32>) -> tensor<128x64xf32>
    %u2 = "tawa.dot"(%ta, %tv, %u) : (tensor<128x64xbf16>, tensor<64x64xbf16>, tensor<128x64xf32>) -> tensor<128x64xf32>
    scf.yield %g2, %u2 : tensor<128x64xf32>, tensor<128x64xf32>
  }
  %e = math.exp %r#0 : tensor<128x64xf32>
  %m = arith.mulf %e, %r#1 : tensor<128x64xf32>
  %out = arith.truncf %m : tensor<128x64xf32> to tensor<128x64xbf16>
  "tawa.store"(%C, %out, %row, %col) : (memref<?x?xbf16>, tensor<128x64xbf16>, i32, i32) -> ()
  return
}
