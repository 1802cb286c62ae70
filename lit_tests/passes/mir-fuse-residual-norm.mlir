// RUN: rlx-opt %s -p mir-fuse | filecheck %s
// RUN: rlx-opt %s -p mir-fuse,convert-mir-to-lir | filecheck %s --check-prefix=LIR
// The barriers of the block at two threads' split, fused and apart:
// RUN: rlx-opt %s -p 'mir-fuse,convert-mir-to-lir,lir-plan-arena,lir-parallelize{min-work=1}' | sed -n '/func.func @sandwich/,/func.return/p' | grep -c lir.barrier | filecheck %s --check-prefix=BARRIERS --match-full-lines
// RUN: rlx-opt %s -p 'mir-fuse{q8-edges=false},convert-mir-to-lir,lir-plan-arena,lir-parallelize{min-work=1}' | sed -n '/func.func @sandwich/,/func.return/p' | grep -c lir.barrier | filecheck %s --check-prefix=BARRIERS-APART --match-full-lines
// BARRIERS: 4
// BARRIERS-APART: 8

// Gemma 3's sandwich norm: s = h + rms_norm(p, g1) is normalized again for the gate/up
// product and read once more by the residual add after the FFN. The product takes p, h
// and g1; its last result is s, which the later add reads.
func.func @sandwich(%p: tensor<2x64xf32>, %h: tensor<2x64xf32>, %g1: tensor<64xf32>, %g2: tensor<64xf32>, %wg: tensor<32x36xui8>, %wu: tensor<32x36xui8>, %wd: tensor<64x18xui8>, %g3: tensor<64xf32>) -> tensor<2x64xf32> {
  %n1 = mir.rms_norm %p, %g1 eps 1.0e-06 : (tensor<2x64xf32>, tensor<64xf32>) -> tensor<2x64xf32>
  %s = mir.add %h, %n1 : (tensor<2x64xf32>, tensor<2x64xf32>) -> tensor<2x64xf32>
  %n2 = mir.rms_norm %s, %g2 eps 1.0e-06 : (tensor<2x64xf32>, tensor<64xf32>) -> tensor<2x64xf32>
  %g = mir.dequant_matmul %n2, %wg scheme q4_0 activations q8 : (tensor<2x64xf32>, tensor<32x36xui8>) -> tensor<2x32xf32>
  %u = mir.dequant_matmul %n2, %wu scheme q4_0 activations q8 : (tensor<2x64xf32>, tensor<32x36xui8>) -> tensor<2x32xf32>
  %a = mir.gelu_tanh %g : tensor<2x32xf32>
  %f = mir.mul %a, %u : (tensor<2x32xf32>, tensor<2x32xf32>) -> tensor<2x32xf32>
  %d = mir.dequant_matmul %f, %wd scheme q4_0 activations q8 : (tensor<2x32xf32>, tensor<64x18xui8>) -> tensor<2x64xf32>
  %n3 = mir.rms_norm %d, %g3 eps 1.0e-06 : (tensor<2x64xf32>, tensor<64xf32>) -> tensor<2x64xf32>
  %y = mir.add %s, %n3 : (tensor<2x64xf32>, tensor<2x64xf32>) -> tensor<2x64xf32>
  func.return %y : tensor<2x64xf32>
}

// CHECK-LABEL: func.func @sandwich
// CHECK-SAME:    (%[[P:.*]]: tensor<2x64xf32>, %[[H:.*]]: tensor<2x64xf32>, %[[G1:.*]]: tensor<64xf32>, %[[G2:.*]]: tensor<64xf32>, %[[WG:.*]]: tensor<32x36xui8>, %[[WU:.*]]: tensor<32x36xui8>, %[[WD:.*]]: tensor<64x18xui8>, %[[G3:.*]]: tensor<64xf32>)
// CHECK-NEXT:    %[[F:.*]], %{{.*}}, %[[S:.*]] = mir.shared_input_matmul %[[P]], %[[WG]], %[[WU]] residual(%[[H]], %[[G1]] : tensor<2x64xf32>, tensor<64xf32>) eps 1.000000e-06 norm(%[[G2]] : tensor<64xf32>) eps 1.000000e-06 scheme q4_0 activations q8 glu gelu_tanh : (tensor<2x64xf32>, tensor<32x36xui8>, tensor<32x36xui8>) -> (tensor<2x32xf32>, tensor<2x32xf32>, tensor<2x64xf32>)
// CHECK-NEXT:    %[[D:.*]] = mir.dequant_matmul %[[F]], %[[WD]]
// CHECK-NEXT:    %[[N3:.*]] = mir.rms_norm %[[D]], %[[G3]]
// CHECK-NEXT:    %{{.*}} = mir.add %[[S]], %[[N3]]

// LIR-LABEL: func.func @sandwich
// LIR:         lir.shared_input_matmul q4_0 ins(%{{.*}}, %{{.*}}, %{{.*}} : memref<2x64xf32>, memref<32x36xui8>, memref<32x36xui8>) residual(%{{.*}}, %{{.*}} : memref<2x64xf32>, memref<64xf32>) eps 1.000000e-06 norm(%{{.*}} : memref<64xf32>) eps 1.000000e-06 outs(%{{.*}}, %{{.*}}, %[[S:.*]] : memref<2x32xf32>, memref<2x32xf32>, memref<2x64xf32>) activations q8 glu gelu_tanh
// LIR:         lir.elementwise add ins(%[[S]], %{{.*}} : memref<2x64xf32>, memref<2x64xf32>)

// What stays apart: the sum read before the product (it must exist there).
func.func @early(%p: tensor<1x64xf32>, %h: tensor<1x64xf32>, %g1: tensor<64xf32>, %g2: tensor<64xf32>, %wg: tensor<32x36xui8>, %wu: tensor<32x36xui8>) -> (tensor<1x32xf32>, tensor<1x32xf32>, tensor<1x64xf32>) {
  %n1 = mir.rms_norm %p, %g1 eps 1.0e-06 : (tensor<1x64xf32>, tensor<64xf32>) -> tensor<1x64xf32>
  %s = mir.add %h, %n1 : (tensor<1x64xf32>, tensor<1x64xf32>) -> tensor<1x64xf32>
  %e = mir.neg %s : tensor<1x64xf32>
  %n2 = mir.rms_norm %s, %g2 eps 1.0e-06 : (tensor<1x64xf32>, tensor<64xf32>) -> tensor<1x64xf32>
  %g = mir.dequant_matmul %n2, %wg scheme q4_0 activations q8 : (tensor<1x64xf32>, tensor<32x36xui8>) -> tensor<1x32xf32>
  %u = mir.dequant_matmul %n2, %wu scheme q4_0 activations q8 : (tensor<1x64xf32>, tensor<32x36xui8>) -> tensor<1x32xf32>
  func.return %g, %u, %e : tensor<1x32xf32>, tensor<1x32xf32>, tensor<1x64xf32>
}

// CHECK-LABEL: func.func @early
// CHECK:         mir.add
// CHECK:         mir.shared_input_matmul
// CHECK-NOT:     residual(
// CHECK-SAME:    norm(
