// RUN: rlx-opt %s --split-input-file | rlx-opt --split-input-file | filecheck %s
// RUN: rlx-opt %s --split-input-file --print-op-generic | rlx-opt --split-input-file | filecheck %s

// Batched decoding bufferized: the rows go into the slot cache's state buffer in place at
// their (slot, position) pairs, and the slot attention reads that buffer.

func.func @slots(%q: memref<?x16xf32> {rlx.name = "q", rlx.role = "input", rlx.dims = ["R", 16]}, %k: memref<?x8xf32> {rlx.name = "k", rlx.role = "input", rlx.dims = ["R", 8]}, %s: memref<?xi32> {rlx.name = "s", rlx.role = "input", rlx.dims = ["R"]}, %p: memref<?xi32> {rlx.name = "p", rlx.role = "input", rlx.dims = ["R"]}, %kc: memref<4x32x8xf32> {rlx.name = "kc", rlx.role = "state"}, %o: memref<?x16xf32> {rlx.name = "out0", rlx.role = "output", rlx.dims = ["R", 16]}) {
  lir.cache_scatter ins(%k, %s, %p : memref<?x8xf32>, memref<?xi32>, memref<?xi32>) outs(%kc : memref<4x32x8xf32>)
  lir.slot_attention ins(%q, %kc, %kc, %s, %p : memref<?x16xf32>, memref<4x32x8xf32>, memref<4x32x8xf32>, memref<?xi32>, memref<?xi32>) outs(%o : memref<?x16xf32>) num_heads 2 head_dim 8 num_kv_heads 1 scale 3.535534e-01 window 4
  func.return
}

// CHECK-LABEL: func.func @slots
// CHECK:         lir.cache_scatter ins(%k, %s, %p : memref<?x8xf32>, memref<?xi32>, memref<?xi32>) outs(%kc : memref<4x32x8xf32>)
// CHECK-NEXT:    lir.slot_attention ins(%q, %kc, %kc, %s, %p : memref<?x16xf32>, memref<4x32x8xf32>, memref<4x32x8xf32>, memref<?xi32>, memref<?xi32>) outs(%o : memref<?x16xf32>) num_heads 2 head_dim 8 num_kv_heads 1 scale {{.*}} window 4
