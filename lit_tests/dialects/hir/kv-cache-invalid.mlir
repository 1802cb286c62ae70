// RUN: rlx-opt %s --split-input-file --verify-diagnostics | filecheck %s

// The rules a decoding Llama block adds: caches [capacity, num_kv_heads*head_dim] of one
// shape, x without batch, no custom or bias mask; k_cache, v_cache and position together.

%x = "test.op"() : () -> tensor<3x8xf32>
%g = "test.op"() : () -> tensor<8xf32>
%wq = "test.op"() : () -> tensor<8x8xf32>
%wk = "test.op"() : () -> tensor<8x4xf32>
%wf = "test.op"() : () -> tensor<8x16xf32>
%wd = "test.op"() : () -> tensor<16x8xf32>
%cs = "test.op"() : () -> tensor<3x2xf32>
%k = "test.op"() : () -> tensor<6x8xf32>
%p = "test.op"() : () -> index
%0 = hir.llama_decoder_block %x ln1(%g) attn(%wq, %wk, %wk, %wq) ln2(%g) ffn(%wf, %wf, %wd) rope(%cs, %cs) kv_cache(%k, %k, %p) num_heads 2 num_kv_heads 1 head_dim 4 : (tensor<3x8xf32>, tensor<8xf32>, tensor<8x8xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x8xf32>, tensor<8xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<16x8xf32>, tensor<3x2xf32>, tensor<3x2xf32>, tensor<6x8xf32>, tensor<6x8xf32>, index) -> tensor<3x8xf32>

// CHECK: 'hir.llama_decoder_block': k_cache: expected shape [6, 4] ([capacity, num_kv_heads*head_dim = 4]), got [6, 8]

// -----

%x = "test.op"() : () -> tensor<3x8xf32>
%g = "test.op"() : () -> tensor<8xf32>
%wq = "test.op"() : () -> tensor<8x8xf32>
%wk = "test.op"() : () -> tensor<8x4xf32>
%wf = "test.op"() : () -> tensor<8x16xf32>
%wd = "test.op"() : () -> tensor<16x8xf32>
%cs = "test.op"() : () -> tensor<3x2xf32>
%k = "test.op"() : () -> tensor<6x4xf32>
%m = "test.op"() : () -> tensor<3x3xf32>
%p = "test.op"() : () -> index
%0 = hir.llama_decoder_block %x ln1(%g) attn(%wq, %wk, %wk, %wq) ln2(%g) ffn(%wf, %wf, %wd) rope(%cs, %cs) mask(%m) kv_cache(%k, %k, %p) num_heads 2 num_kv_heads 1 head_dim 4 mask_kind bias : (tensor<3x8xf32>, tensor<8xf32>, tensor<8x8xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x8xf32>, tensor<8xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<16x8xf32>, tensor<3x2xf32>, tensor<3x2xf32>, tensor<3x3xf32>, tensor<6x4xf32>, tensor<6x4xf32>, index) -> tensor<3x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.llama_decoder_block': mask_kind: with kv_cache, expected causal or none (a mask over the cache rows is not supported), got 'bias'

// -----

%x = "test.op"() : () -> tensor<7x8xf32>
%g = "test.op"() : () -> tensor<8xf32>
%wq = "test.op"() : () -> tensor<8x8xf32>
%wk = "test.op"() : () -> tensor<8x4xf32>
%wf = "test.op"() : () -> tensor<8x16xf32>
%wd = "test.op"() : () -> tensor<16x8xf32>
%cs = "test.op"() : () -> tensor<7x2xf32>
%k = "test.op"() : () -> tensor<6x4xf32>
%p = "test.op"() : () -> index
%0 = hir.llama_decoder_block %x ln1(%g) attn(%wq, %wk, %wk, %wq) ln2(%g) ffn(%wf, %wf, %wd) rope(%cs, %cs) kv_cache(%k, %k, %p) num_heads 2 num_kv_heads 1 head_dim 4 : (tensor<7x8xf32>, tensor<8xf32>, tensor<8x8xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x8xf32>, tensor<8xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<16x8xf32>, tensor<7x2xf32>, tensor<7x2xf32>, tensor<6x4xf32>, tensor<6x4xf32>, index) -> tensor<7x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'hir.llama_decoder_block': x [7, 8]: expected at most 6 rows (the capacity of the caches [6, 4]), got 7
