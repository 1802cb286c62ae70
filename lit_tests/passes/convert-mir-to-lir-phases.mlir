// RUN: rlx-opt %s -p convert-mir-to-lir | filecheck %s
// RUN: rlx-opt %s -p 'convert-mir-to-lir,lir-plan-arena,convert-lir-to-llvm{vector-width=8 profile=true}' | filecheck %s --check-prefix=SITES

// Streaming phases (RLX's rules, passes/phases.py): every lir kernel carries the phase of
// the mir op it came from as `rlx.phase`. Constants are prologue; the ops up to the last
// compute op (a name with matmul, attention or gated_delta_net) are steady state, even
// those before the first one; everything after it is epilogue, and so are the copies
// func.return needs.

// CHECK-LABEL: func.func @decoder(
// CHECK:         lir.constant {{.*}} {rlx.phase = "prologue"}
// CHECK:         lir.rms_norm {{.*}} {rlx.phase = "steady_state"}
// CHECK:         lir.matmul {{.*}} {rlx.phase = "steady_state"}
// CHECK:         lir.attention {{.*}} {rlx.phase = "steady_state"}
// CHECK:         lir.softmax {{.*}} {rlx.phase = "epilogue"}
// CHECK:         lir.elementwise exp {{.*}} {rlx.phase = "epilogue"}
// CHECK:         lir.copy ins(%x : memref<4x8xf32>) outs(%[[OUT1:.*]] : memref<4x8xf32>) {rlx.phase = "epilogue"}
// CHECK-NEXT:    func.return
func.func @decoder(%x: tensor<4x8xf32> {rlx.name = "x", rlx.role = "input"},
                   %w: tensor<8x8xf32> {rlx.name = "w", rlx.role = "param"},
                   %k: tensor<6x8xf32> {rlx.name = "k", rlx.role = "param"},
                   %v: tensor<6x8xf32> {rlx.name = "v", rlx.role = "param"}) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %g = mir.constant dense<1.0> : tensor<8xf32>
  %n = mir.rms_norm %x, %g : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %q = mir.matmul %n, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %a = mir.attention %q, %k, %v num_heads 1 head_dim 8 num_kv_heads 1 mask_kind causal scale 0.35355339 : (tensor<4x8xf32>, tensor<6x8xf32>, tensor<6x8xf32>) -> tensor<4x8xf32>
  %s = mir.softmax %a axis 1 : tensor<4x8xf32>
  %e = mir.exp %s : tensor<4x8xf32>
  func.return %e, %x : tensor<4x8xf32>, tensor<4x8xf32>
}

// A scan is one op of its function (no compute op in the name: steady state); the
// kernels of its body take its phase.

// CHECK-LABEL: func.func @rnn(
// CHECK:         lir.scan {{.*}} attributes {rlx.phase = "steady_state"} {
// CHECK:           lir.matmul {{.*}} {rlx.phase = "steady_state"}
// CHECK-NEXT:      %{{.*}} = lir.alloc
// CHECK-NEXT:      lir.elementwise add {{.*}} {rlx.phase = "steady_state"}
func.func @rnn(%h: tensor<4xf32> {rlx.name = "h", rlx.role = "input"}, %xs: tensor<5x4xf32> {rlx.name = "xs", rlx.role = "input"}, %w: tensor<4x4xf32> {rlx.name = "w", rlx.role = "param"}) -> tensor<4xf32> {
  %r = mir.scan %h xs(%xs : tensor<5x4xf32>) consts(%w : tensor<4x4xf32>) length 5 : tensor<4xf32> -> tensor<4xf32> {
  ^bb0(%c: tensor<4xf32>, %x: tensor<4xf32>, %m: tensor<4x4xf32>):
    %p = mir.matmul %c, %m : (tensor<4xf32>, tensor<4x4xf32>) -> tensor<4xf32>
    %n = mir.add %p, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mir.yield %n : tensor<4xf32>
  }
  func.return %r : tensor<4xf32>
}

// The profiled build records each call site's phase (the profile groups time by it).
// SITES-LABEL: llvm.func @decoder(
// SITES:       llvm.call @decoder__constant_{{.*}}\22op\22: \22constant\22{{.*}}\22phase\22: \22prologue\22
// SITES:       llvm.call @decoder__matmul_{{.*}}\22phase\22: \22steady_state\22
// SITES:       llvm.call @decoder__softmax_{{.*}}\22phase\22: \22epilogue\22
