// RUN: rlx-opt %s -p convert-hir-to-mir | filecheck %s
// RUN: rlx-opt %s -p convert-hir-to-mir | filecheck %s --check-prefix=NOHIR

// Every hir op expands into mir primitives (SPEC "Semantics"), one case per pattern and
// per optional operand or property. The replacement keeps the hir op's result type.

// NOHIR-NOT: hir.

// hir.linear: mir.matmul, then mir.add of the bias, then the activation's unary op
// (fusing them into mir.fused_matmul is mir-fuse's job).
// CHECK-LABEL: func.func @linear(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<4x16xf32>, %[[W:[^:]*]]: tensor<16x8xf32>)
// CHECK-NEXT:    %[[MATMUL:.*]] = mir.matmul %[[X]], %[[W]] : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    func.return %[[MATMUL]] : tensor<4x8xf32>
func.func @linear(%x: tensor<4x16xf32>, %w: tensor<16x8xf32>) -> tensor<4x8xf32> {
  %y = hir.linear %x, %w : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @linear_bias(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<2x4x16xf32>, %[[W:[^:]*]]: tensor<16x8xf32>, %[[B:[^:]*]]: tensor<8xf32>)
// CHECK-NEXT:    %[[MATMUL:.*]] = mir.matmul %[[X]], %[[W]] : (tensor<2x4x16xf32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT:    %[[ADD:.*]] = mir.add %[[MATMUL]], %[[B]] : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT:    func.return %[[ADD]] : tensor<2x4x8xf32>
func.func @linear_bias(%x: tensor<2x4x16xf32>, %w: tensor<16x8xf32>, %b: tensor<8xf32>) -> tensor<2x4x8xf32> {
  %y = hir.linear %x, %w bias %b : (tensor<2x4x16xf32>, tensor<16x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  func.return %y : tensor<2x4x8xf32>
}

// CHECK-LABEL: func.func @linear_relu(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<16xf32>, %[[W:[^:]*]]: tensor<16x8xf32>)
// CHECK-NEXT:    %[[MATMUL:.*]] = mir.matmul %[[X]], %[[W]] : (tensor<16xf32>, tensor<16x8xf32>) -> tensor<8xf32>
// CHECK-NEXT:    %[[RELU:.*]] = mir.relu %[[MATMUL]] : tensor<8xf32>
// CHECK-NEXT:    func.return %[[RELU]] : tensor<8xf32>
func.func @linear_relu(%x: tensor<16xf32>, %w: tensor<16x8xf32>) -> tensor<8xf32> {
  %y = hir.linear %x, %w activation relu : (tensor<16xf32>, tensor<16x8xf32>) -> tensor<8xf32>
  func.return %y : tensor<8xf32>
}

// CHECK-LABEL: func.func @linear_bias_gelu(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<4x16xf32>, %[[W:[^:]*]]: tensor<16x8xf32>, %[[B:[^:]*]]: tensor<8xf32>)
// CHECK-NEXT:    %[[MATMUL:.*]] = mir.matmul %[[X]], %[[W]] : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %[[ADD:.*]] = mir.add %[[MATMUL]], %[[B]] : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %[[GELU:.*]] = mir.gelu %[[ADD]] : tensor<4x8xf32>
// CHECK-NEXT:    func.return %[[GELU]] : tensor<4x8xf32>
func.func @linear_bias_gelu(%x: tensor<4x16xf32>, %w: tensor<16x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %y = hir.linear %x, %w bias %b activation gelu : (tensor<4x16xf32>, tensor<16x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @linear_gelu_tanh(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<4x16xf32>, %[[W:[^:]*]]: tensor<16x8xf32>)
// CHECK-NEXT:    %[[MATMUL:.*]] = mir.matmul %[[X]], %[[W]] : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %[[GELU_TANH:.*]] = mir.gelu_tanh %[[MATMUL]] : tensor<4x8xf32>
// CHECK-NEXT:    func.return %[[GELU_TANH]] : tensor<4x8xf32>
func.func @linear_gelu_tanh(%x: tensor<4x16xf32>, %w: tensor<16x8xf32>) -> tensor<4x8xf32> {
  %y = hir.linear %x, %w activation gelu_tanh : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @linear_bias_silu(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<4x16xf32>, %[[W:[^:]*]]: tensor<16x8xf32>, %[[B:[^:]*]]: tensor<8xf32>)
// CHECK-NEXT:    %[[MATMUL:.*]] = mir.matmul %[[X]], %[[W]] : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %[[ADD:.*]] = mir.add %[[MATMUL]], %[[B]] : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %[[SILU:.*]] = mir.silu %[[ADD]] : tensor<4x8xf32>
// CHECK-NEXT:    func.return %[[SILU]] : tensor<4x8xf32>
func.func @linear_bias_silu(%x: tensor<4x16xf32>, %w: tensor<16x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %y = hir.linear %x, %w bias %b activation silu : (tensor<4x16xf32>, tensor<16x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @linear_sigmoid(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<4x16xf32>, %[[W:[^:]*]]: tensor<16x8xf32>)
// CHECK-NEXT:    %[[MATMUL:.*]] = mir.matmul %[[X]], %[[W]] : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %[[SIGMOID:.*]] = mir.sigmoid %[[MATMUL]] : tensor<4x8xf32>
// CHECK-NEXT:    func.return %[[SIGMOID]] : tensor<4x8xf32>
func.func @linear_sigmoid(%x: tensor<4x16xf32>, %w: tensor<16x8xf32>) -> tensor<4x8xf32> {
  %y = hir.linear %x, %w activation sigmoid : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @linear_bias_tanh(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<4x16xf32>, %[[W:[^:]*]]: tensor<16x8xf32>, %[[B:[^:]*]]: tensor<8xf32>)
// CHECK-NEXT:    %[[MATMUL:.*]] = mir.matmul %[[X]], %[[W]] : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %[[ADD:.*]] = mir.add %[[MATMUL]], %[[B]] : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %[[TANH:.*]] = mir.tanh %[[ADD]] : tensor<4x8xf32>
// CHECK-NEXT:    func.return %[[TANH]] : tensor<4x8xf32>
func.func @linear_bias_tanh(%x: tensor<4x16xf32>, %w: tensor<16x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %y = hir.linear %x, %w bias %b activation tanh : (tensor<4x16xf32>, tensor<16x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}

// hir.swiglu_ffn: (silu(x @ gate) * (x @ up)) @ down.
// CHECK-LABEL: func.func @swiglu_ffn(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<6x32xf32>, %[[UP:[^:]*]]: tensor<32x64xf32>, %[[GATE:[^:]*]]: tensor<32x64xf32>, %[[DOWN:[^:]*]]: tensor<64x48xf32>)
// CHECK-NEXT:    %[[XG:.*]] = mir.matmul %[[X]], %[[GATE]] : (tensor<6x32xf32>, tensor<32x64xf32>) -> tensor<6x64xf32>
// CHECK-NEXT:    %[[SG:.*]] = mir.silu %[[XG]] : tensor<6x64xf32>
// CHECK-NEXT:    %[[XU:.*]] = mir.matmul %[[X]], %[[UP]] : (tensor<6x32xf32>, tensor<32x64xf32>) -> tensor<6x64xf32>
// CHECK-NEXT:    %[[GU:.*]] = mir.mul %[[SG]], %[[XU]] : (tensor<6x64xf32>, tensor<6x64xf32>) -> tensor<6x64xf32>
// CHECK-NEXT:    %[[Y:.*]] = mir.matmul %[[GU]], %[[DOWN]] : (tensor<6x64xf32>, tensor<64x48xf32>) -> tensor<6x48xf32>
// CHECK-NEXT:    func.return %[[Y]] : tensor<6x48xf32>
func.func @swiglu_ffn(%x: tensor<6x32xf32>, %up: tensor<32x64xf32>, %gate: tensor<32x64xf32>, %down: tensor<64x48xf32>) -> tensor<6x48xf32> {
  %y = hir.swiglu_ffn %x, up %up, gate %gate, down %down : (tensor<6x32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x48xf32>) -> tensor<6x48xf32>
  func.return %y : tensor<6x48xf32>
}

// The norms keep one mir op each; beta is mir.rms_norm's optional operand.
// CHECK-LABEL: func.func @rms_norm(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<2x6x32xf32>, %[[G:[^:]*]]: tensor<32xf32>)
// CHECK-NEXT:    %[[RMS_NORM:.*]] = mir.rms_norm %[[X]], %[[G]] : (tensor<2x6x32xf32>, tensor<32xf32>) -> tensor<2x6x32xf32>
// CHECK-NEXT:    func.return %[[RMS_NORM]] : tensor<2x6x32xf32>
func.func @rms_norm(%x: tensor<2x6x32xf32>, %g: tensor<32xf32>) -> tensor<2x6x32xf32> {
  %y = hir.rms_norm %x, %g : (tensor<2x6x32xf32>, tensor<32xf32>) -> tensor<2x6x32xf32>
  func.return %y : tensor<2x6x32xf32>
}

// CHECK-LABEL: func.func @rms_norm_beta(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<6x32xf32>, %[[G:[^:]*]]: tensor<32xf32>, %[[B:[^:]*]]: tensor<32xf32>)
// CHECK-NEXT:    %[[RMS_NORM:.*]] = mir.rms_norm %[[X]], %[[G]], %[[B]] eps 1.000000e-06 : (tensor<6x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<6x32xf32>
// CHECK-NEXT:    func.return %[[RMS_NORM]] : tensor<6x32xf32>
func.func @rms_norm_beta(%x: tensor<6x32xf32>, %g: tensor<32xf32>, %b: tensor<32xf32>) -> tensor<6x32xf32> {
  %y = hir.rms_norm %x, %g beta %b eps 1.000000e-06 : (tensor<6x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<6x32xf32>
  func.return %y : tensor<6x32xf32>
}

// hir.residual_rms_norm: mir.add, then mir.rms_norm of the sum.
// CHECK-LABEL: func.func @residual_rms_norm(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<6x32xf32>, %[[R:[^:]*]]: tensor<6x32xf32>, %[[G:[^:]*]]: tensor<32xf32>)
// CHECK-NEXT:    %[[ADD:.*]] = mir.add %[[X]], %[[R]] : (tensor<6x32xf32>, tensor<6x32xf32>) -> tensor<6x32xf32>
// CHECK-NEXT:    %[[RMS_NORM:.*]] = mir.rms_norm %[[ADD]], %[[G]] : (tensor<6x32xf32>, tensor<32xf32>) -> tensor<6x32xf32>
// CHECK-NEXT:    func.return %[[RMS_NORM]] : tensor<6x32xf32>
func.func @residual_rms_norm(%x: tensor<6x32xf32>, %r: tensor<6x32xf32>, %g: tensor<32xf32>) -> tensor<6x32xf32> {
  %y = hir.residual_rms_norm %x, %r, %g : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<32xf32>) -> tensor<6x32xf32>
  func.return %y : tensor<6x32xf32>
}

// CHECK-LABEL: func.func @residual_rms_norm_beta(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<6x32xf32>, %[[R:[^:]*]]: tensor<6x32xf32>, %[[G:[^:]*]]: tensor<32xf32>, %[[B:[^:]*]]: tensor<32xf32>)
// CHECK-NEXT:    %[[ADD:.*]] = mir.add %[[X]], %[[R]] : (tensor<6x32xf32>, tensor<6x32xf32>) -> tensor<6x32xf32>
// CHECK-NEXT:    %[[RMS_NORM:.*]] = mir.rms_norm %[[ADD]], %[[G]], %[[B]] eps 1.000000e-06 : (tensor<6x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<6x32xf32>
// CHECK-NEXT:    func.return %[[RMS_NORM]] : tensor<6x32xf32>
func.func @residual_rms_norm_beta(%x: tensor<6x32xf32>, %r: tensor<6x32xf32>, %g: tensor<32xf32>, %b: tensor<32xf32>) -> tensor<6x32xf32> {
  %y = hir.residual_rms_norm %x, %r, %g beta %b eps 1.000000e-06 : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<6x32xf32>
  func.return %y : tensor<6x32xf32>
}

// CHECK-LABEL: func.func @layer_norm(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<6x32xf32>, %[[G:[^:]*]]: tensor<32xf32>, %[[B:[^:]*]]: tensor<32xf32>)
// CHECK-NEXT:    %[[LAYER_NORM:.*]] = mir.layer_norm %[[X]], %[[G]], %[[B]] eps 1.000000e-03 : (tensor<6x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<6x32xf32>
// CHECK-NEXT:    func.return %[[LAYER_NORM]] : tensor<6x32xf32>
func.func @layer_norm(%x: tensor<6x32xf32>, %g: tensor<32xf32>, %b: tensor<32xf32>) -> tensor<6x32xf32> {
  %y = hir.layer_norm %x, %g, %b eps 1.000000e-03 : (tensor<6x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<6x32xf32>
  func.return %y : tensor<6x32xf32>
}

// hir.attention and hir.rope: the mir op of the same name, same properties.
// CHECK-LABEL: func.func @attention(
// CHECK-SAME:    %[[Q:[^:]*]]: tensor<2x6x32xf32>, %[[K:[^:]*]]: tensor<2x10x16xf32>, %[[V:[^:]*]]: tensor<2x10x16xf32>)
// CHECK-NEXT:    %[[ATTENTION:.*]] = mir.attention %[[Q]], %[[K]], %[[V]] num_heads 4 head_dim 8 num_kv_heads 2 mask_kind none scale 0.353553385 : (tensor<2x6x32xf32>, tensor<2x10x16xf32>, tensor<2x10x16xf32>) -> tensor<2x6x32xf32>
// CHECK-NEXT:    func.return %[[ATTENTION]] : tensor<2x6x32xf32>
func.func @attention(%q: tensor<2x6x32xf32>, %k: tensor<2x10x16xf32>, %v: tensor<2x10x16xf32>) -> tensor<2x6x32xf32> {
  %y = hir.attention %q, %k, %v num_heads 4 num_kv_heads 2 head_dim 8 scale 0.353553385 : (tensor<2x6x32xf32>, tensor<2x10x16xf32>, tensor<2x10x16xf32>) -> tensor<2x6x32xf32>
  func.return %y : tensor<2x6x32xf32>
}

// CHECK-LABEL: func.func @attention_causal(
// CHECK-SAME:    %[[Q:[^:]*]]: tensor<6x32xf32>, %[[K:[^:]*]]: tensor<6x32xf32>, %[[V:[^:]*]]: tensor<6x32xf32>)
// CHECK-NEXT:    %[[ATTENTION:.*]] = mir.attention %[[Q]], %[[K]], %[[V]] num_heads 4 head_dim 8 num_kv_heads 4 mask_kind causal scale 0.353553385 : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>) -> tensor<6x32xf32>
// CHECK-NEXT:    func.return %[[ATTENTION]] : tensor<6x32xf32>
func.func @attention_causal(%q: tensor<6x32xf32>, %k: tensor<6x32xf32>, %v: tensor<6x32xf32>) -> tensor<6x32xf32> {
  %y = hir.attention %q, %k, %v mask_kind causal num_heads 4 num_kv_heads 4 head_dim 8 scale 0.353553385 : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>) -> tensor<6x32xf32>
  func.return %y : tensor<6x32xf32>
}

// CHECK-LABEL: func.func @attention_custom_mask(
// CHECK-SAME:    %[[Q:[^:]*]]: tensor<2x6x32xf32>, %[[K:[^:]*]]: tensor<2x10x16xf32>, %[[V:[^:]*]]: tensor<2x10x16xf32>, %[[M:[^:]*]]: tensor<6x10xf32>)
// CHECK-NEXT:    %[[ATTENTION:.*]] = mir.attention %[[Q]], %[[K]], %[[V]], %[[M]] num_heads 4 head_dim 8 num_kv_heads 2 mask_kind custom scale 0.353553385 : (tensor<2x6x32xf32>, tensor<2x10x16xf32>, tensor<2x10x16xf32>, tensor<6x10xf32>) -> tensor<2x6x32xf32>
// CHECK-NEXT:    func.return %[[ATTENTION]] : tensor<2x6x32xf32>
func.func @attention_custom_mask(%q: tensor<2x6x32xf32>, %k: tensor<2x10x16xf32>, %v: tensor<2x10x16xf32>, %m: tensor<6x10xf32>) -> tensor<2x6x32xf32> {
  %y = hir.attention %q, %k, %v mask %m mask_kind custom num_heads 4 num_kv_heads 2 head_dim 8 scale 0.353553385 : (tensor<2x6x32xf32>, tensor<2x10x16xf32>, tensor<2x10x16xf32>, tensor<6x10xf32>) -> tensor<2x6x32xf32>
  func.return %y : tensor<2x6x32xf32>
}

// CHECK-LABEL: func.func @attention_bias_mask(
// CHECK-SAME:    %[[Q:[^:]*]]: tensor<2x6x32xf32>, %[[K:[^:]*]]: tensor<2x10x16xf32>, %[[V:[^:]*]]: tensor<2x10x16xf32>, %[[M:[^:]*]]: tensor<1x4x6x10xf32>)
// CHECK-NEXT:    %[[ATTENTION:.*]] = mir.attention %[[Q]], %[[K]], %[[V]], %[[M]] num_heads 4 head_dim 8 num_kv_heads 2 mask_kind bias scale 1.000000e+00 : (tensor<2x6x32xf32>, tensor<2x10x16xf32>, tensor<2x10x16xf32>, tensor<1x4x6x10xf32>) -> tensor<2x6x32xf32>
// CHECK-NEXT:    func.return %[[ATTENTION]] : tensor<2x6x32xf32>
func.func @attention_bias_mask(%q: tensor<2x6x32xf32>, %k: tensor<2x10x16xf32>, %v: tensor<2x10x16xf32>, %m: tensor<1x4x6x10xf32>) -> tensor<2x6x32xf32> {
  %y = hir.attention %q, %k, %v mask %m mask_kind bias num_heads 4 num_kv_heads 2 head_dim 8 scale 1.000000e+00 : (tensor<2x6x32xf32>, tensor<2x10x16xf32>, tensor<2x10x16xf32>, tensor<1x4x6x10xf32>) -> tensor<2x6x32xf32>
  func.return %y : tensor<2x6x32xf32>
}

// CHECK-LABEL: func.func @rope(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<2x6x32xf32>, %[[C:[^:]*]]: tensor<6x8xf32>, %[[S:[^:]*]]: tensor<6x8xf32>)
// CHECK-NEXT:    %[[ROPE:.*]] = mir.rope %[[X]], %[[C]], %[[S]] head_dim 16 n_rot 16 style half : (tensor<2x6x32xf32>, tensor<6x8xf32>, tensor<6x8xf32>) -> tensor<2x6x32xf32>
// CHECK-NEXT:    func.return %[[ROPE]] : tensor<2x6x32xf32>
func.func @rope(%x: tensor<2x6x32xf32>, %c: tensor<6x8xf32>, %s: tensor<6x8xf32>) -> tensor<2x6x32xf32> {
  %y = hir.rope %x, %c, %s head_dim 16 n_rot 16 : (tensor<2x6x32xf32>, tensor<6x8xf32>, tensor<6x8xf32>) -> tensor<2x6x32xf32>
  func.return %y : tensor<2x6x32xf32>
}

// CHECK-LABEL: func.func @rope_interleaved(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<6x32xf32>, %[[C:[^:]*]]: tensor<6x4xf32>, %[[S:[^:]*]]: tensor<6x4xf32>)
// CHECK-NEXT:    %[[ROPE:.*]] = mir.rope %[[X]], %[[C]], %[[S]] head_dim 16 n_rot 8 style interleaved : (tensor<6x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<6x32xf32>
// CHECK-NEXT:    func.return %[[ROPE]] : tensor<6x32xf32>
func.func @rope_interleaved(%x: tensor<6x32xf32>, %c: tensor<6x4xf32>, %s: tensor<6x4xf32>) -> tensor<6x32xf32> {
  %y = hir.rope %x, %c, %s head_dim 16 n_rot 8 style interleaved : (tensor<6x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<6x32xf32>
  func.return %y : tensor<6x32xf32>
}

// hir.llama_decoder_block: the whole pre-norm block in primitives: rms_norm, q/k/v
// matmuls, rope on q and k (n_rot = head_dim), grouped-query attention (scale
// 1/sqrt(head_dim)), o projection, residual add, rms_norm, SwiGLU FFN, residual add.
// CHECK-LABEL: func.func @llama_decoder_block(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<2x5x32xf32>, %[[LN1_G:[^:]*]]: tensor<32xf32>, %[[Q_W:[^:]*]]: tensor<32x32xf32>, %[[K_W:[^:]*]]: tensor<32x16xf32>, %[[V_W:[^:]*]]: tensor<32x16xf32>, %[[O_W:[^:]*]]: tensor<32x32xf32>, %[[LN2_G:[^:]*]]: tensor<32xf32>, %[[GATE_W:[^:]*]]: tensor<32x48xf32>, %[[UP_W:[^:]*]]: tensor<32x48xf32>, %[[DOWN_W:[^:]*]]: tensor<48x32xf32>, %[[COS:[^:]*]]: tensor<5x4xf32>, %[[SIN:[^:]*]]: tensor<5x4xf32>)
// CHECK-NEXT:    %[[A:.*]] = mir.rms_norm %[[X]], %[[LN1_G]] : (tensor<2x5x32xf32>, tensor<32xf32>) -> tensor<2x5x32xf32>
// CHECK-NEXT:    %[[Q:.*]] = mir.matmul %[[A]], %[[Q_W]] : (tensor<2x5x32xf32>, tensor<32x32xf32>) -> tensor<2x5x32xf32>
// CHECK-NEXT:    %[[K:.*]] = mir.matmul %[[A]], %[[K_W]] : (tensor<2x5x32xf32>, tensor<32x16xf32>) -> tensor<2x5x16xf32>
// CHECK-NEXT:    %[[V:.*]] = mir.matmul %[[A]], %[[V_W]] : (tensor<2x5x32xf32>, tensor<32x16xf32>) -> tensor<2x5x16xf32>
// CHECK-NEXT:    %[[QR:.*]] = mir.rope %[[Q]], %[[COS]], %[[SIN]] head_dim 8 n_rot 8 style half : (tensor<2x5x32xf32>, tensor<5x4xf32>, tensor<5x4xf32>) -> tensor<2x5x32xf32>
// CHECK-NEXT:    %[[KR:.*]] = mir.rope %[[K]], %[[COS]], %[[SIN]] head_dim 8 n_rot 8 style half : (tensor<2x5x16xf32>, tensor<5x4xf32>, tensor<5x4xf32>) -> tensor<2x5x16xf32>
// CHECK-NEXT:    %[[ATT:.*]] = mir.attention %[[QR]], %[[KR]], %[[V]] num_heads 4 head_dim 8 num_kv_heads 2 mask_kind causal scale 0.353553385 : (tensor<2x5x32xf32>, tensor<2x5x16xf32>, tensor<2x5x16xf32>) -> tensor<2x5x32xf32>
// CHECK-NEXT:    %[[O:.*]] = mir.matmul %[[ATT]], %[[O_W]] : (tensor<2x5x32xf32>, tensor<32x32xf32>) -> tensor<2x5x32xf32>
// CHECK-NEXT:    %[[H:.*]] = mir.add %[[X]], %[[O]] : (tensor<2x5x32xf32>, tensor<2x5x32xf32>) -> tensor<2x5x32xf32>
// CHECK-NEXT:    %[[N2:.*]] = mir.rms_norm %[[H]], %[[LN2_G]] : (tensor<2x5x32xf32>, tensor<32xf32>) -> tensor<2x5x32xf32>
// CHECK-NEXT:    %[[XG:.*]] = mir.matmul %[[N2]], %[[GATE_W]] : (tensor<2x5x32xf32>, tensor<32x48xf32>) -> tensor<2x5x48xf32>
// CHECK-NEXT:    %[[SG:.*]] = mir.silu %[[XG]] : tensor<2x5x48xf32>
// CHECK-NEXT:    %[[XU:.*]] = mir.matmul %[[N2]], %[[UP_W]] : (tensor<2x5x32xf32>, tensor<32x48xf32>) -> tensor<2x5x48xf32>
// CHECK-NEXT:    %[[GU:.*]] = mir.mul %[[SG]], %[[XU]] : (tensor<2x5x48xf32>, tensor<2x5x48xf32>) -> tensor<2x5x48xf32>
// CHECK-NEXT:    %[[FFN:.*]] = mir.matmul %[[GU]], %[[DOWN_W]] : (tensor<2x5x48xf32>, tensor<48x32xf32>) -> tensor<2x5x32xf32>
// CHECK-NEXT:    %[[OUT:.*]] = mir.add %[[H]], %[[FFN]] : (tensor<2x5x32xf32>, tensor<2x5x32xf32>) -> tensor<2x5x32xf32>
// CHECK-NEXT:    func.return %[[OUT]] : tensor<2x5x32xf32>
func.func @llama_decoder_block(%x: tensor<2x5x32xf32>, %ln1_g: tensor<32xf32>, %q_w: tensor<32x32xf32>, %k_w: tensor<32x16xf32>, %v_w: tensor<32x16xf32>, %o_w: tensor<32x32xf32>, %ln2_g: tensor<32xf32>, %gate_w: tensor<32x48xf32>, %up_w: tensor<32x48xf32>, %down_w: tensor<48x32xf32>, %cos: tensor<5x4xf32>, %sin: tensor<5x4xf32>) -> tensor<2x5x32xf32> {
  %y = hir.llama_decoder_block %x ln1(%ln1_g) attn(%q_w, %k_w, %v_w, %o_w) ln2(%ln2_g) ffn(%gate_w, %up_w, %down_w) rope(%cos, %sin) num_heads 4 num_kv_heads 2 head_dim 8 : (tensor<2x5x32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x48xf32>, tensor<32x48xf32>, tensor<48x32xf32>, tensor<5x4xf32>, tensor<5x4xf32>) -> tensor<2x5x32xf32>
  func.return %y : tensor<2x5x32xf32>
}

// With betas, a bias mask, interleaved rope and eps: all carried over.
// CHECK-LABEL: func.func @llama_decoder_block_betas_mask(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<5x32xf32>, %[[LN1_G:[^:]*]]: tensor<32xf32>, %[[LN1_B:[^:]*]]: tensor<32xf32>, %[[Q_W:[^:]*]]: tensor<32x32xf32>, %[[K_W:[^:]*]]: tensor<32x16xf32>, %[[V_W:[^:]*]]: tensor<32x16xf32>, %[[O_W:[^:]*]]: tensor<32x32xf32>, %[[LN2_G:[^:]*]]: tensor<32xf32>, %[[LN2_B:[^:]*]]: tensor<32xf32>, %[[GATE_W:[^:]*]]: tensor<32x48xf32>, %[[UP_W:[^:]*]]: tensor<32x48xf32>, %[[DOWN_W:[^:]*]]: tensor<48x32xf32>, %[[COS:[^:]*]]: tensor<5x4xf32>, %[[SIN:[^:]*]]: tensor<5x4xf32>, %[[MASK:[^:]*]]: tensor<5x5xf32>)
// CHECK-NEXT:    %[[A:.*]] = mir.rms_norm %[[X]], %[[LN1_G]], %[[LN1_B]] eps 1.000000e-06 : (tensor<5x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<5x32xf32>
// CHECK-NEXT:    %[[Q:.*]] = mir.matmul %[[A]], %[[Q_W]] : (tensor<5x32xf32>, tensor<32x32xf32>) -> tensor<5x32xf32>
// CHECK-NEXT:    %[[K:.*]] = mir.matmul %[[A]], %[[K_W]] : (tensor<5x32xf32>, tensor<32x16xf32>) -> tensor<5x16xf32>
// CHECK-NEXT:    %[[V:.*]] = mir.matmul %[[A]], %[[V_W]] : (tensor<5x32xf32>, tensor<32x16xf32>) -> tensor<5x16xf32>
// CHECK-NEXT:    %[[QR:.*]] = mir.rope %[[Q]], %[[COS]], %[[SIN]] head_dim 8 n_rot 8 style interleaved : (tensor<5x32xf32>, tensor<5x4xf32>, tensor<5x4xf32>) -> tensor<5x32xf32>
// CHECK-NEXT:    %[[KR:.*]] = mir.rope %[[K]], %[[COS]], %[[SIN]] head_dim 8 n_rot 8 style interleaved : (tensor<5x16xf32>, tensor<5x4xf32>, tensor<5x4xf32>) -> tensor<5x16xf32>
// CHECK-NEXT:    %[[ATT:.*]] = mir.attention %[[QR]], %[[KR]], %[[V]], %[[MASK]] num_heads 4 head_dim 8 num_kv_heads 2 mask_kind bias scale 0.353553385 : (tensor<5x32xf32>, tensor<5x16xf32>, tensor<5x16xf32>, tensor<5x5xf32>) -> tensor<5x32xf32>
// CHECK-NEXT:    %[[O:.*]] = mir.matmul %[[ATT]], %[[O_W]] : (tensor<5x32xf32>, tensor<32x32xf32>) -> tensor<5x32xf32>
// CHECK-NEXT:    %[[H:.*]] = mir.add %[[X]], %[[O]] : (tensor<5x32xf32>, tensor<5x32xf32>) -> tensor<5x32xf32>
// CHECK-NEXT:    %[[N2:.*]] = mir.rms_norm %[[H]], %[[LN2_G]], %[[LN2_B]] eps 1.000000e-06 : (tensor<5x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<5x32xf32>
// CHECK-NEXT:    %[[XG:.*]] = mir.matmul %[[N2]], %[[GATE_W]] : (tensor<5x32xf32>, tensor<32x48xf32>) -> tensor<5x48xf32>
// CHECK-NEXT:    %[[SG:.*]] = mir.silu %[[XG]] : tensor<5x48xf32>
// CHECK-NEXT:    %[[XU:.*]] = mir.matmul %[[N2]], %[[UP_W]] : (tensor<5x32xf32>, tensor<32x48xf32>) -> tensor<5x48xf32>
// CHECK-NEXT:    %[[GU:.*]] = mir.mul %[[SG]], %[[XU]] : (tensor<5x48xf32>, tensor<5x48xf32>) -> tensor<5x48xf32>
// CHECK-NEXT:    %[[FFN:.*]] = mir.matmul %[[GU]], %[[DOWN_W]] : (tensor<5x48xf32>, tensor<48x32xf32>) -> tensor<5x32xf32>
// CHECK-NEXT:    %[[OUT:.*]] = mir.add %[[H]], %[[FFN]] : (tensor<5x32xf32>, tensor<5x32xf32>) -> tensor<5x32xf32>
// CHECK-NEXT:    func.return %[[OUT]] : tensor<5x32xf32>
func.func @llama_decoder_block_betas_mask(%x: tensor<5x32xf32>, %ln1_g: tensor<32xf32>, %ln1_b: tensor<32xf32>, %q_w: tensor<32x32xf32>, %k_w: tensor<32x16xf32>, %v_w: tensor<32x16xf32>, %o_w: tensor<32x32xf32>, %ln2_g: tensor<32xf32>, %ln2_b: tensor<32xf32>, %gate_w: tensor<32x48xf32>, %up_w: tensor<32x48xf32>, %down_w: tensor<48x32xf32>, %cos: tensor<5x4xf32>, %sin: tensor<5x4xf32>, %mask: tensor<5x5xf32>) -> tensor<5x32xf32> {
  %y = hir.llama_decoder_block %x ln1(%ln1_g, %ln1_b) attn(%q_w, %k_w, %v_w, %o_w) ln2(%ln2_g, %ln2_b) ffn(%gate_w, %up_w, %down_w) rope(%cos, %sin) mask(%mask) num_heads 4 num_kv_heads 2 head_dim 8 mask_kind bias rope_style interleaved eps 1.000000e-06 : (tensor<5x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x48xf32>, tensor<32x48xf32>, tensor<48x32xf32>, tensor<5x4xf32>, tensor<5x4xf32>, tensor<5x5xf32>) -> tensor<5x32xf32>
  func.return %y : tensor<5x32xf32>
}

// hir.embedding: mir.gather along axis 0.
// CHECK-LABEL: func.func @embedding(
// CHECK-SAME:    %[[T:[^:]*]]: tensor<16x8xf32>, %[[IDS:[^:]*]]: tensor<2x3xi32>)
// CHECK-NEXT:    %[[GATHER:.*]] = mir.gather %[[T]], %[[IDS]] axis 0 : (tensor<16x8xf32>, tensor<2x3xi32>) -> tensor<2x3x8xf32>
// CHECK-NEXT:    func.return %[[GATHER]] : tensor<2x3x8xf32>
func.func @embedding(%t: tensor<16x8xf32>, %ids: tensor<2x3xi32>) -> tensor<2x3x8xf32> {
  %y = hir.embedding %t[%ids] : (tensor<16x8xf32>, tensor<2x3xi32>) -> tensor<2x3x8xf32>
  func.return %y : tensor<2x3x8xf32>
}

// hir.embedding with one i64 id (rank 0): one row of the table.
// CHECK-LABEL: func.func @embedding_i64_scalar(
// CHECK-SAME:    %[[T:[^:]*]]: tensor<16x8xf32>, %[[IDS:[^:]*]]: tensor<i64>)
// CHECK-NEXT:    %[[GATHER:.*]] = mir.gather %[[T]], %[[IDS]] axis 0 : (tensor<16x8xf32>, tensor<i64>) -> tensor<8xf32>
// CHECK-NEXT:    func.return %[[GATHER]] : tensor<8xf32>
func.func @embedding_i64_scalar(%t: tensor<16x8xf32>, %ids: tensor<i64>) -> tensor<8xf32> {
  %y = hir.embedding %t[%ids] : (tensor<16x8xf32>, tensor<i64>) -> tensor<8xf32>
  func.return %y : tensor<8xf32>
}

// hir.dequant_matmul stays one mir op.
// CHECK-LABEL: func.func @dequant_matmul_q8_0(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<4x64xf32>, %[[W:[^:]*]]: tensor<8x68xui8>)
// CHECK-NEXT:    %[[DEQUANT_MATMUL:.*]] = mir.dequant_matmul %[[X]], %[[W]] scheme q8_0 : (tensor<4x64xf32>, tensor<8x68xui8>) -> tensor<4x8xf32>
// CHECK-NEXT:    func.return %[[DEQUANT_MATMUL]] : tensor<4x8xf32>
func.func @dequant_matmul_q8_0(%x: tensor<4x64xf32>, %w: tensor<8x68xui8>) -> tensor<4x8xf32> {
  %y = hir.dequant_matmul q8_0 %x, %w : (tensor<4x64xf32>, tensor<8x68xui8>) -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @dequant_matmul_q4_0(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<64xf32>, %[[W:[^:]*]]: tensor<8x36xui8>)
// CHECK-NEXT:    %[[DEQUANT_MATMUL:.*]] = mir.dequant_matmul %[[X]], %[[W]] scheme q4_0 : (tensor<64xf32>, tensor<8x36xui8>) -> tensor<8xf32>
// CHECK-NEXT:    func.return %[[DEQUANT_MATMUL]] : tensor<8xf32>
func.func @dequant_matmul_q4_0(%x: tensor<64xf32>, %w: tensor<8x36xui8>) -> tensor<8xf32> {
  %y = hir.dequant_matmul q4_0 %x, %w : (tensor<64xf32>, tensor<8x36xui8>) -> tensor<8xf32>
  func.return %y : tensor<8xf32>
}

// hir.depthwise_conv1d_causal: concat(zeros [B, K-1, C] or left_pad, x) along time,
// then a valid mir.depthwise_conv1d.
// CHECK-LABEL: func.func @depthwise_conv1d_causal(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<2x5x4xf32>, %[[W:[^:]*]]: tensor<3x4xf32>)
// CHECK-NEXT:    %[[ZEROS:.*]] = mir.constant dense<0.000000e+00> : tensor<2x2x4xf32>
// CHECK-NEXT:    %[[PADDED:.*]] = mir.concat %[[ZEROS]], %[[X]] axis 1 : (tensor<2x2x4xf32>, tensor<2x5x4xf32>) -> tensor<2x7x4xf32>
// CHECK-NEXT:    %[[CONV:.*]] = mir.depthwise_conv1d %[[PADDED]], %[[W]] : (tensor<2x7x4xf32>, tensor<3x4xf32>) -> tensor<2x5x4xf32>
// CHECK-NEXT:    func.return %[[CONV]] : tensor<2x5x4xf32>
func.func @depthwise_conv1d_causal(%x: tensor<2x5x4xf32>, %w: tensor<3x4xf32>) -> tensor<2x5x4xf32> {
  %y = hir.depthwise_conv1d_causal %x, %w : (tensor<2x5x4xf32>, tensor<3x4xf32>) -> tensor<2x5x4xf32>
  func.return %y : tensor<2x5x4xf32>
}

// CHECK-LABEL: func.func @depthwise_conv1d_causal_left_pad(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<2x5x4xf32>, %[[W:[^:]*]]: tensor<3x4xf32>, %[[PAD:[^:]*]]: tensor<2x2x4xf32>)
// CHECK-NEXT:    %[[PADDED:.*]] = mir.concat %[[PAD]], %[[X]] axis 1 : (tensor<2x2x4xf32>, tensor<2x5x4xf32>) -> tensor<2x7x4xf32>
// CHECK-NEXT:    %[[CONV:.*]] = mir.depthwise_conv1d %[[PADDED]], %[[W]] : (tensor<2x7x4xf32>, tensor<3x4xf32>) -> tensor<2x5x4xf32>
// CHECK-NEXT:    func.return %[[CONV]] : tensor<2x5x4xf32>
func.func @depthwise_conv1d_causal_left_pad(%x: tensor<2x5x4xf32>, %w: tensor<3x4xf32>, %pad: tensor<2x2x4xf32>) -> tensor<2x5x4xf32> {
  %y = hir.depthwise_conv1d_causal %x, %w left_pad %pad : (tensor<2x5x4xf32>, tensor<3x4xf32>, tensor<2x2x4xf32>) -> tensor<2x5x4xf32>
  func.return %y : tensor<2x5x4xf32>
}

// With K = 1 there is nothing to pad: no concat.
// CHECK-LABEL: func.func @depthwise_conv1d_causal_k1(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<2x5x4xf32>, %[[W:[^:]*]]: tensor<1x4xf32>)
// CHECK-NEXT:    %[[CONV:.*]] = mir.depthwise_conv1d %[[X]], %[[W]] : (tensor<2x5x4xf32>, tensor<1x4xf32>) -> tensor<2x5x4xf32>
// CHECK-NEXT:    func.return %[[CONV]] : tensor<2x5x4xf32>
func.func @depthwise_conv1d_causal_k1(%x: tensor<2x5x4xf32>, %w: tensor<1x4xf32>) -> tensor<2x5x4xf32> {
  %y = hir.depthwise_conv1d_causal %x, %w : (tensor<2x5x4xf32>, tensor<1x4xf32>) -> tensor<2x5x4xf32>
  func.return %y : tensor<2x5x4xf32>
}


// The activation form is carried to mir.
// CHECK-LABEL: func.func @dequant_matmul_q8_activations(
// CHECK:         mir.dequant_matmul %{{.*}}, %{{.*}} scheme q5_0 activations q8 : (tensor<3x64xf32>, tensor<8x44xui8>) -> tensor<3x8xf32>
func.func @dequant_matmul_q8_activations(%x: tensor<3x64xf32>, %w: tensor<8x44xui8>) -> tensor<3x8xf32> {
  %y = hir.dequant_matmul q5_0 %x, %w activations q8 : (tensor<3x64xf32>, tensor<8x44xui8>) -> tensor<3x8xf32>
  func.return %y : tensor<3x8xf32>
}

// shared_linear_pair: one mir.shared_input_matmul of both weights.
// CHECK-LABEL: func.func @shared_linear_pair(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<3x8xf32>, %[[A:[^:]*]]: tensor<8x5xf32>, %[[B:[^:]*]]: tensor<8x2xf32>)
// CHECK-NEXT:    %[[P:.*]], %[[Q:.*]] = mir.shared_input_matmul %[[X]], %[[A]], %[[B]] : (tensor<3x8xf32>, tensor<8x5xf32>, tensor<8x2xf32>) -> (tensor<3x5xf32>, tensor<3x2xf32>)
// CHECK-NEXT:    func.return %[[P]], %[[Q]]
func.func @shared_linear_pair(%x: tensor<3x8xf32>, %a: tensor<8x5xf32>, %b: tensor<8x2xf32>) -> (tensor<3x5xf32>, tensor<3x2xf32>) {
  %p, %q = hir.shared_linear_pair %x, %a, %b : (tensor<3x8xf32>, tensor<8x5xf32>, tensor<8x2xf32>) -> (tensor<3x5xf32>, tensor<3x2xf32>)
  func.return %p, %q : tensor<3x5xf32>, tensor<3x2xf32>
}

// linear_fused: one mir.fused_matmul (no matmul + add + activation for mir-fuse to fold).
// CHECK-LABEL: func.func @linear_fused(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<3x8xf32>, %[[W:[^:]*]]: tensor<8x5xf32>, %[[B:[^:]*]]: tensor<5xf32>)
// CHECK-NEXT:    %[[Y:.*]] = mir.fused_matmul %[[X]], %[[W]], %[[B]] activation silu : (tensor<3x8xf32>, tensor<8x5xf32>, tensor<5xf32>) -> tensor<3x5xf32>
// CHECK-NEXT:    func.return %[[Y]]
func.func @linear_fused(%x: tensor<3x8xf32>, %w: tensor<8x5xf32>, %b: tensor<5xf32>) -> tensor<3x5xf32> {
  %y = hir.linear_fused %x, %w bias %b activation silu : (tensor<3x8xf32>, tensor<8x5xf32>, tensor<5xf32>) -> tensor<3x5xf32>
  func.return %y : tensor<3x5xf32>
}
