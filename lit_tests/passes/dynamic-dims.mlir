// RUN: rlx-opt %s -p convert-hir-to-mir | filecheck %s --check-prefix=MIR
// RUN: rlx-opt %s -p convert-hir-to-mir,canonicalize,cse,mir-fuse | filecheck %s --check-prefix=FUSE
// RUN: rlx-opt %s -p convert-hir-to-mir,canonicalize,cse,mir-fuse,convert-mir-to-lir | filecheck %s --check-prefix=LIR
// RUN: rlx-opt %s -p 'convert-hir-to-mir,convert-mir-to-lir,lir-plan-arena{max-dims="S=128"}' | filecheck %s --check-prefix=ARENA
// RUN: rlx-opt %s -p rlx-lower | filecheck %s --check-prefix=LOWER

// The passes on a dynamic module (issue 9): every hir block with a symbolic sequence
// length S (and T rows of k/v), as g.input("x", ("S", 32)) builds it.
// - convert-hir-to-mir decomposes the blocks on ? shapes and keeps rlx.dims;
// - canonicalize, cse and mir-fuse work as on static shapes (folders never fire on a ?);
// - convert-mir-to-lir bufferizes to memref<?x...>: each dynamic lir.alloc names its
//   dims from the arguments' symbols (the causal convolution pads S rows to S+2), the
//   output arguments take the results' rlx.dims;
// - lir-plan-arena plans the ? buffers at the symbols' bounds; convert-lir-to-llvm builds
//   kernels that read the sizes at run time, except for the causal convolution (below).

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

// MIR-LABEL: func.func @blocks(%x: tensor<?x32xf32> {rlx.name = "x", rlx.role = "input", rlx.dims = ["S", 32 : i64]}, %kv: tensor<?x16xf32> {rlx.name = "kv", rlx.role = "input", rlx.dims = ["T", 16 : i64]}
// MIR-SAME:    -> (tensor<?x16xf32> {rlx.dims = ["S", 16 : i64]}, tensor<1x?x32xf32> {rlx.dims = [1 : i64, "S", 32 : i64]}) {
// MIR-NOT:     hir.
// MIR:         %[[PAD:.*]] = mir.constant dense<0.000000e+00> : tensor<1x2x32xf32>
// MIR:         %[[CAT:.*]] = mir.concat %[[PAD]], %{{.*}} axis 1 : (tensor<1x2x32xf32>, tensor<1x?x32xf32>) -> tensor<1x?x32xf32>
// MIR-NEXT:    %[[CONV:.*]] = mir.depthwise_conv1d %[[CAT]], %cw : (tensor<1x?x32xf32>, tensor<3x32xf32>) -> tensor<1x?x32xf32>
// MIR-NEXT:    func.return %{{.*}}, %[[CONV]] : tensor<?x16xf32>, tensor<1x?x32xf32>

// FUSE-LABEL: func.func @blocks(
// FUSE:         mir.fused_matmul %{{.*}}, %w activation gelu : (tensor<?x32xf32>, tensor<32x32xf32>) -> tensor<?x32xf32>
// FUSE:         mir.fused_matmul %{{.*}}, %gate activation silu : (tensor<?x32xf32>, tensor<32x48xf32>) -> tensor<?x48xf32>
// FUSE:         func.return %{{.*}}, %{{.*}} : tensor<?x16xf32>, tensor<1x?x32xf32>

// LIR-LABEL: func.func @blocks(%x: memref<?x32xf32> {rlx.name = "x", rlx.role = "input", rlx.dims = ["S", 32 : i64]}
// LIR-SAME:    %out0: memref<?x16xf32> {rlx.name = "out0", rlx.role = "output", rlx.dims = ["S", 16 : i64]}, %out1: memref<1x?x32xf32> {rlx.name = "out1", rlx.role = "output", rlx.dims = [1 : i64, "S", 32 : i64]}) {
// LIR-NOT:     lir.alloc dims [{{.*}}"?"
// LIR:         %{{.*}} = lir.alloc dims ["S", 32 : i64] : memref<?x32xf32>
// LIR:         %{{.*}} = lir.alloc dims ["S", 48 : i64] : memref<?x48xf32>
// LIR:         %[[PAD:.*]] = lir.alloc : memref<1x2x32xf32>
// LIR:         %[[CAT:.*]] = lir.alloc dims [1 : i64, "S+2", 32 : i64] : memref<1x?x32xf32>
// LIR-NEXT:    lir.concat ins(%[[PAD]], %{{.*}} : memref<1x2x32xf32>, memref<1x?x32xf32>) outs(%[[CAT]] : memref<1x?x32xf32>) axis 1
// LIR-NEXT:    lir.depthwise_conv1d ins(%[[CAT]], %cw : memref<1x?x32xf32>, memref<3x32xf32>) outs(%out1 : memref<1x?x32xf32>)
// LIR-NEXT:    func.return

// lir-plan-arena sizes every ? buffer at its symbols' bounds (max-dims; T, not named,
// at the default 4096) and records them on the arena, whose verifier re-proves the plan;
// each slot keeps its symbolic dims.
// ARENA:       %arena = lir.arena size {{[0-9]+}} alignment 64 strategy "greedy-by-size" max_live_bytes {{[0-9]+}} max_dims {S = 128 : i64, T = 4096 : i64}
// ARENA:       lir.slot %arena[{{[0-9]+}}] live [{{[0-9]+}}, {{[0-9]+}}] dims ["S", 32 : i64] : memref<{{[0-9]+}}xi8> -> memref<?x32xf32>

// The causal convolution pads along S (a concat along a symbolic axis) and convolves
// the S+2 padded rows: both kernels read S at run time (pointers, then the size of S).
// LOWER-DAG: llvm.func @blocks__concat_{{[0-9]+}}(%{{.*}}: !llvm.ptr {{.*}}, %{{.*}}: !llvm.ptr {{.*}}, %{{.*}}: !llvm.ptr {{.*}}, %{{.*}}: i64)
// LOWER-DAG: llvm.func @blocks__depthwise_conv1d_{{[0-9]+}}(%{{.*}}: !llvm.ptr {{.*}}, %{{.*}}: !llvm.ptr {{.*}}, %{{.*}}: !llvm.ptr {{.*}}, %{{.*}}: i64)
