// RUN: rlx-opt %s -p lir-plan-arena | filecheck %s
// RUN: rlx-opt %s -p 'lir-plan-arena{alignment=128}' | filecheck %s --check-prefix=ALIGN
// RUN: rlx-opt %s -p 'lir-plan-arena{strategy=naive}' | filecheck %s --check-prefix=NAIVE
// RUN: rlx-opt %s -p 'lir-plan-arena{strategy=greedy-by-size alignment=16}' | filecheck %s --check-prefix=SMALL
// RUN: rlx-opt %s -p 'lir-plan-arena{inplace=false}' | filecheck %s --check-prefix=NOINPLACE

// Live ranges are schedule positions after the pass: the arena is op 0.

// A chain of four 64-byte elementwise buffers: each one is live from its writer to its
// reader. In place (the default), each exp writes over its input, which dies there: one
// slot offset for all (64 bytes; the lower bound counts an in-place pair once). Without
// in-place reuse, two slots (greedy 128 bytes = the lower bound; naive 256).

// CHECK-LABEL: func.func @reuse(
// CHECK-NEXT:    %[[AR:.*]] = lir.arena size 64 alignment 64 strategy "greedy-by-size" max_live_bytes 64 : memref<64xi8>
// CHECK-NEXT:    %[[A:.*]] = lir.slot %[[AR]][0] live [2, 4] : memref<64xi8> -> memref<16xf32>
// CHECK-NEXT:    lir.elementwise exp ins(%{{.*}} : memref<16xf32>) outs(%[[A]] : memref<16xf32>)
// CHECK-NEXT:    %[[B:.*]] = lir.slot %[[AR]][0] live [4, 6] : memref<64xi8> -> memref<16xf32>
// CHECK-NEXT:    lir.elementwise exp ins(%[[A]] : memref<16xf32>) outs(%[[B]] : memref<16xf32>)
// CHECK-NEXT:    %[[C:.*]] = lir.slot %[[AR]][0] live [6, 8] : memref<64xi8> -> memref<16xf32>
// CHECK-NEXT:    lir.elementwise exp ins(%[[B]] : memref<16xf32>) outs(%[[C]] : memref<16xf32>)
// CHECK-NEXT:    %[[D:.*]] = lir.slot %[[AR]][0] live [8, 9] : memref<64xi8> -> memref<16xf32>
// CHECK-NEXT:    lir.elementwise exp ins(%[[C]] : memref<16xf32>) outs(%[[D]] : memref<16xf32>)
// CHECK-NEXT:    lir.elementwise exp ins(%[[D]] : memref<16xf32>) outs(%{{.*}} : memref<16xf32>)
// CHECK-NEXT:    func.return

// NOINPLACE-LABEL: func.func @reuse(
// NOINPLACE-NEXT:    %[[AR:.*]] = lir.arena size 128 alignment 64 strategy "greedy-by-size" max_live_bytes 128 : memref<128xi8>
// NOINPLACE-NEXT:    %[[A:.*]] = lir.slot %[[AR]][0] live [2, 4] : memref<128xi8> -> memref<16xf32>
// NOINPLACE-NEXT:    lir.elementwise exp ins(%{{.*}} : memref<16xf32>) outs(%[[A]] : memref<16xf32>)
// NOINPLACE-NEXT:    %[[B:.*]] = lir.slot %[[AR]][64] live [4, 6] : memref<128xi8> -> memref<16xf32>
// NOINPLACE-NEXT:    lir.elementwise exp ins(%[[A]] : memref<16xf32>) outs(%[[B]] : memref<16xf32>)
// NOINPLACE-NEXT:    %[[C:.*]] = lir.slot %[[AR]][0] live [6, 8] : memref<128xi8> -> memref<16xf32>
// NOINPLACE-NEXT:    lir.elementwise exp ins(%[[B]] : memref<16xf32>) outs(%[[C]] : memref<16xf32>)
// NOINPLACE-NEXT:    %[[D:.*]] = lir.slot %[[AR]][64] live [8, 9] : memref<128xi8> -> memref<16xf32>
// NOINPLACE-NEXT:    lir.elementwise exp ins(%[[C]] : memref<16xf32>) outs(%[[D]] : memref<16xf32>)

