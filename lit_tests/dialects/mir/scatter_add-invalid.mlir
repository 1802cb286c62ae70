// RUN: rlx-opt %s --split-input-file --verify-diagnostics | filecheck %s

// One case per rule of the mir.scatter_add verifier.

%u = "test.op"() : () -> tensor<4x8xf32>
%ids = "test.op"() : () -> tensor<4xf32>
%z = mir.scatter_add %u, %ids axis 0 dim_size 10 : (tensor<4x8xf32>, tensor<4xf32>) -> tensor<10x8xf32>

// CHECK: 'mir.scatter_add': indices: expected element type i32 or i64, got f32

// -----

%u = "test.op"() : () -> tensor<4x8xi32>
%ids = "test.op"() : () -> tensor<4xi32>
%z = mir.scatter_add %u, %ids axis 0 dim_size 10 : (tensor<4x8xi32>, tensor<4xi32>) -> tensor<10x8xi32>

// CHECK: 'mir.scatter_add': updates: expected element type f32, got i32

// -----

%u = "test.op"() : () -> tensor<4x8xf32>
%ids = "test.op"() : () -> tensor<5xi32>
%z = mir.scatter_add %u, %ids axis 0 dim_size 10 : (tensor<4x8xf32>, tensor<5xi32>) -> tensor<10x8xf32>

// CHECK: 'mir.scatter_add': updates: expected shape [5]

// -----

%u = "test.op"() : () -> tensor<4x8xf32>
%ids = "test.op"() : () -> tensor<4xi32>
%z = mir.scatter_add %u, %ids axis 2 dim_size 10 : (tensor<4x8xf32>, tensor<4xi32>) -> tensor<10x8xf32>

// CHECK: 'mir.scatter_add': axis: axis 2 is out of range for rank 2

// -----

%u = "test.op"() : () -> tensor<4x8xf32>
%ids = "test.op"() : () -> tensor<4xi32>
%z = mir.scatter_add %u, %ids axis 0 dim_size 0 : (tensor<4x8xf32>, tensor<4xi32>) -> tensor<10x8xf32>

// CHECK: 'mir.scatter_add': dim_size: expected an integer >= 1, got 0

// -----

%u = "test.op"() : () -> tensor<4x8xf32>
%ids = "test.op"() : () -> tensor<4xi32>
%z = mir.scatter_add %u, %ids axis 0 dim_size 10 : (tensor<4x8xf32>, tensor<4xi32>) -> tensor<9x8xf32>

// CHECK: 'mir.scatter_add': {{.*}}[10, 8]{{.*}}[9, 8]
