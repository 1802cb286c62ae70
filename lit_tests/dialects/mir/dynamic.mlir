// RUN: rlx-opt %s --split-input-file | rlx-opt --split-input-file | filecheck %s
// RUN: rlx-opt %s --split-input-file --print-op-generic | rlx-opt --split-input-file | filecheck %s

// Symbolic dims in mir (issue 9): the primitives with a `?` sequence dim as the Graph
// builder emits them for g.input("x", ("S", 16)), then the same after mir-fuse (a fused
// matmul and fused elementwise bodies on ? shapes). Round-trips in custom and generic form.

func.func @prims(%x: tensor<?x16xf32> {rlx.name = "x", rlx.role = "input", rlx.dims = ["S", 16 : i64]}, %w: tensor<16x8xf32> {rlx.name = "w", rlx.role = "param"}, %b: tensor<8xf32> {rlx.name = "b", rlx.role = "param"}, %cols: tensor<3xi64> {rlx.name = "cols", rlx.role = "input"}) -> (tensor<3x?x8xf32> {rlx.dims = [3 : i64, "S", 8 : i64]}, tensor<?x3xf32> {rlx.dims = ["S", 3 : i64]}) {
  %0 = mir.matmul %x, %w : (tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  %1 = mir.add %0, %b : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  %2 = mir.relu %1 : tensor<?x8xf32>
  %3 = mir.softmax %2 axis 1 : tensor<?x8xf32>
  %4 = mir.reduce mean %2 axes [1] keepdim : tensor<?x8xf32> -> tensor<?x1xf32>
  %5 = mir.mul %3, %4 : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
  %6 = mir.reduce sum %2 axes [0] : tensor<?x8xf32> -> tensor<8xf32>
  %7 = mir.add %5, %6 : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  %8 = mir.reshape %7 : tensor<?x8xf32> -> tensor<?x2x4xf32>
  %9 = mir.transpose %8 perm [0, 2, 1] : tensor<?x2x4xf32> -> tensor<?x4x2xf32>
  %10 = mir.reshape %9 : tensor<?x4x2xf32> -> tensor<?x8xf32>
  %11 = mir.narrow %10 axis 1 start 2 length 4 : tensor<?x8xf32> -> tensor<?x4xf32>
  %12 = mir.concat %11, %11 axis 1 : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x8xf32>
  %13 = mir.reshape %12 : tensor<?x8xf32> -> tensor<1x?x8xf32>
  %14 = mir.broadcast_to %13 : tensor<1x?x8xf32> -> tensor<3x?x8xf32>
  %15 = mir.gather %x, %cols axis 1 : (tensor<?x16xf32>, tensor<3xi64>) -> tensor<?x3xf32>
  %16 = mir.exp %15 : tensor<?x3xf32>
  %17 = mir.constant dense<1.000000e+00> : tensor<f32>
  %18 = mir.sub %16, %17 : (tensor<?x3xf32>, tensor<f32>) -> tensor<?x3xf32>
  func.return %14, %18 : tensor<3x?x8xf32>, tensor<?x3xf32>
}

// CHECK-LABEL: func.func @prims(%x: tensor<?x16xf32> {rlx.name = "x", rlx.role = "input", rlx.dims = ["S", 16 : i64]}, %w: tensor<16x8xf32> {rlx.name = "w", rlx.role = "param"}, %b: tensor<8xf32> {rlx.name = "b", rlx.role = "param"}, %cols: tensor<3xi64> {rlx.name = "cols", rlx.role = "input"}) -> (tensor<3x?x8xf32> {rlx.dims = [3 : i64, "S", 8 : i64]}, tensor<?x3xf32> {rlx.dims = ["S", 3 : i64]}) {
// CHECK-NEXT: %0 = mir.matmul %x, %w : (tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
// CHECK-NEXT: %1 = mir.add %0, %b : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
// CHECK-NEXT: %2 = mir.relu %1 : tensor<?x8xf32>
// CHECK-NEXT: %3 = mir.softmax %2 axis 1 : tensor<?x8xf32>
// CHECK-NEXT: %4 = mir.reduce mean %2 axes [1] keepdim : tensor<?x8xf32> -> tensor<?x1xf32>
// CHECK-NEXT: %5 = mir.mul %3, %4 : (tensor<?x8xf32>, tensor<?x1xf32>) -> tensor<?x8xf32>
// CHECK-NEXT: %6 = mir.reduce sum %2 axes [0] : tensor<?x8xf32> -> tensor<8xf32>
// CHECK-NEXT: %7 = mir.add %5, %6 : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
// CHECK-NEXT: %8 = mir.reshape %7 : tensor<?x8xf32> -> tensor<?x2x4xf32>
// CHECK-NEXT: %9 = mir.transpose %8 perm [0, 2, 1] : tensor<?x2x4xf32> -> tensor<?x4x2xf32>
// CHECK-NEXT: %10 = mir.reshape %9 : tensor<?x4x2xf32> -> tensor<?x8xf32>
// CHECK-NEXT: %11 = mir.narrow %10 axis 1 start 2 length 4 : tensor<?x8xf32> -> tensor<?x4xf32>
// CHECK-NEXT: %12 = mir.concat %11, %11 axis 1 : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x8xf32>
// CHECK-NEXT: %13 = mir.reshape %12 : tensor<?x8xf32> -> tensor<1x?x8xf32>
// CHECK-NEXT: %14 = mir.broadcast_to %13 : tensor<1x?x8xf32> -> tensor<3x?x8xf32>
// CHECK-NEXT: %15 = mir.gather %x, %cols axis 1 : (tensor<?x16xf32>, tensor<3xi64>) -> tensor<?x3xf32>
// CHECK-NEXT: %16 = mir.exp %15 : tensor<?x3xf32>
// CHECK-NEXT: %17 = mir.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %18 = mir.sub %16, %17 : (tensor<?x3xf32>, tensor<f32>) -> tensor<?x3xf32>
// CHECK-NEXT: func.return %14, %18 : tensor<3x?x8xf32>, tensor<?x3xf32>
// CHECK-NEXT: }

// -----

func.func @prims_fused(%x: tensor<?x16xf32> {rlx.name = "x", rlx.role = "input", rlx.dims = ["S", 16 : i64]}, %w: tensor<16x8xf32> {rlx.name = "w", rlx.role = "param"}, %b: tensor<8xf32> {rlx.name = "b", rlx.role = "param"}, %cols: tensor<3xi64> {rlx.name = "cols", rlx.role = "input"}) -> (tensor<3x?x8xf32> {rlx.dims = [3 : i64, "S", 8 : i64]}, tensor<?x3xf32> {rlx.dims = ["S", 3 : i64]}) {
  %0 = mir.fused_matmul %x, %w, %b activation relu : (tensor<?x16xf32>, tensor<16x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  %1 = mir.softmax %0 axis 1 : tensor<?x8xf32>
  %2 = mir.reduce mean %0 axes [1] keepdim : tensor<?x8xf32> -> tensor<?x1xf32>
  %3 = mir.reduce sum %0 axes [0] : tensor<?x8xf32> -> tensor<8xf32>
  %4 = mir.fused_elementwise ins(%1, %2, %3 : tensor<?x8xf32>, tensor<?x1xf32>, tensor<8xf32>) -> tensor<?x8xf32> {
  ^bb0(%5: f32, %6: f32, %7: f32):
    %8 = arith.mulf %5, %6 : f32
    %9 = arith.addf %8, %7 : f32
    mir.yield %9 : f32
  }
  %5 = mir.reshape %4 : tensor<?x8xf32> -> tensor<?x2x4xf32>
  %6 = mir.transpose %5 perm [0, 2, 1] : tensor<?x2x4xf32> -> tensor<?x4x2xf32>
  %7 = mir.reshape %6 : tensor<?x4x2xf32> -> tensor<?x8xf32>
  %8 = mir.narrow %7 axis 1 start 2 length 4 : tensor<?x8xf32> -> tensor<?x4xf32>
  %9 = mir.concat %8, %8 axis 1 : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x8xf32>
  %10 = mir.reshape %9 : tensor<?x8xf32> -> tensor<1x?x8xf32>
  %11 = mir.broadcast_to %10 : tensor<1x?x8xf32> -> tensor<3x?x8xf32>
  %12 = mir.gather %x, %cols axis 1 : (tensor<?x16xf32>, tensor<3xi64>) -> tensor<?x3xf32>
  %13 = mir.fused_elementwise ins(%12 : tensor<?x3xf32>) -> tensor<?x3xf32> {
  ^bb0(%14: f32):
    %15 = arith.constant 1.000000e+00 : f32
    %16 = math.exp %14 : f32
    %17 = arith.subf %16, %15 : f32
    mir.yield %17 : f32
  }
  func.return %11, %13 : tensor<3x?x8xf32>, tensor<?x3xf32>
}

// CHECK-LABEL: func.func @prims_fused(%x: tensor<?x16xf32> {rlx.name = "x", rlx.role = "input", rlx.dims = ["S", 16 : i64]}, %w: tensor<16x8xf32> {rlx.name = "w", rlx.role = "param"}, %b: tensor<8xf32> {rlx.name = "b", rlx.role = "param"}, %cols: tensor<3xi64> {rlx.name = "cols", rlx.role = "input"}) -> (tensor<3x?x8xf32> {rlx.dims = [3 : i64, "S", 8 : i64]}, tensor<?x3xf32> {rlx.dims = ["S", 3 : i64]}) {
// CHECK-NEXT: %0 = mir.fused_matmul %x, %w, %b activation relu : (tensor<?x16xf32>, tensor<16x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
// CHECK-NEXT: %1 = mir.softmax %0 axis 1 : tensor<?x8xf32>
// CHECK-NEXT: %2 = mir.reduce mean %0 axes [1] keepdim : tensor<?x8xf32> -> tensor<?x1xf32>
// CHECK-NEXT: %3 = mir.reduce sum %0 axes [0] : tensor<?x8xf32> -> tensor<8xf32>
// CHECK-NEXT: %4 = mir.fused_elementwise ins(%1, %2, %3 : tensor<?x8xf32>, tensor<?x1xf32>, tensor<8xf32>) -> tensor<?x8xf32> {
// CHECK-NEXT: ^bb0(%5: f32, %6: f32, %7: f32):
// CHECK-NEXT: %8 = arith.mulf %5, %6 : f32
// CHECK-NEXT: %9 = arith.addf %8, %7 : f32
// CHECK-NEXT: mir.yield %9 : f32
// CHECK-NEXT: }
// CHECK-NEXT: %5 = mir.reshape %4 : tensor<?x8xf32> -> tensor<?x2x4xf32>
// CHECK-NEXT: %6 = mir.transpose %5 perm [0, 2, 1] : tensor<?x2x4xf32> -> tensor<?x4x2xf32>
// CHECK-NEXT: %7 = mir.reshape %6 : tensor<?x4x2xf32> -> tensor<?x8xf32>
// CHECK-NEXT: %8 = mir.narrow %7 axis 1 start 2 length 4 : tensor<?x8xf32> -> tensor<?x4xf32>
// CHECK-NEXT: %9 = mir.concat %8, %8 axis 1 : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x8xf32>
// CHECK-NEXT: %10 = mir.reshape %9 : tensor<?x8xf32> -> tensor<1x?x8xf32>
// CHECK-NEXT: %11 = mir.broadcast_to %10 : tensor<1x?x8xf32> -> tensor<3x?x8xf32>
// CHECK-NEXT: %12 = mir.gather %x, %cols axis 1 : (tensor<?x16xf32>, tensor<3xi64>) -> tensor<?x3xf32>
// CHECK-NEXT: %13 = mir.fused_elementwise ins(%12 : tensor<?x3xf32>) -> tensor<?x3xf32> {
// CHECK-NEXT: ^bb0(%14: f32):
// CHECK-NEXT: %15 = arith.constant 1.000000e+00 : f32
// CHECK-NEXT: %16 = math.exp %14 : f32
// CHECK-NEXT: %17 = arith.subf %16, %15 : f32
// CHECK-NEXT: mir.yield %17 : f32
// CHECK-NEXT: }
// CHECK-NEXT: func.return %11, %13 : tensor<3x?x8xf32>, tensor<?x3xf32>
// CHECK-NEXT: }
