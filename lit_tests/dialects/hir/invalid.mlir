// RUN: rlx-opt %s --split-input-file --verify-diagnostics | filecheck %s

// One case per verifier rule of the hir ops: operand and result element types,
// dimensions, the shape rules of rlx_mlir/shape_inference.py, and property ranges.
// Cases the custom parser would reject before verification use the generic form.

// all ops (shown on hir.linear): an operand of the wrong element type
%x, %w = "test.op"() : () -> (tensor<4x64xi32>, tensor<64x128xf32>)
%y = hir.linear %x, %w : (tensor<4x64xi32>, tensor<64x128xf32>) -> tensor<4x128xf32>
// CHECK: 'hir.linear': x: expected element type f32, got i32

// -----

// all ops: a zero-size dimension
%x, %w = "test.op"() : () -> (tensor<0x64xf32>, tensor<64x128xf32>)
%y = hir.linear %x, %w : (tensor<0x64xf32>, tensor<64x128xf32>) -> tensor<0x128xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.linear': x: every dimension must be >= 1, got shape [0, 64]

// -----

// all ops: a result of the wrong element type
%x, %w = "test.op"() : () -> (tensor<4x64xf32>, tensor<64x128xf32>)
%y = hir.linear %x, %w : (tensor<4x64xf32>, tensor<64x128xf32>) -> tensor<4x128xi32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.linear': result: expected element type f32, got i32

// -----

// all ops: a result of the wrong shape
%x, %w = "test.op"() : () -> (tensor<4x64xf32>, tensor<64x128xf32>)
%y = hir.linear %x, %w : (tensor<4x64xf32>, tensor<64x128xf32>) -> tensor<4x64xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.linear': result: expected shape [4, 128], got [4, 64]

// -----

// all ops: an operand that is not a tensor (generic form)
%x, %w = "test.op"() : () -> (memref<4x64xf32>, tensor<64x128xf32>)
%y = "hir.linear"(%x, %w) : (memref<4x64xf32>, tensor<64x128xf32>) -> tensor<4x128xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: operand 'x' at position 0 does not verify:
// CHECK-NEXT: memref<4x64xf32> should be of base attribute tensor

// -----

// hir.linear: x of rank 0
%x, %w = "test.op"() : () -> (tensor<f32>, tensor<64x128xf32>)
%y = hir.linear %x, %w : (tensor<f32>, tensor<64x128xf32>) -> tensor<128xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.linear': x: expected rank 1 to 8, got rank 0 (shape [])

// -----

// hir.linear: w not 2-D
%x, %w = "test.op"() : () -> (tensor<4x64xf32>, tensor<64xf32>)
%y = hir.linear %x, %w : (tensor<4x64xf32>, tensor<64xf32>) -> tensor<4xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.linear': w: expected rank 2, got rank 1 (shape [64])

// -----

// hir.linear: K of w differs from x
%x, %w = "test.op"() : () -> (tensor<4x64xf32>, tensor<32x128xf32>)
%y = hir.linear %x, %w : (tensor<4x64xf32>, tensor<32x128xf32>) -> tensor<4x128xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.linear': w: expected shape [64, N] (K = last dim of x), got [32, 128]

// -----

// hir.linear: bias not [N]
%x, %w, %b = "test.op"() : () -> (tensor<4x64xf32>, tensor<64x128xf32>, tensor<64xf32>)
%y = hir.linear %x, %w bias %b : (tensor<4x64xf32>, tensor<64x128xf32>, tensor<64xf32>) -> tensor<4x128xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.linear': bias: expected shape [128] (N = columns of w), got [64]

// -----

// hir.linear: bias of the wrong element type
%x, %w, %b = "test.op"() : () -> (tensor<4x64xf32>, tensor<64x128xf32>, tensor<128xi64>)
%y = hir.linear %x, %w bias %b activation relu : (tensor<4x64xf32>, tensor<64x128xf32>, tensor<128xi64>) -> tensor<4x128xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.linear': bias: expected element type f32, got i64

// -----