// ALIGN-LABEL: func.func @reuse(
// ALIGN-NEXT:    %[[AR:.*]] = lir.arena size 128 alignment 128 strategy "greedy-by-size" max_live_bytes 128 : memref<128xi8>
// ALIGN-NEXT:    lir.slot %[[AR]][0] live [2, 4]
// ALIGN:         lir.slot %[[AR]][0] live [4, 6]
// ALIGN:         lir.slot %[[AR]][0] live [6, 8]
// ALIGN:         lir.slot %[[AR]][0] live [8, 9]

// NAIVE-LABEL: func.func @reuse(
// NAIVE-NEXT:    %[[AR:.*]] = lir.arena size 256 alignment 64 strategy naive max_live_bytes 128 : memref<256xi8>
// NAIVE-NEXT:    lir.slot %[[AR]][0] live [2, 4]
// NAIVE:         lir.slot %[[AR]][64] live [4, 6]
// NAIVE:         lir.slot %[[AR]][128] live [6, 8]
// NAIVE:         lir.slot %[[AR]][192] live [8, 9]
func.func @reuse(%x: memref<16xf32>, %out: memref<16xf32>) {
  %a = lir.alloc : memref<16xf32>
  lir.elementwise exp ins(%x : memref<16xf32>) outs(%a : memref<16xf32>)
  %b = lir.alloc : memref<16xf32>
  lir.elementwise exp ins(%a : memref<16xf32>) outs(%b : memref<16xf32>)
  %c = lir.alloc : memref<16xf32>
  lir.elementwise exp ins(%b : memref<16xf32>) outs(%c : memref<16xf32>)
  %d = lir.alloc : memref<16xf32>
  lir.elementwise exp ins(%c : memref<16xf32>) outs(%d : memref<16xf32>)
  lir.elementwise exp ins(%d : memref<16xf32>) outs(%out : memref<16xf32>)
  func.return
}

// %a is read through a view of a view at op 9, so it stays live over [2, 9] and
// cannot share bytes with %b and %c. %b dies at op 8, where abs writes %c in place.

// CHECK-LABEL: func.func @views(
// CHECK-NEXT:    %[[AR:.*]] = lir.arena size 256 alignment 64 strategy "greedy-by-size" max_live_bytes 256 : memref<256xi8>
// CHECK-NEXT:    %[[A:.*]] = lir.slot %[[AR]][0] live [2, 9] : memref<256xi8> -> memref<4x8xf32>
// CHECK-NEXT:    lir.elementwise exp
// CHECK-NEXT:    %[[V:.*]] = lir.view %[[A]][0] : memref<4x8xf32> -> memref<2x16xf32>
// CHECK-NEXT:    %[[W:.*]] = lir.view %[[V]][16] : memref<2x16xf32> -> memref<8xf32>
// CHECK-NEXT:    %[[B:.*]] = lir.slot %[[AR]][128] live [6, 8] : memref<256xi8> -> memref<4x8xf32>
// CHECK-NEXT:    lir.elementwise neg
// CHECK-NEXT:    %[[C:.*]] = lir.slot %[[AR]][128] live [8, 8] : memref<256xi8> -> memref<4x8xf32>
// CHECK-NEXT:    lir.elementwise abs ins(%[[B]] : memref<4x8xf32>) outs(%[[C]] : memref<4x8xf32>)
// CHECK-NEXT:    lir.elementwise add ins(%[[W]], %[[W]] : memref<8xf32>, memref<8xf32>)

