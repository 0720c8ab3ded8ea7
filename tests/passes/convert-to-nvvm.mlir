// RUN: tawa-opt %s --passes convert-to-nvvm | FileCheck %s

// The warp-specialized GEMM (IR after assign-layouts, ring depth 4) to NVVM: 384 threads (producer + 2 consumer
// warp groups), the aref as 4 full barriers (1 arrival: the producer's expect-tx) and 4 empty barriers
// (2 arrivals: one per consumer warp group), setmaxnreg per warp group, TMA copies issued by one elected producer
// thread, and wgmma in the consumer with one group kept in flight; the slot of iteration k is released after the
// wgmma of iteration k + 1 was issued, the last one after the loop.

// CHECK:       gpu.module @tawa_kernels
// CHECK:       llvm.func @gemm(
// CHECK-SAME:    nvvm.grid_constant
// CHECK-SAME:    nvvm.kernel, nvvm.maxntid = array<i32: 384, 1, 1>, nvvm.minctasm = 1 : i32
// CHECK-COUNT-4: nvvm.mbarrier.init %{{.*}}, %c1_i32
// CHECK-COUNT-4: nvvm.mbarrier.init %{{.*}}, %c2_i32
// CHECK-NOT:     nvvm.mbarrier.init
// CHECK:         nvvm.fence.mbarrier.init
// CHECK-NEXT:    nvvm.barrier0

// Producer: wait on the empty barrier with the flipped phase, stage = k & 3 and phase = (k >> 2) & 1.
// CHECK:         nvvm.setmaxregister  decrease 40
// CHECK-NOT:     wgmma
// CHECK:         scf.for
// CHECK:           arith.andi %[[K:.*]], %c3_i32 : i32
// CHECK-NEXT:      %[[SH:.*]] = arith.shrui %[[K]], %c2_i32 : i32
// CHECK-NEXT:      %[[PHASE:.*]] = arith.andi %[[SH]], %c1_i32 : i32
// CHECK:           %[[FLIP:.*]] = arith.xori %[[PHASE]], %c1_i32 : i32
// CHECK-NEXT:      nvvm.mbarrier.try_wait.parity %{{.*}}, %[[FLIP]]
// CHECK:           nvvm.elect.sync
// CHECK:           nvvm.mbarrier.arrive.expect_tx %[[FULL:.*]], %c32768_i32
// CHECK-COUNT-3:   nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %{{.*}}, %[[FULL]], box
// CHECK-NOT:     wgmma

// Consumers: wait on the full barrier, wgmma, keep one group in flight, release the previous slot.
// CHECK:         nvvm.setmaxregister  increase 232
// CHECK:         scf.for
// CHECK:           nvvm.mbarrier.try_wait.parity
// CHECK-NOT:       cp.async.bulk.tensor.shared.cluster.global
// CHECK:           nvvm.wgmma.fence.aligned
// CHECK-COUNT-4:   wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16
// CHECK:           nvvm.wgmma.commit.group.sync.aligned
// CHECK-NEXT:      nvvm.wgmma.wait.group.sync.aligned 1
// CHECK-NEXT:      arith.cmpi sgt
// CHECK:           nvvm.elect.sync
// CHECK:           nvvm.mbarrier.arrive %{{.*}} : !llvm.ptr<3>
// CHECK:           scf.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    nvvm.wgmma.wait.group.sync.aligned 0
// CHECK:         nvvm.mbarrier.arrive %{{.*}} : !llvm.ptr<3>

// Epilogue: a named barrier over the 256 consumer threads (never bar 0), then the TMA store.
// CHECK-NOT:     nvvm.barrier0
// CHECK:         nvvm.barrier id = %c2_i32 number_of_threads = %c256_i32
// CHECK:         nvvm.cp.async.bulk.tensor.global.shared.cta
// CHECK-NOT:     nvvm.barrier0
// CHECK:         llvm.return

!R = !tawa.aref<[tensor<128x64xbf16>, tensor<64x128xbf16>], 4 : i32>

