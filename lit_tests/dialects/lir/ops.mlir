// RUN: rlx-opt %s --split-input-file | rlx-opt --split-input-file | filecheck %s
// RUN: rlx-opt %s --split-input-file --print-op-generic | rlx-opt --split-input-file | filecheck %s
// RUN: rlx-opt %s --split-input-file --print-op-generic | filecheck %s --check-prefix=GENERIC

// Every lir op in its custom form; each optional operand and property both present and absent.

// CHECK-LABEL: func.func @alloc_view
// CHECK-NEXT:    %[[B:.*]] = lir.alloc : memref<4x8xf32>
// CHECK-NEXT:    %{{.*}} = lir.view %[[B]][16] : memref<4x8xf32> -> memref<2x8xf32>
// CHECK-NEXT:    %{{.*}} = lir.view %[[B]][0] : memref<4x8xf32> -> memref<32xf32>
// CHECK-NEXT:    %{{.*}} = lir.view %[[B]][31] : memref<4x8xf32> -> memref<f32>
// GENERIC-LABEL: "func.func"() <{sym_name = "alloc_view"
// GENERIC:         %[[B:.*]] = "lir.alloc"() : () -> memref<4x8xf32>
// GENERIC-NEXT:    %{{.*}} = "lir.view"(%[[B]]) <{offset = 16 : i64}> : (memref<4x8xf32>) -> memref<2x8xf32>
func.func @alloc_view() {
  %b = lir.alloc : memref<4x8xf32>
  %v = lir.view %b[16] : memref<4x8xf32> -> memref<2x8xf32>
  %flat = lir.view %b[0] : memref<4x8xf32> -> memref<32xf32>
  %last = lir.view %b[31] : memref<4x8xf32> -> memref<f32>
  func.return
}

// -----

// Slots 0 and 1 are live together in bytes [0, 128) and [128, 384); slot 2 reuses the
// bytes [0, 128) of slot 0 once slot 0 is dead (disjoint live ranges): a safe plan.

// CHECK-LABEL: func.func @arena
// CHECK-NEXT:    %[[A:.*]] = lir.arena size 4096 alignment 64 strategy "greedy-by-size" max_live_bytes 392 : memref<4096xi8>
// CHECK-NEXT:    %{{.*}} = lir.slot %[[A]][0] live [0, 2] : memref<4096xi8> -> memref<4x8xf32>
// CHECK-NEXT:    %{{.*}} = lir.slot %[[A]][128] live [1, 5] : memref<4096xi8> -> memref<8x8xf32>
// CHECK-NEXT:    %{{.*}} = lir.slot %[[A]][0] live [3, 4] : memref<4096xi8> -> memref<16xi64>
// CHECK-NEXT:    %{{.*}} = lir.slot %[[A]][384] live [3, 3] : memref<4096xi8> -> memref<2x4xui8>
// GENERIC-LABEL: "func.func"() <{sym_name = "arena"
// GENERIC:         %[[A:.*]] = "lir.arena"() <{size = 4096 : i64, alignment = 64 : i64, strategy = #rlx<arena_strategy "greedy-by-size">, max_live_bytes = 392 : i64}> : () -> memref<4096xi8>
// GENERIC-NEXT:    %{{.*}} = "lir.slot"(%[[A]]) <{offset = 0 : i64, live_start = 0 : i64, live_end = 2 : i64}> : (memref<4096xi8>) -> memref<4x8xf32>
func.func @arena() {
  %a = lir.arena size 4096 alignment 64 strategy "greedy-by-size" max_live_bytes 392 : memref<4096xi8>
  %s0 = lir.slot %a[0] live [0, 2] : memref<4096xi8> -> memref<4x8xf32>
  %s1 = lir.slot %a[128] live [1, 5] : memref<4096xi8> -> memref<8x8xf32>
  %s2 = lir.slot %a[0] live [3, 4] : memref<4096xi8> -> memref<16xi64>
  %s3 = lir.slot %a[384] live [3, 3] : memref<4096xi8> -> memref<2x4xui8>
  func.return
}

// -----

// No max_live_bytes; a slot may also view an arena passed in as an argument.

// CHECK-LABEL: func.func @arena_naive
// CHECK-NEXT:    %[[A:.*]] = lir.arena size 256 alignment 1 strategy naive : memref<256xi8>
// CHECK-NEXT:    %{{.*}} = lir.slot %[[A]][0] live [0, 0] : memref<256xi8> -> memref<4x8xf32>
// CHECK-NEXT:    %{{.*}} = lir.slot %[[A]][128] live [0, 0] : memref<256xi8> -> memref<32xi32>
// CHECK-NEXT:    %{{.*}} = lir.slot %{{.*}}[3] live [0, 7] : memref<16xi8> -> memref<3xui8>
// GENERIC-LABEL: "func.func"() <{sym_name = "arena_naive"
// GENERIC:         "lir.arena"() <{size = 256 : i64, alignment = 1 : i64, strategy = #rlx<arena_strategy naive>}> : () -> memref<256xi8>
func.func @arena_naive(%ext: memref<16xi8>) {
  %a = lir.arena size 256 alignment 1 strategy naive : memref<256xi8>
  %s0 = lir.slot %a[0] live [0, 0] : memref<256xi8> -> memref<4x8xf32>
  %s1 = lir.slot %a[128] live [0, 0] : memref<256xi8> -> memref<32xi32>
  %s2 = lir.slot %ext[3] live [0, 7] : memref<16xi8> -> memref<3xui8>
  func.return
}

// -----

// In-place reuse: %s1 and %s2 share the bytes of %s0 although the live ranges meet
// (at 4 and 6): the elementwise kernel at that position (arena = 0) reads the dying
// slot and writes the next one, of the same offset and type.

