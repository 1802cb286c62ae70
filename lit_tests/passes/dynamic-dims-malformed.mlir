// RUN: not rlx-opt %s -p convert-mir-to-lir 2>&1 | filecheck %s

// A hand-written rlx.dims that does not describe its argument's type (a static 65 where
// the type has 64) is one diagnostic of convert-mir-to-lir, not a traceback or a wrong
// name on the allocs (issue 9).

func.func @t(%x: tensor<?x64xf32> {rlx.name = "x", rlx.role = "input", rlx.dims = ["S", 65 : i64]}, %w: tensor<64x8xf32> {rlx.name = "w", rlx.role = "param"}) -> tensor<?x8xf32> {
  %0 = mir.matmul %x, %w : (tensor<?x64xf32>, tensor<64x8xf32>) -> tensor<?x8xf32>
  %1 = mir.softmax %0 axis 1 : tensor<?x8xf32>
  func.return %1 : tensor<?x8xf32>
}

// CHECK: rlx-opt: error: convert-mir-to-lir: @t: argument 0: rlx.dims [S, 65] does not describe its type tensor<?x64xf32>
// CHECK-NOT: Traceback
