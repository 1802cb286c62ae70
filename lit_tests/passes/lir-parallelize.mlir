// RUN: rlx-opt %s --split-input-file -p 'lir-parallelize{hazards-only=false}' | filecheck %s
// RUN: rlx-opt %s --split-input-file -p 'lir-parallelize{hazards-only=false},lir-parallelize' | filecheck %s
// RUN: rlx-opt %s --split-input-file -p lir-parallelize | filecheck %s --check-prefix=HAZARDS
// RUN: rlx-opt %s --split-input-file -p 'lir-parallelize{min-work=1}' | filecheck %s --check-prefix=ALL
// RUN: not rlx-opt %s --split-input-file -p 'lir-parallelize{min-work=0}' 2>&1 | filecheck %s --check-prefix=BAD

// Kernels with a partitioned builder and enough work (min-work, default 2^18) are marked
// rlx.parallel. A barrier separates two kernels unless both are serial: a full one
// between two parallel kernels, "gather" (thread 0 waits for all) before a serial one,
// "release" (the others wait for thread 0) after one. A "gather" ends the function when
// its last kernel is parallel. The pass is idempotent. With hazards-only (the default),
// a kernel that reads and writes nothing the parallel kernels since the last barrier
// write (nor writes what they read) joins them, split and without a barrier, however
// small (lir-parallelize-hazards.mlir has the products of a layer).

func.func @mixed(%x: memref<1024x512xf32> {rlx.name = "x", rlx.role = "input"},
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

// CHECK-LABEL: func.func @mixed(
// CHECK:       %[[T:.*]] = lir.slot
// CHECK-NEXT:  lir.elementwise exp ins(%{{.*}} : memref<1024x512xf32>) outs(%[[T]] : memref<1024x512xf32>) {rlx.parallel}
// CHECK-NEXT:  lir.barrier
// CHECK-NEXT:  lir.elementwise neg ins(%[[T]] : memref<1024x512xf32>) outs(%{{.*}} : memref<1024x512xf32>) {rlx.parallel}
// CHECK-NEXT:  lir.barrier "gather"
// CHECK-NEXT:  lir.elementwise abs ins(%{{.*}} : memref<8xf32>) outs(%{{.*}} : memref<8xf32>)
// CHECK-NOT:   rlx.parallel
// CHECK-NEXT:  func.return

// HAZARDS-LABEL: func.func @mixed(
// HAZARDS:       lir.elementwise neg ins(%{{.*}} : memref<1024x512xf32>) outs(%{{.*}} : memref<1024x512xf32>) {rlx.parallel}
// HAZARDS-NEXT:  lir.elementwise abs ins(%{{.*}} : memref<8xf32>) outs(%{{.*}} : memref<8xf32>) {rlx.parallel}
// HAZARDS-NEXT:  lir.barrier "gather"
// HAZARDS-NEXT:  func.return

// ALL-LABEL: func.func @mixed(
// ALL:       lir.elementwise abs ins(%{{.*}} : memref<8xf32>) outs(%{{.*}} : memref<8xf32>) {rlx.parallel}

// BAD: lir-parallelize: min-work must be >= 1, got 0

// -----

// Small kernels stay serial: thread 0 runs them one after the other, so they need no
// barrier at all.

func.func @small(%x: memref<8xf32> {rlx.name = "x", rlx.role = "input"},
                 %out0: memref<8xf32> {rlx.name = "out0", rlx.role = "output"}) {
  %arena = lir.arena size 64 alignment 64 strategy "greedy-by-size" : memref<64xi8>
  %t = lir.slot %arena[0] live [1, 2] : memref<64xi8> -> memref<8xf32>
  lir.elementwise exp ins(%x : memref<8xf32>) outs(%t : memref<8xf32>)
  lir.elementwise neg ins(%t : memref<8xf32>) outs(%out0 : memref<8xf32>)
  func.return
}

// CHECK-LABEL: func.func @small(
// CHECK:       lir.elementwise exp
// CHECK-NOT:   {rlx.parallel}
// CHECK-NEXT:  lir.elementwise neg
// CHECK-NOT:   {rlx.parallel}
// CHECK-NEXT:  func.return

// ALL-LABEL: func.func @small(
// ALL:       lir.elementwise exp {{.*}} {rlx.parallel}
// ALL-NEXT:  lir.barrier
// ALL-NEXT:  lir.elementwise neg {{.*}} {rlx.parallel}
// ALL-NEXT:  lir.barrier "gather"
// ALL-NEXT:  func.return

// -----

// A checked kernel (gather: its status comes from one thread) and a kernel without a
// partitioned builder (depthwise_conv1d) stay serial however large they are; a serial
// kernel next to a parallel one still needs the barrier between them.

func.func @checked(%table: memref<1024x1024xf32> {rlx.name = "table", rlx.role = "param"},
                   %ids: memref<512xi32> {rlx.name = "ids", rlx.role = "input"},
                   %out0: memref<512x1024xf32> {rlx.name = "out0", rlx.role = "output"},
                   %out1: memref<512x1024xf32> {rlx.name = "out1", rlx.role = "output"}) {
  lir.gather ins(%table, %ids : memref<1024x1024xf32>, memref<512xi32>) outs(%out0 : memref<512x1024xf32>) axis 0
  lir.elementwise exp ins(%out0 : memref<512x1024xf32>) outs(%out1 : memref<512x1024xf32>)
  func.return
}

// CHECK-LABEL: func.func @checked(
// CHECK:       lir.gather
// CHECK-NOT:   {rlx.parallel}
// CHECK-NEXT:  lir.barrier "release"
// CHECK-NEXT:  lir.elementwise exp {{.*}} {rlx.parallel}
// CHECK-NEXT:  lir.barrier "gather"
// CHECK-NEXT:  func.return

// ALL-LABEL: func.func @checked(
// ALL:       lir.gather
// ALL-NOT:   {rlx.parallel}
// ALL-NEXT:  lir.barrier
