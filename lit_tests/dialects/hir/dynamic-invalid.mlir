// RUN: rlx-opt %s --split-input-file --verify-diagnostics | filecheck %s

// Verifier negatives next to symbolic (?) dims in hir (issue 9): a ? is compatible with
// any size, but what is wrong for every size (a static mismatch, a rank, an element
// type, a dim a rule needs static) is still an error.

// K of x (32) against the rows of w (16): wrong for every S
%x = "test.op"() : () -> tensor<?x32xf32>
%w = "test.op"() : () -> tensor<16x8xf32>
%y = hir.linear %x, %w : (tensor<?x32xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>

// CHECK: 'hir.linear': w: expected shape [32, N] (K = last dim of x), got [16, 8]

// -----

// the result's static column count is wrong next to the ?
%x = "test.op"() : () -> tensor<?x32xf32>
%w = "test.op"() : () -> tensor<32x8xf32>
%y = hir.linear %x, %w : (tensor<?x32xf32>, tensor<32x8xf32>) -> tensor<?x16xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.linear': result: expected shape [?, 8], got [?, 16]

// -----

// rank mismatch of the result
%x = "test.op"() : () -> tensor<?x32xf32>
%w = "test.op"() : () -> tensor<32x8xf32>
%y = hir.linear %x, %w : (tensor<?x32xf32>, tensor<32x8xf32>) -> tensor<?x8x1xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.linear': result: expected shape [?, 8], got [?, 8, 1]

// -----

%x = "test.op"() : () -> tensor<?x32xf32>
%g = "test.op"() : () -> tensor<16xf32>
%y = hir.rms_norm %x, %g : (tensor<?x32xf32>, tensor<16xf32>) -> tensor<?x32xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.rms_norm': gamma: expected shape [32] (N = last dim of x), got [16]

// -----

// k/v with T = ? rows but the wrong kv width
%q = "test.op"() : () -> tensor<?x32xf32>
%k = "test.op"() : () -> tensor<?x12xf32>
%y = hir.attention %q, %k, %k num_heads 4 num_kv_heads 2 head_dim 8 scale 0.353553385 : (tensor<?x32xf32>, tensor<?x12xf32>, tensor<?x12xf32>) -> tensor<?x32xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.attention': k: expected shape [?, 16] ([B, T, num_kv_heads*head_dim]), got [?, 12]

// -----

// causal S > T is still caught when both are static
%q = "test.op"() : () -> tensor<8x32xf32>
%k = "test.op"() : () -> tensor<4x16xf32>
%y = hir.attention %q, %k, %k mask_kind causal num_heads 4 num_kv_heads 2 head_dim 8 scale 0.353553385 : (tensor<8x32xf32>, tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<8x32xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.attention': causal attention needs S <= T, got S=8 > T=4

// -----

// cos/sin rows [S, n_rot/2]: the static half is wrong
%x = "test.op"() : () -> tensor<?x32xf32>
%c = "test.op"() : () -> tensor<?x3xf32>
%y = hir.rope %x, %c, %c head_dim 8 n_rot 8 : (tensor<?x32xf32>, tensor<?x3xf32>, tensor<?x3xf32>) -> tensor<?x32xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.rope': cos: expected shape [?, 4] ([S, n_rot/2]), got [?, 3]

// -----

// the heads axis of rope must be static
%x = "test.op"() : () -> tensor<4x?xf32>
%c = "test.op"() : () -> tensor<4x4xf32>
%y = hir.rope %x, %c, %c head_dim 8 n_rot 8 : (tensor<4x?xf32>, tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x?xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.rope': x: the last dim (heads * head_dim) must be static, got the symbolic dimension ?

// -----

%t = "test.op"() : () -> tensor<50x32xf32>
%i = "test.op"() : () -> tensor<?xf32>
%y = hir.embedding %t[%i] : (tensor<50x32xf32>, tensor<?xf32>) -> tensor<?x32xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.embedding': ids: expected element type i32 or i64, got f32

// -----

%x = "test.op"() : () -> tensor<1x?x32xf32>
%w = "test.op"() : () -> tensor<3x32xf32>
%p = "test.op"() : () -> tensor<1x3x32xf32>
%y = hir.depthwise_conv1d_causal %x, %w left_pad %p : (tensor<1x?x32xf32>, tensor<3x32xf32>, tensor<1x3x32xf32>) -> tensor<1x?x32xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.depthwise_conv1d_causal': left_pad: expected shape [1, 2, 32] ([B, K-1, C]), got [1, 3, 32]