// CHECK-LABEL: func.func @arena_inplace
// CHECK-SAME:    (%[[X:.*]]: memref<4x8xf32>, %[[Y:.*]]: memref<8xf32>, %[[O:.*]]: memref<4x8xf32>)
// CHECK-NEXT:    %[[A:.*]] = lir.arena size 128 alignment 64 strategy "greedy-by-size" max_live_bytes 128 : memref<128xi8>
// CHECK-NEXT:    %[[S0:.*]] = lir.slot %[[A]][0] live [2, 4] : memref<128xi8> -> memref<4x8xf32>
// CHECK-NEXT:    lir.elementwise exp ins(%[[X]] : memref<4x8xf32>) outs(%[[S0]] : memref<4x8xf32>)
// CHECK-NEXT:    %[[S1:.*]] = lir.slot %[[A]][0] live [4, 6] : memref<128xi8> -> memref<4x8xf32>
// CHECK-NEXT:    lir.elementwise add ins(%[[S0]], %[[Y]] : memref<4x8xf32>, memref<8xf32>) outs(%[[S1]] : memref<4x8xf32>)
// CHECK-NEXT:    %[[S2:.*]] = lir.slot %[[A]][0] live [6, 7] : memref<128xi8> -> memref<4x8xf32>
// CHECK-NEXT:    lir.fused_elementwise ins(%[[Y]], %[[S1]] : memref<8xf32>, memref<4x8xf32>) outs(%[[S2]] : memref<4x8xf32>) {
// CHECK-NEXT:    ^{{.*}}(%[[P:.*]]: f32, %[[Q:.*]]: f32):
// CHECK-NEXT:      %[[M:.*]] = arith.mulf %[[P]], %[[Q]] : f32
// CHECK-NEXT:      lir.yield %[[M]] : f32
// CHECK-NEXT:    }
// CHECK-NEXT:    lir.copy ins(%[[S2]] : memref<4x8xf32>) outs(%[[O]] : memref<4x8xf32>)
// GENERIC-LABEL: "func.func"() <{sym_name = "arena_inplace"
// GENERIC:         "lir.slot"(%{{.*}}) <{offset = 0 : i64, live_start = 4 : i64, live_end = 6 : i64}> : (memref<128xi8>) -> memref<4x8xf32>
func.func @arena_inplace(%x: memref<4x8xf32>, %y: memref<8xf32>, %o: memref<4x8xf32>) {
  %a = lir.arena size 128 alignment 64 strategy "greedy-by-size" max_live_bytes 128 : memref<128xi8>
  %s0 = lir.slot %a[0] live [2, 4] : memref<128xi8> -> memref<4x8xf32>
  lir.elementwise exp ins(%x : memref<4x8xf32>) outs(%s0 : memref<4x8xf32>)
  %s1 = lir.slot %a[0] live [4, 6] : memref<128xi8> -> memref<4x8xf32>
  lir.elementwise add ins(%s0, %y : memref<4x8xf32>, memref<8xf32>) outs(%s1 : memref<4x8xf32>)
  %s2 = lir.slot %a[0] live [6, 7] : memref<128xi8> -> memref<4x8xf32>
  lir.fused_elementwise ins(%y, %s1 : memref<8xf32>, memref<4x8xf32>) outs(%s2 : memref<4x8xf32>) {
  ^bb0(%p: f32, %q: f32):
    %m = arith.mulf %p, %q : f32
    lir.yield %m : f32
  }
  lir.copy ins(%s2 : memref<4x8xf32>) outs(%o : memref<4x8xf32>)
  func.return
}

// -----

// CHECK-LABEL: func.func @elementwise
// CHECK-SAME:    (%[[A:.*]]: memref<4x8xf32>, %[[B:.*]]: memref<8xf32>, %[[O:.*]]: memref<4x8xf32>, %[[I:.*]]: memref<3xi32>, %[[IO:.*]]: memref<2x3xi32>)
// CHECK-NEXT:    lir.elementwise add ins(%[[A]], %[[B]] : memref<4x8xf32>, memref<8xf32>) outs(%[[O]] : memref<4x8xf32>)
// CHECK-NEXT:    lir.elementwise pow ins(%[[B]], %[[A]] : memref<8xf32>, memref<4x8xf32>) outs(%[[O]] : memref<4x8xf32>)
// CHECK-NEXT:    lir.elementwise gelu_tanh ins(%[[A]] : memref<4x8xf32>) outs(%[[O]] : memref<4x8xf32>)
// CHECK-NEXT:    lir.elementwise max ins(%[[IO]], %[[I]] : memref<2x3xi32>, memref<3xi32>) outs(%[[IO]] : memref<2x3xi32>)
// CHECK-NEXT:    lir.elementwise abs ins(%[[I]] : memref<3xi32>) outs(%[[I]] : memref<3xi32>)
// GENERIC-LABEL: "func.func"() <{sym_name = "elementwise"
// GENERIC:         "lir.elementwise"(%{{.*}}, %{{.*}}, %{{.*}}) <{fn = #rlx<elementwise_fn add>}> : (memref<4x8xf32>, memref<8xf32>, memref<4x8xf32>) -> ()
func.func @elementwise(%a: memref<4x8xf32>, %b: memref<8xf32>, %o: memref<4x8xf32>, %i: memref<3xi32>, %io: memref<2x3xi32>) {
  lir.elementwise add ins(%a, %b : memref<4x8xf32>, memref<8xf32>) outs(%o : memref<4x8xf32>)
  lir.elementwise pow ins(%b, %a : memref<8xf32>, memref<4x8xf32>) outs(%o : memref<4x8xf32>)
  lir.elementwise gelu_tanh ins(%a : memref<4x8xf32>) outs(%o : memref<4x8xf32>)
  lir.elementwise max ins(%io, %i : memref<2x3xi32>, memref<3xi32>) outs(%io : memref<2x3xi32>)
  lir.elementwise abs ins(%i : memref<3xi32>) outs(%i : memref<3xi32>)
  func.return
}

// -----

// CHECK-LABEL: func.func @fused_elementwise
// CHECK-SAME:    (%[[A:.*]]: memref<4x8xf32>, %[[B:.*]]: memref<8xf32>, %[[S:.*]]: memref<f32>, %[[O:.*]]: memref<4x8xf32>)
// CHECK-NEXT:    lir.fused_elementwise ins(%[[A]], %[[B]], %[[S]] : memref<4x8xf32>, memref<8xf32>, memref<f32>) outs(%[[O]] : memref<4x8xf32>) {
// CHECK-NEXT:    ^{{.*}}(%[[X:.*]]: f32, %[[Y:.*]]: f32, %[[Z:.*]]: f32):
// CHECK-NEXT:      %[[T:.*]] = arith.mulf %[[X]], %[[Y]] : f32
// CHECK-NEXT:      %[[U:.*]] = math.tanh %[[T]] : f32
// CHECK-NEXT:      %[[V:.*]] = arith.addf %[[U]], %[[Z]] : f32
// CHECK-NEXT:      lir.yield %[[V]] : f32
// CHECK-NEXT:    }
// CHECK-NEXT:    lir.fused_elementwise ins(%[[B]] : memref<8xf32>) outs(%[[O]] : memref<4x8xf32>) {
// GENERIC-LABEL: "func.func"() <{sym_name = "fused_elementwise"
// GENERIC:         "lir.fused_elementwise"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) ({
// GENERIC:           "lir.yield"(%{{.*}}) : (f32) -> ()
// GENERIC-NEXT:    }) : (memref<4x8xf32>, memref<8xf32>, memref<f32>, memref<4x8xf32>) -> ()
func.func @fused_elementwise(%a: memref<4x8xf32>, %b: memref<8xf32>, %s: memref<f32>, %o: memref<4x8xf32>) {
  lir.fused_elementwise ins(%a, %b, %s : memref<4x8xf32>, memref<8xf32>, memref<f32>) outs(%o : memref<4x8xf32>) {
  ^bb0(%x: f32, %y: f32, %z: f32):
    %t = arith.mulf %x, %y : f32
    %u = math.tanh %t : f32
    %v = arith.addf %u, %z : f32
    lir.yield %v : f32
  }
  // A single input broadcast to a larger out (as mir.fused_elementwise allows).
  lir.fused_elementwise ins(%b : memref<8xf32>) outs(%o : memref<4x8xf32>) {
  ^bb0(%x: f32):
    %e = math.exp %x : f32
    lir.yield %e : f32
  }
  func.return
}

// -----

