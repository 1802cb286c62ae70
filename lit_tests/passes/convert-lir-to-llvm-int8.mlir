// RUN: rlx-opt %s -p 'convert-lir-to-llvm{target=icelake-server}' | filecheck %s --check-prefix=VNNI
// RUN: rlx-opt %s -p 'convert-lir-to-llvm{target=haswell}' | filecheck %s --check-prefix=AVX2
// RUN: rlx-opt %s -p 'convert-lir-to-llvm{target=x86-64}' | filecheck %s --check-prefix=SSE

// A dequant_matmul with `activations q8` takes the int8 kernels where the target has
// integer dot products: `vpdpbusd` with VNNI (icelake-server, 16 lanes), `vpmaddubsw` +
// `vpmaddwd` with AVX2 (haswell, 8 lanes); the K-quants' mins (or offsets) add i16 pair
// dots with x's sums of 16 quants. q8_0 under AVX2 keeps its quants signed (q + 128 would
// saturate vpmaddubsw's i16 sums): |q| times x with q's sign (vpsignb). SSE targets run
// the f32 emulation.

func.func @entry(%x: memref<2x256xf32> {rlx.name = "x", rlx.role = "input"},
                 %wk: memref<8x144xui8> {rlx.name = "wk", rlx.role = "param"},
                 %w8: memref<8x272xui8> {rlx.name = "w8", rlx.role = "param"},
                 %ok: memref<2x8xf32> {rlx.name = "ok", rlx.role = "output"},
                 %o8: memref<2x8xf32> {rlx.name = "o8", rlx.role = "output"}) {
  lir.dequant_matmul q4_k ins(%x, %wk : memref<2x256xf32>, memref<8x144xui8>) outs(%ok : memref<2x8xf32>) activations q8
  lir.dequant_matmul q8_0 ins(%x, %w8 : memref<2x256xf32>, memref<8x272xui8>) outs(%o8 : memref<2x8xf32>) activations q8
  func.return
}

// VNNI:     llvm.func @entry__dequant_matmul_0
// VNNI:     llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.512"
// VNNI:     llvm.call_intrinsic "llvm.x86.avx512.vpdpwssd.512"
// VNNI:     llvm.func @entry__dequant_matmul_1
// VNNI:     llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.512"
// VNNI:     llvm.func @entry(

// AVX2:     llvm.func @entry__dequant_matmul_0
// AVX2:     llvm.call_intrinsic "llvm.x86.avx2.pmadd.ub.sw"
// AVX2:     llvm.call_intrinsic "llvm.x86.avx2.pmadd.wd"
// AVX2:     llvm.func @entry__dequant_matmul_1
// AVX2:     llvm.call_intrinsic "llvm.x86.avx2.psign.b"
// AVX2:     llvm.call_intrinsic "llvm.x86.avx2.pmadd.ub.sw"
// AVX2:     llvm.func @entry(

// SSE-NOT:  llvm.call_intrinsic "llvm.x86
// SSE:      llvm.func @entry(
