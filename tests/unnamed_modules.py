"""Hand-written modules whose arguments carry no rlx.name / rlx.role (issue 14, finding 1),
shared by the API and rlx-run tests."""

UNNAMED = """\
builtin.module {
  func.func @f(%x: tensor<4x8xf32>, %1: tensor<8x3xf32>) -> tensor<4x3xf32> {
    %0 = mir.matmul %x, %1 : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
    func.return %0 : tensor<4x3xf32>
  }
}
"""

# The same at the lir stage: outputs are arguments, so roles cannot be guessed.
UNNAMED_LIR = """\
builtin.module {
  func.func @f(%x: memref<4x8xf32>, %w: memref<8x3xf32>, %out: memref<4x3xf32>) {
    lir.matmul ins(%x, %w : memref<4x8xf32>, memref<8x3xf32>) outs(%out : memref<4x3xf32>)
    func.return
  }
}
"""
