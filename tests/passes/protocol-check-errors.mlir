// RUN: not tawa-opt %s --split-input-file --passes protocol-check 2>&1 | FileCheck %s

// Every way the aref protocol can be broken by hand, each rejected with an error naming the aref and the
// offending op's line (in this file: ops without an explicit loc are located where they are written).
// CHECK-NOT: Traceback

// An aref_get that no aref_consumed releases.
!R = !tawa.aref<[tensor<16x16xf32>], 2 : i32>

func.func @get_without_consumed(%A: memref<?x?xf32>, %C: memref<?x?xf32>) attributes {tawa.kernel} {
  %r = "tawa.aref_create"() : () -> !R
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %n = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xf32>) -> i32
    scf.for %i = %c0 to %n step %c1 : i32 {
      %a = "tawa.load"(%A, %c0, %i) : (memref<?x?xf32>, i32, i32) -> tensor<16x16xf32>
      "tawa.aref_put"(%r, %a) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0>} : (!R, tensor<16x16xf32>) -> ()
    }
    scf.yield
  } {tawa.warp_group = "producer"}
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %n = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xf32>) -> i32
    scf.for %i = %c0 to %n step %c1 : i32 {
// CHECK: protocol-check-errors.mlir:[[# @LINE + 1]]:12: error: aref #0 <tensor<16x16xf32>; depth 2>: aref_get at {{.*}}protocol-check-errors.mlir:[[# @LINE + 1]]:12 is not matched by exactly one aref_consumed in the same iteration of the loop at {{.*}}protocol-check-errors.mlir:[[# @LINE - 1]]:5
      %v = "tawa.aref_get"(%r) {resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (!R) -> tensor<16x16xf32>
// CHECK-NEXT: %v = "tawa.aref_get"(%r)
// CHECK-NEXT: {{^ +\^$}}
      "tawa.store"(%C, %v, %c0, %i) : (memref<?x?xf32>, tensor<16x16xf32>, i32, i32) -> ()
    }
    scf.yield
  } {tawa.warp_group = "consumer", tawa.num_warp_groups = 1 : i32}
  return
}

// -----

// A second aref_consumed in the iteration releases a slot no get took.
!R = !tawa.aref<[tensor<16x16xf32>], 2 : i32>

func.func @consumed_without_get(%A: memref<?x?xf32>, %C: memref<?x?xf32>) attributes {tawa.kernel} {
  %r = "tawa.aref_create"() : () -> !R
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %n = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xf32>) -> i32
    scf.for %i = %c0 to %n step %c1 : i32 {
      %a = "tawa.load"(%A, %c0, %i) : (memref<?x?xf32>, i32, i32) -> tensor<16x16xf32>
      "tawa.aref_put"(%r, %a) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0>} : (!R, tensor<16x16xf32>) -> ()
    }
    scf.yield
  } {tawa.warp_group = "producer"}
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %n = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xf32>) -> i32
    scf.for %i = %c0 to %n step %c1 : i32 {
      %v = "tawa.aref_get"(%r) {resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (!R) -> tensor<16x16xf32>
      "tawa.store"(%C, %v, %c0, %i) : (memref<?x?xf32>, tensor<16x16xf32>, i32, i32) -> ()
      "tawa.aref_consumed"(%r) : (!R) -> ()
// CHECK: protocol-check-errors.mlir:[[# @LINE + 1]]:7: error: aref #0 <tensor<16x16xf32>; depth 2>: aref_consumed releases a slot that no earlier aref_get of the same iteration took
      "tawa.aref_consumed"(%r) : (!R) -> ()
    }
    scf.yield
  } {tawa.warp_group = "consumer", tawa.num_warp_groups = 1 : i32}
  return
}

// -----

// aref_consumed on one branch of an scf.if only.
!R = !tawa.aref<[tensor<16x16xf32>], 2 : i32>

func.func @consumed_on_one_branch(%A: memref<?x?xf32>, %C: memref<?x?xf32>) attributes {tawa.kernel} {
  %r = "tawa.aref_create"() : () -> !R
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %n = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xf32>) -> i32
    scf.for %i = %c0 to %n step %c1 : i32 {
      %a = "tawa.load"(%A, %c0, %i) : (memref<?x?xf32>, i32, i32) -> tensor<16x16xf32>
      "tawa.aref_put"(%r, %a) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0>} : (!R, tensor<16x16xf32>) -> ()
    }
    scf.yield
  } {tawa.warp_group = "producer"}
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %n = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xf32>) -> i32
    scf.for %i = %c0 to %n step %c1 : i32 {
      %v = "tawa.aref_get"(%r) {resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (!R) -> tensor<16x16xf32>
      "tawa.store"(%C, %v, %c0, %i) : (memref<?x?xf32>, tensor<16x16xf32>, i32, i32) -> ()
      %first = arith.cmpi eq, %i, %c0 : i32
      scf.if %first {
// CHECK: protocol-check-errors.mlir:[[# @LINE + 1]]:9: error: aref #0 <tensor<16x16xf32>; depth 2>: aref_consumed runs on only one branch of the conditional at {{.*}}protocol-check-errors.mlir:[[# @LINE - 1]]:7; every aref_get must be released exactly once on every path
        "tawa.aref_consumed"(%r) : (!R) -> ()
      }
    }
    scf.yield
  } {tawa.warp_group = "consumer", tawa.num_warp_groups = 1 : i32}
  return
}

