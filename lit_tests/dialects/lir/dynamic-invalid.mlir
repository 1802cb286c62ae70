// RUN: rlx-opt %s --split-input-file --verify-diagnostics | filecheck %s

// Verifier negatives of dynamic lir buffers (issue 9): an lir.alloc with ? dims names
// them in dims (a symbol exactly where the type has ?, the same sizes elsewhere); a view
// of a dynamic buffer starts at 0 and keeps each ? whole; kernels still catch a static
// mismatch next to a ?.

%b = lir.alloc dims ["S"] : memref<?x8xf32>

// CHECK: 'lir.alloc': dims: the dims [S] do not describe memref<?x8xf32> (a symbol or ? exactly where the type has ?, the same sizes elsewhere)

// -----

%b = lir.alloc dims ["S", 4] : memref<?x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.alloc': dims: the dims [S, 4] do not describe memref<?x8xf32> (a symbol or ? exactly where the type has ?, the same sizes elsewhere)

// -----

%b = lir.alloc dims [8, 8] : memref<?x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.alloc': dims: the dims [8, 8] do not describe memref<?x8xf32> (a symbol or ? exactly where the type has ?, the same sizes elsewhere)

// -----

%b = lir.alloc dims ["S", "T"] : memref<?x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.alloc': dims: the dims [S, T] do not describe memref<?x8xf32> (a symbol or ? exactly where the type has ?, the same sizes elsewhere)

// -----

%b = lir.alloc dims ["8S", 8] : memref<?x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.alloc': dims: a symbolic dimension must be a Python identifier, got '8S'

// -----

%b = lir.alloc dims [2.5, 8] : memref<?x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.alloc': dims: expected sizes and symbol names, got the entry 2.500000e+00 : f64

// -----

%b = lir.alloc dims ["S", 8] : memref<?x8xf32>
%v = lir.view %b[8] dims ["S", 8] : memref<?x8xf32> -> memref<?x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.view': offset: a view with ? dims must start at 0, got 8

// -----

%b = lir.alloc dims ["S", 8] : memref<?x8xf32>
%v = lir.view %b[0] dims ["S", 4] : memref<?x8xf32> -> memref<?x4xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.view': reshape: cannot reshape [?, 8] into [?, 4]: a symbolic dim must stay a whole dim (the same symbols in the same order, no split or merge) and the static dims must have the same product (8 vs 4)

// -----

// a kernel's static mismatch next to a ?
%x = lir.alloc dims ["S", 8] : memref<?x8xf32>
%o = lir.alloc dims ["S", 4] : memref<?x4xf32>
lir.softmax ins(%x : memref<?x8xf32>) outs(%o : memref<?x4xf32>) axis 1

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.softmax': out: expected shape [?, 8], got [?, 4]

// -----

%b = lir.alloc dims ["S", 8] : memref<?x8xf32>
%v = lir.view %b[0] : memref<?x8xf32> -> memref<?x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.view': dims: a buffer with ? dims needs its symbolic dims (lir.view dims [...]), got memref<?x8xf32> without
