// RUN: rlx-opt %s -p rlx-lower | filecheck %s
// RUN: rlx-opt %s -p 'rlx-lower{vector-width=8 strategy=naive}' | filecheck %s --check-prefix=W8
// RUN: rlx-opt %s -p rlx-lower | filecheck %s --check-prefix=PURE

// rlx-lower runs the whole pipeline: hir -> mir -> fused mir -> lir -> planned lir ->
// parallelized lir -> llvm. These kernels are small: none is split across threads, so
// there is no barrier and every kernel runs on thread 0 through its serial wrapper.

func.func @mlp(%x: tensor<4x64xf32> {rlx.name = "x", rlx.role = "input"},
               %w1: tensor<64x128xf32> {rlx.name = "w1", rlx.role = "param"},
               %b1: tensor<128xf32> {rlx.name = "b1", rlx.role = "param"},
               %w2: tensor<128x10xf32> {rlx.name = "w2", rlx.role = "param"}) -> tensor<4x10xf32> {
  %h = hir.linear %x, %w1 bias %b1 activation gelu : (tensor<4x64xf32>, tensor<64x128xf32>, tensor<128xf32>) -> tensor<4x128xf32>
  %l = mir.matmul %h, %w2 : (tensor<4x128xf32>, tensor<128x10xf32>) -> tensor<4x10xf32>
  %y = mir.softmax %l axis 1 : tensor<4x10xf32>
  func.return %y : tensor<4x10xf32>
}

// CHECK-DAG:  llvm.func @mlp__fused_matmul_{{[0-9]+}}(
// CHECK-DAG:  llvm.func @mlp__matmul_{{[0-9]+}}(
// CHECK-DAG:  llvm.func @mlp__softmax_{{[0-9]+}}(
// CHECK:      llvm.func @mlp(%{{.*}}: !llvm.ptr {rlx.name = "x", rlx.role = "input", rlx.type = memref<4x64xf32>
// CHECK-SAME: {rlx.name = "out0", rlx.role = "output", rlx.type = memref<4x10xf32>
// CHECK-SAME: {rlx.role = "arena", rlx.arena_bytes = {{[0-9]+}} : i64, rlx.naive_bytes = {{[0-9]+}} : i64}, %{{.*}}: i64 {rlx.role = "part"}, %{{.*}}: i64 {rlx.role = "parts"}, %{{.*}}: !llvm.ptr {rlx.role = "sync"}) -> i32
// CHECK:      llvm.call @mlp__fused_matmul_{{[0-9]+}}__serial(
// CHECK:      llvm.call @mlp__matmul_{{[0-9]+}}__serial(
// CHECK:      llvm.call @mlp__softmax_{{[0-9]+}}__serial(
// CHECK-NOT:  rlx_barrier
// CHECK:      llvm.return

// W8:     vector<8xf32>
// W8-NOT: vector<16xf32>

// PURE-NOT: {{ (hir|mir|lir|func|memref|arith|math|scf)\.[a-z_]+}}
// PURE-NOT: unrealized_conversion_cast
// PURE-NOT: tensor<
