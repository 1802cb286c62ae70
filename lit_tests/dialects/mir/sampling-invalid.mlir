// RUN: rlx-opt %s --split-input-file --verify-diagnostics | filecheck %s

// One case per rule of the sampling ops' verifiers.

%x = "test.op"() : () -> tensor<2x10xf32>
%v, %i = mir.top_k %x k 11 : (tensor<2x10xf32>) -> (tensor<2x11xf32>, tensor<2x11xi32>)

// CHECK: 'mir.top_k': k: expected an int in [1, 10] (the last axis of input [2, 10]), got 11

// -----

%x = "test.op"() : () -> tensor<2x10xf32>
%a = mir.argmax %x : tensor<2x10xf32> -> tensor<2xf32>

// CHECK: 'mir.argmax': result: expected

// -----

%x = "test.op"() : () -> tensor<2x10xf32>
%t = "test.op"() : () -> tensor<2xf32>
%k = "test.op"() : () -> tensor<i32>
%p = "test.op"() : () -> tensor<f32>
%s = "test.op"() : () -> tensor<i64>
%d = mir.sample %x, %t, %k, %p, %s : (tensor<2x10xf32>, tensor<2xf32>, tensor<i32>, tensor<f32>, tensor<i64>) -> tensor<2xi32>

// CHECK: 'mir.sample': temperature: expected a rank-0 tensor, got [2]