// NOINPLACE-LABEL: func.func @views(
// NOINPLACE-NEXT:    %[[AR:.*]] = lir.arena size 384 alignment 64 strategy "greedy-by-size" max_live_bytes 384 : memref<384xi8>
// NOINPLACE-NEXT:    lir.slot %[[AR]][0] live [2, 9] : memref<384xi8> -> memref<4x8xf32>
// NOINPLACE:         lir.slot %[[AR]][128] live [6, 8] : memref<384xi8> -> memref<4x8xf32>
// NOINPLACE:         lir.slot %[[AR]][256] live [8, 8] : memref<384xi8> -> memref<4x8xf32>
func.func @views(%x: memref<4x8xf32>, %out: memref<8xf32>) {
  %a = lir.alloc : memref<4x8xf32>
  lir.elementwise exp ins(%x : memref<4x8xf32>) outs(%a : memref<4x8xf32>)
  %v = lir.view %a[0] : memref<4x8xf32> -> memref<2x16xf32>
  %w = lir.view %v[16] : memref<2x16xf32> -> memref<8xf32>
  %b = lir.alloc : memref<4x8xf32>
  lir.elementwise neg ins(%x : memref<4x8xf32>) outs(%b : memref<4x8xf32>)
  %c = lir.alloc : memref<4x8xf32>
  lir.elementwise abs ins(%b : memref<4x8xf32>) outs(%c : memref<4x8xf32>)
  lir.elementwise add ins(%w, %w : memref<8xf32>, memref<8xf32>) outs(%out : memref<8xf32>)
  func.return
}

// Largest first: %big at 0, %mid above it, %s1 above both; without in-place reuse %s2
// (live after %big and %mid died) takes the gap at 0 and the never-used %unused (live
// at its own op) the next one. 448 bytes = the lower bound (%big + %mid + %s1 at op 7).
// In place, %s2 is written over %s1 (one chain [4, 11] at 384) and %unused takes 0.

// CHECK-LABEL: func.func @sizes(
// CHECK-NEXT:    %[[AR:.*]] = lir.arena size 448 alignment 64 strategy "greedy-by-size" max_live_bytes 448 : memref<448xi8>
// CHECK-NEXT:    lir.slot %[[AR]][0] live [2, 7] : memref<448xi8> -> memref<64xf32>
// CHECK:         lir.slot %[[AR]][384] live [4, 9] : memref<448xi8> -> memref<4xf32>
// CHECK:         lir.slot %[[AR]][256] live [7, 7] : memref<448xi8> -> memref<32xf32>
// CHECK:         lir.slot %[[AR]][384] live [9, 11] : memref<448xi8> -> memref<4xf32>
// CHECK:         lir.slot %[[AR]][0] live [10, 10] : memref<448xi8> -> memref<4xf32>

// NOINPLACE-LABEL: func.func @sizes(
// NOINPLACE-NEXT:    %[[AR:.*]] = lir.arena size 448 alignment 64 strategy "greedy-by-size" max_live_bytes 448 : memref<448xi8>
// NOINPLACE-NEXT:    lir.slot %[[AR]][0] live [2, 7] : memref<448xi8> -> memref<64xf32>
// NOINPLACE:         lir.slot %[[AR]][384] live [4, 9] : memref<448xi8> -> memref<4xf32>
// NOINPLACE:         lir.slot %[[AR]][256] live [7, 7] : memref<448xi8> -> memref<32xf32>
// NOINPLACE:         lir.slot %[[AR]][0] live [9, 11] : memref<448xi8> -> memref<4xf32>
// NOINPLACE:         lir.slot %[[AR]][64] live [10, 10] : memref<448xi8> -> memref<4xf32>

// ALIGN-LABEL: func.func @sizes(
// ALIGN-NEXT:    %[[AR:.*]] = lir.arena size 512 alignment 128 strategy "greedy-by-size" max_live_bytes 512 : memref<512xi8>
// ALIGN-NEXT:    lir.slot %[[AR]][0] live [2, 7] : memref<512xi8> -> memref<64xf32>
// ALIGN:         lir.slot %[[AR]][256] live [4, 9] : memref<512xi8> -> memref<4xf32>
// ALIGN:         lir.slot %[[AR]][384] live [7, 7] : memref<512xi8> -> memref<32xf32>
// ALIGN:         lir.slot %[[AR]][256] live [9, 11] : memref<512xi8> -> memref<4xf32>
// ALIGN:         lir.slot %[[AR]][0] live [10, 10] : memref<512xi8> -> memref<4xf32>

