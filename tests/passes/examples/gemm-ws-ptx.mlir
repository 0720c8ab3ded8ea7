// RUN: tawac %examples/gemm.tawa --schedule tile --emit ptx --dump-ir-after-all -o %t.ptx 2> %t.dump
// RUN: FileCheck %s --input-file %t.ptx
// RUN: FileCheck %s --input-file %t.ptx --check-prefix=NO-BAR0
// RUN: FileCheck %s --input-file %t.dump --check-prefix=DUMP
// RUN: FileCheck %s --input-file %t.dump --check-prefix=DUMP-NOT-UNIFORM
// RUN: tawac %examples/gemm.tawa --schedule tile --emit ptx -D BLOCK_N=128 | tee %t.n128.ptx | FileCheck %s
// RUN: FileCheck %s --input-file %t.n128.ptx --check-prefix=NO-BAR0
// RUN: tawac %examples/gemm.tawa --schedule tile --emit ptx -D BLOCK_M=256 -D BLOCK_N=128 -D DTYPE=f16 | tee %t.m256.ptx | FileCheck %s
// RUN: FileCheck %s --input-file %t.m256.ptx --check-prefix=NO-BAR0

// The warp-specialized GEMM end to end (tawac, PTX), one program per CTA: the schedule the passes decided is what
// the hardware runs, at the default 128x256 tile, at 128x128 and at 256x128 (f16). (gemm-persistent-ptx.mlir: the
// persistent schedule.)

// CHECK:       mbarrier.init.shared.b64
// CHECK:       setmaxnreg.dec.sync.aligned.u32 40;
// Producer: wait for an empty slot, expect-tx, TMA copies.
// CHECK:       mbarrier.try_wait.parity
// CHECK:       mbarrier.arrive.expect_tx
// CHECK:       cp.async.bulk.tensor.2d.shared::cluster.global
// CHECK:       setmaxnreg.inc.sync.aligned.u32 232;
// Consumers: wait for a full slot, wgmma with one group left in flight, release a slot.
// CHECK:       mbarrier.try_wait.parity
// CHECK:       wgmma.mma_async.sync.aligned.m64n{{[0-9]+}}k16.f32
// CHECK:       wgmma.wait_group.sync.aligned 1;
// CHECK:       mbarrier.arrive.shared.b64
// CHECK:       wgmma.wait_group.sync.aligned 0;
// Epilogue: a named barrier over the 256 consumer threads, TMA store.
// CHECK:       bar.sync 2, 256;
// CHECK:       cp.async.bulk.tensor.2d.global.shared::cta

// After the consumers' setmaxnreg, nothing synchronises the whole CTA (bar 0) any more.
// NO-BAR0:     setmaxnreg.inc
// NO-BAR0-NOT: bar.sync 0;

// --dump-ir-after-all shows each warp-specialization step.
// DUMP:        IR Dump After aref-insertion
// DUMP:        tawa.aref_create
// DUMP:        IR Dump After partition
// DUMP:        scf.execute_region
// DUMP:        tawa.warp_group = "producer"
// DUMP:        tawa.warp_group = "consumer"
// DUMP:        IR Dump After register-realloc
// DUMP:        tawa.max_registers = 40
// DUMP:        IR Dump After assign-warp-groups
// DUMP:        tawa.aref_load
// DUMP:        IR Dump After assign-layouts
// DUMP:        tawa.layout = "mma<
// DUMP:        IR Dump After convert-to-nvvm
// DUMP:        nvvm.setmaxregister
// DUMP:        IR Dump After lower-to-llvm
// DUMP-NOT-UNIFORM-NOT: IR Dump After software-pipeline