// CHECK-LABEL: func.func @matmul
// CHECK-SAME:    (%[[A:.*]]: memref<4x8xf32>, %[[W:.*]]: memref<8x16xf32>, %[[C:.*]]: memref<16xf32>, %[[O:.*]]: memref<4x16xf32>, %[[BA:.*]]: memref<2x4x8xf32>, %[[BO:.*]]: memref<2x4x16xf32>, %[[V:.*]]: memref<8xf32>, %[[VO:.*]]: memref<16xf32>)
// CHECK-NEXT:    lir.matmul ins(%[[A]], %[[W]] : memref<4x8xf32>, memref<8x16xf32>) outs(%[[O]] : memref<4x16xf32>)
// CHECK-NEXT:    lir.matmul ins(%[[BA]], %[[W]] : memref<2x4x8xf32>, memref<8x16xf32>) outs(%[[BO]] : memref<2x4x16xf32>)
// CHECK-NEXT:    lir.matmul ins(%[[V]], %[[W]] : memref<8xf32>, memref<8x16xf32>) outs(%[[VO]] : memref<16xf32>)
// CHECK-NEXT:    lir.fused_matmul ins(%[[A]], %[[W]], %[[C]] : memref<4x8xf32>, memref<8x16xf32>, memref<16xf32>) outs(%[[O]] : memref<4x16xf32>) activation gelu
// CHECK-NEXT:    lir.fused_matmul ins(%[[A]], %[[W]] : memref<4x8xf32>, memref<8x16xf32>) outs(%[[O]] : memref<4x16xf32>)
// CHECK-NEXT:    lir.fused_matmul ins(%[[BA]], %[[W]], %[[C]] : memref<2x4x8xf32>, memref<8x16xf32>, memref<16xf32>) outs(%[[BO]] : memref<2x4x16xf32>)
// CHECK-NEXT:    lir.fused_matmul ins(%[[A]], %[[W]] : memref<4x8xf32>, memref<8x16xf32>) outs(%[[O]] : memref<4x16xf32>) activation silu
// CHECK-NEXT:    lir.matmul ins(%[[BA]], %[[W]] : memref<2x4x8xf32>, memref<8x16xf32>) outs(%[[BO]] : memref<2x4x16xf32>) packed_rhs
// CHECK-NEXT:    lir.fused_matmul ins(%[[A]], %[[W]], %[[C]] : memref<4x8xf32>, memref<8x16xf32>, memref<16xf32>) outs(%[[O]] : memref<4x16xf32>) activation gelu packed_rhs
// CHECK-NEXT:    lir.fused_matmul ins(%[[A]], %[[W]] : memref<4x8xf32>, memref<8x16xf32>) outs(%[[O]] : memref<4x16xf32>) packed_rhs
// GENERIC-LABEL: "func.func"() <{sym_name = "matmul"
// GENERIC:         "lir.matmul"(%{{.*}}, %{{.*}}, %{{.*}}) : (memref<4x8xf32>, memref<8x16xf32>, memref<4x16xf32>) -> ()
// GENERIC:         "lir.fused_matmul"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) <{activation = #rlx<activation gelu>}> : (memref<4x8xf32>, memref<8x16xf32>, memref<16xf32>, memref<4x16xf32>) -> ()
// GENERIC-NEXT:    "lir.fused_matmul"(%{{.*}}, %{{.*}}, %{{.*}}) : (memref<4x8xf32>, memref<8x16xf32>, memref<4x16xf32>) -> ()
// GENERIC:         "lir.matmul"(%{{.*}}, %{{.*}}, %{{.*}}) <{packed_rhs}> : (memref<2x4x8xf32>, memref<8x16xf32>, memref<2x4x16xf32>) -> ()
// GENERIC-NEXT:    "lir.fused_matmul"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) <{activation = #rlx<activation gelu>, packed_rhs}> : (memref<4x8xf32>, memref<8x16xf32>, memref<16xf32>, memref<4x16xf32>) -> ()
func.func @matmul(%a: memref<4x8xf32>, %w: memref<8x16xf32>, %c: memref<16xf32>, %o: memref<4x16xf32>, %ba: memref<2x4x8xf32>, %bo: memref<2x4x16xf32>, %v: memref<8xf32>, %vo: memref<16xf32>) {
  lir.matmul ins(%a, %w : memref<4x8xf32>, memref<8x16xf32>) outs(%o : memref<4x16xf32>)
  lir.matmul ins(%ba, %w : memref<2x4x8xf32>, memref<8x16xf32>) outs(%bo : memref<2x4x16xf32>)
  lir.matmul ins(%v, %w : memref<8xf32>, memref<8x16xf32>) outs(%vo : memref<16xf32>)
  lir.fused_matmul ins(%a, %w, %c : memref<4x8xf32>, memref<8x16xf32>, memref<16xf32>) outs(%o : memref<4x16xf32>) activation gelu
  lir.fused_matmul ins(%a, %w : memref<4x8xf32>, memref<8x16xf32>) outs(%o : memref<4x16xf32>)
  lir.fused_matmul ins(%ba, %w, %c : memref<2x4x8xf32>, memref<8x16xf32>, memref<16xf32>) outs(%bo : memref<2x4x16xf32>)
  lir.fused_matmul ins(%a, %w : memref<4x8xf32>, memref<8x16xf32>) outs(%o : memref<4x16xf32>) activation silu
  lir.matmul ins(%ba, %w : memref<2x4x8xf32>, memref<8x16xf32>) outs(%bo : memref<2x4x16xf32>) packed_rhs
  lir.fused_matmul ins(%a, %w, %c : memref<4x8xf32>, memref<8x16xf32>, memref<16xf32>) outs(%o : memref<4x16xf32>) activation gelu packed_rhs
  lir.fused_matmul ins(%a, %w : memref<4x8xf32>, memref<8x16xf32>) outs(%o : memref<4x16xf32>) packed_rhs
  func.return
}

// -----

// CHECK-LABEL: func.func @reduce_softmax
// CHECK-SAME:    (%[[X:.*]]: memref<4x8xf32>, %[[R:.*]]: memref<4xf32>, %[[K:.*]]: memref<4x1xf32>, %[[S:.*]]: memref<f32>)
// CHECK-NEXT:    lir.reduce sum ins(%[[X]] : memref<4x8xf32>) outs(%[[R]] : memref<4xf32>) axes [1]
// CHECK-NEXT:    lir.reduce max ins(%[[X]] : memref<4x8xf32>) outs(%[[K]] : memref<4x1xf32>) axes [-1] keepdim
// CHECK-NEXT:    lir.reduce mean ins(%[[X]] : memref<4x8xf32>) outs(%[[S]] : memref<f32>) axes [0, 1]
// CHECK-NEXT:    lir.softmax ins(%[[X]] : memref<4x8xf32>) outs(%[[X]] : memref<4x8xf32>) axis -1
// CHECK-NEXT:    lir.softmax ins(%[[X]] : memref<4x8xf32>) outs(%[[X]] : memref<4x8xf32>) axis 0
// GENERIC-LABEL: "func.func"() <{sym_name = "reduce_softmax"
// GENERIC:         "lir.reduce"(%{{.*}}, %{{.*}}) <{kind = #rlx<reduce_kind sum>, axes = array<i64: 1>}> : (memref<4x8xf32>, memref<4xf32>) -> ()
// GENERIC-NEXT:    "lir.reduce"(%{{.*}}, %{{.*}}) <{kind = #rlx<reduce_kind max>, axes = array<i64: -1>, keepdim}> : (memref<4x8xf32>, memref<4x1xf32>) -> ()
// GENERIC:         "lir.softmax"(%{{.*}}, %{{.*}}) <{axis = -1 : i64}> : (memref<4x8xf32>, memref<4x8xf32>) -> ()
func.func @reduce_softmax(%x: memref<4x8xf32>, %r: memref<4xf32>, %k: memref<4x1xf32>, %s: memref<f32>) {
  lir.reduce sum ins(%x : memref<4x8xf32>) outs(%r : memref<4xf32>) axes [1]
  lir.reduce max ins(%x : memref<4x8xf32>) outs(%k : memref<4x1xf32>) axes [-1] keepdim
  lir.reduce mean ins(%x : memref<4x8xf32>) outs(%s : memref<f32>) axes [0, 1]
  lir.softmax ins(%x : memref<4x8xf32>) outs(%x : memref<4x8xf32>) axis -1
  lir.softmax ins(%x : memref<4x8xf32>) outs(%x : memref<4x8xf32>) axis 0
  func.return
}

