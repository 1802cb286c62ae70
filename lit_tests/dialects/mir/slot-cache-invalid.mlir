// RUN: rlx-opt %s --split-input-file --verify-diagnostics | filecheck %s

// One case per rule of batched decoding's ops (mir.cache_scatter, mir.slot_attention).

func.func @f(%k: tensor<?x4xf32> {rlx.name = "k", rlx.role = "input"}, %s: tensor<?xi32> {rlx.name = "s", rlx.role = "input"}, %kc: tensor<4x32x8xf32> {rlx.name = "kc", rlx.role = "state"}) {
  %k2 = mir.cache_scatter %k into %kc[%s, %s] : tensor<?x4xf32>, tensor<?xi32>, tensor<?xi32> into tensor<4x32x8xf32>
  func.return
}

// CHECK: 'mir.cache_scatter': rows [?, 4]: expected [R, 8] or [B, S, 8] (rows of the slot cache [4, 32, 8] [n_slots, capacity, *tail]), got [?, 4]

// -----

func.func @f(%k: tensor<3x8xf32> {rlx.name = "k", rlx.role = "input"}, %s: tensor<2xi32> {rlx.name = "s", rlx.role = "input"}, %p: tensor<3xi32> {rlx.name = "p", rlx.role = "input"}, %kc: tensor<4x32x8xf32> {rlx.name = "kc", rlx.role = "state"}) {
  %k2 = mir.cache_scatter %k into %kc[%s, %p] : tensor<3x8xf32>, tensor<2xi32>, tensor<3xi32> into tensor<4x32x8xf32>
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.cache_scatter': slots: expected shape [3] (one slot per row), got [2]

// -----

func.func @f(%k: tensor<?x8xf32> {rlx.name = "k", rlx.role = "input"}, %s: tensor<?xi32> {rlx.name = "s", rlx.role = "input"}, %kc: tensor<4x?x8xf32> {rlx.name = "kc", rlx.role = "state"}) {
  %k2 = mir.cache_scatter %k into %kc[%s, %s] : tensor<?x8xf32>, tensor<?xi32>, tensor<?xi32> into tensor<4x?x8xf32>
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.cache_scatter': cache: a slot cache (a state) has a static shape, so every dim must be static, got the symbolic dimension ?

// -----

func.func @f(%k: tensor<?x8xf32> {rlx.name = "k", rlx.role = "input"}, %s: tensor<?xi64> {rlx.name = "s", rlx.role = "input"}, %kc: tensor<4x32x8xf32> {rlx.name = "kc", rlx.role = "state"}) {
  %k2 = mir.cache_scatter %k into %kc[%s, %s] : tensor<?x8xf32>, tensor<?xi64>, tensor<?xi64> into tensor<4x32x8xf32>
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.cache_scatter': slots: expected element type i32, got i64

// -----

func.func @f(%q: tensor<?x16xf32> {rlx.name = "q", rlx.role = "input"}, %kc: tensor<4x32x16xf32> {rlx.name = "kc", rlx.role = "input"}, %s: tensor<?xi32> {rlx.name = "s", rlx.role = "input"}) {
  %o = mir.slot_attention %q, %kc, %kc, %s, %s num_heads 2 head_dim 8 num_kv_heads 1 scale 3.535534e-01 : (tensor<?x16xf32>, tensor<4x32x16xf32>, tensor<4x32x16xf32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x16xf32>
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.slot_attention': keys: expected shape [4, 32, 8] ([n_slots, capacity, num_kv_heads*head_dim = 8]), got [4, 32, 16]

// -----

func.func @f(%q: tensor<?x16xf32> {rlx.name = "q", rlx.role = "input"}, %kc: tensor<4x32x8xf32> {rlx.name = "kc", rlx.role = "input"}, %s: tensor<?xi32> {rlx.name = "s", rlx.role = "input"}) {
  %o = mir.slot_attention %q, %kc, %kc, %s, %s num_heads 2 head_dim 8 num_kv_heads 1 scale 3.535534e-01 window 0 : (tensor<?x16xf32>, tensor<4x32x8xf32>, tensor<4x32x8xf32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x16xf32>
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.slot_attention': window: expected an integer >= 1 (the keys a query sees), got 0

// -----

func.func @f(%q: tensor<?x16xf32> {rlx.name = "q", rlx.role = "input"}, %kc: tensor<4x32x8xf32> {rlx.name = "kc", rlx.role = "input"}, %s: tensor<?xf32> {rlx.name = "s", rlx.role = "input"}) {
  %o = mir.slot_attention %q, %kc, %kc, %s, %s num_heads 2 head_dim 8 num_kv_heads 1 scale 3.535534e-01 : (tensor<?x16xf32>, tensor<4x32x8xf32>, tensor<4x32x8xf32>, tensor<?xf32>, tensor<?xf32>) -> tensor<?x16xf32>
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.slot_attention': slots: expected element type i32, got f32
