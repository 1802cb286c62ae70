// RUN: rlx-opt %s -p 'lir-pack-weights{params=w,t,g,h,f,u,v,e target=znver4}' | filecheck %s
// RUN: rlx-opt %s -p 'lir-pack-weights{params=w,t,g,h,f,u,v,e target=haswell}' | filecheck %s --check-prefix=W8
// RUN: rlx-opt %s -p 'lir-pack-weights{params=w,t,g,h,f,u,v,e target=znver4 vector-width=8}' | filecheck %s --check-prefix=W8
// RUN: rlx-opt %s -p 'lir-pack-weights{params=w,t,g,h,f,u,v,e target=x86-64}' | filecheck %s --check-prefix=NONE
// RUN: rlx-opt %s -p 'lir-pack-weights{params=w,t,g,h,f,u,v,e target=znver4},lir-plan-arena,convert-lir-to-llvm{target=znver4}' | filecheck %s --check-prefix=LLVM
// RUN: not rlx-opt %s -p 'lir-pack-weights{params=w,t,g,h,f,u,v,e target=znver4},lir-plan-arena,convert-lir-to-llvm{target=haswell}' 2>&1 | filecheck %s --check-prefix=MISMATCH

// Bound GGUF weights the target's int8 kernels read get their blocks interleaved W rows
// at a time (W = the vector width: 16 on znver4, 8 on haswell; none without int8 kernels):
// %w: a q4_1 weight of a q8 dequant_matmul -> interleaved.
// %t: a q8_0 table read by an embedding lookup and a q8 projection (tied) -> interleaved,
//     the lookup reads it interleaved too.
// %g, %h: the q4_0 weights of a q8 shared_input_matmul -> both interleaved.
// %f: a q4_1 weight of an f32-activation dequant_matmul (the f32 kernel) -> not.
// %u: a q4_k weight (K-quant superblocks: their dwords side by side) -> interleaved.
// %v: an iq4_xs weight (no int8 kernel: the emulation) -> not.
// %e: a table only looked up (no int8 kernel reads it) -> not.

// CHECK-LABEL: func.func @entry(
// CHECK-SAME:    %[[W:[a-z0-9_]+]]: memref<32x40xui8> {rlx.name = "w", rlx.role = "param", rlx.layout = "interleaved:q4_1:16"},
// CHECK-SAME:    %[[T:[a-z0-9_]+]]: memref<40x68xui8> {rlx.name = "t", rlx.role = "param", rlx.layout = "interleaved:q8_0:16"},
// CHECK-SAME:    %[[G:[a-z0-9_]+]]: memref<16x36xui8> {rlx.name = "g", rlx.role = "param", rlx.layout = "interleaved:q4_0:16"},
// CHECK-SAME:    %[[H:[a-z0-9_]+]]: memref<24x36xui8> {rlx.name = "h", rlx.role = "param", rlx.layout = "interleaved:q4_0:16"},
// CHECK-SAME:    %{{[a-z0-9_]+}}: memref<32x40xui8> {rlx.name = "f", rlx.role = "param"},
// CHECK-SAME:    %{{[a-z0-9_]+}}: memref<16x144xui8> {rlx.name = "u", rlx.role = "param", rlx.layout = "interleaved:q4_k:16"},
// CHECK-SAME:    %{{[a-z0-9_]+}}: memref<16x136xui8> {rlx.name = "v", rlx.role = "param"},
// CHECK-SAME:    %{{[a-z0-9_]+}}: memref<40x68xui8> {rlx.name = "e", rlx.role = "param"},
// CHECK:         lir.dequant_matmul q4_1 ins(%{{.*}}, %[[W]] : {{.*}}) outs({{.*}}) activations q8 interleaved 16
// CHECK-NEXT:    lir.dequant_gather q8_0 ins(%[[T]], %{{.*}} : {{.*}}) outs({{.*}}) interleaved 16
// CHECK-NEXT:    lir.dequant_matmul q8_0 ins(%{{.*}}, %[[T]] : {{.*}}) outs({{.*}}) activations q8 interleaved 16
// CHECK-NEXT:    lir.shared_input_matmul q4_0 ins(%{{.*}}, %[[G]], %[[H]] : {{.*}}) outs({{.*}}) activations q8 interleaved 16
// CHECK-NEXT:    lir.dequant_matmul q4_1 ins({{.*}}) outs({{.*}}){{$}}
// CHECK-NEXT:    lir.dequant_matmul q4_k ins({{.*}}) outs({{.*}}) activations q8 interleaved 16
// CHECK-NEXT:    lir.dequant_matmul iq4_xs ins({{.*}}) outs({{.*}}) activations q8{{$}}
// CHECK-NEXT:    lir.dequant_gather q8_0 ins({{.*}}) outs({{.*}}){{$}}

