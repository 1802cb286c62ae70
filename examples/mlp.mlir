builtin.module {
  func.func @mlp(%x: tensor<4x64xf32> {rlx.name = "x", rlx.role = "input"} loc(unknown), %w1: tensor<64x128xf32> {rlx.name = "w1", rlx.role = "param"} loc(unknown), %b1: tensor<128xf32> {rlx.name = "b1", rlx.role = "param"} loc(unknown), %w2: tensor<128x10xf32> {rlx.name = "w2", rlx.role = "param"} loc(unknown), %b2: tensor<10xf32> {rlx.name = "b2", rlx.role = "param"} loc(unknown)) -> tensor<4x10xf32> {
    %0 = hir.linear %x, %w1 bias %b1 activation gelu : (tensor<4x64xf32>, tensor<64x128xf32>, tensor<128xf32>) -> tensor<4x128xf32> loc("linear#0")
    %1 = mir.matmul %0, %w2 : (tensor<4x128xf32>, tensor<128x10xf32>) -> tensor<4x10xf32> loc("matmul#0")
    %2 = mir.add %1, %b2 : (tensor<4x10xf32>, tensor<10xf32>) -> tensor<4x10xf32> loc("add#0")
    %3 = mir.softmax %2 axis 1 : tensor<4x10xf32> loc("softmax#0")
    func.return %3 : tensor<4x10xf32> loc(unknown)
  } loc(unknown)
} loc(unknown)
