builtin.module {
  func.func @mlp(%x: tensor<4x64xf32> {rlx.name = "x", rlx.role = "input"}, %w1: tensor<64x128xf32> {rlx.name = "w1", rlx.role = "param"}, %b1: tensor<128xf32> {rlx.name = "b1", rlx.role = "param"}, %w2: tensor<128x10xf32> {rlx.name = "w2", rlx.role = "param"}, %b2: tensor<10xf32> {rlx.name = "b2", rlx.role = "param"}) -> tensor<4x10xf32> {
    %0 = hir.linear %x, %w1 bias %b1 activation gelu : (tensor<4x64xf32>, tensor<64x128xf32>, tensor<128xf32>) -> tensor<4x128xf32>
    %1 = mir.matmul %0, %w2 : (tensor<4x128xf32>, tensor<128x10xf32>) -> tensor<4x10xf32>
    %2 = mir.add %1, %b2 : (tensor<4x10xf32>, tensor<10xf32>) -> tensor<4x10xf32>
    %3 = mir.softmax %2 axis 1 : tensor<4x10xf32>
    func.return %3 : tensor<4x10xf32>
  }
}
