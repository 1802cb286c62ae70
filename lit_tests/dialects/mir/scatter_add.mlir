// RUN: rlx-opt %s --split-input-file | rlx-opt --split-input-file | filecheck %s
// RUN: rlx-opt %s --split-input-file --print-op-generic | rlx-opt --split-input-file | filecheck %s
// RUN: rlx-opt %s --split-input-file -p convert-mir-to-lir | filecheck %s --check-prefix=LIR
// RUN: rlx-opt %s --split-input-file -p convert-mir-to-lir,convert-lir-to-llvm | filecheck %s --check-prefix=LLVM

// mir.scatter_add (gather's transpose) round-trips, lowers to the lir.scatter_add kernel
// and then to a checked llvm kernel (an i32 status: an index out of range fails the call).

// CHECK-LABEL: func.func @grad_table
// CHECK:         %{{.*}} = mir.scatter_add %{{.*}}, %{{.*}} axis 0 dim_size 100 : (tensor<2x3x8xf32>, tensor<2x3xi32>) -> tensor<100x8xf32>
// CHECK:         %{{.*}} = mir.scatter_add %{{.*}}, %{{.*}} axis 1 dim_size 5 : (tensor<4x7x33xf32>, tensor<7xi64>) -> tensor<4x5x33xf32>
// LIR-LABEL:   func.func @grad_table
// LIR:           lir.scatter_add ins(%{{.*}}, %{{.*}} : memref<2x3x8xf32>, memref<2x3xi32>) outs(%{{.*}} : memref<100x8xf32>) axis 0 dim_size 100
// LIR:           lir.scatter_add ins(%{{.*}}, %{{.*}} : memref<4x7x33xf32>, memref<7xi64>) outs(%{{.*}} : memref<4x5x33xf32>) axis 1 dim_size 5
// LLVM-LABEL:  llvm.func @grad_table__scatter_add_0(
// LLVM-SAME:     -> i32
// LLVM-LABEL:  llvm.func @grad_table(
// LLVM:          %{{.*}} = llvm.call @grad_table__scatter_add_0
func.func @grad_table(%g: tensor<2x3x8xf32>, %ids: tensor<2x3xi32>, %u: tensor<4x7x33xf32>,
                      %cols: tensor<7xi64>) -> (tensor<100x8xf32>, tensor<4x5x33xf32>) {
  %a = mir.scatter_add %g, %ids axis 0 dim_size 100 : (tensor<2x3x8xf32>, tensor<2x3xi32>) -> tensor<100x8xf32>
  %b = mir.scatter_add %u, %cols axis 1 dim_size 5 : (tensor<4x7x33xf32>, tensor<7xi64>) -> tensor<4x5x33xf32>
  func.return %a, %b : tensor<100x8xf32>, tensor<4x5x33xf32>
}
