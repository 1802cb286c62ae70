// RUN: rlx-opt %s --split-input-file | rlx-opt --split-input-file | filecheck %s
// RUN: rlx-opt %s --split-input-file --print-op-generic | rlx-opt --split-input-file | filecheck %s

// Round-trip of batched decoding's ops (custom form, and through the generic form): rows
// scattered into slot caches at (slot, position) pairs, then the slot attention over them
// (with and without a sliding window).

func.func @slots(%q: tensor<?x16xf32> {rlx.name = "q", rlx.role = "input", rlx.dims = ["R", 16]}, %k: tensor<?x8xf32> {rlx.name = "k", rlx.role = "input", rlx.dims = ["R", 8]}, %s: tensor<?xi32> {rlx.name = "s", rlx.role = "input", rlx.dims = ["R"]}, %p: tensor<?xi32> {rlx.name = "p", rlx.role = "input", rlx.dims = ["R"]}, %kc: tensor<4x32x8xf32> {rlx.name = "kc", rlx.role = "state"}) -> (tensor<?x16xf32> {rlx.dims = ["R", 16]}) {
  %k2 = mir.cache_scatter %k into %kc[%s, %p] : tensor<?x8xf32>, tensor<?xi32>, tensor<?xi32> into tensor<4x32x8xf32>
  mir.assign %k2 to %kc : tensor<4x32x8xf32>
  %o = mir.slot_attention %q, %k2, %k2, %s, %p num_heads 2 head_dim 8 num_kv_heads 1 scale 3.535534e-01 : (tensor<?x16xf32>, tensor<4x32x8xf32>, tensor<4x32x8xf32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x16xf32>
  %w = mir.slot_attention %q, %k2, %k2, %s, %p num_heads 2 head_dim 8 num_kv_heads 1 scale 3.535534e-01 window 4 : (tensor<?x16xf32>, tensor<4x32x8xf32>, tensor<4x32x8xf32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x16xf32>
  func.return %w : tensor<?x16xf32>
}

// CHECK-LABEL: func.func @slots
// CHECK:         %[[K2:.*]] = mir.cache_scatter %k into %kc[%s, %p] : tensor<?x8xf32>, tensor<?xi32>, tensor<?xi32> into tensor<4x32x8xf32>
// CHECK-NEXT:    mir.assign %[[K2]] to %kc : tensor<4x32x8xf32>
// CHECK-NEXT:    %{{.*}} = mir.slot_attention %q, %[[K2]], %[[K2]], %s, %p num_heads 2 head_dim 8 num_kv_heads 1 scale 0.353553414 : (tensor<?x16xf32>, tensor<4x32x8xf32>, tensor<4x32x8xf32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x16xf32>
// CHECK-NEXT:    %{{.*}} = mir.slot_attention %q, %[[K2]], %[[K2]], %s, %p num_heads 2 head_dim 8 num_kv_heads 1 scale 0.353553414 window 4 :

// -----

// A rectangle of sequences: rows [B, S, ·] with slots and positions [B, S].

func.func @rectangle(%q: tensor<?x?x16xf32> {rlx.name = "q", rlx.role = "input", rlx.dims = ["B", "S", 16]}, %k: tensor<?x?x8xf32> {rlx.name = "k", rlx.role = "input", rlx.dims = ["B", "S", 8]}, %s: tensor<?x?xi32> {rlx.name = "s", rlx.role = "input", rlx.dims = ["B", "S"]}, %p: tensor<?x?xi32> {rlx.name = "p", rlx.role = "input", rlx.dims = ["B", "S"]}, %kc: tensor<4x32x8xf32> {rlx.name = "kc", rlx.role = "state"}) -> (tensor<?x?x16xf32> {rlx.dims = ["B", "S", 16]}) {
  %k2 = mir.cache_scatter %k into %kc[%s, %p] : tensor<?x?x8xf32>, tensor<?x?xi32>, tensor<?x?xi32> into tensor<4x32x8xf32>
  mir.assign %k2 to %kc : tensor<4x32x8xf32>
  %o = mir.slot_attention %q, %k2, %k2, %s, %p num_heads 2 head_dim 8 num_kv_heads 1 scale 3.535534e-01 : (tensor<?x?x16xf32>, tensor<4x32x8xf32>, tensor<4x32x8xf32>, tensor<?x?xi32>, tensor<?x?xi32>) -> tensor<?x?x16xf32>
  func.return %o : tensor<?x?x16xf32>
}

// CHECK-LABEL: func.func @rectangle
// CHECK:         %[[K2:.*]] = mir.cache_scatter %k into %kc[%s, %p] : tensor<?x?x8xf32>, tensor<?x?xi32>, tensor<?x?xi32> into tensor<4x32x8xf32>
// CHECK:         mir.slot_attention %q, %[[K2]], %[[K2]], %s, %p {{.*}} : (tensor<?x?x16xf32>, tensor<4x32x8xf32>, tensor<4x32x8xf32>, tensor<?x?xi32>, tensor<?x?xi32>) -> tensor<?x?x16xf32>
