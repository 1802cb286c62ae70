// RUN: rlx-opt %s -p convert-mir-to-lir | filecheck %s --check-prefix=LIR
// RUN: rlx-opt %s -p convert-mir-to-lir | rlx-opt | filecheck %s --check-prefix=LIR
// RUN: rlx-opt %s -p convert-mir-to-lir,lir-plan-arena,'lir-parallelize{min-work=1}',convert-lir-to-llvm | filecheck %s --check-prefix=LLVM

// A gated delta net returning its state: the mir op has two results, its lir kernel two
// outs, here the two output arguments (no alloc, no view, no copy).

// LIR-LABEL: func.func @gdn(
// LIR-SAME:    %[[O:[a-z0-9]+]]: memref<1x3x2x4xf32> {rlx.name = "out0", rlx.role = "output"}, %[[S:[a-z0-9]+]]: memref<1x2x4x4xf32> {rlx.name = "out1", rlx.role = "output"}
// LIR-NEXT:    lir.gated_delta_net ins(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : memref<1x3x2x4xf32>, memref<1x3x2x4xf32>, memref<1x3x2x4xf32>, memref<1x3x2xf32>, memref<1x3x2xf32>, memref<1x2x4x4xf32>) outs(%[[O]], %[[S]] : memref<1x3x2x4xf32>, memref<1x2x4x4xf32>) return_state
// LIR-NEXT:    func.return

// Split over threads, the kernel takes (part, parts) and runs its share of the
// (batch row, head) items, each over every time step.
// LLVM:        llvm.func @gdn__gated_delta_net_{{[0-9]+}}({{.*}}: !llvm.ptr, %{{[0-9]+}}: i64, %{{[0-9]+}}: i64)
// LLVM:        llvm.call @gdn__gated_delta_net_{{[0-9]+}}(
func.func @gdn(%q: tensor<1x3x2x4xf32> {rlx.name = "q", rlx.role = "input"}, %g: tensor<1x3x2xf32> {rlx.name = "g", rlx.role = "input"}, %s: tensor<1x2x4x4xf32> {rlx.name = "s", rlx.role = "input"}) -> (tensor<1x3x2x4xf32>, tensor<1x2x4x4xf32>) {
  %o, %st = mir.gated_delta_net %q, %q, %q, %g, %g initial_state %s return_state : (tensor<1x3x2x4xf32>, tensor<1x3x2x4xf32>, tensor<1x3x2x4xf32>, tensor<1x3x2xf32>, tensor<1x3x2xf32>, tensor<1x2x4x4xf32>) -> (tensor<1x3x2x4xf32>, tensor<1x2x4x4xf32>)
  func.return %o, %st : tensor<1x3x2x4xf32>, tensor<1x2x4x4xf32>
}

// Over a symbolic s: one buffer per result, the output's sized by S, the final state's
// static; the kernel reads S at run time (its i64 size after the seven pointers).
// LIR-LABEL: func.func @sscan_state(
// LIR:         %[[Y:.*]] = lir.alloc dims [1 : i64, "S", 4 : i64] : memref<1x?x4xf32>
// LIR-NEXT:    %[[F:.*]] = lir.alloc : memref<1x4x3xf32>
// LIR-NEXT:    lir.selective_scan ins({{.*}}) outs(%[[Y]], %[[F]] : memref<1x?x4xf32>, memref<1x4x3xf32>) return_state
// LIR-NEXT:    lir.elementwise exp ins(%[[Y]] : memref<1x?x4xf32>)
// LIR-NEXT:    lir.reduce sum ins(%[[F]] : memref<1x4x3xf32>)
// LLVM:        llvm.func @sscan_state__selective_scan_{{[0-9]+}}(%{{[0-9]+}}: !llvm.ptr, %{{[0-9]+}}: !llvm.ptr, %{{[0-9]+}}: !llvm.ptr, %{{[0-9]+}}: !llvm.ptr, %{{[0-9]+}}: !llvm.ptr, %{{[0-9]+}}: !llvm.ptr, %{{[0-9]+}}: !llvm.ptr, %{{[0-9]+}}: i64, %{{[0-9]+}}: i64, %{{[0-9]+}}: i64)
func.func @sscan_state(%x: tensor<1x?x4xf32> {rlx.name = "x", rlx.role = "input", rlx.dims = [1 : i64, "S", 4 : i64]}, %a: tensor<4x3xf32> {rlx.name = "a", rlx.role = "param"}, %b: tensor<1x?x3xf32> {rlx.name = "b", rlx.role = "input", rlx.dims = [1 : i64, "S", 3 : i64]}) -> (tensor<1x?x4xf32> {rlx.dims = [1 : i64, "S", 4 : i64]}, tensor<1x4xf32>) {
  %y, %f = mir.selective_scan %x, %x, %a, %b, %b return_state : (tensor<1x?x4xf32>, tensor<1x?x4xf32>, tensor<4x3xf32>, tensor<1x?x3xf32>, tensor<1x?x3xf32>) -> (tensor<1x?x4xf32>, tensor<1x4x3xf32>)
  %r = mir.exp %y : tensor<1x?x4xf32>
  %rs = mir.reduce sum %f axes [2] : tensor<1x4x3xf32> -> tensor<1x4xf32>
  func.return %r, %rs : tensor<1x?x4xf32>, tensor<1x4xf32>
}

// A selective scan writes its output argument directly.
// LIR-LABEL: func.func @sscan(
// LIR:         lir.selective_scan ins(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : memref<2x5x4xf32>, memref<2x5x4xf32>, memref<4x3xf32>, memref<2x5x3xf32>, memref<2x5x3xf32>) outs(%{{.*}} : memref<2x5x4xf32>)
// LIR-NEXT:    func.return
func.func @sscan(%x: tensor<2x5x4xf32> {rlx.name = "x", rlx.role = "input"}, %a: tensor<4x3xf32> {rlx.name = "a", rlx.role = "param"}, %b: tensor<2x5x3xf32> {rlx.name = "b", rlx.role = "input"}) -> tensor<2x5x4xf32> {
  %y = mir.selective_scan %x, %x, %a, %b, %b : (tensor<2x5x4xf32>, tensor<2x5x4xf32>, tensor<4x3xf32>, tensor<2x5x3xf32>, tensor<2x5x3xf32>) -> tensor<2x5x4xf32>
  func.return %y : tensor<2x5x4xf32>
}
