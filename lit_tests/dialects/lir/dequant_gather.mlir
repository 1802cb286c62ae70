// RUN: rlx-opt %s --split-input-file | rlx-opt --split-input-file | filecheck %s
// RUN: rlx-opt %s --split-input-file --print-op-generic | rlx-opt --split-input-file | filecheck %s
// RUN: rlx-opt %s --split-input-file -p convert-lir-to-llvm | filecheck %s --check-prefix=LLVM

// lir.dequant_gather round-trips and lowers to a checked kernel (an i32 status).

// CHECK-LABEL: func.func @embed
// CHECK:         lir.dequant_gather q4_1 ins(%{{.*}}, %{{.*}} : memref<50x40xui8>, memref<3xi32>) outs(%{{.*}} : memref<3x64xf32>)
// LLVM-LABEL:  llvm.func @embed__dequant_gather_0(
// LLVM-SAME:     -> i32
// LLVM-LABEL:  llvm.func @embed(
// LLVM:          %{{.*}} = llvm.call @embed__dequant_gather_0
func.func @embed(%t: memref<50x40xui8>, %ids: memref<3xi32>, %o: memref<3x64xf32>) {
  lir.dequant_gather q4_1 ins(%t, %ids : memref<50x40xui8>, memref<3xi32>) outs(%o : memref<3x64xf32>)
  func.return
}
