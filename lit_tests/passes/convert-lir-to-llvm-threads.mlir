// RUN: rlx-opt %s -p 'lir-parallelize{hazards-only=false},convert-lir-to-llvm{vector-width=16}' | filecheck %s
// RUN: rlx-opt %s -p convert-lir-to-llvm{vector-width=16} | filecheck %s --check-prefix=SERIAL

// Kernels that lir-parallelize marked rlx.parallel are built partitioned: they take the
// thread id and count and compute their share. Its lir.barriers become rlx_barrier calls
// (the last one ends the entry so thread 0 returns when all are done), and an entry with
// barriers gets its native worker loop. (hazards-only=false: the small abs, independent of
// the neg before it, would otherwise join the neg's region; lir-parallelize.mlir.)

func.func @big(%x: memref<1024x512xf32> {rlx.name = "x", rlx.role = "input"},
               %small: memref<8xf32> {rlx.name = "small", rlx.role = "input"},
               %out0: memref<1024x512xf32> {rlx.name = "out0", rlx.role = "output"},
               %out1: memref<8xf32> {rlx.name = "out1", rlx.role = "output"}) {
  %arena = lir.arena size 2097152 alignment 64 strategy "greedy-by-size" : memref<2097152xi8>
  %t = lir.slot %arena[0] live [1, 2] : memref<2097152xi8> -> memref<1024x512xf32>
  lir.elementwise exp ins(%x : memref<1024x512xf32>) outs(%t : memref<1024x512xf32>)
  lir.elementwise neg ins(%t : memref<1024x512xf32>) outs(%out0 : memref<1024x512xf32>)
  lir.elementwise abs ins(%small : memref<8xf32>) outs(%out1 : memref<8xf32>)
  func.return
}

// CHECK:      llvm.func @big__elementwise_0(%{{.*}}: !llvm.ptr {llvm.noalias}, %{{.*}}: !llvm.ptr {llvm.noalias}, %{{.*}}: i64, %{{.*}}: i64)
// CHECK:      llvm.func @big__elementwise_2__serial(
// CHECK:      llvm.func @big(
// CHECK-SAME: %[[PART:[0-9a-z_]+]]: i64 {rlx.role = "part"}, %[[PARTS:[0-9a-z_]+]]: i64 {rlx.role = "parts"}, %[[SYNC:[0-9a-z_]+]]: !llvm.ptr {rlx.role = "sync"}) -> i32
// CHECK:      llvm.call @big__elementwise_0(%{{.*}}, %{{.*}}, %[[PART]], %[[PARTS]])
// CHECK-NEXT: %[[FULL:.*]] = llvm.mlir.constant(0) : i64
// CHECK-NEXT: llvm.call @rlx_barrier(%[[SYNC]], %[[PART]], %[[PARTS]], %[[FULL]])
// CHECK-NEXT: llvm.call @big__elementwise_1(%{{.*}}, %{{.*}}, %[[PART]], %[[PARTS]])
// CHECK-NEXT: %[[GATHER:.*]] = llvm.mlir.constant(1) : i64
// CHECK-NEXT: llvm.call @rlx_barrier(%[[SYNC]], %[[PART]], %[[PARTS]], %[[GATHER]])
// CHECK-NEXT: llvm.call @big__elementwise_2__serial(%{{.*}}, %{{.*}}, %[[PART]], %[[PARTS]])
// CHECK-NEXT: llvm.mlir.constant(0 : i32)
// CHECK-NEXT: llvm.return
// CHECK:      llvm.func @big__worker(
// CHECK:      llvm.func @rlx_barrier(
// CHECK:      "lock xaddq $0, ($2)", "=r,0,r,~{memory},~{flags}"
// CHECK:      "pause"
// CHECK:      llvm.func @sched_yield() -> i32

// Without lir-parallelize every kernel is serial: no partitioned kernel, no barrier, no
// worker loop.
// SERIAL:     llvm.func @big__elementwise_0(%{{.*}}: !llvm.ptr {llvm.noalias}, %{{.*}}: !llvm.ptr {llvm.noalias})
// SERIAL:     llvm.func @big__elementwise_0__serial(
// SERIAL-NOT: rlx_barrier
// SERIAL-NOT: __worker
