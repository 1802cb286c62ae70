// RUN: rlx-opt %s --split-input-file --verify-diagnostics | filecheck %s

// One case per rule of the state ops' verifiers.

func.func @f(%x: tensor<?x4xf32> {rlx.name = "x", rlx.role = "input"}, %k: tensor<16x8xf32> {rlx.name = "k", rlx.role = "state"}, %p: index {rlx.name = "position", rlx.role = "position"}) {
  %k2 = mir.insert_rows %x into %k[%p] : tensor<?x4xf32> into tensor<16x8xf32>
  func.return
}

// CHECK: 'mir.insert_rows': rows [?, 4]: expected [S, 8] (rows of the cache [16, 8]), got [?, 4]

// -----

func.func @f(%x: tensor<17x8xf32> {rlx.name = "x", rlx.role = "input"}, %k: tensor<16x8xf32> {rlx.name = "k", rlx.role = "state"}, %p: index {rlx.name = "position", rlx.role = "position"}) {
  %k2 = mir.insert_rows %x into %k[%p] : tensor<17x8xf32> into tensor<16x8xf32>
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.insert_rows': rows [17, 8]: expected at most 16 rows (the capacity of the cache [16, 8]), got 17

// -----

func.func @f(%x: tensor<?x8xf32> {rlx.name = "x", rlx.role = "input"}, %k: tensor<?x8xf32> {rlx.name = "k", rlx.role = "state"}, %p: index {rlx.name = "position", rlx.role = "position"}) {
  %k2 = mir.insert_rows %x into %k[%p] : tensor<?x8xf32> into tensor<?x8xf32>
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.insert_rows': cache: a cache (a state) has a static shape, so every dim must be static, got the symbolic dimension ?

// -----

func.func @f(%x: tensor<?x8xi32> {rlx.name = "x", rlx.role = "input"}, %k: tensor<16x8xf32> {rlx.name = "k", rlx.role = "state"}, %p: index {rlx.name = "position", rlx.role = "position"}) {
  %k2 = mir.insert_rows %x into %k[%p] : tensor<?x8xi32> into tensor<16x8xf32>
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.insert_rows': cache: expected element type i32 (as rows), got f32

// -----

%k = "test.op"() : () -> tensor<16x8xf32>
%r = mir.extract_rows %k size "T" : tensor<16x8xf32> -> tensor<4x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.extract_rows': result: expected a ? first dim (its size is the symbol T), got tensor<4x8xf32>

// -----

%k = "test.op"() : () -> tensor<16x8xf32>
%r = mir.extract_rows %k size "T+1" : tensor<16x8xf32> -> tensor<?x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.extract_rows': size: expected a symbol name (a Python identifier), got 'T+1'

// -----

%k = "test.op"() : () -> tensor<16x8xf32>
%r = mir.extract_rows %k size "T" : tensor<16x8xf32> -> tensor<?x4xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.extract_rows': result: expected shape [T, 8], got [?, 4]

// -----

func.func @f(%x: tensor<1x8xf32> {rlx.name = "x", rlx.role = "input"}) {
  mir.assign %x to %x : tensor<1x8xf32>
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.assign': state: expected a function argument with rlx.role = "state", got argument 0 with role input

// -----

func.func @f(%x: tensor<1x8xf32> {rlx.name = "x", rlx.role = "input"}) {
  %y = mir.neg %x : tensor<1x8xf32>
  mir.assign %x to %y : tensor<1x8xf32>
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.assign': state: expected a state argument of the function, got the result of mir.neg