// -----

// CHECK-LABEL: func.func @norms
// CHECK-SAME:    (%[[X:.*]]: memref<4x8xf32>, %[[G:.*]]: memref<8xf32>, %[[B:.*]]: memref<8xf32>, %[[O:.*]]: memref<4x8xf32>)
// CHECK-NEXT:    lir.rms_norm ins(%[[X]], %[[G]] : memref<4x8xf32>, memref<8xf32>) outs(%[[O]] : memref<4x8xf32>) eps 1.000000e-05
// CHECK-NEXT:    lir.rms_norm ins(%[[X]], %[[G]], %[[B]] : memref<4x8xf32>, memref<8xf32>, memref<8xf32>) outs(%[[O]] : memref<4x8xf32>) eps 1.000000e-06
// CHECK-NEXT:    lir.layer_norm ins(%[[X]], %[[G]], %[[B]] : memref<4x8xf32>, memref<8xf32>, memref<8xf32>) outs(%[[O]] : memref<4x8xf32>) eps 1.000000e-05
// GENERIC-LABEL: "func.func"() <{sym_name = "norms"
// GENERIC:         "lir.rms_norm"(%{{.*}}, %{{.*}}, %{{.*}}) <{eps = 1.000000e-05 : f32}> : (memref<4x8xf32>, memref<8xf32>, memref<4x8xf32>) -> ()
// GENERIC-NEXT:    "lir.rms_norm"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) <{eps = 1.000000e-06 : f32}> : (memref<4x8xf32>, memref<8xf32>, memref<8xf32>, memref<4x8xf32>) -> ()
func.func @norms(%x: memref<4x8xf32>, %g: memref<8xf32>, %b: memref<8xf32>, %o: memref<4x8xf32>) {
  lir.rms_norm ins(%x, %g : memref<4x8xf32>, memref<8xf32>) outs(%o : memref<4x8xf32>) eps 1.0e-05
  lir.rms_norm ins(%x, %g, %b : memref<4x8xf32>, memref<8xf32>, memref<8xf32>) outs(%o : memref<4x8xf32>) eps 1.0e-06
  lir.layer_norm ins(%x, %g, %b : memref<4x8xf32>, memref<8xf32>, memref<8xf32>) outs(%o : memref<4x8xf32>) eps 1.0e-05
  func.return
}

// -----

// CHECK-LABEL: func.func @rope_attention
// CHECK-SAME:    (%[[X:.*]]: memref<2x4x16xf32>, %[[CS:.*]]: memref<4x4xf32>, %[[SN:.*]]: memref<4x4xf32>, %[[K:.*]]: memref<2x4x8xf32>, %[[M:.*]]: memref<4x4xf32>, %[[O:.*]]: memref<2x4x16xf32>)
// CHECK-NEXT:    lir.rope ins(%[[X]], %[[CS]], %[[SN]] : memref<2x4x16xf32>, memref<4x4xf32>, memref<4x4xf32>) outs(%[[O]] : memref<2x4x16xf32>) head_dim 8 n_rot 8 style half
// CHECK-NEXT:    lir.rope ins(%[[X]], %[[CS]], %[[SN]] : memref<2x4x16xf32>, memref<4x4xf32>, memref<4x4xf32>) outs(%[[O]] : memref<2x4x16xf32>) head_dim 16 n_rot 8 style interleaved
// CHECK-NEXT:    lir.attention ins(%[[X]], %[[K]], %[[K]] : memref<2x4x16xf32>, memref<2x4x8xf32>, memref<2x4x8xf32>) outs(%[[O]] : memref<2x4x16xf32>) num_heads 2 head_dim 8 num_kv_heads 1 mask_kind causal scale 0.353553385
// CHECK-NEXT:    lir.attention ins(%[[X]], %[[K]], %[[K]], %[[M]] : memref<2x4x16xf32>, memref<2x4x8xf32>, memref<2x4x8xf32>, memref<4x4xf32>) outs(%[[O]] : memref<2x4x16xf32>) num_heads 2 head_dim 8 num_kv_heads 1 mask_kind bias scale 1.250000e-01
// GENERIC-LABEL: "func.func"() <{sym_name = "rope_attention"
// GENERIC:         "lir.rope"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) <{head_dim = 8 : i64, n_rot = 8 : i64, style = #rlx<rope_style half>}>
// GENERIC:         "lir.attention"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) <{num_heads = 2 : i64, head_dim = 8 : i64, num_kv_heads = 1 : i64, mask_kind = #rlx<mask_kind causal>, scale = 0.353553385 : f32}>
// GENERIC-NEXT:    "lir.attention"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) <{num_heads = 2 : i64, head_dim = 8 : i64, num_kv_heads = 1 : i64, mask_kind = #rlx<mask_kind bias>, scale = 1.250000e-01 : f32}>
func.func @rope_attention(%x: memref<2x4x16xf32>, %cs: memref<4x4xf32>, %sn: memref<4x4xf32>, %k: memref<2x4x8xf32>, %m: memref<4x4xf32>, %o: memref<2x4x16xf32>) {
  lir.rope ins(%x, %cs, %sn : memref<2x4x16xf32>, memref<4x4xf32>, memref<4x4xf32>) outs(%o : memref<2x4x16xf32>) head_dim 8 n_rot 8 style half
  lir.rope ins(%x, %cs, %sn : memref<2x4x16xf32>, memref<4x4xf32>, memref<4x4xf32>) outs(%o : memref<2x4x16xf32>) head_dim 16 n_rot 8 style interleaved
  lir.attention ins(%x, %k, %k : memref<2x4x16xf32>, memref<2x4x8xf32>, memref<2x4x8xf32>) outs(%o : memref<2x4x16xf32>) num_heads 2 head_dim 8 num_kv_heads 1 mask_kind causal scale 0.35355339
  lir.attention ins(%x, %k, %k, %m : memref<2x4x16xf32>, memref<2x4x8xf32>, memref<2x4x8xf32>, memref<4x4xf32>) outs(%o : memref<2x4x16xf32>) num_heads 2 head_dim 8 num_kv_heads 1 mask_kind bias scale 0.125
  func.return
}

// -----

