// RUN: rlx-opt %s | rlx-opt | filecheck %s
// RUN: rlx-opt %s --print-op-generic | rlx-opt | filecheck %s

// The sampling kernels round-trip; lir.sample's position is an index operand,
// its row_positions a group of its own.

// CHECK-LABEL: func.func @kernels
// CHECK: lir.argmax ins(%x : memref<2x10xf32>) outs(%a : memref<2xi32>)
// CHECK: lir.top_k ins(%x : memref<2x10xf32>) outs(%v, %i : memref<2x3xf32>, memref<2x3xi32>) k 3
// CHECK: lir.sample ins(%x, %t, %k, %p, %s, %pos : memref<2x10xf32>, memref<f32>, memref<i32>, memref<f32>, memref<i64>, index) outs(%a : memref<2xi32>)
// CHECK: lir.sample ins(%x, %t, %kr, %p, %s : memref<2x10xf32>, memref<f32>, memref<2xi32>, memref<f32>, memref<i64>) row_positions(%rp : memref<2xi64>) outs(%a : memref<2xi32>)
func.func @kernels(%x: memref<2x10xf32>, %a: memref<2xi32>, %v: memref<2x3xf32>, %i: memref<2x3xi32>, %t: memref<f32>, %k: memref<i32>, %p: memref<f32>, %s: memref<i64>, %pos: index, %kr: memref<2xi32>, %rp: memref<2xi64>) {
  lir.argmax ins(%x : memref<2x10xf32>) outs(%a : memref<2xi32>)
  lir.top_k ins(%x : memref<2x10xf32>) outs(%v, %i : memref<2x3xf32>, memref<2x3xi32>) k 3
  lir.sample ins(%x, %t, %k, %p, %s, %pos : memref<2x10xf32>, memref<f32>, memref<i32>, memref<f32>, memref<i64>, index) outs(%a : memref<2xi32>)
  lir.sample ins(%x, %t, %kr, %p, %s : memref<2x10xf32>, memref<f32>, memref<2xi32>, memref<f32>, memref<i64>) row_positions(%rp : memref<2xi64>) outs(%a : memref<2xi32>)
  func.return
}
