// RUN: tawa-opt %examples/flash_attention.tawa | tee %t | FileCheck %s
// RUN: FileCheck %s --check-prefix=NO-MASK --input-file %t
// RUN: tawa-opt %examples/flash_attention.tawa -D CAUSAL=1 -D HEAD_DIM=64 | FileCheck %s --check-prefix=CAUSAL

// Q is loaded once; the loop over key blocks carries (l, acc, m); S = Q K^T scaled and masked against the
// sequence length, online softmax in base 2, acc += P V; the epilogue divides by l. CAUSAL = 0 folds the causal
// mask away; CAUSAL = 1 bounds the loop by the diagonal (min) and adds the mask (cmpi sle, andi).

// CHECK:       memref<?x?x?x?xbf16>
// CHECK:       "tawa.dim"(%arg0) {axis = 2 : i32}
// CHECK:       "tawa.load"(%arg0, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[a-z0-9_]+}}) : (memref<?x?x?x?xbf16>, i32, i32, i32, i32) -> tensor<128x128xbf16>
// CHECK:       scf.for {{.*}} -> (tensor<128xf32>, tensor<128x128xf32>, tensor<128xf32>)
// CHECK:         "tawa.trans"
// CHECK:         "tawa.dot"{{.*}}-> tensor<128x128xf32>
// CHECK:         arith.select
// CHECK:         kind = "max"
// CHECK:         math.exp2
// CHECK:         kind = "sum"
// CHECK:         "tawa.dot"{{.*}}(tensor<128x128xbf16>, tensor<128x128xbf16>, tensor<128x128xf32>)
// CHECK:         scf.yield
// CHECK:       arith.divf
// CHECK:       "tawa.store"(%arg3,
// NO-MASK-NOT: arith.cmpi sle

// CAUSAL:      memref<?x?x?x?xbf16>
// CAUSAL:      arith.minsi
// CAUSAL:      scf.for
// CAUSAL:        arith.cmpi sle
// CAUSAL:        arith.andi
// CAUSAL:      tensor<128x64xbf16>
