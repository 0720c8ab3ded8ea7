// RUN: tawa-opt %s --passes register-realloc | FileCheck %s
// RUN: tawa-opt %s --passes register-realloc --producer-registers 24 --consumer-registers 240 \
// RUN:   | FileCheck %s --check-prefix=CUSTOM
// RUN: not tawa-opt %s --passes register-realloc --consumer-registers 240 2>&1 | FileCheck %s --check-prefix=TOO-MANY
// RUN: not tawa-opt %s --passes register-realloc --producer-registers 32 --consumer-registers 240 2>&1 \
// RUN:   | FileCheck %s --check-prefix=POOL

// Each warp group gets its setmaxnreg budget: the producer few (default 40), the consumers many (default 232).
// The budgets are checked against the registers the block starts with, 168 for each of its 384 threads (consumer
// warp groups counted from the region's tawa.num_warp_groups): setmaxnreg only moves those between warp groups,
// and a consumer's setmaxnreg.inc waits for them forever if they do not suffice. 128 x (24 + 2 x 240) = 64512
// fits; 128 x (40 + 2 x 240) does not, nor 128 x (32 + 2 x 240) = 65536, which fits the register file and hung
// the GPU.

// CHECK-LABEL: func.func @ws
// CHECK:         } {tawa.max_registers = 40 : i32, tawa.warp_group = "producer"}
// CHECK:         } {tawa.max_registers = 232 : i32, tawa.num_warp_groups = 2 : i32, tawa.warp_group = "consumer"}

// CUSTOM-LABEL: func.func @ws
// CUSTOM:         } {tawa.max_registers = 24 : i32, tawa.warp_group = "producer"}
// CUSTOM:         } {tawa.max_registers = 240 : i32, tawa.num_warp_groups = 2 : i32, tawa.warp_group = "consumer"}

// TOO-MANY: error: register budgets exceed the registers the block starts with: 128 x (40 + 2 x 240) = 66560 > 64512 (384 threads x 168)
// TOO-MANY: lower consumer_registers to at most 232
// TOO-MANY-NOT: func.func

// POOL: error: register budgets exceed the registers the block starts with: 128 x (32 + 2 x 240) = 65536 > 64512
// POOL: lower consumer_registers to at most 232

!R = !tawa.aref<[tensor<128x64xbf16>], 2 : i32>

func.func @ws(%A: memref<?x?xbf16>, %C: memref<?x?xf32>) attributes {tawa.kernel} {
  %r = "tawa.aref_create"() : () -> !R
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %n = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xbf16>) -> i32
    scf.for %i = %c0 to %n step %c1 : i32 {
      %a = "tawa.load"(%A, %c0, %i) : (memref<?x?xbf16>, i32, i32) -> tensor<128x64xbf16>
      "tawa.aref_put"(%r, %a) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0>} : (!R, tensor<128x64xbf16>) -> ()
    }
    scf.yield
  } {tawa.warp_group = "producer"}
  scf.execute_region {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %n = "tawa.dim"(%A) {axis = 1 : i32} : (memref<?x?xbf16>) -> i32
    scf.for %i = %c0 to %n step %c1 : i32 {
      %v = "tawa.aref_get"(%r) {resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (!R) -> tensor<128x64xbf16>
      %f = arith.extf %v : tensor<128x64xbf16> to tensor<128x64xf32>
      "tawa.store"(%C, %f, %c0, %i) : (memref<?x?xf32>, tensor<128x64xf32>, i32, i32) -> ()
      "tawa.aref_consumed"(%r) : (!R) -> ()
    }
    scf.yield
  } {tawa.warp_group = "consumer", tawa.num_warp_groups = 2 : i32}
  return
}
