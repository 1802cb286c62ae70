// RUN: rlx-opt %s --split-input-file --verify-diagnostics | filecheck %s

// One case per rule of the lir.insert_rows verifier (and the view of a cache's rows).

%x = "test.op"() : () -> memref<?x4xf32>
%k = "test.op"() : () -> memref<16x8xf32>
%p = "test.op"() : () -> index
lir.insert_rows ins(%x, %p : memref<?x4xf32>, index) outs(%k : memref<16x8xf32>)

// CHECK: 'lir.insert_rows': rows [?, 4]: expected [S, 8] (rows of the cache [16, 8]), got [?, 4]

// -----

%x = "test.op"() : () -> memref<2x8xf32>
%k = "test.op"() : () -> memref<16x8xi32>
%p = "test.op"() : () -> index
lir.insert_rows ins(%x, %p : memref<2x8xf32>, index) outs(%k : memref<16x8xi32>)

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.insert_rows': out: expected element type f32 (as rows), got i32

// -----

%x = "test.op"() : () -> memref<20x8xf32>
%k = "test.op"() : () -> memref<16x8xf32>
%p = "test.op"() : () -> index
lir.insert_rows ins(%x, %p : memref<20x8xf32>, index) outs(%k : memref<16x8xf32>)

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.insert_rows': rows [20, 8]: expected at most 16 rows (the capacity of the cache [16, 8]), got 20

// -----

%k = "test.op"() : () -> memref<16x8xf32>
%v = lir.view %k[0] dims ["T", 4] : memref<16x8xf32> -> memref<?x4xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.view': reshape: cannot reshape [16, 8] into [?, 4]
