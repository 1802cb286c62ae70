// RUN: rlx-opt %s --split-input-file --verify-diagnostics | filecheck %s

// One case per rule of the mir.dequant_gather verifier.

%t = "test.op"() : () -> tensor<100x68xf32>
%ids = "test.op"() : () -> tensor<4xi32>
%z = mir.dequant_gather %t, %ids scheme q8_0 : (tensor<100x68xf32>, tensor<4xi32>) -> tensor<4x64xf32>

// CHECK: 'mir.dequant_gather': table: expected element type ui8, got f32

// -----

%t = "test.op"() : () -> tensor<100x68xui8>
%ids = "test.op"() : () -> tensor<4xf32>
%z = mir.dequant_gather %t, %ids scheme q8_0 : (tensor<100x68xui8>, tensor<4xf32>) -> tensor<4x64xf32>

// CHECK: 'mir.dequant_gather': ids: expected element type i32 or i64, got f32

// -----

%t = "test.op"() : () -> tensor<100x68xui8>
%ids = "test.op"() : () -> tensor<4xi32>
%z = mir.dequant_gather %t, %ids scheme q8_0 : (tensor<100x68xui8>, tensor<4xi32>) -> tensor<4x64xi32>

// CHECK: 'mir.dequant_gather': result: expected element type f32, got i32

// -----

%t = "test.op"() : () -> tensor<100x70xui8>
%ids = "test.op"() : () -> tensor<4xi32>
%z = mir.dequant_gather %t, %ids scheme q8_0 : (tensor<100x70xui8>, tensor<4xi32>) -> tensor<4x64xf32>

// CHECK: 'mir.dequant_gather': table: a row must be whole q8_0 blocks of 34 bytes, got 70 bytes

// -----

%t = "test.op"() : () -> tensor<6800xui8>
%ids = "test.op"() : () -> tensor<4xi32>
%z = mir.dequant_gather %t, %ids scheme q8_0 : (tensor<6800xui8>, tensor<4xi32>) -> tensor<4x64xf32>

// CHECK: 'mir.dequant_gather': table: expected rank 2

// -----

%t = "test.op"() : () -> tensor<100x68xui8>
%ids = "test.op"() : () -> tensor<4xi32>
%z = mir.dequant_gather %t, %ids scheme q8_0 : (tensor<100x68xui8>, tensor<4xi32>) -> tensor<4x32xf32>

// CHECK: 'mir.dequant_gather': {{.*}}[4, 64]{{.*}}[4, 32]
