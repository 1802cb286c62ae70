// RUN: rlx-opt %s --split-input-file --verify-diagnostics --parsing-diagnostics | filecheck %s

// One case per rule of the mir verifiers (and a few of xDSL's own checks on mir ops).

// zero-size dimension (every op checks every operand and result)
%a = "test.op"() : () -> tensor<0x4xf32>
%z = mir.exp %a : tensor<0x4xf32>

// CHECK: 'mir.exp': input: every dimension must be >= 1, got shape [0, 4]

// -----

%a = "test.op"() : () -> tensor<4xf32>
%z = mir.reshape %a : tensor<4xf32> -> tensor<4x0xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.reshape': result: every dimension must be >= 1, got shape [4, 0]

// -----

// === binary elementwise
%a = "test.op"() : () -> tensor<4xi32>
%z = mir.div %a, %a : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.div': lhs: expected element type f32, got i32

// -----

%a = "test.op"() : () -> tensor<4xui8>
%z = mir.add %a, %a : (tensor<4xui8>, tensor<4xui8>) -> tensor<4xui8>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.add': lhs: expected element type f32 or i32 or i64, got ui8

// -----

%a = "test.op"() : () -> tensor<4xf32>
%b = "test.op"() : () -> tensor<4xi32>
%z = mir.mul %a, %b : (tensor<4xf32>, tensor<4xi32>) -> tensor<4xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.mul': rhs: expected element type f32 (as lhs), got i32

// -----

%a = "test.op"() : () -> tensor<4xf32>
%z = mir.sub %a, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.sub': result: expected element type f32 (as lhs), got i32

// -----

%a = "test.op"() : () -> tensor<4x3xf32>
%b = "test.op"() : () -> tensor<8xf32>
%z = mir.max %a, %b : (tensor<4x3xf32>, tensor<8xf32>) -> tensor<4x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.max': lhs [4, 3] and rhs [8] are not broadcast-compatible

// -----

%a = "test.op"() : () -> tensor<4x1xf32>
%b = "test.op"() : () -> tensor<8xf32>
%z = mir.pow %a, %b : (tensor<4x1xf32>, tensor<8xf32>) -> tensor<4x9xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.pow': result: expected shape [4, 8], got [4, 9]

// -----

// === unary elementwise
%a = "test.op"() : () -> tensor<4xi32>
%z = mir.exp %a : tensor<4xi32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.exp': input: expected element type f32, got i32

// -----

%a = "test.op"() : () -> tensor<4xi32>
%z = mir.softplus %a : tensor<4xi32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.softplus': input: expected element type f32, got i32

// -----

%a = "test.op"() : () -> tensor<4xui8>
%z = mir.abs %a : tensor<4xui8>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.abs': input: expected element type f32 or i32 or i64, got ui8

// -----

%a = "test.op"() : () -> tensor<4xf32>
%z = "mir.tanh"(%a) : (tensor<4xf32>) -> tensor<8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: result 'result' at position 0 does not verify:
// CHECK-NEXT: attribute tensor<4xf32> expected from variable 'T', but got tensor<8xf32>

// -----

// === matmul
%a = "test.op"() : () -> tensor<4x8xf32>
%b = "test.op"() : () -> tensor<7x16xf32>
%z = mir.matmul %a, %b : (tensor<4x8xf32>, tensor<7x16xf32>) -> tensor<4x16xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.matmul': matmul inner dimensions differ: lhs [4, 8] has K=8, rhs [7, 16] has K=7

// -----

%a = "test.op"() : () -> tensor<f32>
%b = "test.op"() : () -> tensor<8x16xf32>
%z = mir.matmul %a, %b : (tensor<f32>, tensor<8x16xf32>) -> tensor<16xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.matmul': matmul operands must have rank >= 1, got [] and [8, 16]

// -----

%a = "test.op"() : () -> tensor<2x4x8xf32>
%b = "test.op"() : () -> tensor<3x8x16xf32>
%z = mir.matmul %a, %b : (tensor<2x4x8xf32>, tensor<3x8x16xf32>) -> tensor<2x4x16xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.matmul': lhs batch [2] and rhs batch [3] are not broadcast-compatible

// -----

%a = "test.op"() : () -> tensor<4x8xf32>
%b = "test.op"() : () -> tensor<8x16xi32>
%z = mir.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xi32>) -> tensor<4x16xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.matmul': rhs: expected element type f32, got i32

// -----

%a = "test.op"() : () -> tensor<4x8xf32>
%b = "test.op"() : () -> tensor<8x16xf32>
%z = mir.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.matmul': result: expected shape [4, 16], got [4, 8]

// -----

// === fused_matmul
%a = "test.op"() : () -> tensor<4x8xf32>
%w = "test.op"() : () -> tensor<8x16xf32>
%b = "test.op"() : () -> tensor<8xf32>
%z = mir.fused_matmul %a, %w, %b : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<8xf32>) -> tensor<4x16xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.fused_matmul': bias: expected shape [16] (N = last dim of rhs), got [8]

// -----