// CHECK-LABEL: func.func @data_movement
// CHECK-SAME:    (%[[X:.*]]: memref<4x8xf32>, %[[T:.*]]: memref<8x4xf32>, %[[N:.*]]: memref<4x2xf32>, %[[C:.*]]: memref<6x8xf32>, %[[H:.*]]: memref<2x8xf32>, %[[R:.*]]: memref<8xf32>, %[[I:.*]]: memref<3xi32>, %[[G:.*]]: memref<3x8xf32>, %[[L:.*]]: memref<2xi64>, %[[GI:.*]]: memref<2x3xi32>)
// CHECK-NEXT:    lir.transpose ins(%[[X]] : memref<4x8xf32>) outs(%[[T]] : memref<8x4xf32>) perm [1, 0]
// CHECK-NEXT:    lir.narrow ins(%[[X]] : memref<4x8xf32>) outs(%[[N]] : memref<4x2xf32>) axis 1 start 3 length 2
// CHECK-NEXT:    lir.concat ins(%[[X]], %[[H]] : memref<4x8xf32>, memref<2x8xf32>) outs(%[[C]] : memref<6x8xf32>) axis 0
// CHECK-NEXT:    lir.broadcast_to ins(%[[R]] : memref<8xf32>) outs(%[[X]] : memref<4x8xf32>)
// CHECK-NEXT:    lir.gather ins(%[[X]], %[[I]] : memref<4x8xf32>, memref<3xi32>) outs(%[[G]] : memref<3x8xf32>) axis 0
// CHECK-NEXT:    %[[GL:.*]] = lir.alloc : memref<2xi32>
// CHECK-NEXT:    lir.gather ins(%[[I]], %[[L]] : memref<3xi32>, memref<2xi64>) outs(%[[GL]] : memref<2xi32>) axis -1
// CHECK-NEXT:    lir.copy ins(%[[GI]] : memref<2x3xi32>) outs(%[[GI]] : memref<2x3xi32>)
// GENERIC-LABEL: "func.func"() <{sym_name = "data_movement"
// GENERIC:         "lir.transpose"(%{{.*}}, %{{.*}}) <{perm = array<i64: 1, 0>}> : (memref<4x8xf32>, memref<8x4xf32>) -> ()
// GENERIC-NEXT:    "lir.narrow"(%{{.*}}, %{{.*}}) <{axis = 1 : i64, start = 3 : i64, length = 2 : i64}> : (memref<4x8xf32>, memref<4x2xf32>) -> ()
func.func @data_movement(%x: memref<4x8xf32>, %t: memref<8x4xf32>, %n: memref<4x2xf32>, %c: memref<6x8xf32>, %h: memref<2x8xf32>, %r: memref<8xf32>, %i: memref<3xi32>, %g: memref<3x8xf32>, %l: memref<2xi64>, %gi: memref<2x3xi32>) {
  lir.transpose ins(%x : memref<4x8xf32>) outs(%t : memref<8x4xf32>) perm [1, 0]
  lir.narrow ins(%x : memref<4x8xf32>) outs(%n : memref<4x2xf32>) axis 1 start 3 length 2
  lir.concat ins(%x, %h : memref<4x8xf32>, memref<2x8xf32>) outs(%c : memref<6x8xf32>) axis 0
  lir.broadcast_to ins(%r : memref<8xf32>) outs(%x : memref<4x8xf32>)
  lir.gather ins(%x, %i : memref<4x8xf32>, memref<3xi32>) outs(%g : memref<3x8xf32>) axis 0
  %gl = lir.alloc : memref<2xi32>
  lir.gather ins(%i, %l : memref<3xi32>, memref<2xi64>) outs(%gl : memref<2xi32>) axis -1
  lir.copy ins(%gi : memref<2x3xi32>) outs(%gi : memref<2x3xi32>)
  func.return
}

// -----

// CHECK-LABEL: func.func @constant
// CHECK-SAME:    (%[[O:.*]]: memref<2xf32>, %[[S:.*]]: memref<i64>, %[[U:.*]]: memref<2x2xui8>)
// CHECK-NEXT:    lir.constant dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32> outs(%[[O]] : memref<2xf32>)
// CHECK-NEXT:    lir.constant dense<7> : tensor<i64> outs(%[[S]] : memref<i64>)
// CHECK-NEXT:    lir.constant dense<{{\[\[}}1, 2], [3, 255]]> : tensor<2x2xui8> outs(%[[U]] : memref<2x2xui8>)
// GENERIC-LABEL: "func.func"() <{sym_name = "constant"
// GENERIC:         "lir.constant"(%{{.*}}) <{value = dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>}> : (memref<2xf32>) -> ()
func.func @constant(%o: memref<2xf32>, %s: memref<i64>, %u: memref<2x2xui8>) {
  lir.constant dense<[1.0, 2.0]> : tensor<2xf32> outs(%o : memref<2xf32>)
  lir.constant dense<7> : tensor<i64> outs(%s : memref<i64>)
  lir.constant dense<[[1, 2], [3, 255]]> : tensor<2x2xui8> outs(%u : memref<2x2xui8>)
  func.return
}

// -----

// CHECK-LABEL: func.func @quant_conv
// CHECK-SAME:    (%[[X:.*]]: memref<4x64xf32>, %[[W8:.*]]: memref<16x68xui8>, %[[W4:.*]]: memref<16x36xui8>, %[[O:.*]]: memref<4x16xf32>, %[[P:.*]]: memref<1x10x8xf32>, %[[K:.*]]: memref<3x8xf32>, %[[Y:.*]]: memref<1x8x8xf32>)
// CHECK-NEXT:    lir.dequant_matmul q8_0 ins(%[[X]], %[[W8]] : memref<4x64xf32>, memref<16x68xui8>) outs(%[[O]] : memref<4x16xf32>)
// CHECK-NEXT:    lir.dequant_matmul q4_0 ins(%[[X]], %[[W4]] : memref<4x64xf32>, memref<16x36xui8>) outs(%[[O]] : memref<4x16xf32>)
// CHECK-NEXT:    lir.depthwise_conv1d ins(%[[P]], %[[K]] : memref<1x10x8xf32>, memref<3x8xf32>) outs(%[[Y]] : memref<1x8x8xf32>)
// GENERIC-LABEL: "func.func"() <{sym_name = "quant_conv"
// GENERIC:         "lir.dequant_matmul"(%{{.*}}, %{{.*}}, %{{.*}}) <{scheme = #rlx<quant_scheme q8_0>}> : (memref<4x64xf32>, memref<16x68xui8>, memref<4x16xf32>) -> ()
// GENERIC:         "lir.depthwise_conv1d"(%{{.*}}, %{{.*}}, %{{.*}}) : (memref<1x10x8xf32>, memref<3x8xf32>, memref<1x8x8xf32>) -> ()
func.func @quant_conv(%x: memref<4x64xf32>, %w8: memref<16x68xui8>, %w4: memref<16x36xui8>, %o: memref<4x16xf32>, %p: memref<1x10x8xf32>, %k: memref<3x8xf32>, %y: memref<1x8x8xf32>) {
  lir.dequant_matmul q8_0 ins(%x, %w8 : memref<4x64xf32>, memref<16x68xui8>) outs(%o : memref<4x16xf32>)
  lir.dequant_matmul q4_0 ins(%x, %w4 : memref<4x64xf32>, memref<16x36xui8>) outs(%o : memref<4x16xf32>)
  lir.depthwise_conv1d ins(%p, %k : memref<1x10x8xf32>, memref<3x8xf32>) outs(%y : memref<1x8x8xf32>)
  func.return
}