// -----

// The producer's loop runs one more iteration.
!R = !tawa.aref<[tensor<16x16xf32>], 2 : i32>

func.func @trip_counts_differ(%A: memref<?x?xf32>, %C: memref<?x?xf32>) attributes {tawa.kernel} {
  %r = "tawa.aref_create"() : () -> !R
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %n = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xf32>) -> i32
    %n1 = arith.addi %n, %c1 : i32
    scf.for %i = %c0 to %n1 step %c1 : i32 {
      %a = "tawa.load"(%A, %c0, %i) : (memref<?x?xf32>, i32, i32) -> tensor<16x16xf32>
      "tawa.aref_put"(%r, %a) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0>} : (!R, tensor<16x16xf32>) -> ()
    }
    scf.yield
  } {tawa.warp_group = "producer"}
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %n = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xf32>) -> i32
// CHECK: protocol-check-errors.mlir:[[# @LINE + 1]]:5: error: aref #0 <tensor<16x16xf32>; depth 2>: the producer's loop at {{.*}}protocol-check-errors.mlir:{{[0-9]+}}:5 and the consumer's loop at {{.*}}protocol-check-errors.mlir:[[# @LINE + 1]]:5 may run different trip counts (upper bounds differ); every aref_put must be matched by one aref_get
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

// dim(A, 1) in the producer, dim(A, 0) in the consumer: equal only for a square A, so rejected.
!R = !tawa.aref<[tensor<16x16xf32>], 2 : i32>

func.func @bounds_of_different_dims(%A: memref<?x?xf32>, %C: memref<?x?xf32>) attributes {tawa.kernel} {
  %r = "tawa.aref_create"() : () -> !R
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %n = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xf32>) -> i32
    scf.for %i = %c0 to %n step %c1 : i32 {
      %a = "tawa.load"(%A, %c0, %i) : (memref<?x?xf32>, i32, i32) -> tensor<16x16xf32>
      "tawa.aref_put"(%r, %a) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0>} : (!R, tensor<16x16xf32>) -> ()
    }
    scf.yield
  } {tawa.warp_group = "producer"}
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %n = "tawa.dim"(%A) {axis = 0 : i32} : (memref<?x?xf32>) -> i32
// CHECK: protocol-check-errors.mlir:[[# @LINE + 1]]:5: error: aref #0 <tensor<16x16xf32>; depth 2>: the producer's loop at {{.*}} and the consumer's loop at {{.*}} may run different trip counts (upper bounds differ)
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

// Nobody puts.
!R = !tawa.aref<[tensor<16x16xf32>], 2 : i32>

func.func @nobody_puts(%A: memref<?x?xf32>, %C: memref<?x?xf32>) attributes {tawa.kernel} {
  %r = "tawa.aref_create"() : () -> !R
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %n = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xf32>) -> i32
    scf.for %i = %c0 to %n step %c1 : i32 {
      %a = "tawa.load"(%A, %c0, %i) : (memref<?x?xf32>, i32, i32) -> tensor<16x16xf32>
    }
    scf.yield
  } {tawa.warp_group = "producer"}
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %n = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xf32>) -> i32
    scf.for %i = %c0 to %n step %c1 : i32 {
// CHECK: protocol-check-errors.mlir:[[# @LINE + 1]]:12: error: aref #0 <tensor<16x16xf32>; depth 2> is read by aref_get but no warp group puts to it: the get would wait forever
      %v = "tawa.aref_get"(%r) {resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (!R) -> tensor<16x16xf32>
      "tawa.store"(%C, %v, %c0, %i) : (memref<?x?xf32>, tensor<16x16xf32>, i32, i32) -> ()
      "tawa.aref_consumed"(%r) : (!R) -> ()
    }
    scf.yield
  } {tawa.warp_group = "consumer", tawa.num_warp_groups = 1 : i32}
  return
}

// -----

// Nobody gets.
!R = !tawa.aref<[tensor<16x16xf32>], 2 : i32>

