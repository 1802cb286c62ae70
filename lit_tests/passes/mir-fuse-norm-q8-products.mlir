// RUN: rlx-opt %s -p mir-fuse | filecheck %s
// The barriers of the mixed layer at two threads' split, fused and apart:
// RUN: rlx-opt %s -p 'mir-fuse,convert-mir-to-lir,lir-plan-arena,lir-parallelize{min-work=1}' | sed -n '/func.func @mixed(/,/func.return/p' | grep -c lir.barrier | filecheck %s --check-prefix=BARRIERS --match-full-lines
// RUN: rlx-opt %s -p 'mir-fuse{q8-edges=false},convert-mir-to-lir,lir-plan-arena,lir-parallelize{min-work=1}' | sed -n '/func.func @mixed(/,/func.return/p' | grep -c lir.barrier | filecheck %s --check-prefix=BARRIERS-APART --match-full-lines
// BARRIERS: 2
// BARRIERS-APART: 3

// A Q4_K_M layer: q/k in q5_0 (one shared product), v in q8_0, all of rms_norm(h). Each
// product normalizes h itself (v as a one-weight shared_input_matmul), and v's product
// moves next to q/k's, before the op on q.
func.func @mixed(%h: tensor<1x64xf32>, %gamma: tensor<64xf32>, %wq: tensor<32x44xui8>, %wk: tensor<16x44xui8>, %wv: tensor<16x68xui8>) -> (tensor<1x32xf32>, tensor<1x16xf32>, tensor<1x16xf32>) {
  %n = mir.rms_norm %h, %gamma eps 1.0e-06 : (tensor<1x64xf32>, tensor<64xf32>) -> tensor<1x64xf32>
  %q = mir.dequant_matmul %n, %wq scheme q5_0 activations q8 : (tensor<1x64xf32>, tensor<32x44xui8>) -> tensor<1x32xf32>
  %k = mir.dequant_matmul %n, %wk scheme q5_0 activations q8 : (tensor<1x64xf32>, tensor<16x44xui8>) -> tensor<1x16xf32>
  %qn = mir.neg %q : tensor<1x32xf32>
  %v = mir.dequant_matmul %n, %wv scheme q8_0 activations q8 : (tensor<1x64xf32>, tensor<16x68xui8>) -> tensor<1x16xf32>
  func.return %qn, %k, %v : tensor<1x32xf32>, tensor<1x16xf32>, tensor<1x16xf32>
}

// CHECK-LABEL: func.func @mixed
// CHECK-SAME:    (%[[H:.*]]: tensor<1x64xf32>, %[[G:.*]]: tensor<64xf32>, %[[WQ:.*]]: tensor<32x44xui8>, %[[WK:.*]]: tensor<16x44xui8>, %[[WV:.*]]: tensor<16x68xui8>)
// CHECK-NEXT:    %[[Q:.*]], %{{.*}} = mir.shared_input_matmul %[[H]], %[[WQ]], %[[WK]] norm(%[[G]] : tensor<64xf32>) eps 1.000000e-06 scheme q5_0 activations q8
// CHECK-NEXT:    %{{.*}} = mir.shared_input_matmul %[[H]], %[[WV]] norm(%[[G]] : tensor<64xf32>) eps 1.000000e-06 scheme q8_0 activations q8 : (tensor<1x64xf32>, tensor<16x68xui8>) -> (tensor<1x16xf32>)
// CHECK-NEXT:    %{{.*}} = mir.neg %[[Q]]
// CHECK-NOT:     mir.rms_norm