// -----

// Weights interleaved W rows at a time (lir-pack-weights): the q8 products and the lookup
// of a tied table state it.
// CHECK-LABEL: func.func @interleaved
// CHECK-NEXT:    lir.dequant_matmul q8_0 ins({{.*}}) outs({{.*}}) activations q8 interleaved 16
// CHECK-NEXT:    lir.shared_input_matmul q4_0 ins({{.*}}) outs({{.*}}) activations q8 interleaved 8
// CHECK-NEXT:    lir.dequant_gather q8_0 ins({{.*}}) outs({{.*}}) interleaved 16
// GENERIC:         "lir.dequant_matmul"({{.*}}) <{scheme = #rlx<quant_scheme q8_0>, activations = #rlx<quant_activations q8>, interleaved = 16 : i64}>
func.func @interleaved(%x: memref<4x64xf32>, %w8: memref<16x68xui8>, %w4: memref<16x36xui8>, %o: memref<4x16xf32>, %ids: memref<4xi32>, %e: memref<4x64xf32>) {
  lir.dequant_matmul q8_0 ins(%x, %w8 : memref<4x64xf32>, memref<16x68xui8>) outs(%o : memref<4x16xf32>) activations q8 interleaved 16
  lir.shared_input_matmul q4_0 ins(%x, %w4, %w4 : memref<4x64xf32>, memref<16x36xui8>, memref<16x36xui8>) outs(%o, %o : memref<4x16xf32>, memref<4x16xf32>) activations q8 interleaved 8
  lir.dequant_gather q8_0 ins(%w8, %ids : memref<16x68xui8>, memref<4xi32>) outs(%e : memref<4x64xf32>) interleaved 16
  func.return
}

// -----

// Every GGUF scheme family: float rows (f16, bf16), 32-value blocks, 256-value K-quant blocks.
// CHECK-LABEL: func.func @dequant_matmul_schemes
// GENERIC-LABEL: sym_name = "dequant_matmul_schemes"
func.func @dequant_matmul_schemes() {
  %x_f16, %w_f16, %o_f16 = "test.op"() : () -> (memref<2x5xf32>, memref<8x10xui8>, memref<2x8xf32>)
  lir.dequant_matmul f16 ins(%x_f16, %w_f16 : memref<2x5xf32>, memref<8x10xui8>) outs(%o_f16 : memref<2x8xf32>)
  %x_bf16, %w_bf16, %o_bf16 = "test.op"() : () -> (memref<2x5xf32>, memref<8x10xui8>, memref<2x8xf32>)
  lir.dequant_matmul bf16 ins(%x_bf16, %w_bf16 : memref<2x5xf32>, memref<8x10xui8>) outs(%o_bf16 : memref<2x8xf32>)
  %x_q4_1, %w_q4_1, %o_q4_1 = "test.op"() : () -> (memref<2x64xf32>, memref<8x40xui8>, memref<2x8xf32>)
  lir.dequant_matmul q4_1 ins(%x_q4_1, %w_q4_1 : memref<2x64xf32>, memref<8x40xui8>) outs(%o_q4_1 : memref<2x8xf32>)
  %x_q5_0, %w_q5_0, %o_q5_0 = "test.op"() : () -> (memref<2x64xf32>, memref<8x44xui8>, memref<2x8xf32>)
  lir.dequant_matmul q5_0 ins(%x_q5_0, %w_q5_0 : memref<2x64xf32>, memref<8x44xui8>) outs(%o_q5_0 : memref<2x8xf32>)
  %x_q5_1, %w_q5_1, %o_q5_1 = "test.op"() : () -> (memref<2x64xf32>, memref<8x48xui8>, memref<2x8xf32>)
  lir.dequant_matmul q5_1 ins(%x_q5_1, %w_q5_1 : memref<2x64xf32>, memref<8x48xui8>) outs(%o_q5_1 : memref<2x8xf32>)
  %x_q4_k, %w_q4_k, %o_q4_k = "test.op"() : () -> (memref<2x256xf32>, memref<8x144xui8>, memref<2x8xf32>)
  lir.dequant_matmul q4_k ins(%x_q4_k, %w_q4_k : memref<2x256xf32>, memref<8x144xui8>) outs(%o_q4_k : memref<2x8xf32>)
  %x_q5_k, %w_q5_k, %o_q5_k = "test.op"() : () -> (memref<2x256xf32>, memref<8x176xui8>, memref<2x8xf32>)
  lir.dequant_matmul q5_k ins(%x_q5_k, %w_q5_k : memref<2x256xf32>, memref<8x176xui8>) outs(%o_q5_k : memref<2x8xf32>)
  %x_q6_k, %w_q6_k, %o_q6_k = "test.op"() : () -> (memref<2x256xf32>, memref<8x210xui8>, memref<2x8xf32>)
  lir.dequant_matmul q6_k ins(%x_q6_k, %w_q6_k : memref<2x256xf32>, memref<8x210xui8>) outs(%o_q6_k : memref<2x8xf32>)
  func.return
}
// CHECK:        lir.dequant_matmul f16 ins(%{{.*}}, %{{.*}} : memref<2x5xf32>, memref<8x10xui8>) outs(%{{.*}} : memref<2x8xf32>)
// CHECK:        lir.dequant_matmul bf16 ins(%{{.*}}, %{{.*}} : memref<2x5xf32>, memref<8x10xui8>) outs(%{{.*}} : memref<2x8xf32>)
// CHECK:        lir.dequant_matmul q4_1 ins(%{{.*}}, %{{.*}} : memref<2x64xf32>, memref<8x40xui8>) outs(%{{.*}} : memref<2x8xf32>)
// CHECK:        lir.dequant_matmul q5_0 ins(%{{.*}}, %{{.*}} : memref<2x64xf32>, memref<8x44xui8>) outs(%{{.*}} : memref<2x8xf32>)
// CHECK:        lir.dequant_matmul q5_1 ins(%{{.*}}, %{{.*}} : memref<2x64xf32>, memref<8x48xui8>) outs(%{{.*}} : memref<2x8xf32>)
// CHECK:        lir.dequant_matmul q4_k ins(%{{.*}}, %{{.*}} : memref<2x256xf32>, memref<8x144xui8>) outs(%{{.*}} : memref<2x8xf32>)
// CHECK:        lir.dequant_matmul q5_k ins(%{{.*}}, %{{.*}} : memref<2x256xf32>, memref<8x176xui8>) outs(%{{.*}} : memref<2x8xf32>)
// CHECK:        lir.dequant_matmul q6_k ins(%{{.*}}, %{{.*}} : memref<2x256xf32>, memref<8x210xui8>) outs(%{{.*}} : memref<2x8xf32>)
// GENERIC:      "lir.dequant_matmul"(%{{.*}}, %{{.*}}, %{{.*}}) <{scheme = #rlx<quant_scheme f16>}> : (memref<2x5xf32>, memref<8x10xui8>, memref<2x8xf32>) -> ()
// GENERIC:      "lir.dequant_matmul"(%{{.*}}, %{{.*}}, %{{.*}}) <{scheme = #rlx<quant_scheme bf16>}> : (memref<2x5xf32>, memref<8x10xui8>, memref<2x8xf32>) -> ()
// GENERIC:      "lir.dequant_matmul"(%{{.*}}, %{{.*}}, %{{.*}}) <{scheme = #rlx<quant_scheme q4_1>}> : (memref<2x64xf32>, memref<8x40xui8>, memref<2x8xf32>) -> ()
// GENERIC:      "lir.dequant_matmul"(%{{.*}}, %{{.*}}, %{{.*}}) <{scheme = #rlx<quant_scheme q5_0>}> : (memref<2x64xf32>, memref<8x44xui8>, memref<2x8xf32>) -> ()
// GENERIC:      "lir.dequant_matmul"(%{{.*}}, %{{.*}}, %{{.*}}) <{scheme = #rlx<quant_scheme q5_1>}> : (memref<2x64xf32>, memref<8x48xui8>, memref<2x8xf32>) -> ()
// GENERIC:      "lir.dequant_matmul"(%{{.*}}, %{{.*}}, %{{.*}}) <{scheme = #rlx<quant_scheme q4_k>}> : (memref<2x256xf32>, memref<8x144xui8>, memref<2x8xf32>) -> ()
// GENERIC:      "lir.dequant_matmul"(%{{.*}}, %{{.*}}, %{{.*}}) <{scheme = #rlx<quant_scheme q5_k>}> : (memref<2x256xf32>, memref<8x176xui8>, memref<2x8xf32>) -> ()
// GENERIC:      "lir.dequant_matmul"(%{{.*}}, %{{.*}}, %{{.*}}) <{scheme = #rlx<quant_scheme q6_k>}> : (memref<2x256xf32>, memref<8x210xui8>, memref<2x8xf32>) -> ()

