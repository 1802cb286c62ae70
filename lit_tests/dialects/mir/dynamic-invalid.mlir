// RUN: rlx-opt %s --split-input-file --verify-diagnostics | filecheck %s

// Verifier negatives next to symbolic (?) dims in mir (issue 9): a ? is compatible with
// any size (a declared ? where the rule infers 8 verifies, as in MLIR), but what is wrong
// for every size is still an error; a reshape keeps each ? a whole dim, narrow needs a
// static axis, broadcast_to cannot introduce a ?.

// a static mismatch next to a ?
%a = "test.op"() : () -> tensor<?x8xf32>
%b = "test.op"() : () -> tensor<?x4xf32>
%z = mir.add %a, %b : (tensor<?x8xf32>, tensor<?x4xf32>) -> tensor<?x8xf32>

// CHECK: 'mir.add': lhs [?, 8] and rhs [?, 4] are not broadcast-compatible

// -----

// the declared result contradicts the rule in its static dim
%a = "test.op"() : () -> tensor<?x8xf32>
%z = mir.add %a, %a : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x4xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.add': result: expected shape [?, 8], got [?, 4]

// -----

%a = "test.op"() : () -> tensor<?x8xf32>
%w = "test.op"() : () -> tensor<4x2xf32>
%z = mir.matmul %a, %w : (tensor<?x8xf32>, tensor<4x2xf32>) -> tensor<?x2xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.matmul': matmul inner dimensions differ: lhs [?, 8] has K=8, rhs [4, 2] has K=4

// -----

// a reshape that would merge the ? into a static dim
%a = "test.op"() : () -> tensor<?x8xf32>
%z = mir.reshape %a : tensor<?x8xf32> -> tensor<?x16xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.reshape': reshape: cannot reshape [?, 8] into [?, 16]: a symbolic dim must stay a whole dim (the same symbols in the same order, no split or merge) and the static dims must have the same product (8 vs 16)

// -----

// a reshape that drops the ?
%a = "test.op"() : () -> tensor<?x8xf32>
%z = mir.reshape %a : tensor<?x8xf32> -> tensor<64xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.reshape': reshape: cannot reshape [?, 8] into [64]: a symbolic dim must stay a whole dim (the same symbols in the same order, no split or merge) and the static dims must have the same product (8 vs 64)

// -----

%a = "test.op"() : () -> tensor<?x8xf32>
%z = mir.narrow %a axis 0 start 0 length 2 : tensor<?x8xf32> -> tensor<2x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.narrow': narrow: axis 0 of [?, 8] is symbolic (?); narrow needs a static axis

// -----

%a = "test.op"() : () -> tensor<?x8xf32>
%b = "test.op"() : () -> tensor<?x4xf32>
%z = mir.concat %a, %b axis 0 : (tensor<?x8xf32>, tensor<?x4xf32>) -> tensor<?x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.concat': concat: input 1 has shape [?, 4], expected [?, 8] except along axis 0

// -----

%a = "test.op"() : () -> tensor<?x8xf32>
%z = mir.broadcast_to %a : tensor<?x8xf32> -> tensor<?x4xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.broadcast_to': input of shape [?, 8] cannot be broadcast to [?, 4]

// -----

%a = "test.op"() : () -> tensor<?x8xi32>
%z = mir.softmax %a axis 1 : tensor<?x8xi32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.softmax': input: expected element type f32, got i32

// -----

// broadcast_to cannot introduce a ? (its size would be unknown)
%a = "test.op"() : () -> tensor<1x8xf32>
%z = mir.broadcast_to %a : tensor<1x8xf32> -> tensor<?x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.broadcast_to': input of shape [1, 8] cannot be broadcast to [?, 8]: dim 0 of the target is symbolic (?) where the input has size 1; broadcast_to cannot introduce a symbolic dim (broadcast against a value that has it instead: x + y)
