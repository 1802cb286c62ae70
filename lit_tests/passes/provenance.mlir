// RUN: rlx-opt %s --print-debuginfo -p convert-hir-to-mir | filecheck %s --check-prefix=MIR
// RUN: rlx-opt %s --print-debuginfo -p convert-hir-to-mir,mir-fuse | filecheck %s --check-prefix=FUSED
// RUN: rlx-opt %s --print-debuginfo -p convert-hir-to-mir,mir-fuse,convert-mir-to-lir,lir-plan-arena | filecheck %s --check-prefix=LIR
// RUN: rlx-opt %s --print-debuginfo -p convert-hir-to-mir,mir-fuse,convert-mir-to-lir,lir-plan-arena,convert-lir-to-llvm | filecheck %s --check-prefix=LLVM

// Provenance: every op's location names the user's block it came from. An hir block's
// expansion is located "block/op" (an hir op lowered to its own mir twin keeps the
// block's name); a fused op at every op it replaces (a fused
// location); bufferization and the kernel calls keep the location.

func.func @block(%x: tensor<8x32xf32> {rlx.name = "x", rlx.role = "input"},
                 %w: tensor<32x32xf32> {rlx.name = "w", rlx.role = "param"},
                 %g: tensor<32xf32> {rlx.name = "g", rlx.role = "param"}) -> tensor<8x32xf32> {
  %0 = hir.linear %x, %w activation gelu : (tensor<8x32xf32>, tensor<32x32xf32>) -> tensor<8x32xf32> loc("layer3.linear")
  %1 = hir.rms_norm %0, %g eps 1.000000e-05 : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32> loc("layer3.norm")
  %2 = mir.exp %1 : tensor<8x32xf32> loc("layer3.exp")
  %3 = mir.neg %2 : tensor<8x32xf32> loc("layer3.neg")
  func.return %3 : tensor<8x32xf32>
}

// MIR:      mir.matmul {{.*}} loc("layer3.linear/matmul")
// MIR-NEXT: mir.gelu {{.*}} loc("layer3.linear/gelu")
// MIR-NEXT: mir.rms_norm {{.*}} loc("layer3.norm")
// MIR-NEXT: mir.exp {{.*}} loc("layer3.exp")
// MIR-NEXT: mir.neg {{.*}} loc("layer3.neg")

// FUSED:      mir.fused_matmul {{.*}} loc(fused["layer3.linear/matmul", "layer3.linear/gelu"])
// FUSED-NEXT: mir.rms_norm {{.*}} loc("layer3.norm")
// FUSED:      } loc(fused["layer3.exp", "layer3.neg"])

// LIR:      lir.fused_matmul {{.*}} loc(fused["layer3.linear/matmul", "layer3.linear/gelu"])
// LIR:      lir.rms_norm {{.*}} loc("layer3.norm")
// LIR:      } loc(fused["layer3.exp", "layer3.neg"])

// LLVM:      llvm.call @block__fused_matmul_0__serial({{.*}} loc(fused["layer3.linear/matmul", "layer3.linear/gelu"])
// LLVM:      llvm.call @block__rms_norm_1__serial({{.*}} loc("layer3.norm")
// LLVM:      llvm.call @block__fused_elementwise_2__serial({{.*}} loc(fused["layer3.exp", "layer3.neg"])
