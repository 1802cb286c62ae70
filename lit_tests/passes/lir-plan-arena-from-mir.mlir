// RUN: rlx-opt %s -p convert-mir-to-lir,lir-plan-arena | filecheck %s --check-prefix=PIPE
// RUN: not rlx-opt %s -p lir-plan-arena 2>&1 | filecheck %s --check-prefix=ORDER

// (Its own file: lir-plan-arena refuses a module that still has mir ops, so this case
// cannot share a file with the lir-only cases of lir-plan-arena.mlir.)

// From mir: after convert-mir-to-lir the allocs are planned and the result verifies.

// PIPE-LABEL: func.func @from_mir(
// PIPE-SAME:      %[[X:.*]]: memref<8xf32>, %[[OUT:.*]]: memref<8xf32> {rlx.name = "out0", rlx.role = "output"}) {
// PIPE-NEXT:    %[[AR:.*]] = lir.arena size 64 alignment 64 strategy "greedy-by-size" max_live_bytes 64 : memref<64xi8>
// PIPE-NEXT:    %[[A:.*]] = lir.slot %[[AR]][0] live [2, 4] : memref<64xi8> -> memref<8xf32>
// PIPE-NEXT:    lir.elementwise exp ins(%[[X]] : memref<8xf32>) outs(%[[A]] : memref<8xf32>)
// PIPE-NEXT:    %[[B:.*]] = lir.slot %[[AR]][0] live [4, 6] : memref<64xi8> -> memref<8xf32>
// PIPE-NEXT:    lir.elementwise sqrt ins(%[[A]] : memref<8xf32>) outs(%[[B]] : memref<8xf32>)
// PIPE-NEXT:    %[[C:.*]] = lir.slot %[[AR]][0] live [6, 7] : memref<64xi8> -> memref<8xf32>
// PIPE-NEXT:    lir.elementwise log ins(%[[B]] : memref<8xf32>) outs(%[[C]] : memref<8xf32>)
// PIPE-NEXT:    lir.elementwise add ins(%[[C]], %[[X]] : memref<8xf32>, memref<8xf32>) outs(%[[OUT]] : memref<8xf32>)
// PIPE-NEXT:    func.return
func.func @from_mir(%x: tensor<8xf32>) -> tensor<8xf32> {
  %a = mir.exp %x : tensor<8xf32>
  %b = mir.sqrt %a : tensor<8xf32>
  %c = mir.log %b : tensor<8xf32>
  %y = mir.add %c, %x : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  func.return %y : tensor<8xf32>
}

// Run before convert-mir-to-lir, the pass names the ops that remain and the pass to run.
// ORDER: rlx-opt: error: lir-plan-arena: the module still has mir ops (mir.add, mir.exp, mir.log, mir.sqrt); run convert-mir-to-lir first
