// RUN: tawa-opt %examples/gemm.tawa | FileCheck %s
// RUN: tawa-opt %examples/gemm.tawa -D DTYPE=f16 | tee %t | FileCheck %s --check-prefix=F16
// RUN: FileCheck %s --check-prefix=NO-BF16 --input-file %t

// The frontend's GEMM: K from the tensor, the program ids, a zero accumulator carried by the loop over K, the two
// tile loads feeding the dot, the cast and the store. DTYPE=f16 changes every bf16 to f16.

// CHECK:       func.func @gemm(%arg0: memref<?x?xbf16>, %arg1: memref<?x?xbf16>, %arg2: memref<?x?xbf16>)
// CHECK:         "tawa.dim"(%arg0) {axis = 1 : i32}
// CHECK:         "tawa.program_id"() {axis = 0 : i32}
// CHECK:         "tawa.program_id"() {axis = 1 : i32}
// CHECK:         %[[ACC0:.*]] = "tawa.splat"{{.*}}-> tensor<128x256xf32>
// CHECK:         %[[ACC:.*]] = scf.for {{.*}} iter_args(%[[A:.*]] = %[[ACC0]]) -> (tensor<128x256xf32>) : i32
// CHECK:           %[[TA:.*]] = "tawa.load"(%arg0, {{.*}}) -> tensor<128x64xbf16>
// CHECK:           %[[TB:.*]] = "tawa.load"(%arg1, {{.*}}) -> tensor<64x256xbf16>
// CHECK:           %[[D:.*]] = "tawa.dot"(%[[TA]], %[[TB]], %[[A]]) : (tensor<128x64xbf16>, tensor<64x256xbf16>, tensor<128x256xf32>) -> tensor<128x256xf32>
// CHECK:           scf.yield %[[D]]
// CHECK:         %[[OUT:.*]] = arith.truncf %[[ACC]] : tensor<128x256xf32> to tensor<128x256xbf16>
// CHECK:         "tawa.store"(%arg2, %[[OUT]],
// CHECK:         return

// F16: memref<?x?xf16>
// F16: tensor<128x64xf16>
// F16: tensor<128x256xf32> to tensor<128x256xf16>
// NO-BF16-NOT: bf16
