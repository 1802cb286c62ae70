// RUN: rlx-opt %s -p 'convert-mir-to-lir,lir-plan-arena,lir-parallelize{min-work=1}' | filecheck %s
// RUN: rlx-opt %s -p 'convert-mir-to-lir,lir-plan-arena,lir-parallelize{min-work=1 hazards-only=false}' | filecheck %s --check-prefix=EVERY

// Two products of one input in two schemes (q/k of q4_0, v of q8_0, as in a Q4_K_M
// file's layer): the second neither reads nor writes what the first writes, so the
// threads go on from the first to the second without waiting.
func.func @independent(%x: tensor<1x64xf32>, %wq: tensor<64x36xui8>, %wk: tensor<64x36xui8>, %wv: tensor<64x68xui8>) -> (tensor<1x64xf32>, tensor<1x64xf32>, tensor<1x64xf32>) {
  %q, %k = mir.shared_input_matmul %x, %wq, %wk scheme q4_0 activations q8 : (tensor<1x64xf32>, tensor<64x36xui8>, tensor<64x36xui8>) -> (tensor<1x64xf32>, tensor<1x64xf32>)
  %v = mir.dequant_matmul %x, %wv scheme q8_0 activations q8 : (tensor<1x64xf32>, tensor<64x68xui8>) -> tensor<1x64xf32>
  func.return %q, %k, %v : tensor<1x64xf32>, tensor<1x64xf32>, tensor<1x64xf32>
}

// CHECK-LABEL: func.func @independent
// CHECK:         lir.shared_input_matmul
// CHECK-NEXT:    lir.dequant_matmul
// CHECK-NEXT:    lir.barrier "gather"
// CHECK-NEXT:    func.return

// EVERY-LABEL: func.func @independent
// EVERY:         lir.shared_input_matmul
// EVERY-NEXT:    lir.barrier{{$}}
// EVERY-NEXT:    lir.dequant_matmul

// A kernel that reads what the one before it wrote waits for it (%t), and so does one
// whose out takes the bytes of a buffer an earlier kernel since the barrier still reads
// (%u gets the bytes of %t, which dies at %a's product).
func.func @dependent(%x: tensor<1x64xf32>, %w1: tensor<64x36xui8>, %w2: tensor<64x36xui8>) -> (tensor<1x64xf32>, tensor<1x64xf32>) {
  %t = mir.exp %x : tensor<1x64xf32>
  %a = mir.dequant_matmul %t, %w1 scheme q4_0 activations q8 : (tensor<1x64xf32>, tensor<64x36xui8>) -> tensor<1x64xf32>
  %u = mir.neg %x : tensor<1x64xf32>
  %b = mir.dequant_matmul %u, %w2 scheme q4_0 activations q8 : (tensor<1x64xf32>, tensor<64x36xui8>) -> tensor<1x64xf32>
  func.return %a, %b : tensor<1x64xf32>, tensor<1x64xf32>
}

// CHECK-LABEL: func.func @dependent
// CHECK:         lir.elementwise exp ins(%{{.*}} : memref<1x64xf32>) outs(%[[T:[a-z0-9_]*]] : memref<1x64xf32>)
// CHECK-NEXT:    lir.barrier{{$}}
// CHECK-NEXT:    lir.dequant_matmul q4_0 ins(%[[T]],
// CHECK:         %[[U:.*]] = lir.slot %arena[0]
// CHECK-NEXT:    lir.barrier{{$}}
// CHECK-NEXT:    lir.elementwise neg ins(%{{.*}} : memref<1x64xf32>) outs(%[[U]] : memref<1x64xf32>)
// CHECK-NEXT:    lir.barrier{{$}}
// CHECK-NEXT:    lir.dequant_matmul q4_0 ins(%[[U]],
