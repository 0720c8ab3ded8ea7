// RUN: tawa-opt %examples/gemm.tawa --passes aref-insertion,protocol-check | tee %t | FileCheck %s --check-prefix=AREF
// RUN: FileCheck %s --check-prefix=SEQ --input-file %t
// RUN: tawa-opt %examples/gemm.tawa --passes aref-insertion,partition,protocol-check | FileCheck %s --check-prefix=PART

// examples/gemm.tawa through the warp-specialization passes (frontend output, no canonicalize).

// After aref-insertion: the two tiles go through one aref; the program is still sequential (no warp groups) and
// the protocol holds in program order (protocol-check passes).
// AREF:      %[[R:[0-9]+]] = "tawa.aref_create"() : () -> !tawa.aref<[tensor<128x64xbf16>, tensor<64x256xbf16>], {{[0-9]+}} : i32>
// AREF:      scf.for {{.*}} iter_args
// AREF:        "tawa.load"(%arg0, {{.*}}-> tensor<128x64xbf16>
// AREF:        "tawa.load"(%arg1, {{.*}}-> tensor<64x256xbf16>
// AREF:        "tawa.aref_put"(%[[R]], %{{[0-9]+}}, %{{[0-9]+}}) {operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0>}
// AREF-NOT:    tawa.dot
// AREF:        %[[G:[0-9]+]]:2 = "tawa.aref_get"
// AREF:        "tawa.dot"(%[[G]]#0, %[[G]]#1, %arg{{[0-9]+}})
// AREF-NOT:    tawa.load
// AREF:        "tawa.aref_consumed"
// AREF:        scf.yield
// AREF:      "tawa.store"
// SEQ-NOT:   execute_region

// After partition: a producer region (its own program ids, a loop without iter_args, loads and the put) and a
// consumer region (its own program ids, the loop with the accumulator, get / dot / consumed, the store).
// PART:      "tawa.aref_create"
// PART:      scf.execute_region {
// PART:        "tawa.program_id"() {axis = 0
// PART:        scf.for %arg{{[0-9]+}} = %{{[^ ]+}} to %{{[^ ]+}} step %{{[^ ]+}} : i32 {
// PART:          "tawa.load"
// PART:          "tawa.load"
// PART:          "tawa.aref_put"
// PART-NOT:      tawa.dot
// PART-NOT:      aref_get
// PART:      } {tawa.warp_group = "producer"}
// PART:      scf.execute_region {
// PART:        "tawa.program_id"() {axis = 0
// PART:        scf.for {{.*}} iter_args(%arg{{[0-9]+}} = %{{[0-9]+}}) -> (tensor<128x256xf32>)
// PART-NOT:      tawa.load
// PART-NOT:      aref_put
// PART:          "tawa.aref_get"
// PART:          "tawa.dot"
// PART:          "tawa.aref_consumed"
// PART:        "tawa.store"
// PART:      } {tawa.num_warp_groups = 2 : i32, tawa.warp_group = "consumer"}
// PART:      return
