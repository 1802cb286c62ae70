// RUN: rlx-opt %s -p rlx-lower | filecheck %s
// RUN: rlx-opt %s -p 'rlx-lower{matmul-epilogue=false}' | filecheck %s --check-prefix=NOEPI
// RUN: sed 's/builtin.module {/builtin.module attributes {rlx.stage = "mir"} {/' %s | rlx-opt -p rlx-lower | filecheck %s --check-prefix=MARKED

// rlx-lower takes the fusion policy as mir-fuse's options (`rlx.FusionPolicy`): with
// `matmul-epilogue=false` the matmul, its bias add and its gelu stay apart (the add and
// gelu fuse into one elementwise kernel). A tensor module marked `rlx.stage = "mir"` (as
// `GraphModule.lower()` leaves one) is already at mir: rlx-lower starts at
// convert-mir-to-lir, so nothing is fused, and the mark is gone from the output.

builtin.module {
  func.func @mlp(%x: tensor<3x8xf32> {rlx.name = "x", rlx.role = "input"},
                 %w: tensor<8x5xf32> {rlx.name = "w", rlx.role = "param"},
                 %b: tensor<5xf32> {rlx.name = "b", rlx.role = "param"}) -> tensor<3x5xf32> {
    %m = mir.matmul %x, %w : (tensor<3x8xf32>, tensor<8x5xf32>) -> tensor<3x5xf32>
    %a = mir.add %m, %b : (tensor<3x5xf32>, tensor<5xf32>) -> tensor<3x5xf32>
    %y = mir.gelu %a : tensor<3x5xf32>
    func.return %y : tensor<3x5xf32>
  }
}

// CHECK:      llvm.func @mlp__fused_matmul_0(
// CHECK-NOT:  llvm.func @mlp__elementwise
// CHECK:      llvm.call @mlp__fused_matmul_0__serial(

// NOEPI-NOT:  fused_matmul
// NOEPI:      llvm.func @mlp__matmul_0(
// NOEPI:      llvm.func @mlp__fused_elementwise_1(
// NOEPI-NOT:  fused_matmul

// MARKED-NOT: rlx.stage
// MARKED-NOT: fused_matmul
// MARKED:     llvm.func @mlp__matmul_0(
// MARKED:     llvm.func @mlp__elementwise_1(
// MARKED:     llvm.func @mlp__elementwise_2(
// MARKED-NOT: fused_matmul
