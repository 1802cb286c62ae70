// RUN: rlx-opt %s -p mir-fuse | filecheck %s
// RUN: rlx-opt %s -p 'mir-fuse{q8-edges=false}' | filecheck %s --check-prefix=APART
// The fused forms as lir kernels, and the barriers of the layer at two threads' split:
// RUN: rlx-opt %s -p mir-fuse,convert-mir-to-lir | filecheck %s --check-prefix=LIR
// RUN: rlx-opt %s -p 'mir-fuse,convert-mir-to-lir,lir-plan-arena,lir-parallelize{min-work=1}' | sed -n '/func.func @layer/,/func.return/p' | grep -c lir.barrier | filecheck %s --check-prefix=BARRIERS --match-full-lines
// RUN: rlx-opt %s -p 'mir-fuse{q8-edges=false},convert-mir-to-lir,lir-plan-arena,lir-parallelize{min-work=1}' | sed -n '/func.func @layer/,/func.return/p' | grep -c lir.barrier | filecheck %s --check-prefix=BARRIERS-APART --match-full-lines
// BARRIERS: 5
// BARRIERS-APART: 10

// The q8 edges of a transformer layer: each rms_norm goes into the prologue of the
// shared product after it, the gated linear unit silu(g) * u into the gate/up product's
// epilogue, each residual add into the epilogue of the product before it.
func.func @layer(%h: tensor<1x64xf32>, %gamma: tensor<64xf32>, %wq: tensor<64x36xui8>, %wk: tensor<64x36xui8>, %wo: tensor<64x36xui8>, %wg: tensor<32x36xui8>, %wu: tensor<32x36xui8>, %wd: tensor<64x18xui8>) -> tensor<1x64xf32> {
  %n = mir.rms_norm %h, %gamma eps 1.0e-06 : (tensor<1x64xf32>, tensor<64xf32>) -> tensor<1x64xf32>
  %q = mir.dequant_matmul %n, %wq scheme q4_0 activations q8 : (tensor<1x64xf32>, tensor<64x36xui8>) -> tensor<1x64xf32>
  %k = mir.dequant_matmul %n, %wk scheme q4_0 activations q8 : (tensor<1x64xf32>, tensor<64x36xui8>) -> tensor<1x64xf32>
  %a = mir.mul %q, %k : (tensor<1x64xf32>, tensor<1x64xf32>) -> tensor<1x64xf32>
  %o = mir.dequant_matmul %a, %wo scheme q4_0 activations q8 : (tensor<1x64xf32>, tensor<64x36xui8>) -> tensor<1x64xf32>
  %h2 = mir.add %h, %o : (tensor<1x64xf32>, tensor<1x64xf32>) -> tensor<1x64xf32>
  %n2 = mir.rms_norm %h2, %gamma eps 1.0e-06 : (tensor<1x64xf32>, tensor<64xf32>) -> tensor<1x64xf32>
  %g = mir.dequant_matmul %n2, %wg scheme q4_0 activations q8 : (tensor<1x64xf32>, tensor<32x36xui8>) -> tensor<1x32xf32>
  %u = mir.dequant_matmul %n2, %wu scheme q4_0 activations q8 : (tensor<1x64xf32>, tensor<32x36xui8>) -> tensor<1x32xf32>
  %s = mir.silu %g : tensor<1x32xf32>
  %f = mir.mul %s, %u : (tensor<1x32xf32>, tensor<1x32xf32>) -> tensor<1x32xf32>
  %d = mir.dequant_matmul %f, %wd scheme q4_0 activations q8 : (tensor<1x32xf32>, tensor<64x18xui8>) -> tensor<1x64xf32>
  %y = mir.add %h2, %d : (tensor<1x64xf32>, tensor<1x64xf32>) -> tensor<1x64xf32>
  func.return %y : tensor<1x64xf32>
}

// CHECK-LABEL: func.func @layer
// CHECK-SAME:    (%[[H:.*]]: tensor<1x64xf32>, %[[G:.*]]: tensor<64xf32>, %[[WQ:.*]]: tensor<64x36xui8>, %[[WK:.*]]: tensor<64x36xui8>, %[[WO:.*]]: tensor<64x36xui8>, %[[WG:.*]]: tensor<32x36xui8>, %[[WU:.*]]: tensor<32x36xui8>, %[[WD:.*]]: tensor<64x18xui8>)
// CHECK-NOT:     mir.rms_norm
// CHECK:         %[[Q:.*]], %[[K:.*]] = mir.shared_input_matmul %[[H]], %[[WQ]], %[[WK]] norm(%[[G]] : tensor<64xf32>) eps 1.000000e-06 scheme q4_0 activations q8
// CHECK:         %[[A:.*]] = mir.mul %[[Q]], %[[K]]
// CHECK-NEXT:    %[[H2:.*]] = mir.dequant_matmul %[[A]], %[[WO]] residual %[[H]] scheme q4_0 activations q8
// CHECK-NEXT:    %[[F:.*]], %{{.*}} = mir.shared_input_matmul %[[H2]], %[[WG]], %[[WU]] norm(%[[G]] : tensor<64xf32>) eps 1.000000e-06 scheme q4_0 activations q8 glu silu
// CHECK-NEXT:    %[[Y:.*]] = mir.dequant_matmul %[[F]], %[[WD]] residual %[[H2]] scheme q4_0 activations q8
// CHECK-NEXT:    func.return %[[Y]]