%a = "test.op"() : () -> tensor<4x8xf32>
%w = "test.op"() : () -> tensor<8xf32>
%b = "test.op"() : () -> tensor<1xf32>
%z = mir.fused_matmul %a, %w, %b : (tensor<4x8xf32>, tensor<8xf32>, tensor<1xf32>) -> tensor<4xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.fused_matmul': rhs: expected rank 2 to 8, got rank 1 (shape [8])

// -----

%a = "test.op"() : () -> tensor<4x8xf32>
%w = "test.op"() : () -> tensor<8x16xf32>
%b = "test.op"() : () -> tensor<16xi32>
%z = mir.fused_matmul %a, %w, %b activation silu : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xi32>) -> tensor<4x16xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.fused_matmul': bias: expected element type f32, got i32

// -----

%a = "test.op"() : () -> tensor<4x8xf32>
%w = "test.op"() : () -> tensor<9x16xf32>
%z = mir.fused_matmul %a, %w activation relu : (tensor<4x8xf32>, tensor<9x16xf32>) -> tensor<4x16xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.fused_matmul': matmul inner dimensions differ: lhs [4, 8] has K=8, rhs [9, 16] has K=9

// -----

%a = "test.op"() : () -> tensor<4x8xf32>
%w = "test.op"() : () -> tensor<8x16xf32>
%z = mir.fused_matmul %a, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xi32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.fused_matmul': result: expected element type f32, got i32

// -----

%a = "test.op"() : () -> tensor<4x8xf32>
%w = "test.op"() : () -> tensor<8x16xf32>
%z = mir.fused_matmul %a, %w activation swish : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: Expected `relu`, `gelu`, `gelu_tanh`, `silu`, `sigmoid`, or `tanh`.

// -----

// === dequant_matmul
%x = "test.op"() : () -> tensor<4x64xi32>
%w = "test.op"() : () -> tensor<8x68xui8>
%z = mir.dequant_matmul %x, %w scheme q8_0 : (tensor<4x64xi32>, tensor<8x68xui8>) -> tensor<4x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.dequant_matmul': x: expected element type f32, got i32

// -----

%x = "test.op"() : () -> tensor<4x64xf32>
%w = "test.op"() : () -> tensor<8x68xi32>
%z = mir.dequant_matmul %x, %w scheme q8_0 : (tensor<4x64xf32>, tensor<8x68xi32>) -> tensor<4x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.dequant_matmul': w: expected element type ui8, got i32

// -----

%x = "test.op"() : () -> tensor<4x64xf32>
%w = "test.op"() : () -> tensor<8x68xui8>
%z = mir.dequant_matmul %x, %w scheme q8_0 : (tensor<4x64xf32>, tensor<8x68xui8>) -> tensor<4x8xi32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.dequant_matmul': result: expected element type f32, got i32

// -----

%x = "test.op"() : () -> tensor<4x48xf32>
%w = "test.op"() : () -> tensor<8x68xui8>
%z = mir.dequant_matmul %x, %w scheme q8_0 : (tensor<4x48xf32>, tensor<8x68xui8>) -> tensor<4x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.dequant_matmul': x: last dim K must be a multiple of 32 (a q8_0 block), got 48

// -----

%x = "test.op"() : () -> tensor<4x64xf32>
%w = "test.op"() : () -> tensor<8x68xui8>
%z = mir.dequant_matmul %x, %w scheme q4_0 : (tensor<4x64xf32>, tensor<8x68xui8>) -> tensor<4x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.dequant_matmul': w: expected shape [8, 36] (q4_0: K/32 blocks of 18 bytes), got [8, 68]

// -----

%x = "test.op"() : () -> tensor<4x64xf32>
%w = "test.op"() : () -> tensor<68xui8>
%z = mir.dequant_matmul %x, %w scheme q8_0 : (tensor<4x64xf32>, tensor<68xui8>) -> tensor<4x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.dequant_matmul': w: expected rank 2, got rank 1 (shape [68])

// -----

%x = "test.op"() : () -> tensor<4x64xf32>
%w = "test.op"() : () -> tensor<8x68xui8>
%z = mir.dequant_matmul %x, %w scheme q8_0 : (tensor<4x64xf32>, tensor<8x68xui8>) -> tensor<4x68xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.dequant_matmul': result: expected shape [4, 8], got [4, 68]

// -----

// === depthwise_conv1d
%x = "test.op"() : () -> tensor<10x16xf32>
%w = "test.op"() : () -> tensor<3x16xf32>
%z = mir.depthwise_conv1d %x, %w : (tensor<10x16xf32>, tensor<3x16xf32>) -> tensor<8x16xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.depthwise_conv1d': x: expected rank 3, got rank 2 (shape [10, 16])

// -----

%x = "test.op"() : () -> tensor<2x10x16xf32>
%w = "test.op"() : () -> tensor<3x8xf32>
%z = mir.depthwise_conv1d %x, %w : (tensor<2x10x16xf32>, tensor<3x8xf32>) -> tensor<2x8x16xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.depthwise_conv1d': w: expected shape [3, 16] ([K, C] with C = channels of x), got [3, 8]

