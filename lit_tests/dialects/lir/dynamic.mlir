// RUN: rlx-opt %s | rlx-opt | filecheck %s
// RUN: rlx-opt %s --print-op-generic | rlx-opt | filecheck %s

// Symbolic dims in lir (issue 9): kernels on memref<?x...> buffers, each dynamic
// lir.alloc naming its symbolic dims (`dims ["S", 8]`), views of dynamic buffers at
// offset 0, output arguments with rlx.dims (convert-mir-to-lir of the mir in
// dialects/mir/dynamic.mlir). Round-trips in custom and generic form.

func.func @prims(%x: memref<?x16xf32> {rlx.name = "x", rlx.role = "input", rlx.dims = ["S", 16 : i64]}, %w: memref<16x8xf32> {rlx.name = "w", rlx.role = "param"}, %b: memref<8xf32> {rlx.name = "b", rlx.role = "param"}, %cols: memref<3xi64> {rlx.name = "cols", rlx.role = "input"}, %out0: memref<3x?x8xf32> {rlx.name = "out0", rlx.role = "output", rlx.dims = [3 : i64, "S", 8 : i64]}, %out1: memref<?x3xf32> {rlx.name = "out1", rlx.role = "output", rlx.dims = ["S", 3 : i64]}) {
  %0 = lir.alloc dims ["S", 8 : i64] : memref<?x8xf32>
  lir.fused_matmul ins(%x, %w, %b : memref<?x16xf32>, memref<16x8xf32>, memref<8xf32>) outs(%0 : memref<?x8xf32>) activation relu
  %1 = lir.alloc dims ["S", 8 : i64] : memref<?x8xf32>
  lir.softmax ins(%0 : memref<?x8xf32>) outs(%1 : memref<?x8xf32>) axis 1
  %2 = lir.alloc dims ["S", 1 : i64] : memref<?x1xf32>
  lir.reduce mean ins(%0 : memref<?x8xf32>) outs(%2 : memref<?x1xf32>) axes [1] keepdim
  %3 = lir.alloc : memref<8xf32>
  lir.reduce sum ins(%0 : memref<?x8xf32>) outs(%3 : memref<8xf32>) axes [0]
  %4 = lir.alloc dims ["S", 8 : i64] : memref<?x8xf32>
  lir.fused_elementwise ins(%1, %2, %3 : memref<?x8xf32>, memref<?x1xf32>, memref<8xf32>) outs(%4 : memref<?x8xf32>) {
  ^bb0(%5: f32, %6: f32, %7: f32):
    %8 = arith.mulf %5, %6 : f32
    %9 = arith.addf %8, %7 : f32
    lir.yield %9 : f32
  }
  %5 = lir.view %4[0] dims ["S", 2 : i64, 4 : i64] : memref<?x8xf32> -> memref<?x2x4xf32>
  %6 = lir.alloc dims ["S", 4 : i64, 2 : i64] : memref<?x4x2xf32>
  lir.transpose ins(%5 : memref<?x2x4xf32>) outs(%6 : memref<?x4x2xf32>) perm [0, 2, 1]
  %7 = lir.view %6[0] dims ["S", 8 : i64] : memref<?x4x2xf32> -> memref<?x8xf32>
  %8 = lir.alloc dims ["S", 4 : i64] : memref<?x4xf32>
  lir.narrow ins(%7 : memref<?x8xf32>) outs(%8 : memref<?x4xf32>) axis 1 start 2 length 4
  %9 = lir.alloc dims ["S", 8 : i64] : memref<?x8xf32>
  lir.concat ins(%8, %8 : memref<?x4xf32>, memref<?x4xf32>) outs(%9 : memref<?x8xf32>) axis 1
  %10 = lir.view %9[0] dims [1 : i64, "S", 8 : i64] : memref<?x8xf32> -> memref<1x?x8xf32>
  lir.broadcast_to ins(%10 : memref<1x?x8xf32>) outs(%out0 : memref<3x?x8xf32>)
  %11 = lir.alloc dims ["S", 3 : i64] : memref<?x3xf32>
  lir.gather ins(%x, %cols : memref<?x16xf32>, memref<3xi64>) outs(%11 : memref<?x3xf32>) axis 1
  lir.fused_elementwise ins(%11 : memref<?x3xf32>) outs(%out1 : memref<?x3xf32>) {
  ^bb0(%12: f32):
    %13 = arith.constant 1.000000e+00 : f32
    %14 = math.exp %12 : f32
    %15 = arith.subf %14, %13 : f32
    lir.yield %15 : f32
  }
  func.return
}

