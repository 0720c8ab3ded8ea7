// RUN: tawa-opt %s --passes lower-to-llvm | FileCheck %s

// The NVVM-level kernel module (what convert-to-nvvm gives) to the LLVM dialect: the gpu.module gets the sm_90a
// target; arith, math and scf become llvm ops, calls to libdevice and branches; nvvm ops stay (those without an
// LLVM intrinsic, such as mbarrier.try_wait.parity, become inline PTX).

// CHECK:       gpu.module @tawa_kernels [#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx80">]
// CHECK:       llvm.func @__nv_expf(f32) -> f32
// CHECK:       llvm.func @copy(%arg0: !llvm.ptr<1> {llvm.noalias}, %arg1: i32, %arg2: !llvm.ptr<1> {llvm.noalias})
// CHECK-SAME:    attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>, nvvm.minctasm = 1 : i32}
// CHECK-NOT:     arith.
// CHECK-NOT:     scf.
// CHECK:         %[[TID:.*]] = nvvm.read.ptx.sreg.tid.x : i32
// CHECK-NEXT:    %[[CTA:.*]] = nvvm.read.ptx.sreg.ctaid.x : i32
// CHECK-NEXT:    %[[BASE:.*]] = llvm.mul %[[CTA]], %{{.*}} : i32
// CHECK-NEXT:    %[[I:.*]] = llvm.add %[[BASE]], %[[TID]] : i32
// CHECK-NEXT:    %[[FIRST:.*]] = llvm.icmp "eq" %[[TID]]
// CHECK-NEXT:    llvm.cond_br %[[FIRST]], ^[[INIT:.*]], ^[[JOIN:.*]]
// CHECK-NEXT:  ^[[INIT]]:
// CHECK-NEXT:    nvvm.mbarrier.init
// CHECK:       ^[[JOIN]]:
// CHECK-NEXT:    nvvm.fence.mbarrier.init
// CHECK-NEXT:    nvvm.barrier0
// CHECK-NEXT:    nvvm.setmaxregister  increase 232
// CHECK:         llvm.cond_br
// CHECK:         %[[V:.*]] = llvm.load
// CHECK-NEXT:    %[[E:.*]] = llvm.call @__nv_expf(%[[V]])
// CHECK-NEXT:    llvm.store %[[E]]
// CHECK:         llvm.inline_asm has_side_effects {{.*}}mbarrier.try_wait.parity.shared.b64
// CHECK-NEXT:    llvm.return
// CHECK-NOT:     arith.
// CHECK-NOT:     scf.
module attributes {gpu.container_module} {
  gpu.module @tawa_kernels {
    llvm.mlir.global external @tawa_smem() {addr_space = 3 : i32, alignment = 1024 : i64} : !llvm.array<0 x i8>
    llvm.func @copy(%X: !llvm.ptr<1> {llvm.noalias}, %n: i32, %Y: !llvm.ptr<1> {llvm.noalias}) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>, nvvm.minctasm = 1 : i32} {
      %c0 = arith.constant 0 : i32
      %c1 = arith.constant 1 : i32
      %c128 = arith.constant 128 : i32
      %tid = nvvm.read.ptx.sreg.tid.x : i32
      %cta = nvvm.read.ptx.sreg.ctaid.x : i32
      %base = arith.muli %cta, %c128 : i32
      %i = arith.addi %base, %tid : i32
      %bar = llvm.mlir.addressof @tawa_smem : !llvm.ptr<3>
      %first = arith.cmpi eq, %tid, %c0 : i32
      scf.if %first {
        nvvm.mbarrier.init %bar, %c1 : !llvm.ptr<3>, i32
      }
      nvvm.fence.mbarrier.init
      nvvm.barrier0
      nvvm.setmaxregister increase 232
      %in = arith.cmpi ult, %i, %n : i32
      %i64 = arith.extsi %i : i32 to i64
      %src = llvm.getelementptr %X[%i64] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, f32
      %dst = llvm.getelementptr %Y[%i64] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, f32
      scf.if %in {
        %v = llvm.load %src : !llvm.ptr<1> -> f32
        %w = math.exp %v : f32
        llvm.store %w, %dst : f32, !llvm.ptr<1>
      }
      %c10000000 = arith.constant 10000000 : i32
      nvvm.mbarrier.try_wait.parity %bar, %c0, %c10000000 : !llvm.ptr<3>, i32, i32
      llvm.return
    }
  }
}
