// RUN: rlx-opt %s -p 'lir-pack-weights{params=w,u,e,x,v,p,q,r}' | filecheck %s
// RUN: rlx-opt %s -p 'lir-pack-weights{params=w,u,e,x,v,p,q,r},lir-pack-weights{params=w,u,e,x,v,p,q,r}' | filecheck %s
// RUN: rlx-opt %s -p lir-pack-weights | filecheck %s --check-prefix=NONE
// RUN: rlx-opt %s -p 'lir-pack-weights{params=w,u,e,x,v,p,q,r},lir-plan-arena,convert-lir-to-llvm' | filecheck %s --check-prefix=LLVM

// %w: a bound param used as the rhs of a matmul and of a fused_matmul -> packed (both ops).
// %u: a bound param also read by an elementwise op -> not packed.
// %e: a bound param used as a matmul lhs -> not packed.
// %x: an input (named in params, but not a param) -> not packed.
// %z: a param not named in params (unbound) -> not packed.
// %v: a bound 1-D param (a matmul rhs of rank 1) -> not packed.

// CHECK-LABEL: func.func @entry(
// CHECK-SAME:    %[[X:[a-z0-9_]+]]: memref<4x8xf32> {rlx.name = "x", rlx.role = "input"},
// CHECK-SAME:    %[[W:[a-z0-9_]+]]: memref<8x16xf32> {rlx.name = "w", rlx.role = "param", rlx.layout = "packed_rhs"},
// CHECK-SAME:    %[[U:[a-z0-9_]+]]: memref<8x16xf32> {rlx.name = "u", rlx.role = "param"},
// CHECK-SAME:    %[[E:[a-z0-9_]+]]: memref<4x4xf32> {rlx.name = "e", rlx.role = "param"},
// CHECK-SAME:    %[[Z:[a-z0-9_]+]]: memref<8x16xf32> {rlx.name = "z", rlx.role = "param"},
// CHECK-SAME:    %[[V:[a-z0-9_]+]]: memref<8xf32> {rlx.name = "v", rlx.role = "param"},
// CHECK:         lir.matmul ins(%[[X]], %[[W]] : memref<4x8xf32>, memref<8x16xf32>) outs(%{{.*}} : memref<4x16xf32>) packed_rhs
// CHECK-NEXT:    lir.fused_matmul ins(%[[X]], %[[W]], %{{.*}} : memref<4x8xf32>, memref<8x16xf32>, memref<16xf32>) outs(%{{.*}} : memref<4x16xf32>) activation gelu packed_rhs
// CHECK-NEXT:    lir.matmul ins(%[[X]], %[[U]] : memref<4x8xf32>, memref<8x16xf32>) outs(%{{.*}} : memref<4x16xf32>){{$}}
// CHECK-NEXT:    lir.elementwise exp ins(%[[U]] : memref<8x16xf32>) outs(%{{.*}} : memref<8x16xf32>)
// CHECK-NEXT:    lir.matmul ins(%[[E]], %[[X]] : memref<4x4xf32>, memref<4x8xf32>) outs(%{{.*}} : memref<4x8xf32>){{$}}
// CHECK-NEXT:    lir.matmul ins(%[[X]], %[[Z]] : memref<4x8xf32>, memref<8x16xf32>) outs(%{{.*}} : memref<4x16xf32>){{$}}
// CHECK-NEXT:    lir.matmul ins(%[[X]], %[[V]] : memref<4x8xf32>, memref<8xf32>) outs(%{{.*}} : memref<4xf32>){{$}}

// NONE-NOT: packed_rhs

// LLVM: llvm.func @entry(
// LLVM-SAME: !llvm.ptr {rlx.name = "w", rlx.role = "param", rlx.layout = "packed_rhs", rlx.type = memref<8x16xf32>, llvm.noalias}
// LLVM-SAME: !llvm.ptr {rlx.name = "u", rlx.role = "param", rlx.type = memref<8x16xf32>, llvm.noalias}

