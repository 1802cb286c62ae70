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
%t = "test.op"() : () -> tensor<3xf32>
%k = "test.op"() : () -> tensor<i32>
%p = "test.op"() : () -> tensor<f32>
%s = "test.op"() : () -> tensor<i64>
%d = mir.sample %x, %t, %k, %p, %s : (tensor<2x10xf32>, tensor<3xf32>, tensor<i32>, tensor<f32>, tensor<i64>) -> tensor<2xi32>

// CHECK: 'mir.sample': temperature: expected a rank-0 tensor or [2] (one per row of logits [2, 10]), got [3]

// -----

%x = "test.op"() : () -> tensor<2x3x10xf32>
%t = "test.op"() : () -> tensor<f32>
%k = "test.op"() : () -> tensor<2xi32>
%p = "test.op"() : () -> tensor<f32>
%s = "test.op"() : () -> tensor<i64>
%d = mir.sample %x, %t, %k, %p, %s : (tensor<2x3x10xf32>, tensor<f32>, tensor<2xi32>, tensor<f32>, tensor<i64>) -> tensor<2x3xi32>

// CHECK: 'mir.sample': top_k: expected a rank-0 tensor or one value per row, which needs 2-D logits [R, V] (got logits [2, 3, 10]), got [2]

// -----

%x = "test.op"() : () -> tensor<2x10xf32>
%t = "test.op"() : () -> tensor<f32>
%k = "test.op"() : () -> tensor<i32>
%p = "test.op"() : () -> tensor<f32>
%s = "test.op"() : () -> tensor<i64>
%rp = "test.op"() : () -> tensor<2xi32>
%d = mir.sample %x, %t, %k, %p, %s row_positions(%rp : tensor<2xi32>) : (tensor<2x10xf32>, tensor<f32>, tensor<i32>, tensor<f32>, tensor<i64>) -> tensor<2xi32>

// CHECK: 'mir.sample': row_positions: expected

// -----

%x = "test.op"() : () -> tensor<2x10xf32>
%t = "test.op"() : () -> tensor<f32>
%k = "test.op"() : () -> tensor<i32>
%p = "test.op"() : () -> tensor<f32>
%s = "test.op"() : () -> tensor<i64>
%rp = "test.op"() : () -> tensor<2xi64>
%pos = "test.op"() : () -> index
%d = mir.sample %x, %t, %k, %p, %s position %pos row_positions(%rp : tensor<2xi64>) : (tensor<2x10xf32>, tensor<f32>, tensor<i32>, tensor<f32>, tensor<i64>, index) -> tensor<2xi32>

// CHECK: 'mir.sample': position and row_positions: expected at most one (row_positions gives every row its own position), got both
