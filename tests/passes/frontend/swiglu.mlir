// RUN: tawa-opt %examples/swiglu.tawa | tee %t | FileCheck %s
// RUN: FileCheck %s --check-prefix=LOADS --input-file %t
// RUN: FileCheck %s --check-prefix=DOTS --input-file %t

// Two accumulators carried by one loop; the A tile is loaded once (from the loop on) and feeds both dots. The
// epilogue is silu(gate) * up.

// CHECK:       scf.for {{.*}} -> (tensor<128x192xf32>, tensor<128x192xf32>)
// CHECK:         scf.yield
// CHECK:       math.exp
// CHECK:       arith.mulf
// CHECK:       arith.truncf
// CHECK:       "tawa.store"

// LOADS:       scf.for
// LOADS:         "tawa.load"(%arg0
// LOADS-NOT:     "tawa.load"(%arg0

// DOTS:        scf.for
// DOTS-COUNT-2:  "tawa.dot"
// DOTS-NOT:      "tawa.dot"