func.func @entry(%x: memref<4x8xf32> {rlx.name = "x", rlx.role = "input"},
                 %w: memref<8x16xf32> {rlx.name = "w", rlx.role = "param"},
                 %u: memref<8x16xf32> {rlx.name = "u", rlx.role = "param"},
                 %e: memref<4x4xf32> {rlx.name = "e", rlx.role = "param"},
                 %z: memref<8x16xf32> {rlx.name = "z", rlx.role = "param"},
                 %v: memref<8xf32> {rlx.name = "v", rlx.role = "param"},
                 %out0: memref<4x16xf32> {rlx.name = "out0", rlx.role = "output"}) {
  %c = lir.alloc : memref<16xf32>
  %a = lir.alloc : memref<4x16xf32>
  %b = lir.alloc : memref<4x16xf32>
  %f = lir.alloc : memref<8x16xf32>
  %g = lir.alloc : memref<4x8xf32>
  %h = lir.alloc : memref<4xf32>
  lir.matmul ins(%x, %w : memref<4x8xf32>, memref<8x16xf32>) outs(%a : memref<4x16xf32>)
  lir.fused_matmul ins(%x, %w, %c : memref<4x8xf32>, memref<8x16xf32>, memref<16xf32>) outs(%b : memref<4x16xf32>) activation gelu
  lir.matmul ins(%x, %u : memref<4x8xf32>, memref<8x16xf32>) outs(%a : memref<4x16xf32>)
  lir.elementwise exp ins(%u : memref<8x16xf32>) outs(%f : memref<8x16xf32>)
  lir.matmul ins(%e, %x : memref<4x4xf32>, memref<4x8xf32>) outs(%g : memref<4x8xf32>)
  lir.matmul ins(%x, %z : memref<4x8xf32>, memref<8x16xf32>) outs(%out0 : memref<4x16xf32>)
  lir.matmul ins(%x, %v : memref<4x8xf32>, memref<8xf32>) outs(%h : memref<4xf32>)
  func.return
}

// A shared_input_matmul of f32 weights packs all of its weights or none:
// %p, %q bound and only its weights -> packed, the op gets packed_rhs;
// %r bound but its partner %z unbound -> neither packed (the op stays row-major).
// CHECK-LABEL: func.func @shared(
// CHECK-SAME:    %[[X:[a-z0-9_]+]]: memref<4x8xf32> {rlx.name = "x", rlx.role = "input"},
// CHECK-SAME:    %[[P:[a-z0-9_]+]]: memref<8x16xf32> {rlx.name = "p", rlx.role = "param", rlx.layout = "packed_rhs"},
// CHECK-SAME:    %[[Q:[a-z0-9_]+]]: memref<8x5xf32> {rlx.name = "q", rlx.role = "param", rlx.layout = "packed_rhs"},
// CHECK-SAME:    %[[R:[a-z0-9_]+]]: memref<8x16xf32> {rlx.name = "r", rlx.role = "param"},
// CHECK:         lir.shared_input_matmul ins(%[[X]], %[[P]], %[[Q]] : {{.*}}) outs({{.*}}) packed_rhs
// CHECK-NEXT:    lir.shared_input_matmul ins(%[[X]], %[[R]], %{{.*}} : {{.*}}) outs({{.*}} : memref<4x16xf32>, memref<4x16xf32>){{$}}
func.func @shared(%x: memref<4x8xf32> {rlx.name = "x", rlx.role = "input"},
                  %p: memref<8x16xf32> {rlx.name = "p", rlx.role = "param"},
                  %q: memref<8x5xf32> {rlx.name = "q", rlx.role = "param"},
                  %r: memref<8x16xf32> {rlx.name = "r", rlx.role = "param"},
                  %z: memref<8x16xf32> {rlx.name = "z", rlx.role = "param"},
                  %out0: memref<4x16xf32> {rlx.name = "out0", rlx.role = "output"}) {
  %a = lir.alloc : memref<4x16xf32>
  %b = lir.alloc : memref<4x5xf32>
  %c = lir.alloc : memref<4x16xf32>
  lir.shared_input_matmul ins(%x, %p, %q : memref<4x8xf32>, memref<8x16xf32>, memref<8x5xf32>) outs(%a, %b : memref<4x16xf32>, memref<4x5xf32>)
  lir.shared_input_matmul ins(%x, %r, %z : memref<4x8xf32>, memref<8x16xf32>, memref<8x16xf32>) outs(%c, %out0 : memref<4x16xf32>, memref<4x16xf32>)
  func.return
}
