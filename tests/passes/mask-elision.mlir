// RUN: tawa-opt %examples/flash_attention.tawa -D CAUSAL=1 --passes canonicalize,mask-elision | FileCheck %s

// Attention's key mask (keys < S, and keys <= query rows when causal) is skipped on every block whose last key
// is below S and at or below the block's first query row.
// CHECK:      scf.for
// CHECK:        %[[LAST:[0-9]+]] = arith.addi %{{[0-9]+}}, %c127_i32
// CHECK:        %[[IN:[0-9]+]] = arith.cmpi slt, %[[LAST]], %{{[0-9]+}}
// CHECK:        %[[BELOW:[0-9]+]] = arith.cmpi sle, %[[LAST]], %{{[0-9]+}}
// CHECK:        %[[FULL:[0-9]+]] = arith.andi %[[IN]], %[[BELOW]]
// CHECK:        scf.if %[[FULL]] -> (tensor<128x128xf32>)
// CHECK:        } else {
// CHECK:          arith.select
// CHECK:        "tawa.reduce"