// -----

%x = "test.op"() : () -> tensor<2x2x16xf32>
%w = "test.op"() : () -> tensor<3x16xf32>
%z = mir.depthwise_conv1d %x, %w : (tensor<2x2x16xf32>, tensor<3x16xf32>) -> tensor<2x1x16xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.depthwise_conv1d': x: time dim must be >= K=3 (input is pre-padded), got 2

// -----

%x = "test.op"() : () -> tensor<2x10x16xf32>
%w = "test.op"() : () -> tensor<3x16xi32>
%z = mir.depthwise_conv1d %x, %w : (tensor<2x10x16xf32>, tensor<3x16xi32>) -> tensor<2x8x16xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.depthwise_conv1d': weight: expected element type f32, got i32

// -----

%x = "test.op"() : () -> tensor<2x10x16xf32>
%w = "test.op"() : () -> tensor<3x16xf32>
%z = mir.depthwise_conv1d %x, %w : (tensor<2x10x16xf32>, tensor<3x16xf32>) -> tensor<2x10x16xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.depthwise_conv1d': result: expected shape [2, 8, 16], got [2, 10, 16]

// -----

// === reduce
%x = "test.op"() : () -> tensor<4x8xf32>
%z = mir.reduce sum %x axes [] : tensor<4x8xf32> -> tensor<4x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.reduce': axes: expected at least one axis, got none

// -----

%x = "test.op"() : () -> tensor<4x8xf32>
%z = mir.reduce max %x axes [2] : tensor<4x8xf32> -> tensor<4xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.reduce': axes: axis 2 is out of range for rank 2

// -----

%x = "test.op"() : () -> tensor<4x8xf32>
%z = mir.reduce min %x axes [-3] : tensor<4x8xf32> -> tensor<4xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.reduce': axes: axis -3 is out of range for rank 2

// -----

%x = "test.op"() : () -> tensor<4x8xf32>
%z = mir.reduce mean %x axes [1, -1] : tensor<4x8xf32> -> tensor<4xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.reduce': axes: axes (1, -1) repeat an axis

// -----

%x = "test.op"() : () -> tensor<4x8xf32>
%z = mir.reduce sum %x axes [1] : tensor<4x8xf32> -> tensor<4x1xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.reduce': result: expected shape [4], got [4, 1]

// -----

%x = "test.op"() : () -> tensor<4x8xi32>
%z = mir.reduce sum %x axes [1] : tensor<4x8xi32> -> tensor<4xi32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.reduce': input: expected element type f32, got i32

// -----

%x = "test.op"() : () -> tensor<4x8xf32>
%z = mir.reduce sum %x axes [1] : tensor<4x8xf32> -> tensor<4xi32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.reduce': result: expected element type f32, got i32

// -----

%x = "test.op"() : () -> tensor<4x8xf32>
%z = mir.reduce prod %x axes [1] : tensor<4x8xf32> -> tensor<4xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: invalid.mlir:{{[0-9]+}}:{{[0-9]+}}
// CHECK: Expected `sum`, `max`, `min`, or `mean`.

// -----

// === softmax
%x = "test.op"() : () -> tensor<4x8xf32>
%z = mir.softmax %x axis 2 : tensor<4x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.softmax': axis: axis 2 is out of range for rank 2

// -----

%x = "test.op"() : () -> tensor<f32>
%z = mir.softmax %x axis 0 : tensor<f32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.softmax': axis: axis 0 is out of range for rank 0

// -----

%x = "test.op"() : () -> tensor<4x8xi64>
%z = mir.softmax %x axis -1 : tensor<4x8xi64>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.softmax': input: expected element type f32, got i64

// -----

// === rms_norm, layer_norm
%x = "test.op"() : () -> tensor<4x8xf32>
%g = "test.op"() : () -> tensor<4xf32>
%z = mir.rms_norm %x, %g : (tensor<4x8xf32>, tensor<4xf32>) -> tensor<4x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.rms_norm': gamma: expected shape [8] (N = last dim of x), got [4]

// -----