// APART-LABEL: func.func @layer
// APART:         mir.rms_norm
// APART:         mir.shared_input_matmul
// APART-NOT:     norm(
// APART:         mir.dequant_matmul
// APART-NEXT:    mir.add
// APART:         mir.fused_elementwise
// APART-NOT:     glu

// LIR-LABEL: func.func @layer
// LIR:         lir.shared_input_matmul q4_0 ins(%{{.*}}, %{{.*}}, %{{.*}} : memref<1x64xf32>, memref<64x36xui8>, memref<64x36xui8>) norm(%{{.*}} : memref<64xf32>) eps 1.000000e-06 outs(
// LIR:         lir.dequant_matmul q4_0 ins(%{{.*}}, %{{.*}}, %{{.*}} : memref<1x64xf32>, memref<64x36xui8>, memref<1x64xf32>) outs(%{{.*}} : memref<1x64xf32>) activations q8
// LIR-NOT:     lir.elementwise add
// LIR:         lir.shared_input_matmul q4_0 {{.*}} outs(%{{.*}}, %{{.*}} : memref<1x32xf32>, memref<1x32xf32>) activations q8 glu silu
// LIR-NOT:     lir.fused_elementwise
// LIR:         func.return

// What stays apart: a norm with another use, a norm with a beta, f32 activations, and an
// add that broadcasts the residual.
func.func @apart(%h: tensor<2x64xf32>, %gamma: tensor<64xf32>, %w1: tensor<64x36xui8>, %w2: tensor<64x36xui8>, %r: tensor<64xf32>) -> (tensor<2x64xf32>, tensor<2x64xf32>, tensor<2x64xf32>, tensor<2x64xf32>, tensor<2x64xf32>, tensor<2x64xf32>) {
  %n = mir.rms_norm %h, %gamma : (tensor<2x64xf32>, tensor<64xf32>) -> tensor<2x64xf32>
  %a = mir.dequant_matmul %n, %w1 scheme q4_0 activations q8 : (tensor<2x64xf32>, tensor<64x36xui8>) -> tensor<2x64xf32>
  %b = mir.dequant_matmul %n, %w2 scheme q4_0 activations q8 : (tensor<2x64xf32>, tensor<64x36xui8>) -> tensor<2x64xf32>
  %m = mir.mul %a, %n : (tensor<2x64xf32>, tensor<2x64xf32>) -> tensor<2x64xf32>
  %nb = mir.rms_norm %h, %gamma, %r : (tensor<2x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x64xf32>
  %c = mir.dequant_matmul %nb, %w1 scheme q4_0 activations q8 : (tensor<2x64xf32>, tensor<64x36xui8>) -> tensor<2x64xf32>
  %d = mir.dequant_matmul %nb, %w2 scheme q4_0 activations q8 : (tensor<2x64xf32>, tensor<64x36xui8>) -> tensor<2x64xf32>
  %e = mir.dequant_matmul %h, %w1 scheme q4_0 : (tensor<2x64xf32>, tensor<64x36xui8>) -> tensor<2x64xf32>
  %f = mir.add %h, %e : (tensor<2x64xf32>, tensor<2x64xf32>) -> tensor<2x64xf32>
  %g = mir.dequant_matmul %h, %w2 scheme q4_0 activations q8 : (tensor<2x64xf32>, tensor<64x36xui8>) -> tensor<2x64xf32>
  %s = mir.add %r, %g : (tensor<64xf32>, tensor<2x64xf32>) -> tensor<2x64xf32>
  func.return %m, %b, %c, %d, %f, %s : tensor<2x64xf32>, tensor<2x64xf32>, tensor<2x64xf32>, tensor<2x64xf32>, tensor<2x64xf32>, tensor<2x64xf32>
}

// CHECK-LABEL: func.func @apart
// CHECK:         mir.rms_norm
// CHECK:         mir.shared_input_matmul
// CHECK-NOT:     norm(
// CHECK:         mir.rms_norm
// CHECK-NOT:     norm(
// CHECK-NOT:     residual
// CHECK:         func.return
