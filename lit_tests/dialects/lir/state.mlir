// RUN: rlx-opt %s --split-input-file | rlx-opt --split-input-file | filecheck %s
// RUN: rlx-opt %s --split-input-file --print-op-generic | rlx-opt --split-input-file | filecheck %s

// A bufferized KV-cache append: the rows go into the state buffer in place at the
// position, and the rows [0, T) the cache then holds are a view of it.

func.func @append(%x: memref<?x8xf32> {rlx.name = "x", rlx.role = "input", rlx.dims = ["S", 8]}, %k: memref<16x8xf32> {rlx.name = "k", rlx.role = "state"}, %position: index {rlx.name = "position", rlx.role = "position"}) attributes {rlx.cache_dims = {T = ["S", 16]}} {
  lir.insert_rows ins(%x, %position : memref<?x8xf32>, index) outs(%k : memref<16x8xf32>)
  %rows = lir.view %k[0] dims ["T", 8] : memref<16x8xf32> -> memref<?x8xf32>
  func.return
}

// CHECK-LABEL: func.func @append
// CHECK:         lir.insert_rows ins(%x, %position : memref<?x8xf32>, index) outs(%k : memref<16x8xf32>)
// CHECK-NEXT:    %{{.*}} = lir.view %k[0] dims ["T", 8 : i64] : memref<16x8xf32> -> memref<?x8xf32>

// -----

func.func @static_rows(%x: memref<1x2x3xi32>, %k: memref<4x2x3xi32>, %p: index) {
  lir.insert_rows ins(%x, %p : memref<1x2x3xi32>, index) outs(%k : memref<4x2x3xi32>)
  func.return
}

// CHECK-LABEL: func.func @static_rows
// CHECK:         lir.insert_rows ins(%{{.*}}, %{{.*}} : memref<1x2x3xi32>, index) outs(%{{.*}} : memref<4x2x3xi32>)
