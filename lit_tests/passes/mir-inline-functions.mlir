// RUN: rlx-opt %s --print-debuginfo -p convert-hir-to-mir | filecheck %s --check-prefix=MIR
// RUN: rlx-opt %s --print-debuginfo -p convert-hir-to-mir,mir-inline-functions | filecheck %s --check-prefix=INLINED
// RUN: rlx-opt %s -p rlx-lower | filecheck %s --check-prefix=LLVM
// RUN: not rlx-opt %s -p convert-hir-to-mir,convert-mir-to-lir 2>&1 | filecheck %s --check-prefix=ORDER

// A custom function (`g.custom_fn`): a private func.func called by func.call. The call
// stays through convert-hir-to-mir (which lowers the hir block inside the function too);
// mir-inline-functions replaces each call with the body, its ops located under the call's
// name as a scope, and erases the function once nothing calls it.

func.func @main(%x: tensor<4x16xf32> {rlx.name = "x", rlx.role = "input"},
                %w: tensor<16x16xf32> {rlx.name = "w", rlx.role = "param"}) -> tensor<4x16xf32> {
  %0 = func.call @ffn(%x, %w) : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32> loc("layer0.ffn")
  %1, %2 = func.call @pair(%0) : (tensor<4x16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>) loc("pair")
  %3 = mir.add %1, %2 : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32> loc("add#0")
  func.return %3 : tensor<4x16xf32>
}

func.func private @ffn(%a: tensor<4x16xf32>, %b: tensor<16x16xf32>) -> tensor<4x16xf32> {
  %0 = hir.linear %a, %b activation gelu : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32> loc("linear#0")
  func.return %0 : tensor<4x16xf32>
}

func.func private @pair(%a: tensor<4x16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>) {
  %0 = mir.tanh %a : tensor<4x16xf32> loc("tanh#0")
  %1 = mir.exp %a : tensor<4x16xf32> loc("exp#0")
  func.return %0, %1 : tensor<4x16xf32>, tensor<4x16xf32>
}

// MIR-LABEL: func.func @main(
// MIR:         %[[F:.*]] = func.call @ffn(%x, %w) : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32> loc("layer0.ffn")
// MIR-NEXT:    %[[P:.*]], %[[Q:.*]] = func.call @pair(%[[F]]) : (tensor<4x16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>) loc("pair")
// MIR-NEXT:    mir.add %[[P]], %[[Q]]
// MIR-LABEL: func.func private @ffn(
// MIR-NEXT:    %[[M:.*]] = mir.matmul %a, %b : {{.*}} loc("linear#0/matmul")
// MIR-NEXT:    %[[G:.*]] = mir.gelu %[[M]] : {{.*}} loc("linear#0/gelu")
// MIR-NEXT:    func.return %[[G]]
// MIR-LABEL: func.func private @pair(

// INLINED-LABEL: func.func @main(
// INLINED-NEXT:    %[[M:.*]] = mir.matmul %x, %w : {{.*}} loc("layer0.ffn.linear#0/matmul")
// INLINED-NEXT:    %[[G:.*]] = mir.gelu %[[M]] : {{.*}} loc("layer0.ffn.linear#0/gelu")
// INLINED-NEXT:    %[[T:.*]] = mir.tanh %[[G]] : {{.*}} loc("pair.tanh#0")
// INLINED-NEXT:    %[[E:.*]] = mir.exp %[[G]] : {{.*}} loc("pair.exp#0")
// INLINED-NEXT:    %[[S:.*]] = mir.add %[[T]], %[[E]] : {{.*}} loc("add#0")
// INLINED-NEXT:    func.return %[[S]] : tensor<4x16xf32>
// INLINED-NOT:   func.func
// INLINED-NOT:   func.call

// The whole pipeline inlines before bufferization: one llvm entry, no call of @ffn.
// LLVM-NOT:  @ffn
// LLVM-NOT:  @pair
// LLVM:      llvm.func @main(
// LLVM-NOT:  @ffn
// LLVM-NOT:  @pair

// Bufferization works on one function: a call left is an error naming the pass to run.
// ORDER: convert-mir-to-lir: the module still has func.call ops; run mir-inline-functions first
