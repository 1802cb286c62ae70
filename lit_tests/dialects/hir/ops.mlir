// RUN: rlx-opt %s --split-input-file | rlx-opt --split-input-file | filecheck %s
// RUN: rlx-opt %s --split-input-file --print-op-generic | rlx-opt --split-input-file | filecheck %s
// RUN: rlx-opt %s --split-input-file --print-op-generic | filecheck %s --check-prefix=GENERIC

// Every hir op in its custom syntax, each optional operand and property both present
// and absent; the GENERIC lines show the generic form (properties in `<{...}>`).

// CHECK-LABEL: func.func @linear
// GENERIC-LABEL: sym_name = "linear"
func.func @linear() {
  %x = "test.op"() : () -> tensor<2x8x64xf32>
  %w = "test.op"() : () -> tensor<64x128xf32>
  %b = "test.op"() : () -> tensor<128xf32>
  %v = "test.op"() : () -> tensor<64xf32>
  %y0 = hir.linear %x, %w : (tensor<2x8x64xf32>, tensor<64x128xf32>) -> tensor<2x8x128xf32>
  %y1 = hir.linear %x, %w bias %b : (tensor<2x8x64xf32>, tensor<64x128xf32>, tensor<128xf32>) -> tensor<2x8x128xf32>
  %y2 = hir.linear %x, %w bias %b activation silu : (tensor<2x8x64xf32>, tensor<64x128xf32>, tensor<128xf32>) -> tensor<2x8x128xf32>
  %y3 = hir.linear %v, %w activation gelu_tanh : (tensor<64xf32>, tensor<64x128xf32>) -> tensor<128xf32>
  func.return
}
// CHECK-NEXT:   %[[X:.*]] = "test.op"() : () -> tensor<2x8x64xf32>
// CHECK-NEXT:   %[[W:.*]] = "test.op"() : () -> tensor<64x128xf32>
// CHECK-NEXT:   %[[B:.*]] = "test.op"() : () -> tensor<128xf32>
// CHECK-NEXT:   %[[V:.*]] = "test.op"() : () -> tensor<64xf32>
// CHECK-NEXT:   %{{.*}} = hir.linear %[[X]], %[[W]] : (tensor<2x8x64xf32>, tensor<64x128xf32>) -> tensor<2x8x128xf32>
// CHECK-NEXT:   %{{.*}} = hir.linear %[[X]], %[[W]] bias %[[B]] : (tensor<2x8x64xf32>, tensor<64x128xf32>, tensor<128xf32>) -> tensor<2x8x128xf32>
// CHECK-NEXT:   %{{.*}} = hir.linear %[[X]], %[[W]] bias %[[B]] activation silu : (tensor<2x8x64xf32>, tensor<64x128xf32>, tensor<128xf32>) -> tensor<2x8x128xf32>
// CHECK-NEXT:   %{{.*}} = hir.linear %[[V]], %[[W]] activation gelu_tanh : (tensor<64xf32>, tensor<64x128xf32>) -> tensor<128xf32>
// GENERIC:      "hir.linear"(%{{.*}}, %{{.*}}) : (tensor<2x8x64xf32>, tensor<64x128xf32>) -> tensor<2x8x128xf32>
// GENERIC-NEXT: "hir.linear"(%{{.*}}, %{{.*}}, %{{.*}}) : (tensor<2x8x64xf32>, tensor<64x128xf32>, tensor<128xf32>) -> tensor<2x8x128xf32>
// GENERIC-NEXT: "hir.linear"(%{{.*}}, %{{.*}}, %{{.*}}) <{activation = #rlx<activation silu>}> : (tensor<2x8x64xf32>, tensor<64x128xf32>, tensor<128xf32>) -> tensor<2x8x128xf32>
// GENERIC-NEXT: "hir.linear"(%{{.*}}, %{{.*}}) <{activation = #rlx<activation gelu_tanh>}> : (tensor<64xf32>, tensor<64x128xf32>) -> tensor<128xf32>

// -----

// CHECK-LABEL: func.func @swiglu_ffn
// GENERIC-LABEL: sym_name = "swiglu_ffn"
func.func @swiglu_ffn() {
  %x = "test.op"() : () -> tensor<6x32xf32>
  %up = "test.op"() : () -> tensor<32x64xf32>
  %gate = "test.op"() : () -> tensor<32x64xf32>
  %down = "test.op"() : () -> tensor<64x48xf32>
  %y = hir.swiglu_ffn %x, up %up, gate %gate, down %down : (tensor<6x32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x48xf32>) -> tensor<6x48xf32>
  func.return
}
// CHECK-NEXT:   %[[X:.*]] = "test.op"() : () -> tensor<6x32xf32>
// CHECK-NEXT:   %[[UP:.*]] = "test.op"() : () -> tensor<32x64xf32>
// CHECK-NEXT:   %[[GATE:.*]] = "test.op"() : () -> tensor<32x64xf32>
// CHECK-NEXT:   %[[DOWN:.*]] = "test.op"() : () -> tensor<64x48xf32>
// CHECK-NEXT:   %{{.*}} = hir.swiglu_ffn %[[X]], up %[[UP]], gate %[[GATE]], down %[[DOWN]] : (tensor<6x32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x48xf32>) -> tensor<6x48xf32>
// GENERIC:      "hir.swiglu_ffn"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : (tensor<6x32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x48xf32>) -> tensor<6x48xf32>