%x = "test.op"() : () -> tensor<4x8xf32>
%g = "test.op"() : () -> tensor<8xf32>
%b = "test.op"() : () -> tensor<1x8xf32>
%z = mir.rms_norm %x, %g, %b : (tensor<4x8xf32>, tensor<8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.rms_norm': beta: expected shape [8] (N = last dim of x), got [1, 8]

// -----

%x = "test.op"() : () -> tensor<f32>
%g = "test.op"() : () -> tensor<1xf32>
%z = mir.rms_norm %x, %g : (tensor<f32>, tensor<1xf32>) -> tensor<f32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.rms_norm': x: expected rank 1 to 8, got rank 0 (shape [])

// -----

%x = "test.op"() : () -> tensor<4x8xf32>
%g = "test.op"() : () -> tensor<8xf32>
%z = mir.rms_norm %x, %g eps 0.0 : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.rms_norm': eps: expected a finite value > 0, got 0

// -----

// mir.rms_norm: eps = inf (generic form)
%x, %g = "test.op"() : () -> (tensor<4x8xf32>, tensor<8xf32>)
%z = "mir.rms_norm"(%x, %g) <{eps = 0x7F800000 : f32}> : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.rms_norm': eps: expected a finite value > 0, got inf

// -----

%x = "test.op"() : () -> tensor<4x8xf32>
%g = "test.op"() : () -> tensor<8xi32>
%z = mir.rms_norm %x, %g : (tensor<4x8xf32>, tensor<8xi32>) -> tensor<4x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.rms_norm': gamma: expected element type f32, got i32

// -----

%x = "test.op"() : () -> tensor<4x8xf32>
%g = "test.op"() : () -> tensor<8xf32>
%z = mir.rms_norm %x, %g : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<8x4xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.rms_norm': result: expected shape [4, 8], got [8, 4]

// -----

%x = "test.op"() : () -> tensor<4x8xf32>
%g = "test.op"() : () -> tensor<8xf32>
%b = "test.op"() : () -> tensor<4xf32>
%z = mir.layer_norm %x, %g, %b : (tensor<4x8xf32>, tensor<8xf32>, tensor<4xf32>) -> tensor<4x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.layer_norm': beta: expected shape [8] (N = last dim of x), got [4]

// -----

%x = "test.op"() : () -> tensor<4x8xf32>
%g = "test.op"() : () -> tensor<8xf32>
%z = mir.layer_norm %x, %g, %g eps -1.0 : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.layer_norm': eps: expected a finite value > 0, got -1

// -----

%x = "test.op"() : () -> tensor<4x8xf32>
%g = "test.op"() : () -> tensor<8xf32>
%b = "test.op"() : () -> tensor<8xi64>
%z = mir.layer_norm %x, %g, %b : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xi64>) -> tensor<4x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.layer_norm': beta: expected element type f32, got i64

// -----

// === rope
%x = "test.op"() : () -> tensor<32xf32>
%c = "test.op"() : () -> tensor<6x8xf32>
%z = mir.rope %x, %c, %c head_dim 16 n_rot 16 style half : (tensor<32xf32>, tensor<6x8xf32>, tensor<6x8xf32>) -> tensor<32xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.rope': x: expected rank 2 or 3, got rank 1 (shape [32])

// -----

%x = "test.op"() : () -> tensor<6x32xf32>
%c = "test.op"() : () -> tensor<6x6xf32>
%z = mir.rope %x, %c, %c head_dim 12 n_rot 12 style half : (tensor<6x32xf32>, tensor<6x6xf32>, tensor<6x6xf32>) -> tensor<6x32xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.rope': head_dim: must divide the last dim of x [6, 32], got 12

// -----

%x = "test.op"() : () -> tensor<6x32xf32>
%c = "test.op"() : () -> tensor<6x3xf32>
%z = mir.rope %x, %c, %c head_dim 16 n_rot 7 style half : (tensor<6x32xf32>, tensor<6x3xf32>, tensor<6x3xf32>) -> tensor<6x32xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.rope': n_rot: expected an even value in [2, head_dim=16], got 7

// -----

%x = "test.op"() : () -> tensor<6x32xf32>
%c = "test.op"() : () -> tensor<6x16xf32>
%z = mir.rope %x, %c, %c head_dim 16 n_rot 32 style interleaved : (tensor<6x32xf32>, tensor<6x16xf32>, tensor<6x16xf32>) -> tensor<6x32xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.rope': n_rot: expected an even value in [2, head_dim=16], got 32

// -----

%x = "test.op"() : () -> tensor<6x32xf32>
%c = "test.op"() : () -> tensor<5x8xf32>
%s = "test.op"() : () -> tensor<6x8xf32>
%z = mir.rope %x, %c, %s head_dim 16 n_rot 16 style half : (tensor<6x32xf32>, tensor<5x8xf32>, tensor<6x8xf32>) -> tensor<6x32xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.rope': cos: expected shape [6, 8] ([S, n_rot/2]), got [5, 8]

// -----

%x = "test.op"() : () -> tensor<6x32xf32>
%c = "test.op"() : () -> tensor<6x8xf32>
%s = "test.op"() : () -> tensor<6x16xf32>
%z = mir.rope %x, %c, %s head_dim 16 n_rot 16 style half : (tensor<6x32xf32>, tensor<6x8xf32>, tensor<6x16xf32>) -> tensor<6x32xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.rope': sin: expected shape [6, 8] ([S, n_rot/2]), got [6, 16]

// -----

%x = "test.op"() : () -> tensor<6x32xf32>
%c = "test.op"() : () -> tensor<6x8xi32>
%z = mir.rope %x, %c, %c head_dim 16 n_rot 16 style half : (tensor<6x32xf32>, tensor<6x8xi32>, tensor<6x8xi32>) -> tensor<6x32xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.rope': cos: expected element type f32, got i32

// -----

%x = "test.op"() : () -> tensor<6x32xf32>
%c = "test.op"() : () -> tensor<6x8xf32>
%z = mir.rope %x, %c, %c head_dim 16 n_rot 16 style half : (tensor<6x32xf32>, tensor<6x8xf32>, tensor<6x8xf32>) -> tensor<1x6x32xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.rope': result: expected shape [6, 32], got [1, 6, 32]

