// RUN: rlx-opt %s | rlx-opt | filecheck %s
// RUN: rlx-opt %s --print-op-generic | rlx-opt | filecheck %s

// One input, several products: the hir ops, the mir op and its lir kernel round-trip in
// custom and generic form.

// CHECK-LABEL: func.func @shared
// CHECK:       hir.shared_linear_pair %{{.*}}, %{{.*}}, %{{.*}} : (tensor<3x8xf32>, tensor<8x5xf32>, tensor<8x2xf32>) -> (tensor<3x5xf32>, tensor<3x2xf32>)
// CHECK:       hir.linear_fused %{{.*}}, %{{.*}} bias %{{.*}} activation gelu : (tensor<3x8xf32>, tensor<8x5xf32>, tensor<5xf32>) -> tensor<3x5xf32>
// CHECK:       mir.shared_input_matmul %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : (tensor<3x8xf32>, tensor<8x5xf32>, tensor<8x2xf32>, tensor<8x2xf32>) -> (tensor<3x5xf32>, tensor<3x2xf32>, tensor<3x2xf32>)
// CHECK:       mir.shared_input_matmul %{{.*}}, %{{.*}}, %{{.*}} scheme q4_0 activations q8 : (tensor<2x64xf32>, tensor<6x36xui8>, tensor<4x36xui8>) -> (tensor<2x6xf32>, tensor<2x4xf32>)
func.func @shared(%x: tensor<3x8xf32>, %a: tensor<8x5xf32>, %b: tensor<8x2xf32>, %c: tensor<5xf32>, %y: tensor<2x64xf32>, %g: tensor<6x36xui8>, %u: tensor<4x36xui8>) {
  %p, %q = hir.shared_linear_pair %x, %a, %b : (tensor<3x8xf32>, tensor<8x5xf32>, tensor<8x2xf32>) -> (tensor<3x5xf32>, tensor<3x2xf32>)
  %f = hir.linear_fused %x, %a bias %c activation gelu : (tensor<3x8xf32>, tensor<8x5xf32>, tensor<5xf32>) -> tensor<3x5xf32>
  %r:3 = mir.shared_input_matmul %x, %a, %b, %b : (tensor<3x8xf32>, tensor<8x5xf32>, tensor<8x2xf32>, tensor<8x2xf32>) -> (tensor<3x5xf32>, tensor<3x2xf32>, tensor<3x2xf32>)
  %s:2 = mir.shared_input_matmul %y, %g, %u scheme q4_0 activations q8 : (tensor<2x64xf32>, tensor<6x36xui8>, tensor<4x36xui8>) -> (tensor<2x6xf32>, tensor<2x4xf32>)
  func.return
}

// CHECK-LABEL: func.func @kernel
// CHECK: lir.shared_input_matmul q4_0 ins(%x, %g, %u : memref<2x64xf32>, memref<6x36xui8>, memref<4x36xui8>) outs(%o, %v : memref<2x6xf32>, memref<2x4xf32>) activations q8
func.func @kernel(%x: memref<2x64xf32>, %g: memref<6x36xui8>, %u: memref<4x36xui8>, %o: memref<2x6xf32>, %v: memref<2x4xf32>) {
  lir.shared_input_matmul q4_0 ins(%x, %g, %u : memref<2x64xf32>, memref<6x36xui8>, memref<4x36xui8>) outs(%o, %v : memref<2x6xf32>, memref<2x4xf32>) activations q8
  func.return
}
