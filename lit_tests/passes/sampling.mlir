// RUN: rlx-opt %s -p convert-mir-to-lir | filecheck %s --check-prefix=LIR
// RUN: rlx-opt %s -p convert-mir-to-lir,lir-plan-arena,convert-lir-to-llvm | filecheck %s --check-prefix=LLVM

// The sampling ops bufferize to their destination-passing kernels (the position stays an
// index operand) and lower to calls of one llvm.func each.

func.func @pick(%x: tensor<2x10xf32> {rlx.name = "x", rlx.role = "input"}, %t: tensor<f32> {rlx.name = "t", rlx.role = "input"}, %k: tensor<i32> {rlx.name = "k", rlx.role = "input"}, %p: tensor<f32> {rlx.name = "p", rlx.role = "input"}, %s: tensor<i64> {rlx.name = "s", rlx.role = "input"}) -> (tensor<2xi32>, tensor<2x3xf32>, tensor<2x3xi32>, tensor<2xi32>) {
  %a = mir.argmax %x : tensor<2x10xf32> -> tensor<2xi32>
  %v, %i = mir.top_k %x k 3 : (tensor<2x10xf32>) -> (tensor<2x3xf32>, tensor<2x3xi32>)
  %d = mir.sample %x, %t, %k, %p, %s : (tensor<2x10xf32>, tensor<f32>, tensor<i32>, tensor<f32>, tensor<i64>) -> tensor<2xi32>
  func.return %a, %v, %i, %d : tensor<2xi32>, tensor<2x3xf32>, tensor<2x3xi32>, tensor<2xi32>
}

// LIR:      lir.argmax ins(%x : memref<2x10xf32>) outs(%{{.*}} : memref<2xi32>)
// LIR-NEXT: lir.top_k ins(%x : memref<2x10xf32>) outs(%{{.*}}, %{{.*}} : memref<2x3xf32>, memref<2x3xi32>) k 3
// LIR-NEXT: lir.sample ins(%x, %t, %k, %p, %s : memref<2x10xf32>, memref<f32>, memref<i32>, memref<f32>, memref<i64>) outs(%{{.*}} : memref<2xi32>)

// LLVM: llvm.func @pick__argmax_0(%{{.*}}: !llvm.ptr {llvm.noalias}, %{{.*}}: !llvm.ptr {llvm.noalias})
// LLVM: llvm.func @pick__top_k_1(%{{.*}}: !llvm.ptr {llvm.noalias}, %{{.*}}: !llvm.ptr {llvm.noalias}, %{{.*}}: !llvm.ptr {llvm.noalias})
// LLVM: llvm.func @pick__sample_2(%{{.*}}: !llvm.ptr {llvm.noalias}, %{{.*}}: !llvm.ptr {llvm.noalias}, %{{.*}}: !llvm.ptr {llvm.noalias}, %{{.*}}: !llvm.ptr {llvm.noalias}, %{{.*}}: !llvm.ptr {llvm.noalias}, %{{.*}}: !llvm.ptr {llvm.noalias})
// LLVM: llvm.func @pick(
// LLVM: llvm.call @pick__argmax_0__serial
// LLVM: llvm.call @pick__top_k_1__serial
// LLVM: llvm.call @pick__sample_2__serial