// -----

// === attention
%q = "test.op"() : () -> tensor<1x2x6x32xf32>
%z = mir.attention %q, %q, %q num_heads 4 head_dim 8 num_kv_heads 4 mask_kind none scale 0.125 : (tensor<1x2x6x32xf32>, tensor<1x2x6x32xf32>, tensor<1x2x6x32xf32>) -> tensor<1x2x6x32xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.attention': q: expected rank 2 or 3, got rank 4 (shape [1, 2, 6, 32])

// -----

%q = "test.op"() : () -> tensor<2x6x32xf32>
%k = "test.op"() : () -> tensor<6x32xf32>
%z = mir.attention %q, %k, %k num_heads 4 head_dim 8 num_kv_heads 4 mask_kind none scale 0.125 : (tensor<2x6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>) -> tensor<2x6x32xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.attention': k: expected rank 3, got rank 2 (shape [6, 32])

// -----

%q = "test.op"() : () -> tensor<6x32xf32>
%z = mir.attention %q, %q, %q num_heads 0 head_dim 8 num_kv_heads 4 mask_kind none scale 0.125 : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>) -> tensor<6x32xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.attention': num_heads, head_dim and num_kv_heads must be >= 1, got 0, 8, 4

// -----

%q = "test.op"() : () -> tensor<6x32xf32>
%k = "test.op"() : () -> tensor<6x24xf32>
%z = mir.attention %q, %k, %k num_heads 4 head_dim 8 num_kv_heads 3 mask_kind none scale 0.125 : (tensor<6x32xf32>, tensor<6x24xf32>, tensor<6x24xf32>) -> tensor<6x32xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.attention': num_kv_heads: must divide num_heads=4 (grouped-query), got 3

// -----

%q = "test.op"() : () -> tensor<6x30xf32>
%z = mir.attention %q, %q, %q num_heads 4 head_dim 8 num_kv_heads 4 mask_kind none scale 0.125 : (tensor<6x30xf32>, tensor<6x30xf32>, tensor<6x30xf32>) -> tensor<6x30xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.attention': q: last dim must be num_heads*head_dim = 4*8 = 32, got 30

// -----

%q = "test.op"() : () -> tensor<6x32xf32>
%k = "test.op"() : () -> tensor<6x32xf32>
%z = mir.attention %q, %k, %k num_heads 4 head_dim 8 num_kv_heads 2 mask_kind none scale 0.125 : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>) -> tensor<6x32xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.attention': k: expected shape [6, 16] ([B, T, num_kv_heads*head_dim]), got [6, 32]

// -----

%q = "test.op"() : () -> tensor<6x32xf32>
%v = "test.op"() : () -> tensor<5x32xf32>
%z = mir.attention %q, %q, %v num_heads 4 head_dim 8 num_kv_heads 4 mask_kind none scale 0.125 : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<5x32xf32>) -> tensor<6x32xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.attention': v: expected shape [6, 32] (same as k), got [5, 32]

// -----

%q = "test.op"() : () -> tensor<6x32xf32>
%m = "test.op"() : () -> tensor<6x6xf32>
%z = mir.attention %q, %q, %q, %m num_heads 4 head_dim 8 num_kv_heads 4 mask_kind causal scale 0.125 : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x6xf32>) -> tensor<6x32xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.attention': mask: mask_kind 'causal' takes no mask operand, got one

// -----

%q = "test.op"() : () -> tensor<6x32xf32>
%z = mir.attention %q, %q, %q num_heads 4 head_dim 8 num_kv_heads 4 mask_kind bias scale 0.125 : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>) -> tensor<6x32xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.attention': mask: mask_kind 'bias' needs a mask operand, got none

// -----

%q = "test.op"() : () -> tensor<6x32xf32>
%k = "test.op"() : () -> tensor<4x32xf32>
%z = mir.attention %q, %k, %k num_heads 4 head_dim 8 num_kv_heads 4 mask_kind causal scale 0.125 : (tensor<6x32xf32>, tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<6x32xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.attention': causal attention needs S <= T, got S=6 > T=4

// -----

%q = "test.op"() : () -> tensor<2x6x32xf32>
%m = "test.op"() : () -> tensor<2x2x6x6xf32>
%z = mir.attention %q, %q, %q, %m num_heads 4 head_dim 8 num_kv_heads 4 mask_kind custom scale 0.125 : (tensor<2x6x32xf32>, tensor<2x6x32xf32>, tensor<2x6x32xf32>, tensor<2x2x6x6xf32>) -> tensor<2x6x32xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.attention': mask: expected [S, T] = [6, 6] or [1|2, 1|4, 6, 6], got [2, 2, 6, 6]

// -----

%q = "test.op"() : () -> tensor<6x32xf32>
%m = "test.op"() : () -> tensor<6x6xi32>
%z = mir.attention %q, %q, %q, %m num_heads 4 head_dim 8 num_kv_heads 4 mask_kind custom scale 0.125 : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x6xi32>) -> tensor<6x32xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.attention': mask: expected element type f32, got i32