// W8: rlx.layout = "interleaved:q4_1:8"
// W8: lir.dequant_matmul q4_1 ins({{.*}}) outs({{.*}}) activations q8 interleaved 8

// NONE-NOT: interleaved

// LLVM: llvm.func @entry(
// LLVM-SAME: !llvm.ptr {rlx.name = "w", rlx.role = "param", rlx.layout = "interleaved:q4_1:16", rlx.type = memref<32x40xui8>, llvm.noalias}

// MISMATCH: convert-lir-to-llvm: 'lir.dequant_matmul': its weights are interleaved 16 rows at a time for the int8 kernels of that vector width, but it is lowered at width 8

func.func @entry(%x: memref<4x64xf32> {rlx.name = "x", rlx.role = "input"},
                 %ids: memref<4xi32> {rlx.name = "ids", rlx.role = "input"},
                 %w: memref<32x40xui8> {rlx.name = "w", rlx.role = "param"},
                 %t: memref<40x68xui8> {rlx.name = "t", rlx.role = "param"},
                 %g: memref<16x36xui8> {rlx.name = "g", rlx.role = "param"},
                 %h: memref<24x36xui8> {rlx.name = "h", rlx.role = "param"},
                 %f: memref<32x40xui8> {rlx.name = "f", rlx.role = "param"},
                 %u: memref<16x144xui8> {rlx.name = "u", rlx.role = "param"},
                 %v: memref<16x136xui8> {rlx.name = "v", rlx.role = "param"},
                 %e: memref<40x68xui8> {rlx.name = "e", rlx.role = "param"},
                 %xk: memref<4x256xf32> {rlx.name = "xk", rlx.role = "input"},
                 %out0: memref<4x32xf32> {rlx.name = "out0", rlx.role = "output"}) {
  %emb = lir.alloc : memref<4x64xf32>
  %lt = lir.alloc : memref<4x40xf32>
  %og = lir.alloc : memref<4x16xf32>
  %oh = lir.alloc : memref<4x24xf32>
  %of = lir.alloc : memref<4x32xf32>
  %ou = lir.alloc : memref<4x16xf32>
  %emb2 = lir.alloc : memref<4x64xf32>
  lir.dequant_matmul q4_1 ins(%x, %w : memref<4x64xf32>, memref<32x40xui8>) outs(%out0 : memref<4x32xf32>) activations q8
  lir.dequant_gather q8_0 ins(%t, %ids : memref<40x68xui8>, memref<4xi32>) outs(%emb : memref<4x64xf32>)
  lir.dequant_matmul q8_0 ins(%emb, %t : memref<4x64xf32>, memref<40x68xui8>) outs(%lt : memref<4x40xf32>) activations q8
  lir.shared_input_matmul q4_0 ins(%x, %g, %h : memref<4x64xf32>, memref<16x36xui8>, memref<24x36xui8>) outs(%og, %oh : memref<4x16xf32>, memref<4x24xf32>) activations q8
  lir.dequant_matmul q4_1 ins(%x, %f : memref<4x64xf32>, memref<32x40xui8>) outs(%of : memref<4x32xf32>)
  lir.dequant_matmul q4_k ins(%xk, %u : memref<4x256xf32>, memref<16x144xui8>) outs(%ou : memref<4x16xf32>) activations q8
  lir.dequant_matmul iq4_xs ins(%xk, %v : memref<4x256xf32>, memref<16x136xui8>) outs(%ou : memref<4x16xf32>) activations q8
  lir.dequant_gather q8_0 ins(%e, %ids : memref<40x68xui8>, memref<4xi32>) outs(%emb2 : memref<4x64xf32>)
  func.return
}
