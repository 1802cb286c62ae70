// RUN: rlx-opt %s -p convert-mir-to-lir | filecheck %s --check-prefix=LIR
// RUN: rlx-opt %s -p convert-mir-to-lir,lir-plan-arena,'lir-parallelize{min-work=1}',convert-lir-to-llvm | filecheck %s --check-prefix=LLVM

// The reverse pass of a selective scan over a symbolic s: one buffer per result (the
// saved states [b, S, h, n] too, sized by S), the dA rows [b, h, n] summed after it.
// LIR-LABEL: func.func @sscan_backward(
// LIR:         %[[DX:.*]] = lir.alloc dims [2 : i64, "S", 4 : i64] : memref<2x?x4xf32>
// LIR:         %[[ST:.*]] = lir.alloc dims [2 : i64, "S", 4 : i64, 3 : i64] : memref<2x?x4x3xf32>
// LIR-NEXT:    lir.selective_scan_backward ins({{.*}}) outs(%[[DX]], {{.*}}, %[[ST]] : memref<2x?x4xf32>, memref<2x?x4xf32>, memref<2x4x3xf32>, memref<2x?x3xf32>, memref<2x?x3xf32>, memref<2x?x4x3xf32>)
// Split over threads by batch rows: the kernel takes S, then (part, parts).
// LLVM:        llvm.func @sscan_backward__selective_scan_backward_{{[0-9]+}}({{.*}}: !llvm.ptr, %{{[0-9]+}}: i64, %{{[0-9]+}}: i64, %{{[0-9]+}}: i64)
func.func @sscan_backward(%x: tensor<2x?x4xf32> {rlx.name = "x", rlx.role = "input", rlx.dims = [2 : i64, "S", 4 : i64]}, %a: tensor<4x3xf32> {rlx.name = "a", rlx.role = "param"}, %b: tensor<2x?x3xf32> {rlx.name = "b", rlx.role = "input", rlx.dims = [2 : i64, "S", 3 : i64]}, %f: tensor<2x4x3xf32> {rlx.name = "f", rlx.role = "input"}) -> (tensor<2x?x4xf32> {rlx.dims = [2 : i64, "S", 4 : i64]}, tensor<4x3xf32>) {
  %dx, %dd, %da, %db, %dc, %st = mir.selective_scan_backward %x, %x, %a, %b, %b, %x, %f : (tensor<2x?x4xf32>, tensor<2x?x4xf32>, tensor<4x3xf32>, tensor<2x?x3xf32>, tensor<2x?x3xf32>, tensor<2x?x4xf32>, tensor<2x4x3xf32>) -> (tensor<2x?x4xf32>, tensor<2x?x4xf32>, tensor<2x4x3xf32>, tensor<2x?x3xf32>, tensor<2x?x3xf32>, tensor<2x?x4x3xf32>)
  %r = mir.add %dx, %dd : (tensor<2x?x4xf32>, tensor<2x?x4xf32>) -> tensor<2x?x4xf32>
  %sa = mir.reduce sum %da axes [0] : tensor<2x4x3xf32> -> tensor<4x3xf32>
  func.return %r, %sa : tensor<2x?x4xf32>, tensor<4x3xf32>
}
