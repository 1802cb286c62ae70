// RUN: rlx-opt %s --split-input-file --verify-diagnostics | filecheck %s

// One case per rule of the shared-input matmul's verifier.

%x = "test.op"() : () -> tensor<3x8xf32>
%a = "test.op"() : () -> tensor<8x5xf32>
%p = mir.shared_input_matmul %x, %a : (tensor<3x8xf32>, tensor<8x5xf32>) -> (tensor<3x5xf32>)

// CHECK: 'mir.shared_input_matmul': weights: expected at least 2 (one input shared by several products), or 1 with a norm_weight, got 1

// -----

%x = "test.op"() : () -> tensor<3x8xf32>
%a = "test.op"() : () -> tensor<8x5xf32>
%b = "test.op"() : () -> tensor<7x2xf32>
%p, %q = mir.shared_input_matmul %x, %a, %b : (tensor<3x8xf32>, tensor<8x5xf32>, tensor<7x2xf32>) -> (tensor<3x5xf32>, tensor<3x2xf32>)

// CHECK: 'mir.shared_input_matmul': weights[1]: w: expected shape [8, N] (K = last dim of x), got [7, 2]

// -----

%x = "test.op"() : () -> tensor<3x8xf32>
%a = "test.op"() : () -> tensor<8x5xf32>
%b = "test.op"() : () -> tensor<8x2xf32>
%p, %q = mir.shared_input_matmul %x, %a, %b : (tensor<3x8xf32>, tensor<8x5xf32>, tensor<8x2xf32>) -> (tensor<3x5xf32>, tensor<3x3xf32>)

// CHECK: 'mir.shared_input_matmul': products[1]: expected shape [3, 2], got [3, 3]

// -----

%x = "test.op"() : () -> tensor<2x64xf32>
%g = "test.op"() : () -> tensor<6x36xui8>
%u = "test.op"() : () -> tensor<4x36xf32>
%p, %q = mir.shared_input_matmul %x, %g, %u scheme q4_0 : (tensor<2x64xf32>, tensor<6x36xui8>, tensor<4x36xf32>) -> (tensor<2x6xf32>, tensor<2x4xf32>)

// CHECK: 'mir.shared_input_matmul': weights[1]: expected element type ui8, got f32

// -----

%x = "test.op"() : () -> tensor<3x8xf32>
%a = "test.op"() : () -> tensor<8x5xf32>
%b = "test.op"() : () -> tensor<8x2xf32>
%p, %q = mir.shared_input_matmul %x, %a, %b activations q8 : (tensor<3x8xf32>, tensor<8x5xf32>, tensor<8x2xf32>) -> (tensor<3x5xf32>, tensor<3x2xf32>)

// CHECK: 'mir.shared_input_matmul': activations needs a scheme (f32 weights take x as given), got activations q8

// -----

%x = "test.op"() : () -> tensor<3x64xf32>
%a = "test.op"() : () -> tensor<8x36xui8>
%g = "test.op"() : () -> tensor<64xf32>
%p, %q = mir.shared_input_matmul %x, %a, %a norm(%g : tensor<64xf32>) eps 1.0e-05 scheme q4_0 : (tensor<3x64xf32>, tensor<8x36xui8>, tensor<8x36xui8>) -> (tensor<3x8xf32>, tensor<3x8xf32>)

// CHECK: 'mir.shared_input_matmul': a norm_weight needs activations q8 (its prologue is the q8 kernels'), got activations f32
