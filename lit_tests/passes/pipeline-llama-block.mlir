// RUN: rlx-opt %S/../../examples/llama_block.mlir -p 'convert-hir-to-mir,canonicalize,cse,mir-fuse,convert-mir-to-lir,lir-plan-arena' | filecheck %s
// RUN: rlx-opt %S/../../examples/llama_block.mlir -p 'convert-hir-to-mir,canonicalize,cse,mir-fuse,convert-mir-to-lir,lir-plan-arena{strategy=naive}' | filecheck %s --check-prefix=NAIVE
// RUN: rlx-opt %S/../../examples/llama_block.mlir -p 'convert-hir-to-mir,canonicalize,cse,mir-fuse,convert-mir-to-lir,lir-plan-arena,lir-parallelize' | filecheck %s --check-prefix=PAR

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

// lir-parallelize: the matmuls and the attention (32 rows) are split across threads, the
// small elementwise kernels are not; every kernel next to a parallel one waits at a barrier:
// a full one between two parallel kernels, "gather" before a serial kernel, "release"
// after one.
// The in-place residual add still verifies: the slots' live ranges moved with their ops.
// Every kernel carries its phase (convert-mir-to-lir): the residual add after the last
// matmul is the epilogue.
// q/k/v (sibling matmuls of the normed x) are one shared-input kernel with three outs.
// PAR:      lir.rms_norm
// PAR-NEXT: %{{.*}} = lir.slot
// PAR-NEXT: %{{.*}} = lir.slot
// PAR-NEXT: %{{.*}} = lir.slot
// PAR-NEXT: lir.barrier "release"
// PAR-NEXT: lir.shared_input_matmul ins(%{{.*}}, %q_w, %k_w, %v_w : {{.*}}) {rlx.phase = "steady_state", rlx.parallel}
// PAR:      lir.attention {{.*}} {rlx.phase = "steady_state", rlx.parallel}
// PAR:      %[[PROJ:.*]] = lir.slot %arena[360448]
// PAR-NEXT: lir.barrier
// PAR-NEXT: lir.matmul ins(%{{.*}}, %o_w : {{.*}}) outs(%[[PROJ]] : memref<32x512xf32>) {rlx.phase = "steady_state", rlx.parallel}
// PAR-NEXT: %[[SUM:.*]] = lir.slot %arena[360448]
// PAR-NEXT: lir.barrier "gather"
// PAR-NEXT: lir.elementwise add ins(%x, %[[PROJ]] : memref<32x512xf32>, memref<32x512xf32>) outs(%[[SUM]] : memref<32x512xf32>)
// PAR-NOT:  rlx.parallel
// PAR-NEXT: %{{.*}} = lir.slot
// PAR:      lir.matmul ins(%{{.*}}, %down_w : {{.*}}) {rlx.phase = "steady_state", rlx.parallel}
// PAR-NEXT: lir.barrier "gather"
// PAR-NEXT: lir.elementwise add ins(%[[SUM]], %{{.*}}) outs(%out0 : memref<32x512xf32>) {rlx.phase = "epilogue"}
// PAR-NEXT: func.return
