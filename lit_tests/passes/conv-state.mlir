// RUN: rlx-opt %s -p convert-hir-to-mir | filecheck %s --check-prefix=MIR
// RUN: rlx-opt %s -p convert-hir-to-mir | rlx-opt | filecheck %s --check-prefix=MIR
// RUN: rlx-opt %s -p convert-hir-to-mir,convert-mir-to-lir | filecheck %s --check-prefix=LIR
// RUN: rlx-opt %s -p convert-hir-to-mir,convert-mir-to-lir | rlx-opt | filecheck %s --check-prefix=LIR
// RUN: rlx-opt %s -p convert-hir-to-mir,convert-mir-to-lir,lir-plan-arena,convert-lir-to-llvm | filecheck %s --check-prefix=LLVM

// A causal conv that returns its window over a symbolic S: hir's two results become the
// padding concat and one mir.depthwise_conv1d with two results (the window, the padded
// input's last K-1 rows, is the second), then one lir kernel with two outs, here the two
// output arguments. The window's shape has no S: it is [B, K-1, C] for every S.

// MIR-LABEL: func.func @conv_state(
// MIR:         %[[CAT:.*]] = mir.concat %pad, %x axis 1 : (tensor<2x3x5xf32>, tensor<2x?x5xf32>) -> tensor<2x?x5xf32>
// MIR-NEXT:    %[[Y:.*]], %[[W:.*]] = mir.depthwise_conv1d %[[CAT]], %w return_state : (tensor<2x?x5xf32>, tensor<4x5xf32>) -> (tensor<2x?x5xf32>, tensor<2x3x5xf32>)
// MIR-NEXT:    func.return %[[Y]], %[[W]] : tensor<2x?x5xf32>, tensor<2x3x5xf32>

// LIR-LABEL: func.func @conv_state(
// LIR-SAME:    %[[O:[a-z0-9]+]]: memref<2x?x5xf32> {rlx.name = "out0", rlx.role = "output", rlx.dims = [2 : i64, "S", 5 : i64]}, %[[S:[a-z0-9]+]]: memref<2x3x5xf32> {rlx.name = "out1", rlx.role = "output"}
// LIR:         lir.concat
// LIR-NEXT:    lir.depthwise_conv1d ins(%{{.*}}, %w : memref<2x?x5xf32>, memref<4x5xf32>) outs(%[[O]], %[[S]] : memref<2x?x5xf32>, memref<2x3x5xf32>) return_state
// LIR-NEXT:    func.return

// The kernel takes its four pointers (input, weight, out, window), then the size of S.
// LLVM: llvm.func @conv_state__depthwise_conv1d_{{[0-9]+}}(%{{.*}}: !llvm.ptr {{.*}}, %{{.*}}: !llvm.ptr {{.*}}, %{{.*}}: !llvm.ptr {{.*}}, %{{.*}}: !llvm.ptr {{.*}}, %{{.*}}: i64)
func.func @conv_state(%x: tensor<2x?x5xf32> {rlx.name = "x", rlx.role = "input", rlx.dims = [2 : i64, "S", 5 : i64]}, %w: tensor<4x5xf32> {rlx.name = "w", rlx.role = "param"}, %pad: tensor<2x3x5xf32> {rlx.name = "pad", rlx.role = "input"}) -> (tensor<2x?x5xf32> {rlx.dims = [2 : i64, "S", 5 : i64]}, tensor<2x3x5xf32>) {
  %y, %win = hir.depthwise_conv1d_causal %x, %w left_pad %pad return_state : (tensor<2x?x5xf32>, tensor<4x5xf32>, tensor<2x3x5xf32>) -> (tensor<2x?x5xf32>, tensor<2x3x5xf32>)
  func.return %y, %win : tensor<2x?x5xf32>, tensor<2x3x5xf32>
}