// NAIVE-LABEL: func.func @sizes(
// NAIVE-NEXT:    %[[AR:.*]] = lir.arena size 576 alignment 64 strategy naive max_live_bytes 448 : memref<576xi8>
// NAIVE-NEXT:    lir.slot %[[AR]][0] live [2, 7]
// NAIVE:         lir.slot %[[AR]][256] live [4, 9]
// NAIVE:         lir.slot %[[AR]][320] live [7, 7]
// NAIVE:         lir.slot %[[AR]][448] live [9, 11]
// NAIVE:         lir.slot %[[AR]][512] live [10, 10]

// Alignment 16 keeps the 16-byte buffers small.
// SMALL-LABEL: func.func @sizes(
// SMALL-NEXT:    %[[AR:.*]] = lir.arena size 400 alignment 16 strategy "greedy-by-size" max_live_bytes 400 : memref<400xi8>
// SMALL-NEXT:    lir.slot %[[AR]][0] live [2, 7] : memref<400xi8> -> memref<64xf32>
// SMALL:         lir.slot %[[AR]][384] live [4, 9] : memref<400xi8> -> memref<4xf32>
// SMALL:         lir.slot %[[AR]][256] live [7, 7] : memref<400xi8> -> memref<32xf32>
// SMALL:         lir.slot %[[AR]][384] live [9, 11] : memref<400xi8> -> memref<4xf32>
// SMALL:         lir.slot %[[AR]][0] live [10, 10] : memref<400xi8> -> memref<4xf32>
func.func @sizes(%x: memref<64xf32>, %y: memref<4xf32>, %out: memref<16x4xf32>) {
  %big = lir.alloc : memref<64xf32>
  lir.elementwise exp ins(%x : memref<64xf32>) outs(%big : memref<64xf32>)
  %s1 = lir.alloc : memref<4xf32>
  lir.elementwise exp ins(%y : memref<4xf32>) outs(%s1 : memref<4xf32>)
  %mid = lir.alloc : memref<32xf32>
  %lo = lir.view %big[0] : memref<64xf32> -> memref<32xf32>
  lir.elementwise neg ins(%lo : memref<32xf32>) outs(%mid : memref<32xf32>)
  %s2 = lir.alloc : memref<4xf32>
  lir.elementwise exp ins(%s1 : memref<4xf32>) outs(%s2 : memref<4xf32>)
  %unused = lir.alloc : memref<4xf32>
  lir.broadcast_to ins(%s2 : memref<4xf32>) outs(%out : memref<16x4xf32>)
  func.return
}

// No allocs: no arena.

// CHECK-LABEL: func.func @no_allocs(
// CHECK-NEXT:    lir.copy
// CHECK-NEXT:    func.return
// NAIVE-LABEL: func.func @no_allocs(
// NAIVE-NEXT:    lir.copy
func.func @no_allocs(%x: memref<4xf32>, %out: memref<4xf32>) {
  lir.copy ins(%x : memref<4xf32>) outs(%out : memref<4xf32>)
  func.return
}

// In-place reuse in the SwiGLU shape: silu(gate) and up are live together; the mul
// writes its out over %gate (which dies there, not over %up: one input is enough), and
// the fused residual add writes over the product. Three 128-byte buffers need 256
// bytes in place, 384 without.

// CHECK-LABEL: func.func @inplace_swiglu(
// CHECK-NEXT:    %[[AR:.*]] = lir.arena size 256 alignment 64 strategy "greedy-by-size" max_live_bytes 256 : memref<256xi8>
// CHECK-NEXT:    %[[GATE:.*]] = lir.slot %[[AR]][0] live [2, 6] : memref<256xi8> -> memref<4x8xf32>
// CHECK-NEXT:    lir.elementwise silu
// CHECK-NEXT:    %[[UP:.*]] = lir.slot %[[AR]][128] live [4, 6] : memref<256xi8> -> memref<4x8xf32>
// CHECK-NEXT:    lir.elementwise exp
// CHECK-NEXT:    %[[PROD:.*]] = lir.slot %[[AR]][0] live [6, 8] : memref<256xi8> -> memref<4x8xf32>
// CHECK-NEXT:    lir.elementwise mul ins(%[[GATE]], %[[UP]] : memref<4x8xf32>, memref<4x8xf32>) outs(%[[PROD]] : memref<4x8xf32>)
// CHECK-NEXT:    %[[SUM:.*]] = lir.slot %[[AR]][0] live [8, 9] : memref<256xi8> -> memref<4x8xf32>
// CHECK-NEXT:    lir.fused_elementwise ins(%{{.*}}, %[[PROD]] : memref<4x8xf32>, memref<4x8xf32>) outs(%[[SUM]] : memref<4x8xf32>) {