// -----

// A kernel with several outs: a sequence op with return_state writes its output and its
// final state, each into its own buffer (outs last, the optional one when present).
// CHECK-LABEL: func.func @sequence
// CHECK-NEXT:    %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} = "test.op"()
// CHECK-NEXT:    lir.selective_scan ins(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : memref<1x4x8xf32>, memref<1x4x8xf32>, memref<8x3xf32>, memref<1x4x3xf32>, memref<1x4x3xf32>) outs(%{{.*}} : memref<1x4x8xf32>)
// CHECK-NEXT:    lir.selective_scan ins(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : memref<1x4x8xf32>, memref<1x4x8xf32>, memref<8x3xf32>, memref<1x4x3xf32>, memref<1x4x3xf32>, memref<1x8x3xf32>) outs(%{{.*}}, %{{.*}} : memref<1x4x8xf32>, memref<1x8x3xf32>) return_state
// CHECK-NEXT:    %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} = "test.op"()
// CHECK-NEXT:    lir.gated_delta_net ins(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : memref<1x?x2x4xf32>, memref<1x?x2x4xf32>, memref<1x?x2x5xf32>, memref<1x?x2xf32>, memref<1x?x2xf32>) outs(%{{.*}}, %{{.*}} : memref<1x?x2x5xf32>, memref<1x2x4x5xf32>) return_state
// GENERIC-LABEL: "func.func"() <{sym_name = "sequence"
// GENERIC:       "lir.selective_scan"({{.*}}) <{operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 1, 0>}>
// GENERIC:       "lir.selective_scan"({{.*}}) <{return_state, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 1, 1>}>
func.func @sequence() {
  %x, %a, %b, %o, %s0, %s = "test.op"() : () -> (memref<1x4x8xf32>, memref<8x3xf32>, memref<1x4x3xf32>, memref<1x4x8xf32>, memref<1x8x3xf32>, memref<1x8x3xf32>)
  lir.selective_scan ins(%x, %x, %a, %b, %b : memref<1x4x8xf32>, memref<1x4x8xf32>, memref<8x3xf32>, memref<1x4x3xf32>, memref<1x4x3xf32>) outs(%o : memref<1x4x8xf32>)
  lir.selective_scan ins(%x, %x, %a, %b, %b, %s0 : memref<1x4x8xf32>, memref<1x4x8xf32>, memref<8x3xf32>, memref<1x4x3xf32>, memref<1x4x3xf32>, memref<1x8x3xf32>) outs(%o, %s : memref<1x4x8xf32>, memref<1x8x3xf32>) return_state
  %q, %v, %g, %out, %st = "test.op"() : () -> (memref<1x?x2x4xf32>, memref<1x?x2x5xf32>, memref<1x?x2xf32>, memref<1x?x2x5xf32>, memref<1x2x4x5xf32>)
  lir.gated_delta_net ins(%q, %q, %v, %g, %g : memref<1x?x2x4xf32>, memref<1x?x2x4xf32>, memref<1x?x2x5xf32>, memref<1x?x2xf32>, memref<1x?x2xf32>) outs(%out, %st : memref<1x?x2x5xf32>, memref<1x2x4x5xf32>) return_state
  func.return
}

// -----

// CHECK-LABEL: func.func @dequant_matmul_q8_activations
// GENERIC-LABEL: sym_name = "dequant_matmul_q8_activations"
func.func @dequant_matmul_q8_activations(%x: memref<2x64xf32>, %w: memref<8x40xui8>, %o: memref<2x8xf32>) {
  lir.dequant_matmul q4_1 ins(%x, %w : memref<2x64xf32>, memref<8x40xui8>) outs(%o : memref<2x8xf32>) activations q8
  func.return
}
// CHECK:        lir.dequant_matmul q4_1 ins(%{{.*}}, %{{.*}} : memref<2x64xf32>, memref<8x40xui8>) outs(%{{.*}} : memref<2x8xf32>) activations q8
// GENERIC:      "lir.dequant_matmul"(%{{.*}}, %{{.*}}, %{{.*}}) <{scheme = #rlx<quant_scheme q4_1>, activations = #rlx<quant_activations q8>}> : (memref<2x64xf32>, memref<8x40xui8>, memref<2x8xf32>) -> ()

// -----

