// RUN: tawa-opt %examples/softmax.tawa | tee %t | FileCheck %s
// RUN: FileCheck %s --check-prefix=NO-LOOP --input-file %t

// Rows of 1024 columns, masked against N with an arange; max, exp, sum, divide. No loop.

// NO-LOOP-NOT: scf.for
// CHECK:       "tawa.dim"(%arg0) {axis = 1 : i32}
// CHECK:       "tawa.load"{{.*}}-> tensor<2x1024xf32>
// CHECK:       "tawa.arange"() {end = 1024 : i32, start = 0 : i32}
// CHECK:       arith.cmpi slt, {{.*}} : tensor<1x1024xi32>
// CHECK:       arith.select
// CHECK:       "tawa.reduce"{{.*}}{axis = 1 : i32, kind = "max"}{{.*}}-> tensor<2xf32>
// CHECK:       math.exp
// CHECK:       "tawa.reduce"{{.*}}kind = "sum"
// CHECK:       arith.divf
// CHECK:       "tawa.store"
