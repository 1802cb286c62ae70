// RUN: rlx-opt %s -p convert-mir-to-lir | filecheck %s --check-prefix=LIR
// RUN: rlx-opt %s -p convert-mir-to-lir,lir-plan-arena,lir-parallelize | filecheck %s --check-prefix=PLAN
// RUN: rlx-opt %s -p convert-mir-to-lir,lir-plan-arena,lir-parallelize,convert-lir-to-llvm | filecheck %s --check-prefix=LLVM

// A scan through every stage: its body is bufferized like any graph (kernels into
// allocs), the allocs become arena slots live at the scan's position, and the scan
// becomes a native loop around the calls of the body's kernels.

// LIR-LABEL: func.func @rnn(
// LIR:         lir.scan ins(%h : memref<4xf32>) xs(%xs : memref<5x4xf32>) consts(%w : memref<4x4xf32>) outs(%out0 : memref<5x4xf32>) length 5 trajectory attributes {rlx.phase = "steady_state"} {
// LIR-NEXT:    ^bb0(%c: memref<4xf32>, %x: memref<4xf32>, %m: memref<4x4xf32>):
// LIR-NEXT:      %[[P:.*]] = lir.alloc : memref<4xf32>
// LIR-NEXT:      lir.matmul ins(%c, %m : memref<4xf32>, memref<4x4xf32>) outs(%[[P]] : memref<4xf32>) {rlx.phase = "steady_state"}
// LIR-NEXT:      %[[N:.*]] = lir.alloc : memref<4xf32>
// LIR-NEXT:      lir.elementwise add ins(%[[P]], %x : memref<4xf32>, memref<4xf32>) outs(%[[N]] : memref<4xf32>)
// LIR-NEXT:      lir.yield %[[N]] : memref<4xf32>
// LIR-NEXT:    }
// LIR-NEXT:    func.return

// The body's buffers are slots live at the scan (position 1), apart from each other.
// PLAN:        %arena = lir.arena size 128
// PLAN:        lir.scan
// PLAN:          lir.slot %arena[0] live [1, 1]
// PLAN:          lir.slot %arena[64] live [1, 1]

// LLVM-LABEL:  llvm.func @rnn(
// LLVM:          llvm.br ^[[HEADER:.*]](%{{.*}}, %{{.*}} : i64, i32)
// LLVM-NEXT:   ^[[HEADER]](%[[T:.*]]: i64, %[[STATUS:.*]]: i32):
// LLVM-NEXT:     %[[LEN:.*]] = llvm.mlir.constant(5) : i64
// LLVM-NEXT:     %[[C:.*]] = llvm.icmp "slt" %[[T]], %[[LEN]] : i64
// LLVM-NEXT:     llvm.cond_br %[[C]], ^[[BODY:.*]], ^[[EXIT:.*]] {rlx.loop_header}
// LLVM-NEXT:   ^[[BODY]]:
// LLVM:          llvm.select %{{.*}}, %{{.*}}, %{{.*}} : i1, !llvm.ptr
// LLVM:          llvm.call @rnn__matmul_{{[0-9]+}}__serial(
// LLVM:          llvm.call @rnn__elementwise_{{[0-9]+}}__serial(
// LLVM:          llvm.call @rnn__copy_{{[0-9]+}}__serial(
// LLVM:          llvm.add %[[T]], %{{.*}} : i64
// LLVM-NEXT:     llvm.br ^[[HEADER]](%{{.*}}, %[[STATUS]] : i64, i32)
// LLVM-NEXT:   ^[[EXIT]]:
// LLVM-NEXT:     %[[ZERO:.*]] = llvm.mlir.constant(0 : i32) : i32
// LLVM-NEXT:     %[[ALL:.*]] = llvm.or %[[ZERO]], %[[STATUS]] : i32
// LLVM-NEXT:     llvm.return %[[ALL]] : i32
func.func @rnn(%h: tensor<4xf32> {rlx.name = "h", rlx.role = "input"}, %xs: tensor<5x4xf32> {rlx.name = "xs", rlx.role = "input"}, %w: tensor<4x4xf32> {rlx.name = "w", rlx.role = "param"}) -> tensor<5x4xf32> {
  %r = mir.scan %h xs(%xs : tensor<5x4xf32>) consts(%w : tensor<4x4xf32>) length 5 trajectory : tensor<4xf32> -> tensor<5x4xf32> {
  ^bb0(%c: tensor<4xf32>, %x: tensor<4xf32>, %m: tensor<4x4xf32>):
    %p = mir.matmul %c, %m : (tensor<4xf32>, tensor<4x4xf32>) -> tensor<4xf32>
    %n = mir.add %p, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mir.yield %n : tensor<4xf32>
  }
  func.return %r : tensor<5x4xf32>
}