// -----

// CHECK-LABEL: func.func @rms_norm
// GENERIC-LABEL: sym_name = "rms_norm"
func.func @rms_norm() {
  %x = "test.op"() : () -> tensor<2x6x32xf32>
  %g = "test.op"() : () -> tensor<32xf32>
  %b = "test.op"() : () -> tensor<32xf32>
  %y0 = hir.rms_norm %x, %g : (tensor<2x6x32xf32>, tensor<32xf32>) -> tensor<2x6x32xf32>
  %y1 = hir.rms_norm %x, %g beta %b eps 1.000000e-06 : (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<2x6x32xf32>
  %y2 = hir.rms_norm %x, %g eps 1.000000e-05 : (tensor<2x6x32xf32>, tensor<32xf32>) -> tensor<2x6x32xf32>
  func.return
}
// CHECK-NEXT:   %[[X:.*]] = "test.op"() : () -> tensor<2x6x32xf32>
// CHECK-NEXT:   %[[G:.*]] = "test.op"() : () -> tensor<32xf32>
// CHECK-NEXT:   %[[B:.*]] = "test.op"() : () -> tensor<32xf32>
// CHECK-NEXT:   %{{.*}} = hir.rms_norm %[[X]], %[[G]] : (tensor<2x6x32xf32>, tensor<32xf32>) -> tensor<2x6x32xf32>
// CHECK-NEXT:   %{{.*}} = hir.rms_norm %[[X]], %[[G]] beta %[[B]] eps 1.000000e-06 : (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<2x6x32xf32>
// The default eps (1e-5) is not printed.
// CHECK-NEXT:   %{{.*}} = hir.rms_norm %[[X]], %[[G]] : (tensor<2x6x32xf32>, tensor<32xf32>) -> tensor<2x6x32xf32>
// GENERIC:      "hir.rms_norm"(%{{.*}}, %{{.*}}) <{eps = 1.000000e-05 : f32}> : (tensor<2x6x32xf32>, tensor<32xf32>) -> tensor<2x6x32xf32>
// GENERIC-NEXT: "hir.rms_norm"(%{{.*}}, %{{.*}}, %{{.*}}) <{eps = 1.000000e-06 : f32}> : (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<2x6x32xf32>

// -----

// CHECK-LABEL: func.func @residual_rms_norm
// GENERIC-LABEL: sym_name = "residual_rms_norm"
func.func @residual_rms_norm() {
  %x = "test.op"() : () -> tensor<6x32xf32>
  %r = "test.op"() : () -> tensor<6x32xf32>
  %g = "test.op"() : () -> tensor<32xf32>
  %b = "test.op"() : () -> tensor<32xf32>
  %y0 = hir.residual_rms_norm %x, %r, %g : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<32xf32>) -> tensor<6x32xf32>
  %y1 = hir.residual_rms_norm %x, %r, %g beta %b eps 1.000000e-06 : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<6x32xf32>
  func.return
}
// CHECK-NEXT:   %[[X:.*]] = "test.op"() : () -> tensor<6x32xf32>
// CHECK-NEXT:   %[[R:.*]] = "test.op"() : () -> tensor<6x32xf32>
// CHECK-NEXT:   %[[G:.*]] = "test.op"() : () -> tensor<32xf32>
// CHECK-NEXT:   %[[B:.*]] = "test.op"() : () -> tensor<32xf32>
// CHECK-NEXT:   %{{.*}} = hir.residual_rms_norm %[[X]], %[[R]], %[[G]] : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<32xf32>) -> tensor<6x32xf32>
// CHECK-NEXT:   %{{.*}} = hir.residual_rms_norm %[[X]], %[[R]], %[[G]] beta %[[B]] eps 1.000000e-06 : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<6x32xf32>
// GENERIC:      "hir.residual_rms_norm"(%{{.*}}, %{{.*}}, %{{.*}}) <{eps = 1.000000e-05 : f32}> : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<32xf32>) -> tensor<6x32xf32>
// GENERIC-NEXT: "hir.residual_rms_norm"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) <{eps = 1.000000e-06 : f32}>

// -----