// CHECK-LABEL: func.func @prims(%x: memref<?x16xf32> {rlx.name = "x", rlx.role = "input", rlx.dims = ["S", 16 : i64]}, %w: memref<16x8xf32> {rlx.name = "w", rlx.role = "param"}, %b: memref<8xf32> {rlx.name = "b", rlx.role = "param"}, %cols: memref<3xi64> {rlx.name = "cols", rlx.role = "input"}, %out0: memref<3x?x8xf32> {rlx.name = "out0", rlx.role = "output", rlx.dims = [3 : i64, "S", 8 : i64]}, %out1: memref<?x3xf32> {rlx.name = "out1", rlx.role = "output", rlx.dims = ["S", 3 : i64]}) {
// CHECK-NEXT: %0 = lir.alloc dims ["S", 8 : i64] : memref<?x8xf32>
// CHECK-NEXT: lir.fused_matmul ins(%x, %w, %b : memref<?x16xf32>, memref<16x8xf32>, memref<8xf32>) outs(%0 : memref<?x8xf32>) activation relu
// CHECK-NEXT: %1 = lir.alloc dims ["S", 8 : i64] : memref<?x8xf32>
// CHECK-NEXT: lir.softmax ins(%0 : memref<?x8xf32>) outs(%1 : memref<?x8xf32>) axis 1
// CHECK-NEXT: %2 = lir.alloc dims ["S", 1 : i64] : memref<?x1xf32>
// CHECK-NEXT: lir.reduce mean ins(%0 : memref<?x8xf32>) outs(%2 : memref<?x1xf32>) axes [1] keepdim
// CHECK-NEXT: %3 = lir.alloc : memref<8xf32>
// CHECK-NEXT: lir.reduce sum ins(%0 : memref<?x8xf32>) outs(%3 : memref<8xf32>) axes [0]
// CHECK-NEXT: %4 = lir.alloc dims ["S", 8 : i64] : memref<?x8xf32>
// CHECK-NEXT: lir.fused_elementwise ins(%1, %2, %3 : memref<?x8xf32>, memref<?x1xf32>, memref<8xf32>) outs(%4 : memref<?x8xf32>) {
// CHECK-NEXT: ^bb0(%5: f32, %6: f32, %7: f32):
// CHECK-NEXT: %8 = arith.mulf %5, %6 : f32
// CHECK-NEXT: %9 = arith.addf %8, %7 : f32
// CHECK-NEXT: lir.yield %9 : f32
// CHECK-NEXT: }
// CHECK-NEXT: %5 = lir.view %4[0] dims ["S", 2 : i64, 4 : i64] : memref<?x8xf32> -> memref<?x2x4xf32>
// CHECK-NEXT: %6 = lir.alloc dims ["S", 4 : i64, 2 : i64] : memref<?x4x2xf32>
// CHECK-NEXT: lir.transpose ins(%5 : memref<?x2x4xf32>) outs(%6 : memref<?x4x2xf32>) perm [0, 2, 1]
// CHECK-NEXT: %7 = lir.view %6[0] dims ["S", 8 : i64] : memref<?x4x2xf32> -> memref<?x8xf32>
// CHECK-NEXT: %8 = lir.alloc dims ["S", 4 : i64] : memref<?x4xf32>
// CHECK-NEXT: lir.narrow ins(%7 : memref<?x8xf32>) outs(%8 : memref<?x4xf32>) axis 1 start 2 length 4
// CHECK-NEXT: %9 = lir.alloc dims ["S", 8 : i64] : memref<?x8xf32>
// CHECK-NEXT: lir.concat ins(%8, %8 : memref<?x4xf32>, memref<?x4xf32>) outs(%9 : memref<?x8xf32>) axis 1
// CHECK-NEXT: %10 = lir.view %9[0] dims [1 : i64, "S", 8 : i64] : memref<?x8xf32> -> memref<1x?x8xf32>
// CHECK-NEXT: lir.broadcast_to ins(%10 : memref<1x?x8xf32>) outs(%out0 : memref<3x?x8xf32>)
// CHECK-NEXT: %11 = lir.alloc dims ["S", 3 : i64] : memref<?x3xf32>
// CHECK-NEXT: lir.gather ins(%x, %cols : memref<?x16xf32>, memref<3xi64>) outs(%11 : memref<?x3xf32>) axis 1
// CHECK-NEXT: lir.fused_elementwise ins(%11 : memref<?x3xf32>) outs(%out1 : memref<?x3xf32>) {
// CHECK-NEXT: ^bb0(%12: f32):
// CHECK-NEXT: %13 = arith.constant 1.000000e+00 : f32
// CHECK-NEXT: %14 = math.exp %12 : f32
// CHECK-NEXT: %15 = arith.subf %14, %13 : f32
// CHECK-NEXT: lir.yield %15 : f32
// CHECK-NEXT: }
// CHECK-NEXT: func.return
// CHECK-NEXT: }