// hir.swiglu_ffn: up rows differ from D
%x, %up, %gate, %down = "test.op"() : () -> (tensor<6x32xf32>, tensor<16x64xf32>, tensor<16x64xf32>, tensor<64x32xf32>)
%y = hir.swiglu_ffn %x, up %up, gate %gate, down %down : (tensor<6x32xf32>, tensor<16x64xf32>, tensor<16x64xf32>, tensor<64x32xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.swiglu_ffn': up: expected shape [32, 64] (D = last dim of x), got [16, 64]

// -----

// hir.swiglu_ffn: gate differs from up
%x, %up, %gate, %down = "test.op"() : () -> (tensor<6x32xf32>, tensor<32x64xf32>, tensor<32x48xf32>, tensor<64x32xf32>)
%y = hir.swiglu_ffn %x, up %up, gate %gate, down %down : (tensor<6x32xf32>, tensor<32x64xf32>, tensor<32x48xf32>, tensor<64x32xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.swiglu_ffn': gate: expected shape [32, 64] (same as up), got [32, 48]

// -----

// hir.swiglu_ffn: down not 2-D
%x, %up, %gate, %down = "test.op"() : () -> (tensor<6x32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64xf32>)
%y = hir.swiglu_ffn %x, up %up, gate %gate, down %down : (tensor<6x32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.swiglu_ffn': down: expected rank 2, got rank 1 (shape [64])

// -----

// hir.swiglu_ffn: down rows differ from F
%x, %up, %gate, %down = "test.op"() : () -> (tensor<6x32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<48x32xf32>)
%y = hir.swiglu_ffn %x, up %up, gate %gate, down %down : (tensor<6x32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<48x32xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.swiglu_ffn': down: expected shape [64, 32] (F = columns of up), got [48, 32]

// -----

// hir.swiglu_ffn: x of rank 0
%x, %up, %gate, %down = "test.op"() : () -> (tensor<f32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>)
%y = hir.swiglu_ffn %x, up %up, gate %gate, down %down : (tensor<f32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>) -> tensor<32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.swiglu_ffn': x: expected rank 1 to 8, got rank 0 (shape [])

// -----

// hir.swiglu_ffn: gate of the wrong element type
%x, %up, %gate, %down = "test.op"() : () -> (tensor<6x32xf32>, tensor<32x64xf32>, tensor<32x64xi32>, tensor<64x32xf32>)
%y = hir.swiglu_ffn %x, up %up, gate %gate, down %down : (tensor<6x32xf32>, tensor<32x64xf32>, tensor<32x64xi32>, tensor<64x32xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.swiglu_ffn': gate: expected element type f32, got i32

// -----

// hir.rms_norm: gamma not [N]
%x, %g = "test.op"() : () -> (tensor<6x32xf32>, tensor<16xf32>)
%y = hir.rms_norm %x, %g : (tensor<6x32xf32>, tensor<16xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.rms_norm': gamma: expected shape [32] (N = last dim of x), got [16]

// -----

// hir.rms_norm: beta not [N]
%x, %g, %b = "test.op"() : () -> (tensor<6x32xf32>, tensor<32xf32>, tensor<1x32xf32>)
%y = hir.rms_norm %x, %g beta %b : (tensor<6x32xf32>, tensor<32xf32>, tensor<1x32xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.rms_norm': beta: expected shape [32] (N = last dim of x), got [1, 32]

// -----

// hir.rms_norm: x of rank 0
%x, %g = "test.op"() : () -> (tensor<f32>, tensor<1xf32>)
%y = hir.rms_norm %x, %g : (tensor<f32>, tensor<1xf32>) -> tensor<f32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.rms_norm': x: expected rank 1 to 8, got rank 0 (shape [])

// -----

// hir.rms_norm: eps = 0
%x, %g = "test.op"() : () -> (tensor<6x32xf32>, tensor<32xf32>)
%y = hir.rms_norm %x, %g eps 0.0 : (tensor<6x32xf32>, tensor<32xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.rms_norm': eps: expected a finite value > 0, got 0

// -----

// hir.rms_norm: eps < 0
%x, %g = "test.op"() : () -> (tensor<6x32xf32>, tensor<32xf32>)
%y = hir.rms_norm %x, %g eps -1.0e-05 : (tensor<6x32xf32>, tensor<32xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.rms_norm': eps: expected a finite value > 0, got -1e-05

// -----

// hir.rms_norm: eps = inf (generic form)
%x, %g = "test.op"() : () -> (tensor<6x32xf32>, tensor<32xf32>)
%y = "hir.rms_norm"(%x, %g) <{eps = 0x7F800000 : f32}> : (tensor<6x32xf32>, tensor<32xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.rms_norm': eps: expected a finite value > 0, got inf

// -----

// hir.rms_norm: eps not f32 (generic form)
%x, %g = "test.op"() : () -> (tensor<6x32xf32>, tensor<32xf32>)
%y = "hir.rms_norm"(%x, %g) <{eps = 1.0e-05 : f64}> : (tensor<6x32xf32>, tensor<32xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: f64 should be of base attribute f32

// -----

// hir.residual_rms_norm: residual differs from x
%x, %r, %g = "test.op"() : () -> (tensor<6x32xf32>, tensor<1x32xf32>, tensor<32xf32>)
%y = hir.residual_rms_norm %x, %r, %g : (tensor<6x32xf32>, tensor<1x32xf32>, tensor<32xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.residual_rms_norm': residual: expected shape [6, 32] (same as x), got [1, 32]

// -----

// hir.residual_rms_norm: gamma not [N]
%x, %r, %g = "test.op"() : () -> (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6xf32>)
%y = hir.residual_rms_norm %x, %r, %g : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.residual_rms_norm': gamma: expected shape [32] (N = last dim of x), got [6]

// -----

// hir.residual_rms_norm: beta not [N]
%x, %r, %g, %b = "test.op"() : () -> (tensor<6x32xf32>, tensor<6x32xf32>, tensor<32xf32>, tensor<33xf32>)
%y = hir.residual_rms_norm %x, %r, %g beta %b : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<32xf32>, tensor<33xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.residual_rms_norm': beta: expected shape [32] (N = last dim of x), got [33]

// -----

// hir.residual_rms_norm: residual of the wrong element type
%x, %r, %g = "test.op"() : () -> (tensor<6x32xf32>, tensor<6x32xi32>, tensor<32xf32>)
%y = hir.residual_rms_norm %x, %r, %g : (tensor<6x32xf32>, tensor<6x32xi32>, tensor<32xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.residual_rms_norm': residual: expected element type f32, got i32

// -----

// hir.residual_rms_norm: eps = 0
%x, %r, %g = "test.op"() : () -> (tensor<6x32xf32>, tensor<6x32xf32>, tensor<32xf32>)
%y = hir.residual_rms_norm %x, %r, %g eps 0.0 : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<32xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.residual_rms_norm': eps: expected a finite value > 0, got 0

// -----

// hir.layer_norm: beta not [N]
%x, %g, %b = "test.op"() : () -> (tensor<6x32xf32>, tensor<32xf32>, tensor<16xf32>)
%y = hir.layer_norm %x, %g, %b : (tensor<6x32xf32>, tensor<32xf32>, tensor<16xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.layer_norm': beta: expected shape [32] (N = last dim of x), got [16]

// -----

// hir.layer_norm: gamma not [N]
%x, %g, %b = "test.op"() : () -> (tensor<6x32xf32>, tensor<6x32xf32>, tensor<32xf32>)
%y = hir.layer_norm %x, %g, %b : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<32xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.layer_norm': gamma: expected shape [32] (N = last dim of x), got [6, 32]

// -----

// hir.layer_norm: beta of the wrong element type
%x, %g, %b = "test.op"() : () -> (tensor<6x32xf32>, tensor<32xf32>, tensor<32xi64>)
%y = hir.layer_norm %x, %g, %b : (tensor<6x32xf32>, tensor<32xf32>, tensor<32xi64>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.layer_norm': beta: expected element type f32, got i64

// -----

// hir.layer_norm: eps < 0
%x, %g, %b = "test.op"() : () -> (tensor<6x32xf32>, tensor<32xf32>, tensor<32xf32>)
%y = hir.layer_norm %x, %g, %b eps -1.0 : (tensor<6x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.layer_norm': eps: expected a finite value > 0, got -1

// -----

// hir.attention: q of rank 1
%q, %k, %v = "test.op"() : () -> (tensor<32xf32>, tensor<32xf32>, tensor<32xf32>)
%y = hir.attention %q, %k, %v num_heads 4 num_kv_heads 4 head_dim 8 scale 0.35 : (tensor<32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.attention': q: expected rank 2 or 3, got rank 1 (shape [32])

// -----

// hir.attention: k of another rank than q
%q, %k, %v = "test.op"() : () -> (tensor<6x32xf32>, tensor<1x6x32xf32>, tensor<6x32xf32>)
%y = hir.attention %q, %k, %v num_heads 4 num_kv_heads 4 head_dim 8 scale 0.35 : (tensor<6x32xf32>, tensor<1x6x32xf32>, tensor<6x32xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.attention': k: expected rank 2, got rank 3 (shape [1, 6, 32])

// -----

// hir.attention: num_heads < 1
%q, %k, %v = "test.op"() : () -> (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>)
%y = hir.attention %q, %k, %v num_heads 0 num_kv_heads 4 head_dim 8 scale 0.35 : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.attention': num_heads, head_dim and num_kv_heads must be >= 1, got 0, 8, 4

// -----

// hir.attention: head_dim < 1
%q, %k, %v = "test.op"() : () -> (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>)
%y = hir.attention %q, %k, %v num_heads 4 num_kv_heads 4 head_dim -8 scale 0.35 : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.attention': num_heads, head_dim and num_kv_heads must be >= 1, got 4, -8, 4

// -----

// hir.attention: num_kv_heads does not divide num_heads
%q, %k, %v = "test.op"() : () -> (tensor<6x32xf32>, tensor<6x24xf32>, tensor<6x24xf32>)
%y = hir.attention %q, %k, %v num_heads 4 num_kv_heads 3 head_dim 8 scale 0.35 : (tensor<6x32xf32>, tensor<6x24xf32>, tensor<6x24xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.attention': num_kv_heads: must divide num_heads=4 (grouped-query), got 3

// -----

// hir.attention: q's last dim is not num_heads*head_dim
%q, %k, %v = "test.op"() : () -> (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>)
%y = hir.attention %q, %k, %v num_heads 4 num_kv_heads 4 head_dim 4 scale 0.35 : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.attention': q: last dim must be num_heads*head_dim = 4*4 = 16, got 32

// -----

// hir.attention: k's last dim is not num_kv_heads*head_dim
%q, %k, %v = "test.op"() : () -> (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>)
%y = hir.attention %q, %k, %v num_heads 4 num_kv_heads 2 head_dim 8 scale 0.35 : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.attention': k: expected shape [6, 16] ([B, T, num_kv_heads*head_dim]), got [6, 32]

// -----

// hir.attention: k's batch differs from q
%q, %k, %v = "test.op"() : () -> (tensor<2x6x32xf32>, tensor<3x6x32xf32>, tensor<3x6x32xf32>)
%y = hir.attention %q, %k, %v num_heads 4 num_kv_heads 4 head_dim 8 scale 0.35 : (tensor<2x6x32xf32>, tensor<3x6x32xf32>, tensor<3x6x32xf32>) -> tensor<2x6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.attention': k: expected shape [2, 6, 32] ([B, T, num_kv_heads*head_dim]), got [3, 6, 32]

// -----

// hir.attention: v differs from k
%q, %k, %v = "test.op"() : () -> (tensor<6x32xf32>, tensor<8x32xf32>, tensor<6x32xf32>)
%y = hir.attention %q, %k, %v num_heads 4 num_kv_heads 4 head_dim 8 scale 0.35 : (tensor<6x32xf32>, tensor<8x32xf32>, tensor<6x32xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.attention': v: expected shape [8, 32] (same as k), got [6, 32]

// -----

// hir.attention: a mask with mask_kind none
%q, %k, %v, %m = "test.op"() : () -> (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x6xf32>)
%y = hir.attention %q, %k, %v mask %m num_heads 4 num_kv_heads 4 head_dim 8 scale 0.35 : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x6xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.attention': mask: mask_kind 'none' takes no mask operand, got one

// -----

// hir.attention: a mask with mask_kind causal
%q, %k, %v, %m = "test.op"() : () -> (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x6xf32>)
%y = hir.attention %q, %k, %v mask %m mask_kind causal num_heads 4 num_kv_heads 4 head_dim 8 scale 0.35 : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x6xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.attention': mask: mask_kind 'causal' takes no mask operand, got one

// -----

// hir.attention: no mask with mask_kind custom
%q, %k, %v = "test.op"() : () -> (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>)
%y = hir.attention %q, %k, %v mask_kind custom num_heads 4 num_kv_heads 4 head_dim 8 scale 0.35 : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.attention': mask: mask_kind 'custom' needs a mask operand, got none

// -----

// hir.attention: no mask with mask_kind bias
%q, %k, %v = "test.op"() : () -> (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>)
%y = hir.attention %q, %k, %v mask_kind bias num_heads 4 num_kv_heads 4 head_dim 8 scale 0.35 : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.attention': mask: mask_kind 'bias' needs a mask operand, got none

// -----

// hir.attention: causal with S > T
%q, %k, %v = "test.op"() : () -> (tensor<8x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>)
%y = hir.attention %q, %k, %v mask_kind causal num_heads 4 num_kv_heads 4 head_dim 8 scale 0.35 : (tensor<8x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>) -> tensor<8x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.attention': causal attention needs S <= T, got S=8 > T=6

// -----

// hir.attention: a 2-D mask that is not [S, T]
%q, %k, %v, %m = "test.op"() : () -> (tensor<6x32xf32>, tensor<10x32xf32>, tensor<10x32xf32>, tensor<6x6xf32>)
%y = hir.attention %q, %k, %v mask %m mask_kind custom num_heads 4 num_kv_heads 4 head_dim 8 scale 0.35 : (tensor<6x32xf32>, tensor<10x32xf32>, tensor<10x32xf32>, tensor<6x6xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.attention': mask: expected shape [6, 10] ([S, T]), got [6, 6]

// -----

// hir.attention: a 4-D mask whose head dim is neither 1 nor H
%q, %k, %v, %m = "test.op"() : () -> (tensor<2x6x32xf32>, tensor<2x10x32xf32>, tensor<2x10x32xf32>, tensor<2x2x6x10xf32>)
%y = hir.attention %q, %k, %v mask %m mask_kind bias num_heads 4 num_kv_heads 4 head_dim 8 scale 0.35 : (tensor<2x6x32xf32>, tensor<2x10x32xf32>, tensor<2x10x32xf32>, tensor<2x2x6x10xf32>) -> tensor<2x6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.attention': mask: expected [S, T] = [6, 10] or [1|2, 1|4, 6, 10], got [2, 2, 6, 10]

// -----

// hir.attention: a 3-D mask
%q, %k, %v, %m = "test.op"() : () -> (tensor<2x6x32xf32>, tensor<2x10x32xf32>, tensor<2x10x32xf32>, tensor<2x6x10xf32>)
%y = hir.attention %q, %k, %v mask %m mask_kind bias num_heads 4 num_kv_heads 4 head_dim 8 scale 0.35 : (tensor<2x6x32xf32>, tensor<2x10x32xf32>, tensor<2x10x32xf32>, tensor<2x6x10xf32>) -> tensor<2x6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.attention': mask: expected [S, T] = [6, 10] or [1|2, 1|4, 6, 10], got [2, 6, 10]

// -----

// hir.attention: a mask of the wrong element type
%q, %k, %v, %m = "test.op"() : () -> (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x6xi32>)
%y = hir.attention %q, %k, %v mask %m mask_kind custom num_heads 4 num_kv_heads 4 head_dim 8 scale 0.35 : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x6xi32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.attention': mask: expected element type f32, got i32

// -----

// hir.attention: scale = inf (generic form)
%q, %k, %v = "test.op"() : () -> (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>)
%y = "hir.attention"(%q, %k, %v) <{num_heads = 4 : i64, num_kv_heads = 4 : i64, head_dim = 8 : i64, scale = 0x7F800000 : f32}> : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.attention': scale: expected a finite value, got inf

// -----

// hir.attention: a missing num_heads (generic form)
%q, %k, %v = "test.op"() : () -> (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>)
%y = "hir.attention"(%q, %k, %v) <{num_kv_heads = 4 : i64, head_dim = 8 : i64, scale = 1.0 : f32}> : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: property 'num_heads' expected in operation 'hir.attention'

// -----

// hir.attention: num_heads not i64 (generic form)
%q, %k, %v = "test.op"() : () -> (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>)
%y = "hir.attention"(%q, %k, %v) <{num_heads = 4 : i32, num_kv_heads = 4 : i64, head_dim = 8 : i64, scale = 1.0 : f32}> : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: Expected attribute i64 but got i32

// -----

// hir.rope: x of rank 1
%x, %c, %s = "test.op"() : () -> (tensor<32xf32>, tensor<6x4xf32>, tensor<6x4xf32>)
%y = hir.rope %x, %c, %s head_dim 8 n_rot 8 : (tensor<32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.rope': x: expected rank 2 or 3, got rank 1 (shape [32])

// -----

// hir.rope: x of rank 4
%x, %c, %s = "test.op"() : () -> (tensor<1x2x6x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>)
%y = hir.rope %x, %c, %s head_dim 8 n_rot 8 : (tensor<1x2x6x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<1x2x6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.rope': x: expected rank 2 or 3, got rank 4 (shape [1, 2, 6, 32])

// -----

// hir.rope: head_dim does not divide the last dim
%x, %c, %s = "test.op"() : () -> (tensor<6x32xf32>, tensor<6x3xf32>, tensor<6x3xf32>)
%y = hir.rope %x, %c, %s head_dim 6 n_rot 6 : (tensor<6x32xf32>, tensor<6x3xf32>, tensor<6x3xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.rope': head_dim: must divide the last dim of x [6, 32], got 6

// -----

// hir.rope: head_dim < 1
%x, %c, %s = "test.op"() : () -> (tensor<6x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>)
%y = hir.rope %x, %c, %s head_dim 0 n_rot 8 : (tensor<6x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.rope': head_dim: expected a value >= 1, got 0

// -----

// hir.rope: n_rot odd
%x, %c, %s = "test.op"() : () -> (tensor<6x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>)
%y = hir.rope %x, %c, %s head_dim 8 n_rot 7 : (tensor<6x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.rope': n_rot: expected an even value in [2, head_dim=8], got 7

// -----

// hir.rope: n_rot > head_dim
%x, %c, %s = "test.op"() : () -> (tensor<6x32xf32>, tensor<6x5xf32>, tensor<6x5xf32>)
%y = hir.rope %x, %c, %s head_dim 8 n_rot 10 : (tensor<6x32xf32>, tensor<6x5xf32>, tensor<6x5xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.rope': n_rot: expected an even value in [2, head_dim=8], got 10

// -----

// hir.rope: n_rot < 2
%x, %c, %s = "test.op"() : () -> (tensor<6x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>)
%y = hir.rope %x, %c, %s head_dim 8 n_rot 0 : (tensor<6x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.rope': n_rot: expected an even value in [2, head_dim=8], got 0

// -----

// hir.rope: cos not [S, n_rot/2]
%x, %c, %s = "test.op"() : () -> (tensor<6x32xf32>, tensor<6x8xf32>, tensor<6x4xf32>)
%y = hir.rope %x, %c, %s head_dim 8 n_rot 8 : (tensor<6x32xf32>, tensor<6x8xf32>, tensor<6x4xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.rope': cos: expected shape [6, 4] ([S, n_rot/2]), got [6, 8]

// -----

// hir.rope: sin not [S, n_rot/2]
%x, %c, %s = "test.op"() : () -> (tensor<6x32xf32>, tensor<6x2xf32>, tensor<5x2xf32>)
%y = hir.rope %x, %c, %s head_dim 8 n_rot 4 style interleaved : (tensor<6x32xf32>, tensor<6x2xf32>, tensor<5x2xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.rope': sin: expected shape [6, 2] ([S, n_rot/2]), got [5, 2]

// -----

// hir.rope: cos of the wrong element type
%x, %c, %s = "test.op"() : () -> (tensor<6x32xf32>, tensor<6x4xi32>, tensor<6x4xf32>)
%y = hir.rope %x, %c, %s head_dim 8 n_rot 8 : (tensor<6x32xf32>, tensor<6x4xi32>, tensor<6x4xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.rope': cos: expected element type f32, got i32

// -----

// hir.llama_decoder_block: x of rank 1
%x, %ln1_g, %ln1_b, %q_w, %k_w, %v_w, %o_w, %ln2_g, %gate_w, %up_w, %down_w, %cos, %sin = "test.op"() : () -> (tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>)
%y = hir.llama_decoder_block %x ln1(%ln1_g, %ln1_b) attn(%q_w, %k_w, %v_w, %o_w) ln2(%ln2_g) ffn(%gate_w, %up_w, %down_w) rope(%cos, %sin) num_heads 4 num_kv_heads 2 head_dim 8 : (tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.llama_decoder_block': x: expected rank 2 or 3, got rank 1 (shape [32])

// -----

// hir.llama_decoder_block: ln1_g not [D]
%x, %ln1_g, %ln1_b, %q_w, %k_w, %v_w, %o_w, %ln2_g, %gate_w, %up_w, %down_w, %cos, %sin = "test.op"() : () -> (tensor<2x6x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>)
%y = hir.llama_decoder_block %x ln1(%ln1_g, %ln1_b) attn(%q_w, %k_w, %v_w, %o_w) ln2(%ln2_g) ffn(%gate_w, %up_w, %down_w) rope(%cos, %sin) num_heads 4 num_kv_heads 2 head_dim 8 : (tensor<2x6x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<2x6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.llama_decoder_block': ln1_g: expected shape [32] (N = last dim of x), got [16]

// -----

// hir.llama_decoder_block: ln1_b not [D]
%x, %ln1_g, %ln1_b, %q_w, %k_w, %v_w, %o_w, %ln2_g, %gate_w, %up_w, %down_w, %cos, %sin = "test.op"() : () -> (tensor<2x6x32xf32>, tensor<32xf32>, tensor<1x32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>)
%y = hir.llama_decoder_block %x ln1(%ln1_g, %ln1_b) attn(%q_w, %k_w, %v_w, %o_w) ln2(%ln2_g) ffn(%gate_w, %up_w, %down_w) rope(%cos, %sin) num_heads 4 num_kv_heads 2 head_dim 8 : (tensor<2x6x32xf32>, tensor<32xf32>, tensor<1x32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<2x6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.llama_decoder_block': ln1_b: expected shape [32] (N = last dim of x), got [1, 32]

// -----

// hir.llama_decoder_block: q_w rows differ from D
%x, %ln1_g, %ln1_b, %q_w, %k_w, %v_w, %o_w, %ln2_g, %gate_w, %up_w, %down_w, %cos, %sin = "test.op"() : () -> (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<16x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>)
%y = hir.llama_decoder_block %x ln1(%ln1_g, %ln1_b) attn(%q_w, %k_w, %v_w, %o_w) ln2(%ln2_g) ffn(%gate_w, %up_w, %down_w) rope(%cos, %sin) num_heads 4 num_kv_heads 2 head_dim 8 : (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<16x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<2x6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.llama_decoder_block': q_w: expected shape [32, N] (K = last dim of x), got [16, 32]

// -----

// hir.llama_decoder_block: q_w columns are not num_heads*head_dim
%x, %ln1_g, %ln1_b, %q_w, %k_w, %v_w, %o_w, %ln2_g, %gate_w, %up_w, %down_w, %cos, %sin = "test.op"() : () -> (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>)
%y = hir.llama_decoder_block %x ln1(%ln1_g, %ln1_b) attn(%q_w, %k_w, %v_w, %o_w) ln2(%ln2_g) ffn(%gate_w, %up_w, %down_w) rope(%cos, %sin) num_heads 4 num_kv_heads 2 head_dim 8 : (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<2x6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.llama_decoder_block': q_w: expected shape [32, 32] ([D, num_heads*head_dim] = [32, 4*8]), got [32, 16]

// -----

// hir.llama_decoder_block: k_w columns are not num_kv_heads*head_dim
%x, %ln1_g, %ln1_b, %q_w, %k_w, %v_w, %o_w, %ln2_g, %gate_w, %up_w, %down_w, %cos, %sin = "test.op"() : () -> (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>)
%y = hir.llama_decoder_block %x ln1(%ln1_g, %ln1_b) attn(%q_w, %k_w, %v_w, %o_w) ln2(%ln2_g) ffn(%gate_w, %up_w, %down_w) rope(%cos, %sin) num_heads 4 num_kv_heads 2 head_dim 8 : (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<2x6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.llama_decoder_block': k_w: expected shape [32, 16] ([D, num_kv_heads*head_dim] = [32, 2*8]), got [32, 32]

// -----

// hir.llama_decoder_block: v_w differs from k_w
%x, %ln1_g, %ln1_b, %q_w, %k_w, %v_w, %o_w, %ln2_g, %gate_w, %up_w, %down_w, %cos, %sin = "test.op"() : () -> (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x8xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>)
%y = hir.llama_decoder_block %x ln1(%ln1_g, %ln1_b) attn(%q_w, %k_w, %v_w, %o_w) ln2(%ln2_g) ffn(%gate_w, %up_w, %down_w) rope(%cos, %sin) num_heads 4 num_kv_heads 2 head_dim 8 : (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x8xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<2x6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.llama_decoder_block': v_w: expected shape [32, 16] ([D, num_kv_heads*head_dim] = [32, 2*8]), got [32, 8]

// -----

// hir.llama_decoder_block: o_w not [num_heads*head_dim, D]
%x, %ln1_g, %ln1_b, %q_w, %k_w, %v_w, %o_w, %ln2_g, %gate_w, %up_w, %down_w, %cos, %sin = "test.op"() : () -> (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>)
%y = hir.llama_decoder_block %x ln1(%ln1_g, %ln1_b) attn(%q_w, %k_w, %v_w, %o_w) ln2(%ln2_g) ffn(%gate_w, %up_w, %down_w) rope(%cos, %sin) num_heads 4 num_kv_heads 2 head_dim 8 : (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<2x6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.llama_decoder_block': o_w: expected shape [32, 32] ([num_heads*head_dim, D]), got [32, 16]

// -----

// hir.llama_decoder_block: ln2_g not [D]
%x, %ln1_g, %ln1_b, %q_w, %k_w, %v_w, %o_w, %ln2_g, %gate_w, %up_w, %down_w, %cos, %sin = "test.op"() : () -> (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<64xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>)
%y = hir.llama_decoder_block %x ln1(%ln1_g, %ln1_b) attn(%q_w, %k_w, %v_w, %o_w) ln2(%ln2_g) ffn(%gate_w, %up_w, %down_w) rope(%cos, %sin) num_heads 4 num_kv_heads 2 head_dim 8 : (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<64xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<2x6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.llama_decoder_block': ln2_g: expected shape [32] (N = last dim of x), got [64]

// -----

// hir.llama_decoder_block: ln2_b not [D]
%x, %ln1_g, %q_w, %k_w, %v_w, %o_w, %ln2_g, %ln2_b, %gate_w, %up_w, %down_w, %cos, %sin = "test.op"() : () -> (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<16xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>)
%y = hir.llama_decoder_block %x ln1(%ln1_g) attn(%q_w, %k_w, %v_w, %o_w) ln2(%ln2_g, %ln2_b) ffn(%gate_w, %up_w, %down_w) rope(%cos, %sin) num_heads 4 num_kv_heads 2 head_dim 8 : (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<16xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<2x6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.llama_decoder_block': ln2_b: expected shape [32] (N = last dim of x), got [16]

// -----

// hir.llama_decoder_block: gate_w differs from up_w
%x, %ln1_g, %ln1_b, %q_w, %k_w, %v_w, %o_w, %ln2_g, %gate_w, %up_w, %down_w, %cos, %sin = "test.op"() : () -> (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x48xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>)
%y = hir.llama_decoder_block %x ln1(%ln1_g, %ln1_b) attn(%q_w, %k_w, %v_w, %o_w) ln2(%ln2_g) ffn(%gate_w, %up_w, %down_w) rope(%cos, %sin) num_heads 4 num_kv_heads 2 head_dim 8 : (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x48xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<2x6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.llama_decoder_block': gate_w: expected shape [32, 64] (same as up), got [32, 48]

// -----

// hir.llama_decoder_block: down_w rows differ from up_w columns
%x, %ln1_g, %ln1_b, %q_w, %k_w, %v_w, %o_w, %ln2_g, %gate_w, %up_w, %down_w, %cos, %sin = "test.op"() : () -> (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<32x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>)
%y = hir.llama_decoder_block %x ln1(%ln1_g, %ln1_b) attn(%q_w, %k_w, %v_w, %o_w) ln2(%ln2_g) ffn(%gate_w, %up_w, %down_w) rope(%cos, %sin) num_heads 4 num_kv_heads 2 head_dim 8 : (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<32x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<2x6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.llama_decoder_block': down_w: expected shape [64, 32] (F = columns of up), got [32, 32]

// -----

// hir.llama_decoder_block: cos not [S, head_dim/2]
%x, %ln1_g, %ln1_b, %q_w, %k_w, %v_w, %o_w, %ln2_g, %gate_w, %up_w, %down_w, %cos, %sin = "test.op"() : () -> (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x8xf32>, tensor<6x4xf32>)
%y = hir.llama_decoder_block %x ln1(%ln1_g, %ln1_b) attn(%q_w, %k_w, %v_w, %o_w) ln2(%ln2_g) ffn(%gate_w, %up_w, %down_w) rope(%cos, %sin) num_heads 4 num_kv_heads 2 head_dim 8 : (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x8xf32>, tensor<6x4xf32>) -> tensor<2x6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.llama_decoder_block': cos: expected shape [6, 4] ([S, n_rot/2]), got [6, 8]

// -----

// hir.llama_decoder_block: sin not [S, head_dim/2]
%x, %ln1_g, %ln1_b, %q_w, %k_w, %v_w, %o_w, %ln2_g, %gate_w, %up_w, %down_w, %cos, %sin = "test.op"() : () -> (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<1x4xf32>)
%y = hir.llama_decoder_block %x ln1(%ln1_g, %ln1_b) attn(%q_w, %k_w, %v_w, %o_w) ln2(%ln2_g) ffn(%gate_w, %up_w, %down_w) rope(%cos, %sin) num_heads 4 num_kv_heads 2 head_dim 8 : (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<1x4xf32>) -> tensor<2x6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.llama_decoder_block': sin: expected shape [6, 4] ([S, n_rot/2]), got [1, 4]

// -----

// hir.llama_decoder_block: an odd head_dim (rope needs an even n_rot = head_dim)
%x, %ln1_g, %ln1_b, %q_w, %k_w, %v_w, %o_w, %ln2_g, %gate_w, %up_w, %down_w, %cos, %sin = "test.op"() : () -> (tensor<2x6x28xf32>, tensor<28xf32>, tensor<28xf32>, tensor<28x28xf32>, tensor<28x28xf32>, tensor<28x28xf32>, tensor<28x28xf32>, tensor<28xf32>, tensor<28x64xf32>, tensor<28x64xf32>, tensor<64x28xf32>, tensor<6x3xf32>, tensor<6x3xf32>)
%y = hir.llama_decoder_block %x ln1(%ln1_g, %ln1_b) attn(%q_w, %k_w, %v_w, %o_w) ln2(%ln2_g) ffn(%gate_w, %up_w, %down_w) rope(%cos, %sin) num_heads 4 num_kv_heads 4 head_dim 7 : (tensor<2x6x28xf32>, tensor<28xf32>, tensor<28xf32>, tensor<28x28xf32>, tensor<28x28xf32>, tensor<28x28xf32>, tensor<28x28xf32>, tensor<28xf32>, tensor<28x64xf32>, tensor<28x64xf32>, tensor<64x28xf32>, tensor<6x3xf32>, tensor<6x3xf32>) -> tensor<2x6x28xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.llama_decoder_block': head_dim: expected an even value in [2, head_dim=7], got 7

// -----

// hir.llama_decoder_block: num_kv_heads does not divide num_heads
%x, %ln1_g, %ln1_b, %q_w, %k_w, %v_w, %o_w, %ln2_g, %gate_w, %up_w, %down_w, %cos, %sin = "test.op"() : () -> (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x24xf32>, tensor<32x24xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>)
%y = hir.llama_decoder_block %x ln1(%ln1_g, %ln1_b) attn(%q_w, %k_w, %v_w, %o_w) ln2(%ln2_g) ffn(%gate_w, %up_w, %down_w) rope(%cos, %sin) num_heads 4 num_kv_heads 3 head_dim 8 : (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x24xf32>, tensor<32x24xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<2x6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.llama_decoder_block': num_kv_heads: must divide num_heads=4 (grouped-query), got 3

// -----

// hir.llama_decoder_block: num_kv_heads < 1
%x, %ln1_g, %ln1_b, %q_w, %k_w, %v_w, %o_w, %ln2_g, %gate_w, %up_w, %down_w, %cos, %sin = "test.op"() : () -> (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>)
%y = hir.llama_decoder_block %x ln1(%ln1_g, %ln1_b) attn(%q_w, %k_w, %v_w, %o_w) ln2(%ln2_g) ffn(%gate_w, %up_w, %down_w) rope(%cos, %sin) num_heads 4 num_kv_heads 0 head_dim 8 : (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<2x6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.llama_decoder_block': num_heads, head_dim and num_kv_heads must be >= 1, got 4, 8, 0

// -----

// hir.llama_decoder_block: a mask with the default mask_kind causal
%x, %ln1_g, %q_w, %k_w, %v_w, %o_w, %ln2_g, %gate_w, %up_w, %down_w, %cos, %sin, %mask = "test.op"() : () -> (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>, tensor<6x6xf32>)
%y = hir.llama_decoder_block %x ln1(%ln1_g) attn(%q_w, %k_w, %v_w, %o_w) ln2(%ln2_g) ffn(%gate_w, %up_w, %down_w) rope(%cos, %sin) mask(%mask) num_heads 4 num_kv_heads 2 head_dim 8 : (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>, tensor<6x6xf32>) -> tensor<2x6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.llama_decoder_block': mask: mask_kind 'causal' takes no mask operand, got one

// -----

// hir.llama_decoder_block: no mask with mask_kind custom
%x, %ln1_g, %ln1_b, %q_w, %k_w, %v_w, %o_w, %ln2_g, %gate_w, %up_w, %down_w, %cos, %sin = "test.op"() : () -> (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>)
%y = hir.llama_decoder_block %x ln1(%ln1_g, %ln1_b) attn(%q_w, %k_w, %v_w, %o_w) ln2(%ln2_g) ffn(%gate_w, %up_w, %down_w) rope(%cos, %sin) num_heads 4 num_kv_heads 2 head_dim 8 mask_kind custom : (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<2x6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.llama_decoder_block': mask: mask_kind 'custom' needs a mask operand, got none

// -----

// hir.llama_decoder_block: a mask that is not [S, T]
%x, %ln1_g, %q_w, %k_w, %v_w, %o_w, %ln2_g, %gate_w, %up_w, %down_w, %cos, %sin, %mask = "test.op"() : () -> (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>, tensor<6x5xf32>)
%y = hir.llama_decoder_block %x ln1(%ln1_g) attn(%q_w, %k_w, %v_w, %o_w) ln2(%ln2_g) ffn(%gate_w, %up_w, %down_w) rope(%cos, %sin) mask(%mask) num_heads 4 num_kv_heads 2 head_dim 8 mask_kind bias : (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>, tensor<6x5xf32>) -> tensor<2x6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.llama_decoder_block': mask: expected shape [6, 6] ([S, T]), got [6, 5]

// -----

// hir.llama_decoder_block: a weight of the wrong element type
%x, %ln1_g, %ln1_b, %q_w, %k_w, %v_w, %o_w, %ln2_g, %gate_w, %up_w, %down_w, %cos, %sin = "test.op"() : () -> (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xi32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>)
%y = hir.llama_decoder_block %x ln1(%ln1_g, %ln1_b) attn(%q_w, %k_w, %v_w, %o_w) ln2(%ln2_g) ffn(%gate_w, %up_w, %down_w) rope(%cos, %sin) num_heads 4 num_kv_heads 2 head_dim 8 : (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xi32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<2x6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.llama_decoder_block': up_w: expected element type f32, got i32

// -----

// hir.llama_decoder_block: eps = 0
%x, %ln1_g, %ln1_b, %q_w, %k_w, %v_w, %o_w, %ln2_g, %gate_w, %up_w, %down_w, %cos, %sin = "test.op"() : () -> (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>)
%y = hir.llama_decoder_block %x ln1(%ln1_g, %ln1_b) attn(%q_w, %k_w, %v_w, %o_w) ln2(%ln2_g) ffn(%gate_w, %up_w, %down_w) rope(%cos, %sin) num_heads 4 num_kv_heads 2 head_dim 8 eps 0.0 : (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<2x6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.llama_decoder_block': eps: expected a finite value > 0, got 0

// -----

// hir.llama_decoder_block: a result of the wrong shape
%x, %ln1_g, %ln1_b, %q_w, %k_w, %v_w, %o_w, %ln2_g, %gate_w, %up_w, %down_w, %cos, %sin = "test.op"() : () -> (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>)
%y = hir.llama_decoder_block %x ln1(%ln1_g, %ln1_b) attn(%q_w, %k_w, %v_w, %o_w) ln2(%ln2_g) ffn(%gate_w, %up_w, %down_w) rope(%cos, %sin) num_heads 4 num_kv_heads 2 head_dim 8 : (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<2x6x16xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.llama_decoder_block': result: expected shape [2, 6, 32], got [2, 6, 16]

// -----

// hir.dequant_matmul: x of the wrong element type
%x, %w = "test.op"() : () -> (tensor<4x64xi32>, tensor<16x68xui8>)
%y = hir.dequant_matmul q8_0 %x, %w : (tensor<4x64xi32>, tensor<16x68xui8>) -> tensor<4x16xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.dequant_matmul': x: expected element type f32, got i32

// -----

// hir.dequant_matmul: w not ui8
%x, %w = "test.op"() : () -> (tensor<4x64xf32>, tensor<16x68xi8>)
%y = hir.dequant_matmul q8_0 %x, %w : (tensor<4x64xf32>, tensor<16x68xi8>) -> tensor<4x16xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.dequant_matmul': w: expected element type ui8, got i8

// -----

// hir.dequant_matmul: w as f32 weights
%x, %w = "test.op"() : () -> (tensor<4x64xf32>, tensor<16x64xf32>)
%y = hir.dequant_matmul q8_0 %x, %w : (tensor<4x64xf32>, tensor<16x64xf32>) -> tensor<4x16xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.dequant_matmul': w: expected element type ui8, got f32

// -----

// hir.dequant_matmul: K not a multiple of 32
%x, %w = "test.op"() : () -> (tensor<4x48xf32>, tensor<16x51xui8>)
%y = hir.dequant_matmul q8_0 %x, %w : (tensor<4x48xf32>, tensor<16x51xui8>) -> tensor<4x16xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.dequant_matmul': x: last dim K must be a multiple of 32 (a q8_0 block), got 48

// -----

// hir.dequant_matmul: q8_0 row bytes differ from K/32*34
%x, %w = "test.op"() : () -> (tensor<4x64xf32>, tensor<16x36xui8>)
%y = hir.dequant_matmul q8_0 %x, %w : (tensor<4x64xf32>, tensor<16x36xui8>) -> tensor<4x16xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.dequant_matmul': w: expected shape [16, 68] (q8_0: K/32 blocks of 34 bytes), got [16, 36]

// -----

// hir.dequant_matmul: q4_0 row bytes differ from K/32*18
%x, %w = "test.op"() : () -> (tensor<4x64xf32>, tensor<16x68xui8>)
%y = hir.dequant_matmul q4_0 %x, %w : (tensor<4x64xf32>, tensor<16x68xui8>) -> tensor<4x16xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.dequant_matmul': w: expected shape [16, 36] (q4_0: K/32 blocks of 18 bytes), got [16, 68]

// -----

// hir.dequant_matmul: w not 2-D
%x, %w = "test.op"() : () -> (tensor<4x64xf32>, tensor<1088xui8>)
%y = hir.dequant_matmul q8_0 %x, %w : (tensor<4x64xf32>, tensor<1088xui8>) -> tensor<4x16xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.dequant_matmul': w: expected rank 2, got rank 1 (shape [1088])

// -----

// hir.dequant_matmul: x of rank 0
%x, %w = "test.op"() : () -> (tensor<f32>, tensor<16x68xui8>)
%y = hir.dequant_matmul q8_0 %x, %w : (tensor<f32>, tensor<16x68xui8>) -> tensor<16xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.dequant_matmul': x: expected rank 1 to 8, got rank 0 (shape [])

// -----

// hir.dequant_matmul: a result of the wrong shape
%x, %w = "test.op"() : () -> (tensor<4x64xf32>, tensor<16x68xui8>)
%y = hir.dequant_matmul q8_0 %x, %w : (tensor<4x64xf32>, tensor<16x68xui8>) -> tensor<4x64xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.dequant_matmul': result: expected shape [4, 16], got [4, 64]

// -----

// hir.embedding: ids of a float element type
%t, %ids = "test.op"() : () -> (tensor<100x32xf32>, tensor<2x6xf32>)
%y = hir.embedding %t[%ids] : (tensor<100x32xf32>, tensor<2x6xf32>) -> tensor<2x6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.embedding': ids: expected element type i32 or i64, got f32

// -----

// hir.embedding: ids of an unsigned element type
%t, %ids = "test.op"() : () -> (tensor<100x32xf32>, tensor<2x6xui8>)
%y = hir.embedding %t[%ids] : (tensor<100x32xf32>, tensor<2x6xui8>) -> tensor<2x6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.embedding': ids: expected element type i32 or i64, got ui8

// -----

// hir.embedding: table not f32
%t, %ids = "test.op"() : () -> (tensor<100x32xi32>, tensor<2x6xi32>)
%y = hir.embedding %t[%ids] : (tensor<100x32xi32>, tensor<2x6xi32>) -> tensor<2x6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.embedding': table: expected element type f32, got i32

// -----

// hir.embedding: table not 2-D
%t, %ids = "test.op"() : () -> (tensor<100xf32>, tensor<2x6xi32>)
%y = hir.embedding %t[%ids] : (tensor<100xf32>, tensor<2x6xi32>) -> tensor<2x6xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.embedding': table: expected rank 2, got rank 1 (shape [100])

// -----

// hir.embedding: a result of the wrong shape
%t, %ids = "test.op"() : () -> (tensor<100x32xf32>, tensor<2x6xi64>)
%y = hir.embedding %t[%ids] : (tensor<100x32xf32>, tensor<2x6xi64>) -> tensor<12x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.embedding': result: expected shape [2, 6, 32], got [12, 32]

// -----

// hir.depthwise_conv1d_causal: x not 3-D
%x, %w = "test.op"() : () -> (tensor<6x8xf32>, tensor<4x8xf32>)
%y = hir.depthwise_conv1d_causal %x, %w : (tensor<6x8xf32>, tensor<4x8xf32>) -> tensor<6x8xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.depthwise_conv1d_causal': x: expected rank 3, got rank 2 (shape [6, 8])

// -----

// hir.depthwise_conv1d_causal: w not 2-D
%x, %w = "test.op"() : () -> (tensor<2x6x8xf32>, tensor<4x8x1xf32>)
%y = hir.depthwise_conv1d_causal %x, %w : (tensor<2x6x8xf32>, tensor<4x8x1xf32>) -> tensor<2x6x8xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.depthwise_conv1d_causal': w: expected rank 2, got rank 3 (shape [4, 8, 1])

// -----

// hir.depthwise_conv1d_causal: w channels differ from x
%x, %w = "test.op"() : () -> (tensor<2x6x8xf32>, tensor<4x16xf32>)
%y = hir.depthwise_conv1d_causal %x, %w : (tensor<2x6x8xf32>, tensor<4x16xf32>) -> tensor<2x6x8xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.depthwise_conv1d_causal': w: expected shape [4, 8] ([K, C] with C = channels of x), got [4, 16]

// -----

// hir.depthwise_conv1d_causal: left_pad not [B, K-1, C]
%x, %w, %p = "test.op"() : () -> (tensor<2x6x8xf32>, tensor<4x8xf32>, tensor<2x4x8xf32>)
%y = hir.depthwise_conv1d_causal %x, %w left_pad %p : (tensor<2x6x8xf32>, tensor<4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x6x8xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.depthwise_conv1d_causal': left_pad: expected shape [2, 3, 8] ([B, K-1, C]), got [2, 4, 8]

// -----

// hir.depthwise_conv1d_causal: left_pad with a kernel of size 1
%x, %w, %p = "test.op"() : () -> (tensor<2x6x8xf32>, tensor<1x8xf32>, tensor<2x1x8xf32>)
%y = hir.depthwise_conv1d_causal %x, %w left_pad %p : (tensor<2x6x8xf32>, tensor<1x8xf32>, tensor<2x1x8xf32>) -> tensor<2x6x8xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.depthwise_conv1d_causal': left_pad: a kernel of size K=1 takes no left_pad (it would be empty)

// -----

// hir.depthwise_conv1d_causal: left_pad of the wrong element type
%x, %w, %p = "test.op"() : () -> (tensor<2x6x8xf32>, tensor<4x8xf32>, tensor<2x3x8xi32>)
%y = hir.depthwise_conv1d_causal %x, %w left_pad %p : (tensor<2x6x8xf32>, tensor<4x8xf32>, tensor<2x3x8xi32>) -> tensor<2x6x8xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.depthwise_conv1d_causal': left_pad: expected element type f32, got i32

// -----

// hir.dequant_matmul q4_1: x does not fit the scheme's blocks
%x, %w = "test.op"() : () -> (tensor<2x48xf32>, tensor<8x40xui8>)
%y = hir.dequant_matmul q4_1 %x, %w : (tensor<2x48xf32>, tensor<8x40xui8>) -> tensor<2x8xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.dequant_matmul': x: last dim K must be a multiple of 32 (a q4_1 block), got 48

// -----

// hir.dequant_matmul q4_k: x does not fit the scheme's blocks
%x, %w = "test.op"() : () -> (tensor<2x128xf32>, tensor<8x144xui8>)
%y = hir.dequant_matmul q4_k %x, %w : (tensor<2x128xf32>, tensor<8x144xui8>) -> tensor<2x8xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.dequant_matmul': x: last dim K must be a multiple of 256 (a q4_k block), got 128

// -----

// hir.dequant_matmul f16: w does not fit the scheme's blocks
%x, %w = "test.op"() : () -> (tensor<2x5xf32>, tensor<8x5xui8>)
%y = hir.dequant_matmul f16 %x, %w : (tensor<2x5xf32>, tensor<8x5xui8>) -> tensor<2x8xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.dequant_matmul': w: expected shape [8, 10] (f16: K/1 blocks of 2 bytes), got [8, 5]

// -----

// hir.dequant_matmul f16: q8 activations need a block-quantized scheme
%x, %w = "test.op"() : () -> (tensor<2x5xf32>, tensor<8x10xui8>)
%y = hir.dequant_matmul f16 %x, %w activations q8 : (tensor<2x5xf32>, tensor<8x10xui8>) -> tensor<2x8xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.dequant_matmul': activations q8 needs a block-quantized scheme (q4_0, q5_0, q8_0, q4_1, q5_1, q4_k, q5_k, q6_k, q2_k, q3_k, iq4_xs, iq4_nl), got f16
