// RUN: tawa-opt %s --passes canonicalize --split-input-file | FileCheck %s

// The frontend's GEMM: constants are hoisted to the top, cdiv(K, 64) = (K + 64 - 1) / 64 folds to one add of 63,
// and the two `k * 64` offsets (and the two `pid * 128` of the store) are CSE'd into one value each.

// CHECK-LABEL: func.func @gemm
// CHECK-DAG:     %[[C63:.*]] = arith.constant 63 : i32
// CHECK-DAG:     %[[C64:.*]] = arith.constant 64 : i32
// CHECK-DAG:     %[[C128:.*]] = arith.constant 128 : i32
// CHECK:         %[[K:.*]] = "tawa.dim"(%arg0) {axis = 1 : i32}
// CHECK-NEXT:    %[[PM:.*]] = "tawa.program_id"() {axis = 0 : i32}
// CHECK-NEXT:    %[[PN:.*]] = "tawa.program_id"() {axis = 1 : i32}
// CHECK-NEXT:    %[[ACC:.*]] = "tawa.splat"
// CHECK-NEXT:    %[[SUM:.*]] = arith.addi %[[K]], %[[C63]] : i32
// CHECK-NEXT:    %[[TRIPS:.*]] = arith.divsi %[[SUM]], %[[C64]] : i32
// CHECK-NEXT:    %[[RES:.*]] = scf.for %[[IV:.*]] = %{{.*}} to %[[TRIPS]] step %{{.*}} iter_args(%[[A:.*]] = %[[ACC]])
// CHECK-NEXT:      %[[ROW:.*]] = arith.muli %[[PM]], %[[C128]] : i32
// CHECK-NEXT:      %[[OFF:.*]] = arith.muli %[[IV]], %[[C64]] : i32
// CHECK-NEXT:      %[[TA:.*]] = "tawa.load"(%arg0, %[[ROW]], %[[OFF]])
// CHECK-NOT:       arith.muli %[[IV]]
// CHECK:           %[[TB:.*]] = "tawa.load"(%arg1, %[[OFF]], %{{.*}})
// CHECK-NEXT:      %[[D:.*]] = "tawa.dot"(%[[TA]], %[[TB]], %[[A]])
// CHECK-NEXT:      scf.yield %[[D]]
// CHECK:         arith.truncf %[[RES]]
// CHECK-NOT:     arith.subi
// CHECK:         return
func.func @gemm(%arg0: memref<?x?xbf16>, %arg1: memref<?x?xbf16>, %arg2: memref<?x?xbf16>) attributes {tawa.kernel} {
  %0 = "tawa.dim"(%arg0) {axis = 1 : i32} : (memref<?x?xbf16>) -> i32
  %cst = arith.constant 0.000000e+00 : f32
  %c64_i32 = arith.constant 64 : i32
  %c1_i32 = arith.constant 1 : i32
  %c0_i32 = arith.constant 0 : i32
  %c128_i32 = arith.constant 128 : i32
  %1 = "tawa.program_id"() {axis = 0 : i32} : () -> i32
  %2 = "tawa.program_id"() {axis = 1 : i32} : () -> i32
  %3 = "tawa.splat"(%cst) : (f32) -> tensor<128x128xf32>
  %4 = arith.addi %0, %c64_i32 : i32
  %5 = arith.subi %4, %c1_i32 : i32
  %6 = arith.divsi %5, %c64_i32 : i32
  %7 = scf.for %arg3 = %c0_i32 to %6 step %c1_i32 iter_args(%arg4 = %3) -> (tensor<128x128xf32>)  : i32 {
    %11 = arith.muli %1, %c128_i32 : i32
    %12 = arith.muli %arg3, %c64_i32 : i32
    %13 = "tawa.load"(%arg0, %11, %12) : (memref<?x?xbf16>, i32, i32) -> tensor<128x64xbf16>
    %14 = arith.muli %arg3, %c64_i32 : i32
    %15 = arith.muli %2, %c128_i32 : i32
    %16 = "tawa.load"(%arg1, %14, %15) : (memref<?x?xbf16>, i32, i32) -> tensor<64x128xbf16>
    %17 = "tawa.dot"(%13, %16, %arg4) : (tensor<128x64xbf16>, tensor<64x128xbf16>, tensor<128x128xf32>) -> tensor<128x128xf32>
    scf.yield %17 : tensor<128x128xf32>
  }
  %8 = arith.truncf %7 : tensor<128x128xf32> to tensor<128x128xbf16>
  %9 = arith.muli %1, %c128_i32 : i32
  %10 = arith.muli %2, %c128_i32 : i32
  "tawa.store"(%arg2, %8, %9, %10) : (memref<?x?xbf16>, tensor<128x128xbf16>, i32, i32) -> ()
  return
}

// -----

// Dead arith is erased, and so are pure tawa ops whose results nobody uses (a dim, a tile of indices and the
// arithmetic on it); ops with effects stay (a load feeding a store), and a constant-true `scf.if` is replaced by
// its then-branch.

// CHECK-LABEL: func.func @dead_and_folded
// CHECK-NOT:     arith.addf
// CHECK-NOT:     tawa.dim
// CHECK-NOT:     tawa.arange
// CHECK-NOT:     tawa.program_id
// CHECK-NOT:     scf.if
// CHECK:         %[[T:.*]] = "tawa.load"(%arg0, %{{.*}})
// CHECK-NEXT:    "tawa.store"(%arg0, %[[T]], %{{.*}})
// CHECK-NEXT:    return
func.func @dead_and_folded(%arg0: memref<?xf32>, %x: f32) attributes {tawa.kernel} {
  %unused = arith.addf %x, %x : f32
  %d = "tawa.dim"(%arg0) {axis = 0 : i32} : (memref<?xf32>) -> i32
  %pid = "tawa.program_id"() {axis = 0 : i32} : () -> i32
  %r = "tawa.arange"() {start = 0 : i32, end = 16 : i32} : () -> tensor<16xi32>
  %p = "tawa.splat"(%pid) : (i32) -> tensor<16xi32>
  %rows = arith.addi %r, %p : tensor<16xi32>
  %c0 = arith.constant 0 : i32
  %true = arith.constant true
  scf.if %true {
    %t = "tawa.load"(%arg0, %c0) : (memref<?xf32>, i32) -> tensor<16xf32>
    "tawa.store"(%arg0, %t, %c0) : (memref<?xf32>, tensor<16xf32>, i32) -> ()
  }
  return
}