// CHECK-LABEL: func.func @layer_norm
// GENERIC-LABEL: sym_name = "layer_norm"
func.func @layer_norm() {
  %x = "test.op"() : () -> tensor<32xf32>
  %g = "test.op"() : () -> tensor<32xf32>
  %b = "test.op"() : () -> tensor<32xf32>
  %y0 = hir.layer_norm %x, %g, %b : (tensor<32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<32xf32>
  %y1 = hir.layer_norm %x, %g, %b eps 1.000000e-03 : (tensor<32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<32xf32>
  func.return
}
// CHECK-NEXT:   %[[X:.*]] = "test.op"() : () -> tensor<32xf32>
// CHECK-NEXT:   %[[G:.*]] = "test.op"() : () -> tensor<32xf32>
// CHECK-NEXT:   %[[B:.*]] = "test.op"() : () -> tensor<32xf32>
// CHECK-NEXT:   %{{.*}} = hir.layer_norm %[[X]], %[[G]], %[[B]] : (tensor<32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<32xf32>
// CHECK-NEXT:   %{{.*}} = hir.layer_norm %[[X]], %[[G]], %[[B]] eps 1.000000e-03 : (tensor<32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<32xf32>
// GENERIC:      "hir.layer_norm"(%{{.*}}, %{{.*}}, %{{.*}}) <{eps = 1.000000e-05 : f32}>
// GENERIC-NEXT: "hir.layer_norm"(%{{.*}}, %{{.*}}, %{{.*}}) <{eps = 1.000000e-03 : f32}>

// -----

// CHECK-LABEL: func.func @attention
// GENERIC-LABEL: sym_name = "attention"
func.func @attention() {
  %q = "test.op"() : () -> tensor<2x6x32xf32>
  %k = "test.op"() : () -> tensor<2x10x16xf32>
  %v = "test.op"() : () -> tensor<2x10x16xf32>
  %m2 = "test.op"() : () -> tensor<6x10xf32>
  %m4 = "test.op"() : () -> tensor<1x4x6x10xf32>
  %q2 = "test.op"() : () -> tensor<6x32xf32>
  %kv2 = "test.op"() : () -> tensor<6x32xf32>
  %a0 = hir.attention %q, %k, %v num_heads 4 num_kv_heads 2 head_dim 8 scale 0.353553385 : (tensor<2x6x32xf32>, tensor<2x10x16xf32>, tensor<2x10x16xf32>) -> tensor<2x6x32xf32>
  %a1 = hir.attention %q, %k, %v mask_kind causal num_heads 4 num_kv_heads 2 head_dim 8 scale 0.353553385 : (tensor<2x6x32xf32>, tensor<2x10x16xf32>, tensor<2x10x16xf32>) -> tensor<2x6x32xf32>
  %a2 = hir.attention %q, %k, %v mask %m2 mask_kind custom num_heads 4 num_kv_heads 2 head_dim 8 scale 0.353553385 : (tensor<2x6x32xf32>, tensor<2x10x16xf32>, tensor<2x10x16xf32>, tensor<6x10xf32>) -> tensor<2x6x32xf32>
  %a3 = hir.attention %q, %k, %v mask %m4 mask_kind bias num_heads 4 num_kv_heads 2 head_dim 8 scale 1.000000e+00 : (tensor<2x6x32xf32>, tensor<2x10x16xf32>, tensor<2x10x16xf32>, tensor<1x4x6x10xf32>) -> tensor<2x6x32xf32>
  %a4 = hir.attention %q2, %kv2, %kv2 mask_kind causal num_heads 4 num_kv_heads 4 head_dim 8 scale 0.353553385 : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>) -> tensor<6x32xf32>
  func.return
}
// CHECK-NEXT:   %[[Q:.*]] = "test.op"() : () -> tensor<2x6x32xf32>
// CHECK-NEXT:   %[[K:.*]] = "test.op"() : () -> tensor<2x10x16xf32>
// CHECK-NEXT:   %[[V:.*]] = "test.op"() : () -> tensor<2x10x16xf32>
// CHECK-NEXT:   %[[M2:.*]] = "test.op"() : () -> tensor<6x10xf32>
// CHECK-NEXT:   %[[M4:.*]] = "test.op"() : () -> tensor<1x4x6x10xf32>
// CHECK-NEXT:   %[[Q2:.*]] = "test.op"() : () -> tensor<6x32xf32>
// CHECK-NEXT:   %[[KV2:.*]] = "test.op"() : () -> tensor<6x32xf32>
// The default mask_kind (none) is not printed.
// CHECK-NEXT:   %{{.*}} = hir.attention %[[Q]], %[[K]], %[[V]] num_heads 4 num_kv_heads 2 head_dim 8 scale 0.353553385 : (tensor<2x6x32xf32>, tensor<2x10x16xf32>, tensor<2x10x16xf32>) -> tensor<2x6x32xf32>
// CHECK-NEXT:   %{{.*}} = hir.attention %[[Q]], %[[K]], %[[V]] mask_kind causal num_heads 4 num_kv_heads 2 head_dim 8 scale 0.353553385 : (tensor<2x6x32xf32>, tensor<2x10x16xf32>, tensor<2x10x16xf32>) -> tensor<2x6x32xf32>
// CHECK-NEXT:   %{{.*}} = hir.attention %[[Q]], %[[K]], %[[V]] mask %[[M2]] mask_kind custom num_heads 4 num_kv_heads 2 head_dim 8 scale 0.353553385 : (tensor<2x6x32xf32>, tensor<2x10x16xf32>, tensor<2x10x16xf32>, tensor<6x10xf32>) -> tensor<2x6x32xf32>
// CHECK-NEXT:   %{{.*}} = hir.attention %[[Q]], %[[K]], %[[V]] mask %[[M4]] mask_kind bias num_heads 4 num_kv_heads 2 head_dim 8 scale 1.000000e+00 : (tensor<2x6x32xf32>, tensor<2x10x16xf32>, tensor<2x10x16xf32>, tensor<1x4x6x10xf32>) -> tensor<2x6x32xf32>
// CHECK-NEXT:   %{{.*}} = hir.attention %[[Q2]], %[[KV2]], %[[KV2]] mask_kind causal num_heads 4 num_kv_heads 4 head_dim 8 scale 0.353553385 : (tensor<6x32xf32>, tensor<6x32xf32>, tensor<6x32xf32>) -> tensor<6x32xf32>
// GENERIC:      "hir.attention"(%{{.*}}, %{{.*}}, %{{.*}}) <{num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 8 : i64, scale = 0.353553385 : f32, mask_kind = #rlx<mask_kind none>}>
// GENERIC-NEXT: "hir.attention"(%{{.*}}, %{{.*}}, %{{.*}}) <{mask_kind = #rlx<mask_kind causal>, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 8 : i64, scale = 0.353553385 : f32}>
// GENERIC-NEXT: "hir.attention"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) <{mask_kind = #rlx<mask_kind custom>,

// -----

// CHECK-LABEL: func.func @rope
// GENERIC-LABEL: sym_name = "rope"
func.func @rope() {
  %x = "test.op"() : () -> tensor<2x6x32xf32>
  %cos = "test.op"() : () -> tensor<6x4xf32>
  %sin = "test.op"() : () -> tensor<6x4xf32>
  %x5 = "test.op"() : () -> tensor<6x10xf32>
  %cos2 = "test.op"() : () -> tensor<6x2xf32>
  %sin2 = "test.op"() : () -> tensor<6x2xf32>
  %y0 = hir.rope %x, %cos, %sin head_dim 8 n_rot 8 : (tensor<2x6x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<2x6x32xf32>
  %y1 = hir.rope %x5, %cos2, %sin2 head_dim 5 n_rot 4 style interleaved : (tensor<6x10xf32>, tensor<6x2xf32>, tensor<6x2xf32>) -> tensor<6x10xf32>
  %y2 = hir.rope %x, %cos, %sin head_dim 8 n_rot 8 style half : (tensor<2x6x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<2x6x32xf32>
  func.return
}
// CHECK-NEXT:   %[[X:.*]] = "test.op"() : () -> tensor<2x6x32xf32>
// CHECK-NEXT:   %[[COS:.*]] = "test.op"() : () -> tensor<6x4xf32>
// CHECK-NEXT:   %[[SIN:.*]] = "test.op"() : () -> tensor<6x4xf32>
// CHECK-NEXT:   %[[X5:.*]] = "test.op"() : () -> tensor<6x10xf32>
// CHECK-NEXT:   %[[COS2:.*]] = "test.op"() : () -> tensor<6x2xf32>
// CHECK-NEXT:   %[[SIN2:.*]] = "test.op"() : () -> tensor<6x2xf32>
// CHECK-NEXT:   %{{.*}} = hir.rope %[[X]], %[[COS]], %[[SIN]] head_dim 8 n_rot 8 : (tensor<2x6x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<2x6x32xf32>
// CHECK-NEXT:   %{{.*}} = hir.rope %[[X5]], %[[COS2]], %[[SIN2]] head_dim 5 n_rot 4 style interleaved : (tensor<6x10xf32>, tensor<6x2xf32>, tensor<6x2xf32>) -> tensor<6x10xf32>
// The default style (half) is not printed.
// CHECK-NEXT:   %{{.*}} = hir.rope %[[X]], %[[COS]], %[[SIN]] head_dim 8 n_rot 8 : (tensor<2x6x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<2x6x32xf32>
// GENERIC:      "hir.rope"(%{{.*}}, %{{.*}}, %{{.*}}) <{head_dim = 8 : i64, n_rot = 8 : i64, style = #rlx<rope_style half>}>
// GENERIC-NEXT: "hir.rope"(%{{.*}}, %{{.*}}, %{{.*}}) <{head_dim = 5 : i64, n_rot = 4 : i64, style = #rlx<rope_style interleaved>}>

// -----

// CHECK-LABEL: func.func @llama_decoder_block
// GENERIC-LABEL: sym_name = "llama_decoder_block"
func.func @llama_decoder_block() {
  %x = "test.op"() : () -> tensor<2x6x32xf32>
  %ln1_g = "test.op"() : () -> tensor<32xf32>
  %ln1_b = "test.op"() : () -> tensor<32xf32>
  %q_w = "test.op"() : () -> tensor<32x32xf32>
  %k_w = "test.op"() : () -> tensor<32x16xf32>
  %v_w = "test.op"() : () -> tensor<32x16xf32>
  %o_w = "test.op"() : () -> tensor<32x32xf32>
  %ln2_g = "test.op"() : () -> tensor<32xf32>
  %ln2_b = "test.op"() : () -> tensor<32xf32>
  %gate_w = "test.op"() : () -> tensor<32x64xf32>
  %up_w = "test.op"() : () -> tensor<32x64xf32>
  %down_w = "test.op"() : () -> tensor<64x32xf32>
  %cos = "test.op"() : () -> tensor<6x4xf32>
  %sin = "test.op"() : () -> tensor<6x4xf32>
  %mask = "test.op"() : () -> tensor<6x6xf32>
  %y0 = hir.llama_decoder_block %x ln1(%ln1_g) attn(%q_w, %k_w, %v_w, %o_w) ln2(%ln2_g) ffn(%gate_w, %up_w, %down_w) rope(%cos, %sin) num_heads 4 num_kv_heads 2 head_dim 8 : (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<2x6x32xf32>
  %y1 = hir.llama_decoder_block %x ln1(%ln1_g, %ln1_b) attn(%q_w, %k_w, %v_w, %o_w) ln2(%ln2_g, %ln2_b) ffn(%gate_w, %up_w, %down_w) rope(%cos, %sin) mask(%mask) num_heads 4 num_kv_heads 2 head_dim 8 mask_kind bias rope_style interleaved eps 1.000000e-06 : (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>, tensor<6x6xf32>) -> tensor<2x6x32xf32>
  %y2 = hir.llama_decoder_block %x ln1(%ln1_g) attn(%q_w, %k_w, %v_w, %o_w) ln2(%ln2_g, %ln2_b) ffn(%gate_w, %up_w, %down_w) rope(%cos, %sin) num_heads 4 num_kv_heads 2 head_dim 8 mask_kind causal rope_style half eps 1.000000e-05 {note = "defaults spelled out"} : (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<2x6x32xf32>
  %y3 = hir.llama_decoder_block %x ln1(%ln1_g, %ln1_b) attn(%q_w, %k_w, %v_w, %o_w) ln2(%ln2_g) ffn(%gate_w, %up_w, %down_w) rope(%cos, %sin) num_heads 4 num_kv_heads 2 head_dim 8 mask_kind none : (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<2x6x32xf32>
  func.return
}
// CHECK-NEXT:   %[[X:.*]] = "test.op"() : () -> tensor<2x6x32xf32>
// CHECK-NEXT:   %[[LN1G:.*]] = "test.op"() : () -> tensor<32xf32>
// CHECK-NEXT:   %[[LN1B:.*]] = "test.op"() : () -> tensor<32xf32>
// CHECK-NEXT:   %[[QW:.*]] = "test.op"() : () -> tensor<32x32xf32>
// CHECK-NEXT:   %[[KW:.*]] = "test.op"() : () -> tensor<32x16xf32>
// CHECK-NEXT:   %[[VW:.*]] = "test.op"() : () -> tensor<32x16xf32>
// CHECK-NEXT:   %[[OW:.*]] = "test.op"() : () -> tensor<32x32xf32>
// CHECK-NEXT:   %[[LN2G:.*]] = "test.op"() : () -> tensor<32xf32>
// CHECK-NEXT:   %[[LN2B:.*]] = "test.op"() : () -> tensor<32xf32>
// CHECK-NEXT:   %[[GATE:.*]] = "test.op"() : () -> tensor<32x64xf32>
// CHECK-NEXT:   %[[UP:.*]] = "test.op"() : () -> tensor<32x64xf32>
// CHECK-NEXT:   %[[DOWN:.*]] = "test.op"() : () -> tensor<64x32xf32>
// CHECK-NEXT:   %[[COS:.*]] = "test.op"() : () -> tensor<6x4xf32>
// CHECK-NEXT:   %[[SIN:.*]] = "test.op"() : () -> tensor<6x4xf32>
// CHECK-NEXT:   %[[MASK:.*]] = "test.op"() : () -> tensor<6x6xf32>
// CHECK-NEXT:   %{{.*}} = hir.llama_decoder_block %[[X]] ln1(%[[LN1G]]) attn(%[[QW]], %[[KW]], %[[VW]], %[[OW]]) ln2(%[[LN2G]]) ffn(%[[GATE]], %[[UP]], %[[DOWN]]) rope(%[[COS]], %[[SIN]]) num_heads 4 num_kv_heads 2 head_dim 8 : (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<2x6x32xf32>
// CHECK-NEXT:   %{{.*}} = hir.llama_decoder_block %[[X]] ln1(%[[LN1G]], %[[LN1B]]) attn(%[[QW]], %[[KW]], %[[VW]], %[[OW]]) ln2(%[[LN2G]], %[[LN2B]]) ffn(%[[GATE]], %[[UP]], %[[DOWN]]) rope(%[[COS]], %[[SIN]]) mask(%[[MASK]]) num_heads 4 num_kv_heads 2 head_dim 8 mask_kind bias rope_style interleaved eps 1.000000e-06 : (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>, tensor<6x6xf32>) -> tensor<2x6x32xf32>
// Defaults (mask_kind causal, rope_style half, eps 1e-5) are not printed.
// CHECK-NEXT:   %{{.*}} = hir.llama_decoder_block %[[X]] ln1(%[[LN1G]]) attn(%[[QW]], %[[KW]], %[[VW]], %[[OW]]) ln2(%[[LN2G]], %[[LN2B]]) ffn(%[[GATE]], %[[UP]], %[[DOWN]]) rope(%[[COS]], %[[SIN]]) num_heads 4 num_kv_heads 2 head_dim 8 {note = "defaults spelled out"} : (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<2x6x32xf32>
// CHECK-NEXT:   %{{.*}} = hir.llama_decoder_block %[[X]] ln1(%[[LN1G]], %[[LN1B]]) attn(%[[QW]], %[[KW]], %[[VW]], %[[OW]]) ln2(%[[LN2G]]) ffn(%[[GATE]], %[[UP]], %[[DOWN]]) rope(%[[COS]], %[[SIN]]) num_heads 4 num_kv_heads 2 head_dim 8 mask_kind none : (tensor<2x6x32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<2x6x32xf32>
// GENERIC:      "hir.llama_decoder_block"(%{{.*}}) <{num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 8 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 0, 0, 0, 0>, eps = 1.000000e-05 : f32, mask_kind = #rlx<mask_kind causal>, rope_style = #rlx<rope_style half>}>
// GENERIC-NEXT: "hir.llama_decoder_block"(%{{.*}}) <{num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 8 : i64, mask_kind = #rlx<mask_kind bias>, rope_style = #rlx<rope_style interleaved>, eps = 1.000000e-06 : f32, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0>}>
// GENERIC-NEXT: "hir.llama_decoder_block"(%{{.*}}) <{{.*}}operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0>{{.*}}}> {note = "defaults spelled out"}

// -----

// CHECK-LABEL: func.func @dequant_matmul
// GENERIC-LABEL: sym_name = "dequant_matmul"
func.func @dequant_matmul() {
  %x = "test.op"() : () -> tensor<4x64xf32>
  %w8 = "test.op"() : () -> tensor<16x68xui8>
  %w4 = "test.op"() : () -> tensor<16x36xui8>
  %y0 = hir.dequant_matmul q8_0 %x, %w8 : (tensor<4x64xf32>, tensor<16x68xui8>) -> tensor<4x16xf32>
  %y1 = hir.dequant_matmul q4_0 %x, %w4 : (tensor<4x64xf32>, tensor<16x36xui8>) -> tensor<4x16xf32>
  func.return
}
// CHECK-NEXT:   %[[X:.*]] = "test.op"() : () -> tensor<4x64xf32>
// CHECK-NEXT:   %[[W8:.*]] = "test.op"() : () -> tensor<16x68xui8>
// CHECK-NEXT:   %[[W4:.*]] = "test.op"() : () -> tensor<16x36xui8>
// CHECK-NEXT:   %{{.*}} = hir.dequant_matmul q8_0 %[[X]], %[[W8]] : (tensor<4x64xf32>, tensor<16x68xui8>) -> tensor<4x16xf32>
// CHECK-NEXT:   %{{.*}} = hir.dequant_matmul q4_0 %[[X]], %[[W4]] : (tensor<4x64xf32>, tensor<16x36xui8>) -> tensor<4x16xf32>
// GENERIC:      "hir.dequant_matmul"(%{{.*}}, %{{.*}}) <{scheme = #rlx<quant_scheme q8_0>}> : (tensor<4x64xf32>, tensor<16x68xui8>) -> tensor<4x16xf32>
// GENERIC-NEXT: "hir.dequant_matmul"(%{{.*}}, %{{.*}}) <{scheme = #rlx<quant_scheme q4_0>}> : (tensor<4x64xf32>, tensor<16x36xui8>) -> tensor<4x16xf32>

// -----

// CHECK-LABEL: func.func @embedding
// GENERIC-LABEL: sym_name = "embedding"
func.func @embedding() {
  %table = "test.op"() : () -> tensor<100x32xf32>
  %ids = "test.op"() : () -> tensor<2x6xi32>
  %id = "test.op"() : () -> tensor<i64>
  %y0 = hir.embedding %table[%ids] : (tensor<100x32xf32>, tensor<2x6xi32>) -> tensor<2x6x32xf32>
  %y1 = hir.embedding %table[%id] : (tensor<100x32xf32>, tensor<i64>) -> tensor<32xf32>
  func.return
}
// CHECK-NEXT:   %[[TABLE:.*]] = "test.op"() : () -> tensor<100x32xf32>
// CHECK-NEXT:   %[[IDS:.*]] = "test.op"() : () -> tensor<2x6xi32>
// CHECK-NEXT:   %[[ID:.*]] = "test.op"() : () -> tensor<i64>
// CHECK-NEXT:   %{{.*}} = hir.embedding %[[TABLE]][%[[IDS]]] : (tensor<100x32xf32>, tensor<2x6xi32>) -> tensor<2x6x32xf32>
// CHECK-NEXT:   %{{.*}} = hir.embedding %[[TABLE]][%[[ID]]] : (tensor<100x32xf32>, tensor<i64>) -> tensor<32xf32>
// GENERIC:      "hir.embedding"(%{{.*}}, %{{.*}}) : (tensor<100x32xf32>, tensor<2x6xi32>) -> tensor<2x6x32xf32>
// GENERIC-NEXT: "hir.embedding"(%{{.*}}, %{{.*}}) : (tensor<100x32xf32>, tensor<i64>) -> tensor<32xf32>

// -----

// CHECK-LABEL: func.func @depthwise_conv1d_causal
// GENERIC-LABEL: sym_name = "depthwise_conv1d_causal"
func.func @depthwise_conv1d_causal() {
  %x = "test.op"() : () -> tensor<2x6x8xf32>
  %w = "test.op"() : () -> tensor<4x8xf32>
  %pad = "test.op"() : () -> tensor<2x3x8xf32>
  %y0 = hir.depthwise_conv1d_causal %x, %w : (tensor<2x6x8xf32>, tensor<4x8xf32>) -> tensor<2x6x8xf32>
  %y1 = hir.depthwise_conv1d_causal %x, %w left_pad %pad : (tensor<2x6x8xf32>, tensor<4x8xf32>, tensor<2x3x8xf32>) -> tensor<2x6x8xf32>
  func.return
}
// CHECK-NEXT:   %[[X:.*]] = "test.op"() : () -> tensor<2x6x8xf32>
// CHECK-NEXT:   %[[W:.*]] = "test.op"() : () -> tensor<4x8xf32>
// CHECK-NEXT:   %[[PAD:.*]] = "test.op"() : () -> tensor<2x3x8xf32>
// CHECK-NEXT:   %{{.*}} = hir.depthwise_conv1d_causal %[[X]], %[[W]] : (tensor<2x6x8xf32>, tensor<4x8xf32>) -> tensor<2x6x8xf32>
// CHECK-NEXT:   %{{.*}} = hir.depthwise_conv1d_causal %[[X]], %[[W]] left_pad %[[PAD]] : (tensor<2x6x8xf32>, tensor<4x8xf32>, tensor<2x3x8xf32>) -> tensor<2x6x8xf32>
// GENERIC:      "hir.depthwise_conv1d_causal"(%{{.*}}, %{{.*}}) : (tensor<2x6x8xf32>, tensor<4x8xf32>) -> tensor<2x6x8xf32>
// GENERIC-NEXT: "hir.depthwise_conv1d_causal"(%{{.*}}, %{{.*}}, %{{.*}}) : (tensor<2x6x8xf32>, tensor<4x8xf32>, tensor<2x3x8xf32>) -> tensor<2x6x8xf32>

// -----

// Every GGUF scheme family: float rows (f16, bf16), 32-value blocks, 256-value K-quant blocks.
// CHECK-LABEL: func.func @dequant_matmul_schemes
// GENERIC-LABEL: sym_name = "dequant_matmul_schemes"
func.func @dequant_matmul_schemes() {
  %x_f16, %w_f16 = "test.op"() : () -> (tensor<2x5xf32>, tensor<8x10xui8>)
  %y_f16 = hir.dequant_matmul f16 %x_f16, %w_f16 : (tensor<2x5xf32>, tensor<8x10xui8>) -> tensor<2x8xf32>
  %x_bf16, %w_bf16 = "test.op"() : () -> (tensor<2x5xf32>, tensor<8x10xui8>)
  %y_bf16 = hir.dequant_matmul bf16 %x_bf16, %w_bf16 : (tensor<2x5xf32>, tensor<8x10xui8>) -> tensor<2x8xf32>
  %x_q4_1, %w_q4_1 = "test.op"() : () -> (tensor<2x64xf32>, tensor<8x40xui8>)
  %y_q4_1 = hir.dequant_matmul q4_1 %x_q4_1, %w_q4_1 : (tensor<2x64xf32>, tensor<8x40xui8>) -> tensor<2x8xf32>
  %x_q5_0, %w_q5_0 = "test.op"() : () -> (tensor<2x64xf32>, tensor<8x44xui8>)
  %y_q5_0 = hir.dequant_matmul q5_0 %x_q5_0, %w_q5_0 : (tensor<2x64xf32>, tensor<8x44xui8>) -> tensor<2x8xf32>
  %x_q5_1, %w_q5_1 = "test.op"() : () -> (tensor<2x64xf32>, tensor<8x48xui8>)
  %y_q5_1 = hir.dequant_matmul q5_1 %x_q5_1, %w_q5_1 : (tensor<2x64xf32>, tensor<8x48xui8>) -> tensor<2x8xf32>
  %x_q4_k, %w_q4_k = "test.op"() : () -> (tensor<2x256xf32>, tensor<8x144xui8>)
  %y_q4_k = hir.dequant_matmul q4_k %x_q4_k, %w_q4_k : (tensor<2x256xf32>, tensor<8x144xui8>) -> tensor<2x8xf32>
  %x_q5_k, %w_q5_k = "test.op"() : () -> (tensor<2x256xf32>, tensor<8x176xui8>)
  %y_q5_k = hir.dequant_matmul q5_k %x_q5_k, %w_q5_k : (tensor<2x256xf32>, tensor<8x176xui8>) -> tensor<2x8xf32>
  %x_q6_k, %w_q6_k = "test.op"() : () -> (tensor<2x256xf32>, tensor<8x210xui8>)
  %y_q6_k = hir.dequant_matmul q6_k %x_q6_k, %w_q6_k : (tensor<2x256xf32>, tensor<8x210xui8>) -> tensor<2x8xf32>
  func.return
}
// CHECK:        hir.dequant_matmul f16 %{{.*}}, %{{.*}} : (tensor<2x5xf32>, tensor<8x10xui8>) -> tensor<2x8xf32>
// CHECK:        hir.dequant_matmul bf16 %{{.*}}, %{{.*}} : (tensor<2x5xf32>, tensor<8x10xui8>) -> tensor<2x8xf32>
// CHECK:        hir.dequant_matmul q4_1 %{{.*}}, %{{.*}} : (tensor<2x64xf32>, tensor<8x40xui8>) -> tensor<2x8xf32>
// CHECK:        hir.dequant_matmul q5_0 %{{.*}}, %{{.*}} : (tensor<2x64xf32>, tensor<8x44xui8>) -> tensor<2x8xf32>
// CHECK:        hir.dequant_matmul q5_1 %{{.*}}, %{{.*}} : (tensor<2x64xf32>, tensor<8x48xui8>) -> tensor<2x8xf32>
// CHECK:        hir.dequant_matmul q4_k %{{.*}}, %{{.*}} : (tensor<2x256xf32>, tensor<8x144xui8>) -> tensor<2x8xf32>
// CHECK:        hir.dequant_matmul q5_k %{{.*}}, %{{.*}} : (tensor<2x256xf32>, tensor<8x176xui8>) -> tensor<2x8xf32>
// CHECK:        hir.dequant_matmul q6_k %{{.*}}, %{{.*}} : (tensor<2x256xf32>, tensor<8x210xui8>) -> tensor<2x8xf32>
// GENERIC:      "hir.dequant_matmul"(%{{.*}}, %{{.*}}) <{scheme = #rlx<quant_scheme f16>}> : (tensor<2x5xf32>, tensor<8x10xui8>) -> tensor<2x8xf32>
// GENERIC:      "hir.dequant_matmul"(%{{.*}}, %{{.*}}) <{scheme = #rlx<quant_scheme bf16>}> : (tensor<2x5xf32>, tensor<8x10xui8>) -> tensor<2x8xf32>
// GENERIC:      "hir.dequant_matmul"(%{{.*}}, %{{.*}}) <{scheme = #rlx<quant_scheme q4_1>}> : (tensor<2x64xf32>, tensor<8x40xui8>) -> tensor<2x8xf32>
// GENERIC:      "hir.dequant_matmul"(%{{.*}}, %{{.*}}) <{scheme = #rlx<quant_scheme q5_0>}> : (tensor<2x64xf32>, tensor<8x44xui8>) -> tensor<2x8xf32>
// GENERIC:      "hir.dequant_matmul"(%{{.*}}, %{{.*}}) <{scheme = #rlx<quant_scheme q5_1>}> : (tensor<2x64xf32>, tensor<8x48xui8>) -> tensor<2x8xf32>
// GENERIC:      "hir.dequant_matmul"(%{{.*}}, %{{.*}}) <{scheme = #rlx<quant_scheme q4_k>}> : (tensor<2x256xf32>, tensor<8x144xui8>) -> tensor<2x8xf32>
// GENERIC:      "hir.dequant_matmul"(%{{.*}}, %{{.*}}) <{scheme = #rlx<quant_scheme q5_k>}> : (tensor<2x256xf32>, tensor<8x176xui8>) -> tensor<2x8xf32>
// GENERIC:      "hir.dequant_matmul"(%{{.*}}, %{{.*}}) <{scheme = #rlx<quant_scheme q6_k>}> : (tensor<2x256xf32>, tensor<8x210xui8>) -> tensor<2x8xf32>

// -----

// activations q8 (ggml's quantized activations) is printed; f32 is the absent property.
// CHECK-LABEL: func.func @dequant_matmul_q8_activations
// GENERIC-LABEL: sym_name = "dequant_matmul_q8_activations"
func.func @dequant_matmul_q8_activations() {
  %x = "test.op"() : () -> tensor<2x256xf32>
  %w = "test.op"() : () -> tensor<8x144xui8>
  %y0 = hir.dequant_matmul q4_k %x, %w activations q8 : (tensor<2x256xf32>, tensor<8x144xui8>) -> tensor<2x8xf32>
  %y1 = hir.dequant_matmul q4_k %x, %w activations f32 : (tensor<2x256xf32>, tensor<8x144xui8>) -> tensor<2x8xf32>
  func.return
}
// CHECK:        hir.dequant_matmul q4_k %{{.*}}, %{{.*}} activations q8 : (tensor<2x256xf32>, tensor<8x144xui8>) -> tensor<2x8xf32>
// GENERIC:      "hir.dequant_matmul"(%{{.*}}, %{{.*}}) <{scheme = #rlx<quant_scheme q4_k>, activations = #rlx<quant_activations q8>}> : (tensor<2x256xf32>, tensor<8x144xui8>) -> tensor<2x8xf32>
