// RUN: rlx-opt %s | filecheck %s --check-prefix=HIR
// RUN: rlx-opt %s -p convert-hir-to-mir | filecheck %s --check-prefix=MIR
// RUN: rlx-opt %s -p convert-hir-to-mir | rlx-opt | filecheck %s --check-prefix=MIR
// RUN: rlx-opt %s -p convert-hir-to-mir,convert-mir-to-lir | filecheck %s --check-prefix=LIR
// RUN: rlx-opt %s -p convert-hir-to-mir,convert-mir-to-lir | rlx-opt | filecheck %s --check-prefix=LIR
// RUN: rlx-opt %s -p convert-hir-to-mir,convert-mir-to-lir,lir-plan-arena,convert-lir-to-llvm | filecheck %s --check-prefix=LLVM

// Sliding-window attention over a symbolic S and T: `window 3` (query i sees the keys
// i + (T-S) - 3 < j <= i + (T-S)) is a property of the op at every level, printed after
// the scale; the kernel reads S and T at run time (its two i64 sizes after the pointers).

// HIR:  hir.attention %q, %k, %k mask_kind causal num_heads 4 num_kv_heads 2 head_dim 8 scale 0.353553385 window 3 : (tensor<?x32xf32>, tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x32xf32>
// MIR:  mir.attention %q, %k, %k num_heads 4 head_dim 8 num_kv_heads 2 mask_kind causal scale 0.353553385 window 3 : (tensor<?x32xf32>, tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x32xf32>
// LIR:  lir.attention ins(%q, %k, %k : memref<?x32xf32>, memref<?x16xf32>, memref<?x16xf32>) outs(%{{.*}} : memref<?x32xf32>) num_heads 4 head_dim 8 num_kv_heads 2 mask_kind causal scale 0.353553385 window 3
// LLVM: llvm.func @swa__attention_{{[0-9]+}}(%{{[0-9]+}}: !llvm.ptr, %{{[0-9]+}}: !llvm.ptr, %{{[0-9]+}}: !llvm.ptr, %{{[0-9]+}}: !llvm.ptr, %{{[0-9]+}}: i64, %{{[0-9]+}}: i64) {
func.func @swa(%q: tensor<?x32xf32> {rlx.name = "q", rlx.role = "input", rlx.dims = ["S", 32 : i64]}, %k: tensor<?x16xf32> {rlx.name = "k", rlx.role = "input", rlx.dims = ["T", 16 : i64]}) -> (tensor<?x32xf32> {rlx.dims = ["S", 32 : i64]}) {
  %o = hir.attention %q, %k, %k mask_kind causal num_heads 4 num_kv_heads 2 head_dim 8 scale 0.353553385 window 3 : (tensor<?x32xf32>, tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x32xf32>
  func.return %o : tensor<?x32xf32>
}