// NOINPLACE-LABEL: func.func @inplace_swiglu(
// NOINPLACE-NEXT:    %[[AR:.*]] = lir.arena size 384 alignment 64 strategy "greedy-by-size" max_live_bytes 384 : memref<384xi8>
// NOINPLACE-NEXT:    lir.slot %[[AR]][0] live [2, 6]
// NOINPLACE:         lir.slot %[[AR]][128] live [4, 6]
// NOINPLACE:         lir.slot %[[AR]][256] live [6, 8]
// NOINPLACE:         lir.slot %[[AR]][0] live [8, 9]

// NAIVE-LABEL: func.func @inplace_swiglu(
// NAIVE-NEXT:    %[[AR:.*]] = lir.arena size 512 alignment 64 strategy naive max_live_bytes 384 : memref<512xi8>
func.func @inplace_swiglu(%g: memref<4x8xf32>, %u: memref<4x8xf32>, %r: memref<4x8xf32>, %out: memref<4x8xf32>) {
  %gate = lir.alloc : memref<4x8xf32>
  lir.elementwise silu ins(%g : memref<4x8xf32>) outs(%gate : memref<4x8xf32>)
  %up = lir.alloc : memref<4x8xf32>
  lir.elementwise exp ins(%u : memref<4x8xf32>) outs(%up : memref<4x8xf32>)
  %prod = lir.alloc : memref<4x8xf32>
  lir.elementwise mul ins(%gate, %up : memref<4x8xf32>, memref<4x8xf32>) outs(%prod : memref<4x8xf32>)
  %sum = lir.alloc : memref<4x8xf32>
  lir.fused_elementwise ins(%r, %prod : memref<4x8xf32>, memref<4x8xf32>) outs(%sum : memref<4x8xf32>) {
  ^bb0(%x: f32, %y: f32):
    %s = arith.addf %x, %y : f32
    lir.yield %s : f32
  }
  lir.elementwise neg ins(%sum : memref<4x8xf32>) outs(%out : memref<4x8xf32>)
  func.return
}

// No in-place reuse: the input is a view at an offset (not the alloc itself).

// CHECK-LABEL: func.func @refuse_view(
// CHECK-NEXT:    %[[AR:.*]] = lir.arena size 192 alignment 64 strategy "greedy-by-size" max_live_bytes 192 : memref<192xi8>
// CHECK-NEXT:    lir.slot %[[AR]][0] live [2, 5] : memref<192xi8> -> memref<32xf32>
// CHECK:         lir.slot %[[AR]][128] live [5, 6] : memref<192xi8> -> memref<16xf32>
func.func @refuse_view(%x: memref<32xf32>, %out: memref<16xf32>) {
  %a = lir.alloc : memref<32xf32>
  lir.elementwise exp ins(%x : memref<32xf32>) outs(%a : memref<32xf32>)
  %hi = lir.view %a[16] : memref<32xf32> -> memref<16xf32>
  %b = lir.alloc : memref<16xf32>
  lir.elementwise neg ins(%hi : memref<16xf32>) outs(%b : memref<16xf32>)
  lir.copy ins(%b : memref<16xf32>) outs(%out : memref<16xf32>)
  func.return
}

// No in-place reuse: the input is broadcast (its type is not out's).

// CHECK-LABEL: func.func @refuse_broadcast(
// CHECK-NEXT:    %[[AR:.*]] = lir.arena size 320 alignment 64 strategy "greedy-by-size" max_live_bytes 320 : memref<320xi8>
// CHECK-NEXT:    lir.slot %[[AR]][256] live [2, 4] : memref<320xi8> -> memref<16xf32>
// CHECK:         lir.slot %[[AR]][0] live [4, 5] : memref<320xi8> -> memref<4x16xf32>
func.func @refuse_broadcast(%x: memref<16xf32>, %y: memref<4x16xf32>, %out: memref<4x16xf32>) {
  %a = lir.alloc : memref<16xf32>
  lir.elementwise exp ins(%x : memref<16xf32>) outs(%a : memref<16xf32>)
  %b = lir.alloc : memref<4x16xf32>
  lir.elementwise add ins(%a, %y : memref<16xf32>, memref<4x16xf32>) outs(%b : memref<4x16xf32>)
  lir.copy ins(%b : memref<4x16xf32>) outs(%out : memref<4x16xf32>)
  func.return
}

