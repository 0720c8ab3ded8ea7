// RUN: tawa-opt %examples/flash_attention.tawa -D CAUSAL=1 --passes aref-insertion,partition,protocol-check | FileCheck %s

// Causal flash attention specialized: K and V share one slot; Q is loaded once, by the consumer, before the loop;
// the loop bound (the min of two cdivs of the program id) is replicated in the producer.

// CHECK:      %[[R:[0-9]+]] = "tawa.aref_create"() : () -> !tawa.aref<[tensor<128x128xbf16>, tensor<128x128xbf16>]
// CHECK:        arith.minsi
// CHECK:        "tawa.load"(%arg1
// CHECK:        "tawa.load"(%arg2
// CHECK:        "tawa.aref_put"(%[[R]],
// CHECK:      warp_group = "producer"
// CHECK:        "tawa.load"(%arg0
// CHECK:        %[[G:[0-9]+]]:2 = "tawa.aref_get"(%[[R]])
// CHECK:        "tawa.trans"(%[[G]]#0)
// CHECK:        "tawa.dot"
// CHECK:        "tawa.reduce"
// CHECK:        math.exp2
// P @ V reads the V tile of the slot, which is released after its last use.
// CHECK:        "tawa.dot"(%{{[0-9]+}}, %[[G]]#1
// CHECK-NEXT:   "tawa.aref_consumed"(%[[R]])
// CHECK-NEXT:   scf.yield
// CHECK:        "tawa.store"
// CHECK:      warp_group = "consumer"
