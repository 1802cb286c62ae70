// RUN: rlx-opt %s -p 'lir-plan-arena{max-dims="S=64"},convert-lir-to-llvm' | filecheck %s

// Reductions and softmax along a symbolic axis (issue 22, item 7a): a mean over the rows
// of x [S, 8] and a softmax along S are built natively (@kernel along_symbols): each
// kernel takes the size of S after its pointers and loops over the run-time rows, the
// mean divides by S converted at run time. A reduction over the trailing axis does not
// work along S: the row driver calls its static one-row kernel as before. A transpose
// that puts S behind a static dim is a run-time strided map (no row kernel).

func.func @along(%x: memref<?x8xf32> {rlx.name = "x", rlx.role = "input", rlx.dims = ["S", 8]},
                 %mean: memref<8xf32> {rlx.name = "mean", rlx.role = "output"},
                 %soft: memref<?x8xf32> {rlx.name = "soft", rlx.role = "output", rlx.dims = ["S", 8]},
                 %rows: memref<?xf32> {rlx.name = "rows", rlx.role = "output", rlx.dims = ["S"]},
                 %t: memref<8x?xf32> {rlx.name = "t", rlx.role = "output", rlx.dims = [8, "S"]}) {
  lir.reduce mean ins(%x : memref<?x8xf32>) outs(%mean : memref<8xf32>) axes [0]
  lir.softmax ins(%x : memref<?x8xf32>) outs(%soft : memref<?x8xf32>) axis 0
  lir.reduce sum ins(%x : memref<?x8xf32>) outs(%rows : memref<?xf32>) axes [1]
  lir.transpose ins(%x : memref<?x8xf32>) outs(%t : memref<8x?xf32>) perm [1, 0]
  func.return
}

// CHECK:      llvm.func @along__reduce_0(%{{.*}}: !llvm.ptr {{.*}}, %{{.*}}: !llvm.ptr {{.*}}, %[[N:.*]]: i64)
// CHECK:      llvm.sitofp %[[N]] : i64 to f32
// CHECK:      llvm.func @along__softmax_1(%{{.*}}: !llvm.ptr {{.*}}, %{{.*}}: !llvm.ptr {{.*}}, %{{.*}}: i64)
// CHECK:      llvm.func @along__reduce_2_row(%{{.*}}: !llvm.ptr {{.*}}, %{{.*}}: !llvm.ptr {{.*}})
// CHECK:      llvm.func @along__reduce_2(%{{.*}}: !llvm.ptr {{.*}}, %{{.*}}: !llvm.ptr {{.*}}, %{{.*}}: i64)
// CHECK:      llvm.call @along__reduce_2_row(
// CHECK-NOT:  llvm.func @along__transpose_3_row
// CHECK:      llvm.func @along__transpose_3(%{{.*}}: !llvm.ptr {{.*}}, %{{.*}}: !llvm.ptr {{.*}}, %{{.*}}: i64)
// CHECK:      llvm.func @along(%{{.*}}: !llvm.ptr {{.*}}, %[[S:.*]]: i64 {rlx.role = "dim", rlx.name = "S"
// CHECK:      llvm.call @along__reduce_0__serial(%{{.*}}, %{{.*}}, %[[S]], %{{.*}}, %{{.*}})
// CHECK:      llvm.call @along__softmax_1__serial(%{{.*}}, %{{.*}}, %[[S]], %{{.*}}, %{{.*}})
// CHECK:      llvm.call @along__reduce_2__serial(%{{.*}}, %{{.*}}, %[[S]], %{{.*}}, %{{.*}})
// CHECK:      llvm.call @along__transpose_3__serial(%{{.*}}, %{{.*}}, %[[S]], %{{.*}}, %{{.*}})
