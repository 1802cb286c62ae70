// RUN: rlx-opt %s --split-input-file | rlx-opt --split-input-file | filecheck %s
// RUN: rlx-opt %s --split-input-file --print-op-generic | rlx-opt --split-input-file | filecheck %s

// mir.dequant_gather round-trips: rows of a quantized table (raw GGUF blocks) looked up
// at i32 or i64 ids of any rank, also symbolic.

// CHECK-LABEL: func.func @embed
// CHECK:         %{{.*}} = mir.dequant_gather %{{.*}}, %{{.*}} scheme q8_0 : (tensor<100x68xui8>, tensor<2x3xi32>) -> tensor<2x3x64xf32>
// CHECK:         %{{.*}} = mir.dequant_gather %{{.*}}, %{{.*}} scheme q6_k : (tensor<10x210xui8>, tensor<?xi64>) -> tensor<?x256xf32>
// CHECK:         %{{.*}} = mir.dequant_gather %{{.*}}, %{{.*}} scheme f16 : (tensor<7x6xui8>, tensor<i32>) -> tensor<3xf32>
func.func @embed(%t: tensor<100x68xui8>, %ids: tensor<2x3xi32>, %k6: tensor<10x210xui8>,
                 %s: tensor<?xi64>, %h: tensor<7x6xui8>, %one: tensor<i32>)
    -> (tensor<2x3x64xf32>, tensor<?x256xf32>, tensor<3xf32>) {
  %a = mir.dequant_gather %t, %ids scheme q8_0 : (tensor<100x68xui8>, tensor<2x3xi32>) -> tensor<2x3x64xf32>
  %b = mir.dequant_gather %k6, %s scheme q6_k : (tensor<10x210xui8>, tensor<?xi64>) -> tensor<?x256xf32>
  %c = mir.dequant_gather %h, %one scheme f16 : (tensor<7x6xui8>, tensor<i32>) -> tensor<3xf32>
  func.return %a, %b, %c : tensor<2x3x64xf32>, tensor<?x256xf32>, tensor<3xf32>
}
