// RUN: rlx-opt %s --split-input-file | rlx-opt --split-input-file | filecheck %s
// RUN: rlx-opt %s --split-input-file --print-op-generic | rlx-opt --split-input-file | filecheck %s

// A Llama block decoding with KV caches: `kv_cache(%k, %v, %position)` after the
// operand groups (custom form, and through the generic form).

func.func @block(%x: tensor<?x8xf32> {rlx.name = "x", rlx.role = "input", rlx.dims = ["S", 8 : i64]}, %cos: tensor<?x2xf32> {rlx.name = "cos", rlx.role = "input", rlx.dims = ["S", 2 : i64]}, %sin: tensor<?x2xf32> {rlx.name = "sin", rlx.role = "input", rlx.dims = ["S", 2 : i64]}, %k: tensor<6x4xf32> {rlx.name = "k", rlx.role = "state"}, %v: tensor<6x4xf32> {rlx.name = "v", rlx.role = "state"}, %ln1: tensor<8xf32> {rlx.name = "ln1", rlx.role = "param"}, %wq: tensor<8x8xf32> {rlx.name = "wq", rlx.role = "param"}, %wk: tensor<8x4xf32> {rlx.name = "wk", rlx.role = "param"}, %wv: tensor<8x4xf32> {rlx.name = "wv", rlx.role = "param"}, %wo: tensor<8x8xf32> {rlx.name = "wo", rlx.role = "param"}, %ln2: tensor<8xf32> {rlx.name = "ln2", rlx.role = "param"}, %wg: tensor<8x16xf32> {rlx.name = "wg", rlx.role = "param"}, %wu: tensor<8x16xf32> {rlx.name = "wu", rlx.role = "param"}, %wd: tensor<16x8xf32> {rlx.name = "wd", rlx.role = "param"}, %position: index {rlx.name = "position", rlx.role = "position"}) -> (tensor<?x8xf32> {rlx.dims = ["S", 8 : i64]}) attributes {rlx.cache_dims = {T = ["S", 6 : i64]}} {
  %0 = hir.llama_decoder_block %x ln1(%ln1) attn(%wq, %wk, %wv, %wo) ln2(%ln2) ffn(%wg, %wu, %wd) rope(%cos, %sin) kv_cache(%k, %v, %position) num_heads 2 num_kv_heads 1 head_dim 4 : (tensor<?x8xf32>, tensor<8xf32>, tensor<8x8xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x8xf32>, tensor<8xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<16x8xf32>, tensor<?x2xf32>, tensor<?x2xf32>, tensor<6x4xf32>, tensor<6x4xf32>, index) -> tensor<?x8xf32>
  func.return %0 : tensor<?x8xf32>
}

// CHECK-LABEL: func.func @block
// CHECK:         hir.llama_decoder_block %x ln1(%ln1) attn(%wq, %wk, %wv, %wo) ln2(%ln2) ffn(%wg, %wu, %wd) rope(%cos, %sin) kv_cache(%k, %v, %position) num_heads 2 num_kv_heads 1 head_dim 4 : ({{.*}}, tensor<6x4xf32>, tensor<6x4xf32>, index) -> tensor<?x8xf32>