// lir.shared_input_matmul: f32 weights (no scheme; packed_rhs present and absent), and
// GGUF weights with f32 and q8 activations, the last also with a fused rms_norm, and
// with a normed residual before it, whose sums are the last out (mir-fuse q8-edges);
// lir.dequant_matmul with a fused residual.
// CHECK-LABEL: func.func @shared_input_matmul
// GENERIC-LABEL: sym_name = "shared_input_matmul"
func.func @shared_input_matmul(%x: memref<2x64xf32>, %a: memref<64x8xf32>, %b: memref<64x3xf32>, %g: memref<8x40xui8>, %o: memref<2x8xf32>, %p: memref<2x3xf32>, %gamma: memref<64xf32>) {
  lir.shared_input_matmul ins(%x, %a, %b : memref<2x64xf32>, memref<64x8xf32>, memref<64x3xf32>) outs(%o, %p : memref<2x8xf32>, memref<2x3xf32>)
  lir.shared_input_matmul ins(%x, %a, %b : memref<2x64xf32>, memref<64x8xf32>, memref<64x3xf32>) outs(%o, %p : memref<2x8xf32>, memref<2x3xf32>) packed_rhs
  lir.shared_input_matmul q4_1 ins(%x, %g, %g : memref<2x64xf32>, memref<8x40xui8>, memref<8x40xui8>) outs(%o, %o : memref<2x8xf32>, memref<2x8xf32>)
  lir.shared_input_matmul q4_1 ins(%x, %g, %g : memref<2x64xf32>, memref<8x40xui8>, memref<8x40xui8>) outs(%o, %o : memref<2x8xf32>, memref<2x8xf32>) activations q8
  lir.shared_input_matmul q4_1 ins(%x, %g, %g : memref<2x64xf32>, memref<8x40xui8>, memref<8x40xui8>) norm(%gamma : memref<64xf32>) eps 1.0e-06 outs(%o, %o : memref<2x8xf32>, memref<2x8xf32>) activations q8
  lir.shared_input_matmul q4_1 ins(%x, %g, %g : memref<2x64xf32>, memref<8x40xui8>, memref<8x40xui8>) residual(%x, %gamma : memref<2x64xf32>, memref<64xf32>) eps 1.0e-06 norm(%gamma : memref<64xf32>) eps 1.0e-06 outs(%o, %o, %x : memref<2x8xf32>, memref<2x8xf32>, memref<2x64xf32>) activations q8
  lir.dequant_matmul q4_1 ins(%x, %g, %o : memref<2x64xf32>, memref<8x40xui8>, memref<2x8xf32>) outs(%o : memref<2x8xf32>) activations q8
  func.return
}
// CHECK:        lir.shared_input_matmul ins(%{{.*}}, %{{.*}}, %{{.*}} : memref<2x64xf32>, memref<64x8xf32>, memref<64x3xf32>) outs(%{{.*}}, %{{.*}} : memref<2x8xf32>, memref<2x3xf32>){{$}}
// CHECK-NEXT:   lir.shared_input_matmul ins(%{{.*}}, %{{.*}}, %{{.*}} : memref<2x64xf32>, memref<64x8xf32>, memref<64x3xf32>) outs(%{{.*}}, %{{.*}} : memref<2x8xf32>, memref<2x3xf32>) packed_rhs{{$}}
// CHECK-NEXT:   lir.shared_input_matmul q4_1 ins(%{{.*}}, %{{.*}}, %{{.*}} : memref<2x64xf32>, memref<8x40xui8>, memref<8x40xui8>) outs(%{{.*}}, %{{.*}} : memref<2x8xf32>, memref<2x8xf32>){{$}}
// CHECK-NEXT:   lir.shared_input_matmul q4_1 ins(%{{.*}}, %{{.*}}, %{{.*}} : memref<2x64xf32>, memref<8x40xui8>, memref<8x40xui8>) outs(%{{.*}}, %{{.*}} : memref<2x8xf32>, memref<2x8xf32>) activations q8{{$}}
// CHECK-NEXT:   lir.shared_input_matmul q4_1 ins(%{{.*}}, %{{.*}}, %{{.*}} : memref<2x64xf32>, memref<8x40xui8>, memref<8x40xui8>) norm(%{{.*}} : memref<64xf32>) eps 1.000000e-06 outs(%{{.*}}, %{{.*}} : memref<2x8xf32>, memref<2x8xf32>) activations q8{{$}}
// CHECK-NEXT:   lir.shared_input_matmul q4_1 ins(%{{.*}}, %{{.*}}, %{{.*}} : memref<2x64xf32>, memref<8x40xui8>, memref<8x40xui8>) residual(%{{.*}}, %{{.*}} : memref<2x64xf32>, memref<64xf32>) eps 1.000000e-06 norm(%{{.*}} : memref<64xf32>) eps 1.000000e-06 outs(%{{.*}}, %{{.*}}, %{{.*}} : memref<2x8xf32>, memref<2x8xf32>, memref<2x64xf32>) activations q8{{$}}
// CHECK-NEXT:   lir.dequant_matmul q4_1 ins(%{{.*}}, %{{.*}}, %{{.*}} : memref<2x64xf32>, memref<8x40xui8>, memref<2x8xf32>) outs(%{{.*}} : memref<2x8xf32>) activations q8{{$}}
// GENERIC:      "lir.shared_input_matmul"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) <{operandSegmentSizes = array<i32: 1, 2, 0, 0, 0, 0, 0, 0, 2>}>
// GENERIC:      "lir.shared_input_matmul"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) <{packed_rhs, operandSegmentSizes

// -----

// lir.shared_input_matmul with mir-fuse's rope and cache edges: q and k rotated as their
// tiles are stored, k and v written into the caches (their outs) at the position.
// CHECK-LABEL: func.func @rope_and_cache_edges
// GENERIC-LABEL: sym_name = "rope_and_cache_edges"
func.func @rope_and_cache_edges(%x: memref<?x64xf32>, %wq: memref<16x36xui8>, %wk: memref<8x36xui8>, %wv: memref<8x36xui8>, %cos: memref<?x4xf32>, %sin: memref<?x4xf32>, %q: memref<?x16xf32>, %kc: memref<32x8xf32>, %vc: memref<32x8xf32>, %p: index) {
  lir.shared_input_matmul q4_0 ins(%x, %wq, %wk, %wv : memref<?x64xf32>, memref<16x36xui8>, memref<8x36xui8>, memref<8x36xui8>) rope(%cos, %sin : memref<?x4xf32>, memref<?x4xf32>) [0, 1] head_dim 8 n_rot 8 style interleaved outs(%q, %kc, %vc : memref<?x16xf32>, memref<32x8xf32>, memref<32x8xf32>) into [1, 2] at %p activations q8
  func.return
}
// CHECK:        lir.shared_input_matmul q4_0 ins(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : memref<?x64xf32>, memref<16x36xui8>, memref<8x36xui8>, memref<8x36xui8>) rope(%{{.*}}, %{{.*}} : memref<?x4xf32>, memref<?x4xf32>) [0, 1] head_dim 8 n_rot 8 style interleaved outs(%{{.*}}, %{{.*}}, %{{.*}} : memref<?x16xf32>, memref<32x8xf32>, memref<32x8xf32>) into [1, 2] at %{{.*}} activations q8{{$}}
// GENERIC:      "lir.shared_input_matmul"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) <{{{.*}}rope_products = array<i64: 0, 1>, rope_head_dim = 8 : i64, rope_n_rot = 8 : i64, rope_style = #rlx<rope_style interleaved>, cache_products = array<i64: 1, 2>, {{.*}}operandSegmentSizes = array<i32: 1, 3, 0, 0, 0, 1, 1, 1, 3>}>

// -----

// lir.barrier: full (no kind), gather and release.
// CHECK-LABEL: func.func @barriers
// CHECK-NEXT:    lir.barrier{{$}}
// CHECK-NEXT:    lir.barrier "gather"
// CHECK-NEXT:    lir.barrier "release"
// GENERIC-LABEL: sym_name = "barriers"
// GENERIC:       "lir.barrier"() : () -> ()
// GENERIC-NEXT:  "lir.barrier"() <{kind = "gather"}> : () -> ()
func.func @barriers() {
  lir.barrier
  lir.barrier "gather"
  lir.barrier "release"
  func.return
}
