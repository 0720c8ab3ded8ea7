// RUN: tawa-opt %examples/gemm_bias_act.tawa | FileCheck %s

// The bias f32[N] is loaded after the loop, broadcast over the rows and added; then the tanh-approximated gelu
// (one math.tanh), the cast and the store.

// CHECK:       func.func @gemm_bias_gelu({{.*}}%arg2: memref<?xf32>
// CHECK:         "tawa.dot"
// CHECK:         %[[B:.*]] = "tawa.load"(%arg2, %{{[0-9]+}}) : (memref<?xf32>, i32) -> tensor<128xf32>
// CHECK:         %[[E:.*]] = "tawa.expand_dims"(%[[B]]) {axis = 0 : i32} : (tensor<128xf32>) -> tensor<1x128xf32>
// CHECK:         %[[BB:.*]] = "tawa.broadcast"(%[[E]]) {{.*}}-> tensor<128x128xf32>
// CHECK:         arith.addf %{{.*}}, %[[BB]]
// CHECK:         math.tanh
// CHECK:         arith.truncf
// CHECK:         "tawa.store"