func.func @nobody_gets(%A: memref<?x?xf32>, %C: memref<?x?xf32>) attributes {tawa.kernel} {
  %r = "tawa.aref_create"() : () -> !R
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %n = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xf32>) -> i32
    scf.for %i = %c0 to %n step %c1 : i32 {
      %a = "tawa.load"(%A, %c0, %i) : (memref<?x?xf32>, i32, i32) -> tensor<16x16xf32>
// CHECK: protocol-check-errors.mlir:[[# @LINE + 1]]:7: error: aref #0 <tensor<16x16xf32>; depth 2> is filled by aref_put but no warp group gets from it: the producer would block once the ring is full
      "tawa.aref_put"(%r, %a) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0>} : (!R, tensor<16x16xf32>) -> ()
    }
    scf.yield
  } {tawa.warp_group = "producer"}
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %n = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xf32>) -> i32
    scf.for %i = %c0 to %n step %c1 : i32 {
      %z = arith.constant 0.000000e+00 : f32
      %v = "tawa.splat"(%z) : (f32) -> tensor<16x16xf32>
      "tawa.store"(%C, %v, %c0, %i) : (memref<?x?xf32>, tensor<16x16xf32>, i32, i32) -> ()
    }
    scf.yield
  } {tawa.warp_group = "consumer", tawa.num_warp_groups = 1 : i32}
  return
}

// -----

// Two puts per iteration but one get.
!R = !tawa.aref<[tensor<16x16xf32>], 2 : i32>

func.func @puts_and_gets_per_iteration_differ(%A: memref<?x?xf32>, %C: memref<?x?xf32>) attributes {tawa.kernel} {
  %r = "tawa.aref_create"() : () -> !R
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %n = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xf32>) -> i32
    scf.for %i = %c0 to %n step %c1 : i32 {
      %a = "tawa.load"(%A, %c0, %i) : (memref<?x?xf32>, i32, i32) -> tensor<16x16xf32>
      "tawa.aref_put"(%r, %a) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0>} : (!R, tensor<16x16xf32>) -> ()
      "tawa.aref_put"(%r, %a) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0>} : (!R, tensor<16x16xf32>) -> ()
    }
    scf.yield
  } {tawa.warp_group = "producer"}
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %n = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xf32>) -> i32
    scf.for %i = %c0 to %n step %c1 : i32 {
// CHECK: protocol-check-errors.mlir:[[# @LINE + 1]]:12: error: aref #0 <tensor<16x16xf32>; depth 2>: 2 aref_put per iteration at {{.*}}protocol-check-errors.mlir:{{[0-9]+}}:7 but 1 aref_get per iteration at {{.*}}protocol-check-errors.mlir:[[# @LINE + 1]]:12; the ring's stages and phases would drift apart
      %v = "tawa.aref_get"(%r) {resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (!R) -> tensor<16x16xf32>
      "tawa.store"(%C, %v, %c0, %i) : (memref<?x?xf32>, tensor<16x16xf32>, i32, i32) -> ()
      "tawa.aref_consumed"(%r) : (!R) -> ()
    }
    scf.yield
  } {tawa.warp_group = "consumer", tawa.num_warp_groups = 1 : i32}
  return
}

// -----

// A put inside a conditional.
!R = !tawa.aref<[tensor<16x16xf32>], 2 : i32>

func.func @put_inside_conditional(%A: memref<?x?xf32>, %C: memref<?x?xf32>) attributes {tawa.kernel} {
  %r = "tawa.aref_create"() : () -> !R
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %n = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xf32>) -> i32
    scf.for %i = %c0 to %n step %c1 : i32 {
      %a = "tawa.load"(%A, %c0, %i) : (memref<?x?xf32>, i32, i32) -> tensor<16x16xf32>
      %true = arith.constant true
      scf.if %true {
// CHECK: protocol-check-errors.mlir:[[# @LINE + 1]]:9: error: tawa.aref_put is inside 'scf.if' at {{.*}}protocol-check-errors.mlir:[[# @LINE - 1]]:7; aref puts and gets run unconditionally in their loop (a conditional may stand only around a whole loop, which both warp groups then take or skip together)
        "tawa.aref_put"(%r, %a) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0>} : (!R, tensor<16x16xf32>) -> ()
      }
    }
    scf.yield
  } {tawa.warp_group = "producer"}
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %n = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xf32>) -> i32
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

// The get (and its consumed) outside the loop that mirrors the producer's.
!R = !tawa.aref<[tensor<16x16xf32>], 2 : i32>

