// RUN: rlx-opt %s -p mir-fuse | filecheck %s
// RUN: rlx-opt %s -p mir-fuse,convert-mir-to-lir | filecheck %s --check-prefix=LIR
// RUN: rlx-opt %s -p 'mir-fuse,convert-mir-to-lir,lir-plan-arena,lir-parallelize{min-work=1}' | filecheck %s --check-prefix=SPLIT
// RUN: rlx-opt %s -p 'mir-fuse{q8-edges=false},convert-mir-to-lir,lir-plan-arena,lir-parallelize{min-work=1}' | filecheck %s --check-prefix=SPLIT-APART

// The attention of a llama layer: the interleaved ropes of q and k go into the q/k/v
// product's epilogue and the KV-cache inserts of k and v into the product itself: its
// k and v results are the updated caches, which bufferization makes the caches' state
// buffers, written by the kernel in place at the position. Nothing is left between the
// product and the attention.
func.func @attention(%h: tensor<?x64xf32> {rlx.name = "h", rlx.role = "input", rlx.dims = ["S", 64 : i64]}, %cos: tensor<?x4xf32> {rlx.name = "cos", rlx.role = "input", rlx.dims = ["S", 4 : i64]}, %sin: tensor<?x4xf32> {rlx.name = "sin", rlx.role = "input", rlx.dims = ["S", 4 : i64]}, %wq: tensor<32x36xui8> {rlx.name = "wq", rlx.role = "param"}, %wk: tensor<16x36xui8> {rlx.name = "wk", rlx.role = "param"}, %wv: tensor<16x36xui8> {rlx.name = "wv", rlx.role = "param"}, %kc: tensor<8x16xf32> {rlx.name = "kc", rlx.role = "state"}, %vc: tensor<8x16xf32> {rlx.name = "vc", rlx.role = "state"}, %position: index {rlx.name = "position", rlx.role = "position"}) -> (tensor<?x32xf32> {rlx.dims = ["S", 32 : i64]}) {
  %q = mir.dequant_matmul %h, %wq scheme q4_0 activations q8 : (tensor<?x64xf32>, tensor<32x36xui8>) -> tensor<?x32xf32>
  %k = mir.dequant_matmul %h, %wk scheme q4_0 activations q8 : (tensor<?x64xf32>, tensor<16x36xui8>) -> tensor<?x16xf32>
  %v = mir.dequant_matmul %h, %wv scheme q4_0 activations q8 : (tensor<?x64xf32>, tensor<16x36xui8>) -> tensor<?x16xf32>
  %qr = mir.rope %q, %cos, %sin head_dim 8 n_rot 8 style interleaved : (tensor<?x32xf32>, tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x32xf32>
  %kr = mir.rope %k, %cos, %sin head_dim 8 n_rot 8 style interleaved : (tensor<?x16xf32>, tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x16xf32>
  %k2 = mir.insert_rows %kr into %kc[%position] : tensor<?x16xf32> into tensor<8x16xf32>
  mir.assign %k2 to %kc : tensor<8x16xf32>
  %kt = mir.extract_rows %k2 size "T" : tensor<8x16xf32> -> tensor<?x16xf32>
  %v2 = mir.insert_rows %v into %vc[%position] : tensor<?x16xf32> into tensor<8x16xf32>
  mir.assign %v2 to %vc : tensor<8x16xf32>
  %vt = mir.extract_rows %v2 size "T" : tensor<8x16xf32> -> tensor<?x16xf32>
  %a = mir.attention %qr, %kt, %vt num_heads 4 head_dim 8 num_kv_heads 2 mask_kind causal scale 0.35355339 : (tensor<?x32xf32>, tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x32xf32>
  func.return %a : tensor<?x32xf32>
}

// CHECK-LABEL: func.func @attention
// CHECK:         %[[Q:.*]], %[[K2:.*]], %[[V2:.*]] = mir.shared_input_matmul %h, %wq, %wk, %wv rope(%cos, %sin : tensor<?x4xf32>, tensor<?x4xf32>) [0, 1] head_dim 8 n_rot 8 style interleaved into(%kc, %vc : tensor<8x16xf32>, tensor<8x16xf32>) [1, 2] at %position scheme q4_0 activations q8 : ({{.*}}) -> (tensor<?x32xf32>, tensor<8x16xf32>, tensor<8x16xf32>)
// CHECK-NOT:     mir.rope
// CHECK-NOT:     mir.insert_rows
// CHECK:         mir.assign %[[K2]] to %kc
// CHECK:         mir.extract_rows %[[K2]] size "T"
// CHECK:         mir.assign %[[V2]] to %vc
// CHECK:         mir.attention %[[Q]]

// LIR-LABEL: func.func @attention
// LIR:         lir.shared_input_matmul q4_0 ins(%h, %wq, %wk, %wv : {{.*}}) rope(%cos, %sin : memref<?x4xf32>, memref<?x4xf32>) [0, 1] head_dim 8 n_rot 8 style interleaved outs(%{{.*}}, %kc, %vc : memref<?x32xf32>, memref<8x16xf32>, memref<8x16xf32>) into [1, 2] at %position activations q8
// LIR-NEXT:    lir.view %kc[0] dims ["T", 16 : i64]
// LIR-NEXT:    lir.view %vc[0] dims ["T", 16 : i64]
// LIR-NOT:     lir.insert_rows
// LIR-NOT:     lir.copy
// LIR:         lir.attention

// Split across threads: one full barrier between the product and the attention, where
// the unfused layer has the two ropes (parallel) and a gather and release around the
// serial inserts.
// SPLIT-LABEL: func.func @attention
// SPLIT:         lir.shared_input_matmul
// SPLIT-NEXT:    lir.view
// SPLIT-NEXT:    lir.view
// SPLIT-NEXT:    lir.barrier{{$}}
// SPLIT-NEXT:    lir.attention
// SPLIT-NEXT:    lir.barrier "gather"
// SPLIT-NEXT:    func.return

// Unfused, the ropes and inserts split their rows as the threads' parts: one region,
// with a barrier before it and one after.
// SPLIT-APART-LABEL: func.func @attention
// SPLIT-APART:       lir.barrier{{$}}
// SPLIT-APART-NOT:   lir.barrier
// SPLIT-APART:       lir.rope {{.*}}rlx.parallel
// SPLIT-APART-NOT:   lir.barrier
// SPLIT-APART:       lir.rope {{.*}}rlx.parallel
// SPLIT-APART-NOT:   lir.barrier
// SPLIT-APART:       lir.insert_rows {{.*}}rlx.parallel
// SPLIT-APART-NOT:   lir.barrier
// SPLIT-APART:       lir.insert_rows {{.*}}rlx.parallel
// SPLIT-APART:       lir.barrier{{$}}
// SPLIT-APART-NEXT:  lir.attention
