// RUN: rlx-opt %s | rlx-opt | filecheck %s
// RUN: rlx-opt %s --print-op-generic | rlx-opt | filecheck %s
// RUN: rlx-opt %s -p convert-hir-to-mir | filecheck %s --check-prefix=MIR

// hir.qwen35_mtp_head round-trips (optional betas absent in hnorm and q_norm) and
// convert-hir-to-mir expands it by one pattern into mir primitives.

// CHECK:      hir.qwen35_mtp_head %h_pre_norm, %input_ids, %cos, %sin, %last_token_idx embed(%embed_w) hnorm(%hnorm_w) enorm(%enorm_w, %enorm_b) eh(%eh_w) attn_norm(%attn_norm_w, %attn_norm_b) attn(%q_gate_w, %k_w, %v_w) q_norm(%q_norm_w) k_norm(%k_norm_w, %k_norm_b) o(%o_w) post_norm(%post_norm_w, %post_norm_b) ffn(%gate_w, %up_w, %down_w) head_norm(%head_norm_w, %head_norm_b) lm_head(%lm_head_w) num_heads 2 num_kv_heads 1 head_dim 4 n_rot 2 : ({{.*}}) -> tensor<2x5xf32>

// MIR-NOT:    hir.
// MIR:        mir.rms_norm %h_pre_norm, %hnorm_w
// MIR:        mir.gather %embed_w, %input_ids axis 0
// MIR:        mir.concat
// MIR:        mir.narrow %{{.*}} axis 3 start 0 length 4
// MIR:        mir.narrow %{{.*}} axis 3 start 4 length 4
// MIR:        mir.rope
// MIR:        mir.rope
// MIR:        mir.attention %{{.*}}, %{{.*}}, %{{.*}} num_heads 2 head_dim 4 num_kv_heads 1 mask_kind causal
// MIR:        mir.sigmoid
// MIR:        mir.gather %{{.*}}, %last_token_idx axis 1 : (tensor<2x3x8xf32>, tensor<2xi32>) -> tensor<2x2x8xf32>
// MIR:        mir.constant dense<[0, 3]> : tensor<2xi64>
// MIR:        mir.gather %{{.*}}, %{{.*}} axis 0 : (tensor<4x8xf32>, tensor<2xi64>) -> tensor<2x8xf32>
// MIR:        mir.matmul %{{.*}}, %lm_head_w : (tensor<2x8xf32>, tensor<8x5xf32>) -> tensor<2x5xf32>
  func.func @mtp(%h_pre_norm: tensor<2x3x8xf32> {rlx.name = "h_pre_norm", rlx.role = "input"}, %input_ids: tensor<2x3xi64> {rlx.name = "input_ids", rlx.role = "input"}, %cos: tensor<3x1xf32> {rlx.name = "cos", rlx.role = "input"}, %sin: tensor<3x1xf32> {rlx.name = "sin", rlx.role = "input"}, %last_token_idx: tensor<2xi32> {rlx.name = "last_token_idx", rlx.role = "input"}, %embed_w: tensor<5x8xf32> {rlx.name = "embed_w", rlx.role = "param"}, %hnorm_w: tensor<8xf32> {rlx.name = "hnorm_w", rlx.role = "param"}, %enorm_w: tensor<8xf32> {rlx.name = "enorm_w", rlx.role = "param"}, %enorm_b: tensor<8xf32> {rlx.name = "enorm_b", rlx.role = "param"}, %eh_w: tensor<16x8xf32> {rlx.name = "eh_w", rlx.role = "param"}, %attn_norm_w: tensor<8xf32> {rlx.name = "attn_norm_w", rlx.role = "param"}, %attn_norm_b: tensor<8xf32> {rlx.name = "attn_norm_b", rlx.role = "param"}, %q_gate_w: tensor<8x16xf32> {rlx.name = "q_gate_w", rlx.role = "param"}, %k_w: tensor<8x4xf32> {rlx.name = "k_w", rlx.role = "param"}, %v_w: tensor<8x4xf32> {rlx.name = "v_w", rlx.role = "param"}, %q_norm_w: tensor<4xf32> {rlx.name = "q_norm_w", rlx.role = "param"}, %k_norm_w: tensor<4xf32> {rlx.name = "k_norm_w", rlx.role = "param"}, %k_norm_b: tensor<4xf32> {rlx.name = "k_norm_b", rlx.role = "param"}, %o_w: tensor<8x8xf32> {rlx.name = "o_w", rlx.role = "param"}, %post_norm_w: tensor<8xf32> {rlx.name = "post_norm_w", rlx.role = "param"}, %post_norm_b: tensor<8xf32> {rlx.name = "post_norm_b", rlx.role = "param"}, %gate_w: tensor<8x6xf32> {rlx.name = "gate_w", rlx.role = "param"}, %up_w: tensor<8x6xf32> {rlx.name = "up_w", rlx.role = "param"}, %down_w: tensor<6x8xf32> {rlx.name = "down_w", rlx.role = "param"}, %head_norm_w: tensor<8xf32> {rlx.name = "head_norm_w", rlx.role = "param"}, %head_norm_b: tensor<8xf32> {rlx.name = "head_norm_b", rlx.role = "param"}, %lm_head_w: tensor<8x5xf32> {rlx.name = "lm_head_w", rlx.role = "param"}) -> tensor<2x5xf32> {
    %0 = hir.qwen35_mtp_head %h_pre_norm, %input_ids, %cos, %sin, %last_token_idx embed(%embed_w) hnorm(%hnorm_w) enorm(%enorm_w, %enorm_b) eh(%eh_w) attn_norm(%attn_norm_w, %attn_norm_b) attn(%q_gate_w, %k_w, %v_w) q_norm(%q_norm_w) k_norm(%k_norm_w, %k_norm_b) o(%o_w) post_norm(%post_norm_w, %post_norm_b) ffn(%gate_w, %up_w, %down_w) head_norm(%head_norm_w, %head_norm_b) lm_head(%lm_head_w) num_heads 2 num_kv_heads 1 head_dim 4 n_rot 2 : (tensor<2x3x8xf32>, tensor<2x3xi64>, tensor<3x1xf32>, tensor<3x1xf32>, tensor<2xi32>, tensor<5x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<16x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8x16xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<8x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8x6xf32>, tensor<8x6xf32>, tensor<6x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8x5xf32>) -> tensor<2x5xf32>
    func.return %0 : tensor<2x5xf32>
  }
