// RUN: rlx-opt %s | rlx-opt | filecheck %s
// RUN: rlx-opt %s --print-op-generic | rlx-opt | filecheck %s

// lir.scan round-trips: buffers in, the body's kernels write allocs, lir.yield the carry.

// CHECK-LABEL: func.func @rnn
// CHECK:         lir.scan ins(%{{.*}} : memref<4xf32>) xs(%{{.*}} : memref<5x4xf32>) consts(%{{.*}} : memref<4x4xf32>) outs(%{{.*}} : memref<5x4xf32>) length 5 trajectory {
// CHECK-NEXT:    ^bb0(%{{.*}}: memref<4xf32>, %{{.*}}: memref<4xf32>, %{{.*}}: memref<4x4xf32>):
// CHECK-NEXT:      %{{.*}} = lir.alloc : memref<4xf32>
// CHECK-NEXT:      lir.fused_matmul
// CHECK-NEXT:      lir.yield %{{.*}} : memref<4xf32>
// CHECK-NEXT:    }
func.func @rnn(%h: memref<4xf32>, %xs: memref<5x4xf32>, %w: memref<4x4xf32>, %out: memref<5x4xf32>) {
  lir.scan ins(%h : memref<4xf32>) xs(%xs : memref<5x4xf32>) consts(%w : memref<4x4xf32>) outs(%out : memref<5x4xf32>) length 5 trajectory {
  ^bb0(%c: memref<4xf32>, %x: memref<4xf32>, %m: memref<4x4xf32>):
    %n = lir.alloc : memref<4xf32>
    lir.fused_matmul ins(%c, %m, %x : memref<4xf32>, memref<4x4xf32>, memref<4xf32>) outs(%n : memref<4xf32>) activation tanh
    lir.yield %n : memref<4xf32>
  }
  func.return
}
