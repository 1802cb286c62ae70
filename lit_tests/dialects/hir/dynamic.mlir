// RUN: rlx-opt %s | rlx-opt | filecheck %s
// RUN: rlx-opt %s --print-op-generic | rlx-opt | filecheck %s

// Symbolic dims in hir (issue 9): every block with a `?` sequence dim, as the Graph
// builder emits them for g.input("x", ("S", 32)) and g.input("kv", ("T", 16)); the
// arguments and results name their symbols in rlx.dims. Round-trips in custom and
// generic form.

func.func @blocks(%x: tensor<?x32xf32> {rlx.name = "x", rlx.role = "input", rlx.dims = ["S", 32 : i64]}, %kv: tensor<?x16xf32> {rlx.name = "kv", rlx.role = "input", rlx.dims = ["T", 16 : i64]}, %ids: tensor<?xi32> {rlx.name = "ids", rlx.role = "input", rlx.dims = ["S"]}, %cos: tensor<?x4xf32> {rlx.name = "cos", rlx.role = "input", rlx.dims = ["S", 4 : i64]}, %sin: tensor<?x4xf32> {rlx.name = "sin", rlx.role = "input", rlx.dims = ["S", 4 : i64]}, %w: tensor<32x32xf32> {rlx.name = "w", rlx.role = "param"}, %gam: tensor<32xf32> {rlx.name = "gam", rlx.role = "param"}, %bet: tensor<32xf32> {rlx.name = "bet", rlx.role = "param"}, %up: tensor<32x48xf32> {rlx.name = "up", rlx.role = "param"}, %gate: tensor<32x48xf32> {rlx.name = "gate", rlx.role = "param"}, %down: tensor<48x32xf32> {rlx.name = "down", rlx.role = "param"}, %table: tensor<50x32xf32> {rlx.name = "table", rlx.role = "param"}, %qb: tensor<16x34xui8> {rlx.name = "qb", rlx.role = "param"}, %cw: tensor<3x32xf32> {rlx.name = "cw", rlx.role = "param"}, %kw: tensor<32x16xf32> {rlx.name = "kw", rlx.role = "param"}, %vw: tensor<32x16xf32> {rlx.name = "vw", rlx.role = "param"}) -> (tensor<?x16xf32> {rlx.dims = ["S", 16 : i64]}, tensor<1x?x32xf32> {rlx.dims = [1 : i64, "S", 32 : i64]}) {
  %0 = hir.embedding %table[%ids] : (tensor<50x32xf32>, tensor<?xi32>) -> tensor<?x32xf32>
  %1 = mir.add %x, %0 : (tensor<?x32xf32>, tensor<?x32xf32>) -> tensor<?x32xf32>
  %2 = hir.linear %1, %w activation gelu : (tensor<?x32xf32>, tensor<32x32xf32>) -> tensor<?x32xf32>
  %3 = hir.rms_norm %2, %gam : (tensor<?x32xf32>, tensor<32xf32>) -> tensor<?x32xf32>
  %4 = hir.swiglu_ffn %3, up %up, gate %gate, down %down : (tensor<?x32xf32>, tensor<32x48xf32>, tensor<32x48xf32>, tensor<48x32xf32>) -> tensor<?x32xf32>
  %5 = hir.residual_rms_norm %4, %x, %gam : (tensor<?x32xf32>, tensor<?x32xf32>, tensor<32xf32>) -> tensor<?x32xf32>
  %6 = hir.layer_norm %4, %gam, %bet : (tensor<?x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<?x32xf32>
  %7 = mir.add %5, %6 : (tensor<?x32xf32>, tensor<?x32xf32>) -> tensor<?x32xf32>
  %8 = hir.rope %7, %cos, %sin head_dim 8 n_rot 8 : (tensor<?x32xf32>, tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x32xf32>
  %9 = hir.attention %8, %kv, %kv num_heads 4 num_kv_heads 2 head_dim 8 scale 0.353553385 : (tensor<?x32xf32>, tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x32xf32>
  %10 = hir.llama_decoder_block %9 ln1(%gam) attn(%w, %kw, %vw, %w) ln2(%gam) ffn(%gate, %up, %down) rope(%cos, %sin) num_heads 4 num_kv_heads 2 head_dim 8 : (tensor<?x32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x48xf32>, tensor<32x48xf32>, tensor<48x32xf32>, tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x32xf32>
  %11 = hir.dequant_matmul q8_0 %10, %qb : (tensor<?x32xf32>, tensor<16x34xui8>) -> tensor<?x16xf32>
  %12 = mir.reshape %10 : tensor<?x32xf32> -> tensor<1x?x32xf32>
  %13 = hir.depthwise_conv1d_causal %12, %cw : (tensor<1x?x32xf32>, tensor<3x32xf32>) -> tensor<1x?x32xf32>
  func.return %11, %13 : tensor<?x16xf32>, tensor<1x?x32xf32>
}

// CHECK-LABEL: func.func @blocks(%x: tensor<?x32xf32> {rlx.name = "x", rlx.role = "input", rlx.dims = ["S", 32 : i64]}, %kv: tensor<?x16xf32> {rlx.name = "kv", rlx.role = "input", rlx.dims = ["T", 16 : i64]}, %ids: tensor<?xi32> {rlx.name = "ids", rlx.role = "input", rlx.dims = ["S"]}, %cos: tensor<?x4xf32> {rlx.name = "cos", rlx.role = "input", rlx.dims = ["S", 4 : i64]}, %sin: tensor<?x4xf32> {rlx.name = "sin", rlx.role = "input", rlx.dims = ["S", 4 : i64]}, %w: tensor<32x32xf32> {rlx.name = "w", rlx.role = "param"}, %gam: tensor<32xf32> {rlx.name = "gam", rlx.role = "param"}, %bet: tensor<32xf32> {rlx.name = "bet", rlx.role = "param"}, %up: tensor<32x48xf32> {rlx.name = "up", rlx.role = "param"}, %gate: tensor<32x48xf32> {rlx.name = "gate", rlx.role = "param"}, %down: tensor<48x32xf32> {rlx.name = "down", rlx.role = "param"}, %table: tensor<50x32xf32> {rlx.name = "table", rlx.role = "param"}, %qb: tensor<16x34xui8> {rlx.name = "qb", rlx.role = "param"}, %cw: tensor<3x32xf32> {rlx.name = "cw", rlx.role = "param"}, %kw: tensor<32x16xf32> {rlx.name = "kw", rlx.role = "param"}, %vw: tensor<32x16xf32> {rlx.name = "vw", rlx.role = "param"}) -> (tensor<?x16xf32> {rlx.dims = ["S", 16 : i64]}, tensor<1x?x32xf32> {rlx.dims = [1 : i64, "S", 32 : i64]}) {
// CHECK-NEXT: %0 = hir.embedding %table[%ids] : (tensor<50x32xf32>, tensor<?xi32>) -> tensor<?x32xf32>
// CHECK-NEXT: %1 = mir.add %x, %0 : (tensor<?x32xf32>, tensor<?x32xf32>) -> tensor<?x32xf32>
// CHECK-NEXT: %2 = hir.linear %1, %w activation gelu : (tensor<?x32xf32>, tensor<32x32xf32>) -> tensor<?x32xf32>
// CHECK-NEXT: %3 = hir.rms_norm %2, %gam : (tensor<?x32xf32>, tensor<32xf32>) -> tensor<?x32xf32>
// CHECK-NEXT: %4 = hir.swiglu_ffn %3, up %up, gate %gate, down %down : (tensor<?x32xf32>, tensor<32x48xf32>, tensor<32x48xf32>, tensor<48x32xf32>) -> tensor<?x32xf32>
// CHECK-NEXT: %5 = hir.residual_rms_norm %4, %x, %gam : (tensor<?x32xf32>, tensor<?x32xf32>, tensor<32xf32>) -> tensor<?x32xf32>
// CHECK-NEXT: %6 = hir.layer_norm %4, %gam, %bet : (tensor<?x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<?x32xf32>
// CHECK-NEXT: %7 = mir.add %5, %6 : (tensor<?x32xf32>, tensor<?x32xf32>) -> tensor<?x32xf32>
// CHECK-NEXT: %8 = hir.rope %7, %cos, %sin head_dim 8 n_rot 8 : (tensor<?x32xf32>, tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x32xf32>
// CHECK-NEXT: %9 = hir.attention %8, %kv, %kv num_heads 4 num_kv_heads 2 head_dim 8 scale 0.353553385 : (tensor<?x32xf32>, tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x32xf32>
// CHECK-NEXT: %10 = hir.llama_decoder_block %9 ln1(%gam) attn(%w, %kw, %vw, %w) ln2(%gam) ffn(%gate, %up, %down) rope(%cos, %sin) num_heads 4 num_kv_heads 2 head_dim 8 : (tensor<?x32xf32>, tensor<32xf32>, tensor<32x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>, tensor<32x32xf32>, tensor<32xf32>, tensor<32x48xf32>, tensor<32x48xf32>, tensor<48x32xf32>, tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x32xf32>
// CHECK-NEXT: %11 = hir.dequant_matmul q8_0 %10, %qb : (tensor<?x32xf32>, tensor<16x34xui8>) -> tensor<?x16xf32>
// CHECK-NEXT: %12 = mir.reshape %10 : tensor<?x32xf32> -> tensor<1x?x32xf32>
// CHECK-NEXT: %13 = hir.depthwise_conv1d_causal %12, %cw : (tensor<1x?x32xf32>, tensor<3x32xf32>) -> tensor<1x?x32xf32>
// CHECK-NEXT: func.return %11, %13 : tensor<?x16xf32>, tensor<1x?x32xf32>
// CHECK-NEXT: }
