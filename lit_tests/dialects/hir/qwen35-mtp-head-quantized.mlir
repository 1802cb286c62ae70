// RUN: rlx-opt %s | rlx-opt | filecheck %s
// RUN: rlx-opt %s --print-op-generic | rlx-opt | filecheck %s
// RUN: rlx-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC
// RUN: rlx-opt %s -p convert-hir-to-mir | filecheck %s --check-prefix=MIR

// hir.qwen35_mtp_head with matrices as raw GGUF rows (ui8 [out, in/values * bytes]): the
// scheme before the operand, `activations q8` for the block-quantized ones; it round-trips
// through the custom and the generic form (`schemes`, a dictionary of quant schemes), and
// convert-hir-to-mir reads the table with mir.dequant_gather and multiplies each quantized
// matrix with mir.dequant_matmul (q8 activations for the block-quantized schemes, not for
// f16/bf16), the f32 ones with mir.matmul as before.

// CHECK:      hir.qwen35_mtp_head %h_pre_norm, %input_ids, %cos, %sin, %last_token_idx embed(q8_0 %embed_w) hnorm(%hnorm_w) enorm(%enorm_w, %enorm_b) eh(q4_0 %eh_w) attn_norm(%attn_norm_w) attn(f16 %q_gate_w, q8_0 %k_w, %v_w) q_norm(%q_norm_w) k_norm(%k_norm_w) o(%o_w) post_norm(%post_norm_w) ffn(%gate_w, %up_w, q5_0 %down_w) head_norm(%head_norm_w) lm_head(bf16 %lm_head_w) num_heads 2 num_kv_heads 1 head_dim 16 n_rot 4 activations q8 : ({{.*}}) -> tensor<2x5xf32>

// GENERIC:    schemes = {embed_w = #rlx<quant_scheme q8_0>, eh_w = #rlx<quant_scheme q4_0>, q_gate_w = #rlx<quant_scheme f16>, k_w = #rlx<quant_scheme q8_0>, down_w = #rlx<quant_scheme q5_0>, lm_head_w = #rlx<quant_scheme bf16>}, activations = #rlx<quant_activations q8>

// MIR-NOT:    hir.
// MIR:        mir.dequant_gather %embed_w, %input_ids scheme q8_0 : (tensor<5x34xui8>, tensor<2x3xi64>) -> tensor<2x3x32xf32>
// MIR:        mir.dequant_matmul %{{.*}}, %eh_w scheme q4_0 activations q8 : (tensor<2x3x64xf32>, tensor<32x36xui8>) -> tensor<2x3x32xf32>
// MIR:        mir.dequant_matmul %{{.*}}, %q_gate_w scheme f16 : (tensor<2x3x32xf32>, tensor<64x64xui8>) -> tensor<2x3x64xf32>
// MIR:        mir.dequant_matmul %{{.*}}, %k_w scheme q8_0 activations q8 :
// MIR:        mir.matmul %{{.*}}, %v_w :
// MIR:        mir.matmul %{{.*}}, %o_w :
// MIR:        mir.matmul %{{.*}}, %gate_w :
// MIR:        mir.matmul %{{.*}}, %up_w :
// MIR:        mir.dequant_matmul %{{.*}}, %down_w scheme q5_0 activations q8 : (tensor<2x3x64xf32>, tensor<32x44xui8>) -> tensor<2x3x32xf32>
// MIR:        mir.dequant_matmul %{{.*}}, %lm_head_w scheme bf16 : (tensor<2x32xf32>, tensor<5x64xui8>) -> tensor<2x5xf32>

  func.func @mtp_q(%h_pre_norm: tensor<2x3x32xf32> {rlx.name = "h_pre_norm", rlx.role = "input"}, %input_ids: tensor<2x3xi64> {rlx.name = "input_ids", rlx.role = "input"}, %cos: tensor<3x2xf32> {rlx.name = "cos", rlx.role = "input"}, %sin: tensor<3x2xf32> {rlx.name = "sin", rlx.role = "input"}, %last_token_idx: tensor<2xi32> {rlx.name = "last_token_idx", rlx.role = "input"}, %embed_w: tensor<5x34xui8> {rlx.name = "embed_w", rlx.role = "param"}, %hnorm_w: tensor<32xf32> {rlx.name = "hnorm_w", rlx.role = "param"}, %enorm_w: tensor<32xf32> {rlx.name = "enorm_w", rlx.role = "param"}, %enorm_b: tensor<32xf32> {rlx.name = "enorm_b", rlx.role = "param"}, %eh_w: tensor<32x36xui8> {rlx.name = "eh_w", rlx.role = "param"}, %attn_norm_w: tensor<32xf32> {rlx.name = "attn_norm_w", rlx.role = "param"}, %q_gate_w: tensor<64x64xui8> {rlx.name = "q_gate_w", rlx.role = "param"}, %k_w: tensor<16x34xui8> {rlx.name = "k_w", rlx.role = "param"}, %v_w: tensor<32x16xf32> {rlx.name = "v_w", rlx.role = "param"}, %q_norm_w: tensor<16xf32> {rlx.name = "q_norm_w", rlx.role = "param"}, %k_norm_w: tensor<16xf32> {rlx.name = "k_norm_w", rlx.role = "param"}, %o_w: tensor<32x32xf32> {rlx.name = "o_w", rlx.role = "param"}, %post_norm_w: tensor<32xf32> {rlx.name = "post_norm_w", rlx.role = "param"}, %gate_w: tensor<32x64xf32> {rlx.name = "gate_w", rlx.role = "param"}, %up_w: tensor<32x64xf32> {rlx.name = "up_w", rlx.role = "param"}, %down_w: tensor<32x44xui8> {rlx.name = "down_w", rlx.role = "param"}, %head_norm_w: tensor<32xf32> {rlx.name = "head_norm_w", rlx.role = "param"}, %lm_head_w: tensor<5x64xui8> {rlx.name = "lm_head_w", rlx.role = "param"}) -> tensor<2x5xf32> {
    %0 = hir.qwen35_mtp_head %h_pre_norm, %input_ids, %cos, %sin, %last_token_idx embed(q8_0 %embed_w) hnorm(%hnorm_w) enorm(%enorm_w, %enorm_b) eh(q4_0 %eh_w) attn_norm(%attn_norm_w) attn(f16 %q_gate_w, q8_0 %k_w, %v_w) q_norm(%q_norm_w) k_norm(%k_norm_w) o(%o_w) post_norm(%post_norm_w) ffn(%gate_w, %up_w, q5_0 %down_w) head_norm(%head_norm_w) lm_head(bf16 %lm_head_w) num_heads 2 num_kv_heads 1 head_dim 16 n_rot 4 activations q8 : (tensor<2x3x32xf32>, tensor<2x3xi64>, tensor<3x2xf32>, tensor<3x2xf32>, tensor<2xi32>, tensor<5x34xui8>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32x36xui8>, tensor<32xf32>, tensor<64x64xui8>, tensor<16x34xui8>, tensor<32x16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<32x44xui8>, tensor<32xf32>, tensor<5x64xui8>) -> tensor<2x5xf32>
    func.return %0 : tensor<2x5xf32>
  }