// -----

%q = "test.op"() : () -> tensor<6x32xf32>
%z = "mir.attention"(%q, %q, %q) <{num_heads = 4 : i64, head_dim = 8 : i64, num_kv_heads = 4 : i64, mask_kind = #rlx<mask_kind none>, scale = 0x7F800000 : f32}> : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>) -> tensor<6x32xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.attention': scale: expected a finite value, got inf

// -----

%q = "test.op"() : () -> tensor<6x32xf32>
%z = mir.attention %q, %q, %q num_heads 4 head_dim 8 num_kv_heads 4 mask_kind none scale 0.125 : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>) -> tensor<6x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.attention': result: expected shape [6, 32], got [6, 8]

// -----

// === reshape
%x = "test.op"() : () -> tensor<4x8xf32>
%z = mir.reshape %x : tensor<4x8xf32> -> tensor<30xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.reshape': reshape: element counts differ: input [4, 8] has 32, target [30] has 30

// -----

%x = "test.op"() : () -> tensor<4x8xf32>
%z = mir.reshape %x : tensor<4x8xf32> -> tensor<32xi32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.reshape': result: expected element type f32 (as input), got i32

// -----

%x = "test.op"() : () -> tensor<4x8xf16>
%z = mir.reshape %x : tensor<4x8xf16> -> tensor<32xf16>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.reshape': input: expected element type f32 or i32 or i64 or ui8, got f16

// -----

// === transpose
%x = "test.op"() : () -> tensor<4x8xf32>
%z = mir.transpose %x perm [0] : tensor<4x8xf32> -> tensor<4x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.transpose': perm: expected 2 entries for rank 2, got (0,)

// -----

%x = "test.op"() : () -> tensor<4x8xf32>
%z = mir.transpose %x perm [1, 1] : tensor<4x8xf32> -> tensor<8x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.transpose': perm: expected a permutation of 0..1, got (1, 1)

// -----

%x = "test.op"() : () -> tensor<4x8xf32>
%z = mir.transpose %x perm [0, 2] : tensor<4x8xf32> -> tensor<4x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.transpose': perm: axis 2 is out of range for rank 2

// -----

%x = "test.op"() : () -> tensor<4x8xf32>
%z = mir.transpose %x perm [1, 0] : tensor<4x8xf32> -> tensor<4x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.transpose': result: expected shape [8, 4], got [4, 8]

// -----

%x = "test.op"() : () -> tensor<4x8xf32>
%z = mir.transpose %x perm [1, 0] : tensor<4x8xf32> -> tensor<8x4xi64>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.transpose': result: expected element type f32 (as input), got i64

// -----

// === narrow
%x = "test.op"() : () -> tensor<4x8xf32>
%z = mir.narrow %x axis 2 start 0 length 1 : tensor<4x8xf32> -> tensor<4x1xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.narrow': axis: axis 2 is out of range for rank 2

// -----

%x = "test.op"() : () -> tensor<4x8xf32>
%z = mir.narrow %x axis 1 start 6 length 4 : tensor<4x8xf32> -> tensor<4x4xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.narrow': narrow: start=6, length=4 must satisfy 0 <= start, 1 <= length, start+length <= 8 (dim 1 of [4, 8])

// -----

%x = "test.op"() : () -> tensor<4x8xf32>
%z = mir.narrow %x axis 1 start -1 length 1 : tensor<4x8xf32> -> tensor<4x1xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.narrow': narrow: start=-1, length=1 must satisfy 0 <= start, 1 <= length, start+length <= 8 (dim 1 of [4, 8])

// -----

%x = "test.op"() : () -> tensor<4x8xf32>
%z = mir.narrow %x axis 1 start 0 length 0 : tensor<4x8xf32> -> tensor<4x1xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.narrow': narrow: start=0, length=0 must satisfy 0 <= start, 1 <= length, start+length <= 8 (dim 1 of [4, 8])

// -----

%x = "test.op"() : () -> tensor<4x8xf32>
%z = mir.narrow %x axis 1 start 2 length 4 : tensor<4x8xf32> -> tensor<4x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.narrow': result: expected shape [4, 4], got [4, 8]

// -----

%x = "test.op"() : () -> tensor<4x8xf32>
%z = mir.narrow %x axis 0 start 0 length 2 : tensor<4x8xf32> -> tensor<2x8xi32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.narrow': result: expected element type f32 (as input), got i32

// -----

// === concat
%z = "mir.concat"() <{axis = 0 : i64}> : () -> tensor<4xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.concat': inputs: expected at least one input, got none

// -----

%x = "test.op"() : () -> tensor<4x8xf32>
%z = mir.concat %x, %x axis 2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x16xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.concat': axis: axis 2 is out of range for rank 2

// -----

%x = "test.op"() : () -> tensor<4x8xf32>
%y = "test.op"() : () -> tensor<4x7xf32>
%z = mir.concat %x, %y axis 0 : (tensor<4x8xf32>, tensor<4x7xf32>) -> tensor<8x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.concat': concat: input 1 has shape [4, 7], expected [4, 8] except along axis 0