func.func @get_outside_the_loop(%A: memref<?x?xf32>, %C: memref<?x?xf32>) attributes {tawa.kernel} {
  %r = "tawa.aref_create"() : () -> !R
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %n = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xf32>) -> i32
    scf.for %i = %c0 to %n step %c1 : i32 {
      %a = "tawa.load"(%A, %c0, %i) : (memref<?x?xf32>, i32, i32) -> tensor<16x16xf32>
      "tawa.aref_put"(%r, %a) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0>} : (!R, tensor<16x16xf32>) -> ()
    }
    scf.yield
  } {tawa.warp_group = "producer"}
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %n = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xf32>) -> i32
// CHECK: protocol-check-errors.mlir:[[# @LINE + 1]]:10: error: aref #0 <tensor<16x16xf32>; depth 2>: aref_put at {{.*}}protocol-check-errors.mlir:{{[0-9]+}}:7 runs inside 1 loop(s) and conditional(s) but aref_get at {{.*}}protocol-check-errors.mlir:[[# @LINE + 1]]:10 inside 0; the two sides must mirror each other
    %v = "tawa.aref_get"(%r) {resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (!R) -> tensor<16x16xf32>
    "tawa.aref_consumed"(%r) : (!R) -> ()
    scf.for %i = %c0 to %n step %c1 : i32 {
      "tawa.store"(%C, %v, %c0, %i) : (memref<?x?xf32>, tensor<16x16xf32>, i32, i32) -> ()
    }
    scf.yield
  } {tawa.warp_group = "consumer", tawa.num_warp_groups = 1 : i32}
  return
}

// -----

// Conditionals around the two sides' loops on different conditions: one side may skip the loop the other runs.
!R = !tawa.aref<[tensor<16x16xf32>], 2 : i32>

func.func @conditionals_differ(%A: memref<?x?xf32>, %CNT: memref<?xi32>, %C: memref<?x?xf32>) attributes {tawa.kernel} {
  %r = "tawa.aref_create"() : () -> !R
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %cnt = "tawa.load_scalar"(%CNT, %c0) : (memref<?xi32>, i32) -> i32
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
    %cnt = "tawa.load_scalar"(%CNT, %c1) : (memref<?xi32>, i32) -> i32
    %go = arith.cmpi slt, %c0, %cnt : i32
    scf.if %go {
      %n = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xf32>) -> i32
      scf.for %i = %c0 to %n step %c1 : i32 {
// CHECK: protocol-check-errors.mlir:[[# @LINE + 1]]:14: error: aref #0 <tensor<16x16xf32>; depth 2>: aref_put at {{.*}}protocol-check-errors.mlir:{{[0-9]+}}:9 and aref_get at {{.*}}protocol-check-errors.mlir:[[# @LINE + 1]]:14 are not in the same branch of conditionals on the same condition; every aref_put must be matched by one aref_get
        %v = "tawa.aref_get"(%r) {resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (!R) -> tensor<16x16xf32>
        "tawa.store"(%C, %v, %c0, %i) : (memref<?x?xf32>, tensor<16x16xf32>, i32, i32) -> ()
        "tawa.aref_consumed"(%r) : (!R) -> ()
      }
    }
    scf.yield
  } {tawa.warp_group = "consumer", tawa.num_warp_groups = 1 : i32}
  return
}

// -----

// The same condition, but the producer's loop in the then branch and the consumer's in the else branch.
!R = !tawa.aref<[tensor<16x16xf32>], 2 : i32>

func.func @branches_differ(%A: memref<?x?xf32>, %C: memref<?x?xf32>) attributes {tawa.kernel} {
  %r = "tawa.aref_create"() : () -> !R
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %n = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xf32>) -> i32
    %go = arith.cmpi slt, %c1, %n : i32
    scf.if %go {
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
    %n = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xf32>) -> i32
    %go = arith.cmpi slt, %c1, %n : i32
    scf.if %go {
    } else {
      scf.for %i = %c0 to %n step %c1 : i32 {
// CHECK: protocol-check-errors.mlir:[[# @LINE + 1]]:14: error: aref #0 <tensor<16x16xf32>; depth 2>: aref_put at {{.*}}protocol-check-errors.mlir:{{[0-9]+}}:9 and aref_get at {{.*}}protocol-check-errors.mlir:[[# @LINE + 1]]:14 are not in the same branch of conditionals on the same condition; every aref_put must be matched by one aref_get
        %v = "tawa.aref_get"(%r) {resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (!R) -> tensor<16x16xf32>
        "tawa.store"(%C, %v, %c0, %i) : (memref<?x?xf32>, tensor<16x16xf32>, i32, i32) -> ()
        "tawa.aref_consumed"(%r) : (!R) -> ()
      }
    }
    scf.yield
  } {tawa.warp_group = "consumer", tawa.num_warp_groups = 1 : i32}
  return
}
