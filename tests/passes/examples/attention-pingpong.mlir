// RUN: tawa-opt %examples/flash_attention.tawa --consumer-pingpong on --passes aref-insertion,partition,protocol-check,register-realloc,assign-warp-groups | FileCheck %s --check-prefix=ATTN
// RUN: tawa-opt %examples/flash_attention.tawa --passes aref-insertion,partition,protocol-check,register-realloc,assign-warp-groups | FileCheck %s --check-prefix=ATTN
// RUN: tawa-opt %examples/flash_attention.tawa --consumer-pingpong off --passes aref-insertion,partition,protocol-check,register-realloc,assign-warp-groups | FileCheck %s --check-prefix=OFF
// RUN: tawa-opt %examples/flash_attention.tawa --consumer-lookahead off --passes aref-insertion,partition,protocol-check,register-realloc,assign-warp-groups | FileCheck %s --check-prefix=OFF
// RUN: tawa-opt %examples/gemm.tawa --consumer-pingpong on --passes aref-insertion,partition,protocol-check,register-realloc,assign-warp-groups | FileCheck %s --check-prefix=GEMM
// RUN: tawac %examples/flash_attention.tawa --consumer-pingpong on --emit ptx | FileCheck %s --check-prefix=PTX

// Attention's two consumer warp groups (their loop does math, the softmax, on a dot's result) get the ping-pong
// schedule by default, where their loop is softmax-pipelined; not with `consumer_pingpong=False`, nor by default
// without the pipeline (`consumer_lookahead=False`); a GEMM main loop (dots that only accumulate) never gets it.
// ATTN: tawa.num_warp_groups = 2 : i32, tawa.pingpong, tawa.warp_group = "consumer"
// OFF-NOT: tawa.pingpong
// GEMM-NOT: tawa.pingpong

// In the PTX each consumer group, in each iteration of its softmax-pipelined loop, waits for its turn on its own
// named barrier (id 14 + group, 256 threads), issues S_k and then P·V of the previous block as two wgmma groups,
// and then arrives on the other group's barrier.
// PTX:      bar.sync{{.*}}%r{{[0-9]+}}, 256;
// PTX:      wgmma.fence.sync.aligned;
// PTX:      wgmma.mma_async.sync.aligned.m64n128k16
// PTX:      wgmma.commit_group.sync.aligned;
// PTX:      wgmma.fence.sync.aligned;
// PTX:      wgmma.commit_group.sync.aligned;
// PTX:      bar.arrive
