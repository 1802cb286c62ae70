// RUN: rlx-opt %s | rlx-opt | filecheck %s
// RUN: rlx-opt %s --print-op-generic | rlx-opt | filecheck %s

// Round-trip of the reverse-pass kernels of the sequence ops: every gradient and the saved
// states are outs; d_initial_state_out only with initial_state.

func.func @backward() {
  %x = "test.op"() : () -> memref<1x4x8xf32>
  %a = "test.op"() : () -> memref<8x3xf32>
  %b = "test.op"() : () -> memref<1x4x3xf32>
  %f = "test.op"() : () -> memref<1x8x3xf32>
  %st = "test.op"() : () -> memref<1x4x8x3xf32>
  lir.selective_scan_backward ins(%x, %x, %a, %b, %b, %x, %f : memref<1x4x8xf32>, memref<1x4x8xf32>, memref<8x3xf32>, memref<1x4x3xf32>, memref<1x4x3xf32>, memref<1x4x8xf32>, memref<1x8x3xf32>) outs(%x, %x, %f, %b, %b, %st : memref<1x4x8xf32>, memref<1x4x8xf32>, memref<1x8x3xf32>, memref<1x4x3xf32>, memref<1x4x3xf32>, memref<1x4x8x3xf32>)
  lir.selective_scan_backward ins(%x, %x, %a, %b, %b, %x, %f, %f : memref<1x4x8xf32>, memref<1x4x8xf32>, memref<8x3xf32>, memref<1x4x3xf32>, memref<1x4x3xf32>, memref<1x4x8xf32>, memref<1x8x3xf32>, memref<1x8x3xf32>) outs(%x, %x, %f, %b, %b, %st, %f : memref<1x4x8xf32>, memref<1x4x8xf32>, memref<1x8x3xf32>, memref<1x4x3xf32>, memref<1x4x3xf32>, memref<1x4x8x3xf32>, memref<1x8x3xf32>)
  %q = "test.op"() : () -> memref<1x4x2x8xf32>
  %g = "test.op"() : () -> memref<1x4x2xf32>
  %s = "test.op"() : () -> memref<1x2x8x8xf32>
  %ss = "test.op"() : () -> memref<1x4x2x8x8xf32>
  lir.gated_delta_net_backward ins(%q, %q, %q, %g, %g, %q, %s : memref<1x4x2x8xf32>, memref<1x4x2x8xf32>, memref<1x4x2x8xf32>, memref<1x4x2xf32>, memref<1x4x2xf32>, memref<1x4x2x8xf32>, memref<1x2x8x8xf32>) outs(%q, %q, %q, %g, %g, %ss : memref<1x4x2x8xf32>, memref<1x4x2x8xf32>, memref<1x4x2x8xf32>, memref<1x4x2xf32>, memref<1x4x2xf32>, memref<1x4x2x8x8xf32>)
  func.return
}

// CHECK-LABEL: func.func @backward
// CHECK:      lir.selective_scan_backward ins({{.*}} : {{.*}}, memref<1x8x3xf32>) outs({{.*}} : {{.*}}, memref<1x4x8x3xf32>)
// CHECK-NEXT: lir.selective_scan_backward ins({{.*}} : {{.*}}, memref<1x8x3xf32>, memref<1x8x3xf32>) outs({{.*}} : {{.*}}, memref<1x4x8x3xf32>, memref<1x8x3xf32>)
// CHECK:      lir.gated_delta_net_backward ins({{.*}}) outs({{.*}} : {{.*}}, memref<1x4x2x8x8xf32>)