// No in-place reuse: the input is read again after the kernel.

// CHECK-LABEL: func.func @refuse_live_after(
// CHECK-NEXT:    %[[AR:.*]] = lir.arena size 128 alignment 64 strategy "greedy-by-size" max_live_bytes 128 : memref<128xi8>
// CHECK-NEXT:    lir.slot %[[AR]][0] live [2, 5] : memref<128xi8> -> memref<16xf32>
// CHECK:         lir.slot %[[AR]][64] live [4, 5] : memref<128xi8> -> memref<16xf32>
func.func @refuse_live_after(%x: memref<16xf32>, %out: memref<16xf32>) {
  %a = lir.alloc : memref<16xf32>
  lir.elementwise exp ins(%x : memref<16xf32>) outs(%a : memref<16xf32>)
  %b = lir.alloc : memref<16xf32>
  lir.elementwise abs ins(%a : memref<16xf32>) outs(%b : memref<16xf32>)
  lir.elementwise max ins(%a, %b : memref<16xf32>, memref<16xf32>) outs(%out : memref<16xf32>)
  func.return
}

// No in-place reuse: a matmul is not elementwise (out[i, j] reads a whole row).

// CHECK-LABEL: func.func @refuse_matmul(
// CHECK-NEXT:    %[[AR:.*]] = lir.arena size 128 alignment 64 strategy "greedy-by-size" max_live_bytes 128 : memref<128xi8>
// CHECK-NEXT:    lir.slot %[[AR]][0] live [2, 4] : memref<128xi8> -> memref<4x4xf32>
// CHECK:         lir.slot %[[AR]][64] live [4, 5] : memref<128xi8> -> memref<4x4xf32>
func.func @refuse_matmul(%x: memref<4x4xf32>, %w: memref<4x4xf32>, %out: memref<4x4xf32>) {
  %a = lir.alloc : memref<4x4xf32>
  lir.elementwise exp ins(%x : memref<4x4xf32>) outs(%a : memref<4x4xf32>)
  %b = lir.alloc : memref<4x4xf32>
  lir.matmul ins(%a, %w : memref<4x4xf32>, memref<4x4xf32>) outs(%b : memref<4x4xf32>)
  lir.copy ins(%b : memref<4x4xf32>) outs(%out : memref<4x4xf32>)
  func.return
}

// No in-place reuse: another input is a view of the candidate (its first row,
// broadcast), which the writes to out would clobber.

// CHECK-LABEL: func.func @refuse_view_operand(
// CHECK-NEXT:    %[[AR:.*]] = lir.arena size 512 alignment 64 strategy "greedy-by-size" max_live_bytes 512 : memref<512xi8>
// CHECK-NEXT:    lir.slot %[[AR]][0] live [2, 5] : memref<512xi8> -> memref<4x16xf32>
// CHECK:         lir.slot %[[AR]][256] live [5, 6] : memref<512xi8> -> memref<4x16xf32>
func.func @refuse_view_operand(%x: memref<4x16xf32>, %out: memref<4x16xf32>) {
  %a = lir.alloc : memref<4x16xf32>
  lir.elementwise exp ins(%x : memref<4x16xf32>) outs(%a : memref<4x16xf32>)
  %row = lir.view %a[0] : memref<4x16xf32> -> memref<16xf32>
  %b = lir.alloc : memref<4x16xf32>
  lir.elementwise add ins(%a, %row : memref<4x16xf32>, memref<16xf32>) outs(%b : memref<4x16xf32>)
  lir.copy ins(%b : memref<4x16xf32>) outs(%out : memref<4x16xf32>)
  func.return
}