// -----

%x = "test.op"() : () -> tensor<4x8xf32>
%y = "test.op"() : () -> tensor<4x8xi32>
%z = mir.concat %x, %y axis 0 : (tensor<4x8xf32>, tensor<4x8xi32>) -> tensor<8x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.concat': inputs[1]: expected element type f32 (as inputs[0]), got i32

// -----

%x = "test.op"() : () -> tensor<4x8xf32>
%z = mir.concat %x, %x axis 1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.concat': result: expected shape [4, 16], got [8, 8]

// -----

%x = "test.op"() : () -> tensor<4x8xf16>
%z = mir.concat %x axis 1 : (tensor<4x8xf16>) -> tensor<4x8xf16>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.concat': inputs[0]: expected element type f32 or i32 or i64 or ui8, got f16

// -----

// === broadcast_to
%x = "test.op"() : () -> tensor<3xf32>
%z = mir.broadcast_to %x : tensor<3xf32> -> tensor<4x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.broadcast_to': input of shape [3] cannot be broadcast to [4, 8]

// -----

%x = "test.op"() : () -> tensor<2x8xf32>
%z = mir.broadcast_to %x : tensor<2x8xf32> -> tensor<8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.broadcast_to': input of shape [2, 8] cannot be broadcast to [8]

// -----

%x = "test.op"() : () -> tensor<8xf32>
%z = mir.broadcast_to %x : tensor<8xf32> -> tensor<4x8xi32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.broadcast_to': result: expected element type f32 (as input), got i32

// -----

// === gather
%t = "test.op"() : () -> tensor<16x8xf32>
%i = "test.op"() : () -> tensor<3xf32>
%z = mir.gather %t, %i axis 0 : (tensor<16x8xf32>, tensor<3xf32>) -> tensor<3x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.gather': indices: expected element type i32 or i64, got f32

// -----

%t = "test.op"() : () -> tensor<16x8xf32>
%i = "test.op"() : () -> tensor<3xi32>
%z = mir.gather %t, %i axis 2 : (tensor<16x8xf32>, tensor<3xi32>) -> tensor<3x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.gather': axis: axis 2 is out of range for rank 2

// -----

%t = "test.op"() : () -> tensor<16x8xf32>
%i = "test.op"() : () -> tensor<3xi32>
%z = mir.gather %t, %i axis 1 : (tensor<16x8xf32>, tensor<3xi32>) -> tensor<3x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.gather': result: expected shape [16, 3], got [3, 8]

// -----

%t = "test.op"() : () -> tensor<16x8xf32>
%i = "test.op"() : () -> tensor<3xi32>
%z = mir.gather %t, %i axis 0 : (tensor<16x8xf32>, tensor<3xi32>) -> tensor<3x8xi32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.gather': result: expected element type f32 (as input), got i32

// -----

// === constant
%c = "mir.constant"() <{value = dense<1.0> : tensor<4xf32>}> : () -> tensor<5xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: attribute tensor<5xf32> expected from variable 'T', but got tensor<4xf32>

// -----

%c = mir.constant dense<1.0> : tensor<4xf64>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.constant': result: expected element type f32 or i32 or i64 or ui8, got f64

// -----

%c = mir.constant dense<1.0> : tensor<0xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.constant': result: every dimension must be >= 1, got shape [0]

// -----

// === fused_elementwise, yield
%z = "mir.fused_elementwise"() ({
  %c = arith.constant 1.0 : f32
  mir.yield %c : f32
}) : () -> tensor<4xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.fused_elementwise': inputs: expected at least one input, got none

// -----

