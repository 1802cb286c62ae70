// RUN: rlx-opt %S/../../examples/llama_block.mlir -p 'convert-hir-to-mir,canonicalize,cse,mir-fuse,convert-mir-to-lir,lir-plan-arena' | filecheck %s
// RUN: rlx-opt %S/../../examples/llama_block.mlir -p 'convert-hir-to-mir,canonicalize,cse,mir-fuse,convert-mir-to-lir,lir-plan-arena{strategy=naive}' | filecheck %s --check-prefix=NAIVE

// The Llama block through the whole tensor and buffer pipeline: one arena that verifies
// (rlx-opt verifies after every pass), with reuse at most half of the naive plan.
// This file itself holds no IR: the input is examples/llama_block.mlir.

// CHECK:      func.func @llama_block(
// CHECK-SAME: {rlx.name = "out0", rlx.role = "output"}
// CHECK:      lir.arena size 491520 alignment 64 strategy "greedy-by-size" max_live_bytes 491520
// CHECK-NOT:  lir.arena
// CHECK-NOT:  lir.alloc
// CHECK:      lir.attention
// CHECK:      lir.fused_matmul {{.*}} activation silu

// NAIVE:      lir.arena size 1114112 alignment 64 strategy naive
