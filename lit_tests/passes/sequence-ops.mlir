// RUN: rlx-opt %s -p convert-mir-to-lir | filecheck %s --check-prefix=LIR
// RUN: rlx-opt %s -p convert-mir-to-lir | rlx-opt | filecheck %s --check-prefix=LIR
// RUN: rlx-opt %s -p convert-mir-to-lir,lir-plan-arena,'lir-parallelize{min-work=1}',convert-lir-to-llvm | filecheck %s --check-prefix=LLVM

// A gated delta net returning its state: one kernel writes the packed buffer (the flat
// output, then the flat state); the two results are views of it, copied into the outputs.

// LIR-LABEL: func.func @gdn(
// LIR:         %[[P:.*]] = lir.alloc : memref<56xf32>
// LIR-NEXT:    lir.gated_delta_net ins(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : memref<1x3x2x4xf32>, memref<1x3x2x4xf32>, memref<1x3x2x4xf32>, memref<1x3x2xf32>, memref<1x3x2xf32>, memref<1x2x4x4xf32>) outs(%[[P]] : memref<56xf32>) return_state
// LIR-DAG:     lir.view %[[P]][0] : memref<56xf32> -> memref<1x3x2x4xf32>
// LIR-DAG:     lir.view %[[P]][24] : memref<56xf32> -> memref<1x2x4x4xf32>
// LIR-NOT:     lir.narrow

// Split over threads, the kernel takes (part, parts) and runs its share of the
// (batch row, head) items, each over every time step.
// LLVM:        llvm.func @gdn__gated_delta_net_{{[0-9]+}}({{.*}}: !llvm.ptr, %{{[0-9]+}}: i64, %{{[0-9]+}}: i64)
// LLVM:        llvm.call @gdn__gated_delta_net_{{[0-9]+}}(
func.func @gdn(%q: tensor<1x3x2x4xf32> {rlx.name = "q", rlx.role = "input"}, %g: tensor<1x3x2xf32> {rlx.name = "g", rlx.role = "input"}, %s: tensor<1x2x4x4xf32> {rlx.name = "s", rlx.role = "input"}) -> (tensor<1x3x2x4xf32>, tensor<1x2x4x4xf32>) {
  %p = mir.gated_delta_net %q, %q, %q, %g, %g initial_state %s return_state : (tensor<1x3x2x4xf32>, tensor<1x3x2x4xf32>, tensor<1x3x2x4xf32>, tensor<1x3x2xf32>, tensor<1x3x2xf32>, tensor<1x2x4x4xf32>) -> tensor<56xf32>
  %o = mir.narrow %p axis 0 start 0 length 24 : tensor<56xf32> -> tensor<24xf32>
  %o4 = mir.reshape %o : tensor<24xf32> -> tensor<1x3x2x4xf32>
  %st = mir.narrow %p axis 0 start 24 length 32 : tensor<56xf32> -> tensor<32xf32>
  %st4 = mir.reshape %st : tensor<32xf32> -> tensor<1x2x4x4xf32>
  func.return %o4, %st4 : tensor<1x3x2x4xf32>, tensor<1x2x4x4xf32>
}

// A selective scan writes its output argument directly.
// LIR-LABEL: func.func @sscan(
// LIR:         lir.selective_scan ins(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : memref<2x5x4xf32>, memref<2x5x4xf32>, memref<4x3xf32>, memref<2x5x3xf32>, memref<2x5x3xf32>) outs(%{{.*}} : memref<2x5x4xf32>)
// LIR-NEXT:    func.return
func.func @sscan(%x: tensor<2x5x4xf32> {rlx.name = "x", rlx.role = "input"}, %a: tensor<4x3xf32> {rlx.name = "a", rlx.role = "param"}, %b: tensor<2x5x3xf32> {rlx.name = "b", rlx.role = "input"}) -> tensor<2x5x4xf32> {
  %y = mir.selective_scan %x, %x, %a, %b, %b : (tensor<2x5x4xf32>, tensor<2x5x4xf32>, tensor<4x3xf32>, tensor<2x5x3xf32>, tensor<2x5x3xf32>) -> tensor<2x5x4xf32>
  func.return %y : tensor<2x5x4xf32>
}
