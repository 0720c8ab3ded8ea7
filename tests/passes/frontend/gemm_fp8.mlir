// RUN: tawa-opt %examples/gemm_fp8.tawa | FileCheck %s

// fp8 operands; B is stored N x K and transposed in the loop; per-row and per-column scales are loaded after the
// loop and multiplied in; the result is bf16.

// CHECK:       func.func @gemm_fp8(%arg0: memref<?x?xf8E4M3FN>
// CHECK:         "tawa.load"(%arg1, {{.*}}-> tensor<256x128xf8E4M3FN>
// CHECK:         "tawa.trans"{{.*}}(tensor<256x128xf8E4M3FN>) -> tensor<128x256xf8E4M3FN>
// CHECK:         "tawa.dot"{{.*}}(tensor<128x128xf8E4M3FN>, tensor<128x256xf8E4M3FN>, tensor<128x256xf32>)
// CHECK:         "tawa.load"(%arg2, {{.*}}-> tensor<128xf32>
// CHECK:         "tawa.load"(%arg3, {{.*}}-> tensor<256xf32>
// CHECK:         arith.mulf
// CHECK:         arith.mulf
// CHECK:         to tensor<128x256xbf16>