func.func @gemm(%arg0: memref<?x?xbf16>, %arg1: memref<?x?xbf16>, %arg2: memref<?x?xbf16>) attributes {tawa.constants = {BLOCK_K = 64 : i64, BLOCK_M = 128 : i64, BLOCK_N = 128 : i64, DTYPE = "bf16"}, tawa.grid = ["cdiv(M, 128)", "cdiv(N, 128)"], tawa.kernel, tawa.num_warps = 12 : i32, tawa.params = [{dtype = "bf16", kind = "tensor", name = "A", shape = ["M", "K"]}, {dtype = "bf16", kind = "tensor", name = "B", shape = ["K", "N"]}, {dtype = "bf16", kind = "tensor", name = "C", shape = ["M", "N"]}]} {
  %0 = "tawa.aref_create"() : () -> !R
  scf.execute_region {
    %c0_i32 = arith.constant 0 : i32
    %1 = "tawa.dim"(%arg0) {axis = 1 : i32} : (memref<?x?xbf16>) -> i32
    %c63_i32 = arith.constant 63 : i32
    %2 = arith.addi %1, %c63_i32 : i32
    %c64_i32 = arith.constant 64 : i32
    %3 = arith.divsi %2, %c64_i32 : i32
    %c1_i32 = arith.constant 1 : i32
    %4 = "tawa.program_id"() {axis = 0 : i32} : () -> i32
    %c128_i32 = arith.constant 128 : i32
    %5 = "tawa.program_id"() {axis = 1 : i32} : () -> i32
    scf.for %arg3 = %c0_i32 to %3 step %c1_i32  : i32 {
      %6 = arith.muli %4, %c128_i32 : i32
      %7 = arith.muli %arg3, %c64_i32 : i32
      %8 = "tawa.load"(%arg0, %6, %7) {tawa.aref_load, tawa.smem} : (memref<?x?xbf16>, i32, i32) -> tensor<128x64xbf16>
      %9 = arith.muli %5, %c128_i32 : i32
      %10 = "tawa.load"(%arg1, %7, %9) {tawa.aref_load, tawa.smem} : (memref<?x?xbf16>, i32, i32) -> tensor<64x128xbf16>
      "tawa.aref_put"(%0, %8, %10) {operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0>} : (!R, tensor<128x64xbf16>, tensor<64x128xbf16>) -> ()
    }
    scf.yield
  } {tawa.first_warp_group = 0 : i32, tawa.max_registers = 40 : i32, tawa.warp_group = "producer"}
  scf.execute_region {
    %c63_i32 = arith.constant 63 : i32
    %c128_i32 = arith.constant 128 : i32
    %c0_i32 = arith.constant 0 : i32
    %c1_i32 = arith.constant 1 : i32
    %c64_i32 = arith.constant 64 : i32
    %cst = arith.constant 0.000000e+00 : f32
    %1 = "tawa.dim"(%arg0) {axis = 1 : i32} : (memref<?x?xbf16>) -> i32
    %2 = "tawa.program_id"() {axis = 0 : i32} : () -> i32
    %3 = "tawa.program_id"() {axis = 1 : i32} : () -> i32
    %4 = "tawa.splat"(%cst) {tawa.layout = "mma<128x128,w=8>"} : (f32) -> tensor<128x128xf32>
    %5 = arith.addi %1, %c63_i32 : i32
    %6 = arith.divsi %5, %c64_i32 : i32
    %7 = scf.for %arg3 = %c0_i32 to %6 step %c1_i32 iter_args(%arg4 = %4) -> (tensor<128x128xf32>)  : i32 {
      %11:2 = "tawa.aref_get"(%0) {resultSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>} : (!R) -> (tensor<128x64xbf16>, tensor<64x128xbf16>)
      %12 = "tawa.dot"(%11#0, %11#1, %arg4) {tawa.layout = "mma<128x128,w=8>"} : (tensor<128x64xbf16>, tensor<64x128xbf16>, tensor<128x128xf32>) -> tensor<128x128xf32>
      "tawa.aref_consumed"(%0) : (!R) -> ()
      scf.yield %12 : tensor<128x128xf32>
    } {tawa.layouts = ["mma<128x128,w=8>"]}
    %8 = arith.truncf %7 {tawa.layout = "mma<128x128,w=8>"} : tensor<128x128xf32> to tensor<128x128xbf16>
    %9 = arith.muli %2, %c128_i32 : i32
    %10 = arith.muli %3, %c128_i32 : i32
    "tawa.store"(%arg2, %8, %9, %10) : (memref<?x?xbf16>, tensor<128x128xbf16>, i32, i32) -> ()
    scf.yield
  } {tawa.first_warp_group = 1 : i32, tawa.max_registers = 232 : i32, tawa.num_warp_groups = 2 : i32, tawa.warp_group = "consumer"}
  return
}