%a = "test.op"() : () -> tensor<4xf16>
%z = mir.fused_elementwise ins(%a : tensor<4xf16>) -> tensor<4xf32> {
^bb0(%x: f16):
  %f = arith.extf %x : f16 to f32
  mir.yield %f : f32
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.fused_elementwise': inputs[0]: expected element type f32 or i32 or i64, got f16

// -----

%a = "test.op"() : () -> tensor<4xf32>
%z = mir.fused_elementwise ins(%a : tensor<4xf32>) -> tensor<4xui8> {
^bb0(%x: f32):
  %f = arith.fptoui %x : f32 to i8
  mir.yield %f : i8
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.fused_elementwise': result: expected element type f32 or i32 or i64, got ui8

// -----

%a = "test.op"() : () -> tensor<3xf32>
%z = mir.fused_elementwise ins(%a : tensor<3xf32>) -> tensor<4x8xf32> {
^bb0(%x: f32):
  mir.yield %x : f32
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.fused_elementwise': inputs[0]: input of shape [3] cannot be broadcast to [4, 8]

// -----

%a = "test.op"() : () -> tensor<4xf32>
%z = mir.fused_elementwise ins(%a, %a : tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> {
^bb0(%x: f32):
  mir.yield %x : f32
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.fused_elementwise': body: expected 2 block arguments (one per input), got 1

// -----

%a = "test.op"() : () -> tensor<4xi32>
%z = mir.fused_elementwise ins(%a : tensor<4xi32>) -> tensor<4xi32> {
^bb0(%x: i64):
  %t = arith.trunci %x : i64 to i32
  mir.yield %t : i32
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.fused_elementwise': body: block argument 0: expected i32 (element type of inputs[0]), got i64

// -----

%a = "test.op"() : () -> tensor<4xf32>
%z = mir.fused_elementwise ins(%a : tensor<4xf32>) -> tensor<4xf32> {
^bb0(%x: f32):
  %t = "test.op"(%x) : (f32) -> f32
  mir.yield %t : f32
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.fused_elementwise': body: expected only arith and math ops, got 'test.op'

// -----

%a = "test.op"() : () -> tensor<4xf32>
%z = mir.fused_elementwise ins(%a : tensor<4xf32>) -> tensor<4xf32> {
^bb0(%x: f32):
  %c = arith.constant dense<1.0> : tensor<4xf32>
  mir.yield %x : f32
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.fused_elementwise': body: 'arith.constant' must compute a scalar, got a value of type tensor<4xf32>

// -----

%a = "test.op"() : () -> tensor<4xf32>
%z = mir.fused_elementwise ins(%a : tensor<4xf32>) -> tensor<4xf32> {
^bb0(%x: f32):
  "test.termop"() : () -> ()
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.fused_elementwise': body: expected to end in 'mir.yield', got 'test.termop'

// -----

%a = "test.op"() : () -> tensor<4xf32>
%z = mir.fused_elementwise ins(%a : tensor<4xf32>) -> tensor<4xf32> {
^bb0(%x: f32):
  mir.yield %x, %x : f32, f32
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.fused_elementwise': body: 'mir.yield' expected one value of type f32 (element type of result), got (f32, f32)

// -----

%a = "test.op"() : () -> tensor<4xf32>
%z = mir.fused_elementwise ins(%a : tensor<4xf32>) -> tensor<4xi32> {
^bb0(%x: f32):
  mir.yield %x : f32
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.fused_elementwise': body: 'mir.yield' expected one value of type i32 (element type of result), got (f32)

// -----

%a = "test.op"() : () -> tensor<4xf32>
%z = mir.fused_elementwise ins(%a : tensor<4xf32>) -> tensor<4xf32> {
^bb0(%x: f32):
  %q = arith.addf %x, %x : f32
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: Operation arith.addf terminates block in single-block region but is not a terminator

// -----

%a = "test.op"() : () -> tensor<4xf32>
%s = "test.op"() : () -> f32
%z = mir.fused_elementwise ins(%a : tensor<4xf32>) -> tensor<4xf32> {
^bb0(%x: f32):
  %q = arith.addf %x, %s : f32
  mir.yield %q : f32
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: Operation using value defined out of its IsolatedFromAbove parent: AddfOp(%q = arith.addf %x, %s : f32)

// -----

%a = "test.op"() : () -> f32
mir.yield %a : f32

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.yield' expects parent op to be one of 'mir.fused_elementwise', 'mir.scan'

// -----

// mir.dequant_matmul q4_1: x does not fit the scheme's blocks
%x, %w = "test.op"() : () -> (tensor<2x48xf32>, tensor<8x40xui8>)
%y = mir.dequant_matmul %x, %w scheme q4_1 : (tensor<2x48xf32>, tensor<8x40xui8>) -> tensor<2x8xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.dequant_matmul': x: last dim K must be a multiple of 32 (a q4_1 block), got 48

// -----

// mir.dequant_matmul q4_k: x does not fit the scheme's blocks
%x, %w = "test.op"() : () -> (tensor<2x128xf32>, tensor<8x144xui8>)
%y = mir.dequant_matmul %x, %w scheme q4_k : (tensor<2x128xf32>, tensor<8x144xui8>) -> tensor<2x8xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.dequant_matmul': x: last dim K must be a multiple of 256 (a q4_k block), got 128

// -----

// mir.dequant_matmul f16: w does not fit the scheme's blocks
%x, %w = "test.op"() : () -> (tensor<2x5xf32>, tensor<8x5xui8>)
%y = mir.dequant_matmul %x, %w scheme f16 : (tensor<2x5xf32>, tensor<8x5xui8>) -> tensor<2x8xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.dequant_matmul': w: expected shape [8, 10] (f16: K/1 blocks of 2 bytes), got [8, 5]

// -----

// mir.attention: a sliding window needs the causal mask
%q = "test.op"() : () -> tensor<6x32xf32>
%z = mir.attention %q, %q, %q num_heads 4 head_dim 8 num_kv_heads 4 mask_kind none scale 0.125 window 2 : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.attention': window: a sliding window needs mask_kind 'causal', got mask_kind 'none'

// -----

// mir.attention: a window of no keys
%q = "test.op"() : () -> tensor<6x32xf32>
%z = mir.attention %q, %q, %q num_heads 4 head_dim 8 num_kv_heads 4 mask_kind causal scale 0.125 window 0 : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>) -> tensor<6x32xf32>
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.attention': window: expected an integer >= 1 (the keys a query sees), got 0
