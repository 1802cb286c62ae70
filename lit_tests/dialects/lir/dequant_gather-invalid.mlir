// RUN: rlx-opt %s --split-input-file --verify-diagnostics | filecheck %s

// lir.dequant_gather checks what mir.dequant_gather checks, on memrefs.

%t = "test.op"() : () -> memref<50x40xui8>
%ids = "test.op"() : () -> memref<3xi32>
%o = "test.op"() : () -> memref<3x32xf32>
lir.dequant_gather q4_1 ins(%t, %ids : memref<50x40xui8>, memref<3xi32>) outs(%o : memref<3x32xf32>)

// CHECK: 'lir.dequant_gather': {{.*}}[3, 64]{{.*}}[3, 32]

// -----

%t = "test.op"() : () -> memref<50x40xui8>
%ids = "test.op"() : () -> memref<3xf32>
%o = "test.op"() : () -> memref<3x64xf32>
lir.dequant_gather q4_1 ins(%t, %ids : memref<50x40xui8>, memref<3xf32>) outs(%o : memref<3x64xf32>)

// CHECK: 'lir.dequant_gather': ids: expected element type i32 or i64, got f32
