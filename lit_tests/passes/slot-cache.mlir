// RUN: rlx-opt %s -p convert-mir-to-lir | filecheck %s --check-prefix=LIR
// RUN: rlx-opt %s -p convert-mir-to-lir,lir-plan-arena | filecheck %s --check-prefix=PLAN
// RUN: rlx-opt %s -p 'convert-mir-to-lir,lir-plan-arena,lir-parallelize{min-work=1}' | filecheck %s --check-prefix=PAR

// Batched decoding: the rows of a ragged batch are scattered into the slot caches' state
// buffers in place (no copy, no arena slot for a cache: the mir.assign becomes nothing),
// and the slot attention reads those buffers. The attention is a checked kernel that
// threads still split (each part checks every row); the scatter stays serial.

// LIR-LABEL: func.func @slots
// LIR:         lir.cache_scatter ins(%k, %s, %p : memref<?x8xf32>, memref<?xi32>, memref<?xi32>) outs(%kc : memref<4x32x8xf32>)
// LIR-NEXT:    lir.cache_scatter ins(%v, %s, %p : memref<?x8xf32>, memref<?xi32>, memref<?xi32>) outs(%vc : memref<4x32x8xf32>)
// LIR:         lir.slot_attention ins(%q, %kc, %vc, %s, %p :
// LIR-NOT:     lir.copy

// PLAN-LABEL: func.func @slots
// PLAN-NOT:    lir.slot %arena{{.*}} -> memref<4x32x8xf32>
// PLAN:        lir.cache_scatter ins(%k, %s, %p : memref<?x8xf32>, memref<?xi32>, memref<?xi32>) outs(%kc : memref<4x32x8xf32>)

// PAR-LABEL: func.func @slots
// PAR:         lir.cache_scatter ins(%k, {{.*}} outs(%kc : memref<4x32x8xf32>) {rlx.phase = "steady_state"}{{$}}
// PAR-NEXT:    lir.cache_scatter ins(%v, {{.*}} outs(%vc : memref<4x32x8xf32>) {rlx.phase = "steady_state"}{{$}}
// PAR-NEXT:    lir.barrier
// PAR-NEXT:    lir.slot_attention ins(%q, %kc, %vc, %s, %p : {{.*}} rlx.parallel}

func.func @slots(%q: tensor<?x16xf32> {rlx.name = "q", rlx.role = "input", rlx.dims = ["R", 16]}, %k: tensor<?x8xf32> {rlx.name = "k", rlx.role = "input", rlx.dims = ["R", 8]}, %v: tensor<?x8xf32> {rlx.name = "v", rlx.role = "input", rlx.dims = ["R", 8]}, %s: tensor<?xi32> {rlx.name = "s", rlx.role = "input", rlx.dims = ["R"]}, %p: tensor<?xi32> {rlx.name = "p", rlx.role = "input", rlx.dims = ["R"]}, %kc: tensor<4x32x8xf32> {rlx.name = "kc", rlx.role = "state"}, %vc: tensor<4x32x8xf32> {rlx.name = "vc", rlx.role = "state"}) -> (tensor<?x16xf32> {rlx.dims = ["R", 16]}) {
  %k2 = mir.cache_scatter %k into %kc[%s, %p] : tensor<?x8xf32>, tensor<?xi32>, tensor<?xi32> into tensor<4x32x8xf32>
  mir.assign %k2 to %kc : tensor<4x32x8xf32>
  %v2 = mir.cache_scatter %v into %vc[%s, %p] : tensor<?x8xf32>, tensor<?xi32>, tensor<?xi32> into tensor<4x32x8xf32>
  mir.assign %v2 to %vc : tensor<4x32x8xf32>
  %o = mir.slot_attention %q, %k2, %v2, %s, %p num_heads 2 head_dim 8 num_kv_heads 1 scale 3.535534e-01 : (tensor<?x16xf32>, tensor<4x32x8xf32>, tensor<4x32x8xf32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x16xf32>
  func.return %o : tensor<?x16xf32>
}
