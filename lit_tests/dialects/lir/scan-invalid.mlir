// RUN: rlx-opt %s --verify-diagnostics | filecheck %s

// The body yields a buffer of the carry's type.

func.func @bad(%h: memref<4xf32>, %out: memref<4xf32>) {
  lir.scan ins(%h : memref<4xf32>) outs(%out : memref<4xf32>) length 2 {
  ^bb0(%c: memref<4xf32>):
    %n = lir.alloc : memref<2xf32>
    lir.yield %n : memref<2xf32>
  }
  func.return
}

// CHECK: 'lir.scan': body: 'lir.yield' expected one value of the carry's type memref<4xf32>, got (memref<2xf32>)