// With Gemma 3's sandwich in front (s = h + rms_norm(p, g1), read again after), both
// products form s; the first one's s replaces the add, the second's is unused.
func.func @mixed_sandwich(%p: tensor<1x64xf32>, %h: tensor<1x64xf32>, %g1: tensor<64xf32>, %gamma: tensor<64xf32>, %wq: tensor<32x44xui8>, %wv: tensor<16x68xui8>) -> (tensor<1x32xf32>, tensor<1x16xf32>, tensor<1x64xf32>) {
  %n1 = mir.rms_norm %p, %g1 eps 1.0e-06 : (tensor<1x64xf32>, tensor<64xf32>) -> tensor<1x64xf32>
  %s = mir.add %h, %n1 : (tensor<1x64xf32>, tensor<1x64xf32>) -> tensor<1x64xf32>
  %n = mir.rms_norm %s, %gamma eps 1.0e-06 : (tensor<1x64xf32>, tensor<64xf32>) -> tensor<1x64xf32>
  %q = mir.dequant_matmul %n, %wq scheme q5_0 activations q8 : (tensor<1x64xf32>, tensor<32x44xui8>) -> tensor<1x32xf32>
  %v = mir.dequant_matmul %n, %wv scheme q8_0 activations q8 : (tensor<1x64xf32>, tensor<16x68xui8>) -> tensor<1x16xf32>
  func.return %q, %v, %s : tensor<1x32xf32>, tensor<1x16xf32>, tensor<1x64xf32>
}

// CHECK-LABEL: func.func @mixed_sandwich
// CHECK-SAME:    (%[[P:.*]]: tensor<1x64xf32>, %[[H:.*]]: tensor<1x64xf32>, %[[G1:.*]]: tensor<64xf32>, %[[G:.*]]: tensor<64xf32>, %[[WQ:.*]]: tensor<32x44xui8>, %[[WV:.*]]: tensor<16x68xui8>)
// CHECK-NEXT:    %[[Q:.*]], %[[S:.*]] = mir.shared_input_matmul %[[P]], %[[WQ]] residual(%[[H]], %[[G1]] : tensor<1x64xf32>, tensor<64xf32>) eps 1.000000e-06 norm(%[[G]] : tensor<64xf32>) eps 1.000000e-06 scheme q5_0
// CHECK-NEXT:    %[[V:.*]], %{{.*}} = mir.shared_input_matmul %[[P]], %[[WV]] residual(%[[H]], %[[G1]] : tensor<1x64xf32>, tensor<64xf32>) eps 1.000000e-06 norm(%[[G]] : tensor<64xf32>) eps 1.000000e-06 scheme q8_0
// CHECK-NEXT:    func.return %[[Q]], %[[V]], %[[S]]

// A lone product takes its norm too (an output projection); one that a residual add
// follows keeps its add epilogue, and the norm stays.
func.func @lone(%h: tensor<1x64xf32>, %gamma: tensor<64xf32>, %w: tensor<16x68xui8>, %wo: tensor<64x68xui8>) -> (tensor<1x16xf32>, tensor<1x64xf32>) {
  %n = mir.rms_norm %h, %gamma eps 1.0e-06 : (tensor<1x64xf32>, tensor<64xf32>) -> tensor<1x64xf32>
  %y = mir.dequant_matmul %n, %w scheme q8_0 activations q8 : (tensor<1x64xf32>, tensor<16x68xui8>) -> tensor<1x16xf32>
  %m = mir.rms_norm %h, %gamma eps 1.0e-05 : (tensor<1x64xf32>, tensor<64xf32>) -> tensor<1x64xf32>
  %o = mir.dequant_matmul %m, %wo scheme q8_0 activations q8 : (tensor<1x64xf32>, tensor<64x68xui8>) -> tensor<1x64xf32>
  %r = mir.add %h, %o : (tensor<1x64xf32>, tensor<1x64xf32>) -> tensor<1x64xf32>
  func.return %y, %r : tensor<1x16xf32>, tensor<1x64xf32>
}

// CHECK-LABEL: func.func @lone
// CHECK-NEXT:    mir.shared_input_matmul %{{.*}}, %{{.*}} norm(%{{.*}} : tensor<64xf32>) eps 1.000000e-06 scheme q8_0
// CHECK-NEXT:    %[[M:.*]] = mir.rms_norm
// CHECK-NEXT:    mir.dequant_matmul %[[M]], %{{.*}} residual
