// RUN: rlx-opt %s -p convert-lir-to-llvm{vector-width=16} | filecheck %s
// RUN: rlx-opt %s -p convert-lir-to-llvm{vector-width=8} | filecheck %s --check-prefix=W8
// RUN: rlx-opt %s -p convert-lir-to-llvm{vector-width=16} | filecheck %s --check-prefix=ONLY-LLVM
// RUN: rlx-opt %s -p convert-lir-to-llvm{vector-width=16} -t llvm | filecheck %s --check-prefix=IR

// The graph function becomes an entry taking one pointer per argument plus the arena;
// slots are byte GEPs into the arena, views element GEPs into their source, and every
// kernel a call of an llvm.func built for it. Identical kernels share one function.
// Every thread runs the entry with its id (part) of parts. No kernel here is marked
// rlx.parallel (lir-parallelize has not run; these are small anyway): all run on thread 0
// through their serial wrappers, with no barrier between them (see
// convert-lir-to-llvm-threads.mlir for marked kernels and lir.barrier).

func.func @entry(%ids: memref<4xi32> {rlx.name = "ids", rlx.role = "input"},
                 %table: memref<10x8xf32> {rlx.name = "table", rlx.role = "param"},
                 %out0: memref<4x8xf32> {rlx.name = "out0", rlx.role = "output"},
                 %out1: memref<32xf32> {rlx.name = "out1", rlx.role = "output"}) {
  %arena = lir.arena size 256 alignment 64 strategy "greedy-by-size" : memref<256xi8>
  %a = lir.slot %arena[0] live [1, 4] : memref<256xi8> -> memref<4x8xf32>
  %b = lir.slot %arena[128] live [2, 4] : memref<256xi8> -> memref<4x8xf32>
  lir.gather ins(%table, %ids : memref<10x8xf32>, memref<4xi32>) outs(%a : memref<4x8xf32>) axis 0
  lir.gather ins(%table, %ids : memref<10x8xf32>, memref<4xi32>) outs(%b : memref<4x8xf32>) axis 0
  lir.copy ins(%a : memref<4x8xf32>) outs(%out0 : memref<4x8xf32>)
  %flat = lir.view %b[0] : memref<4x8xf32> -> memref<32xf32>
  lir.copy ins(%flat : memref<32xf32>) outs(%out1 : memref<32xf32>)
  func.return
}

// CHECK:      llvm.func @entry__gather_0(%{{.*}}: !llvm.ptr {llvm.noalias}, %{{.*}}: !llvm.ptr {llvm.noalias}, %{{.*}}: !llvm.ptr {llvm.noalias}) -> i32
// Kernels too small to split run on thread 0 through a serial wrapper taking (part, parts).
// CHECK:      llvm.func @entry__gather_0__serial(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %[[PART:.*]]: i64, %{{.*}}: i64) -> i32
// CHECK-NOT:  llvm.func @entry__gather_
// CHECK:      llvm.func @entry__copy_
// CHECK:      llvm.func @entry(%[[IDS:[0-9a-z_]+]]: !llvm.ptr {rlx.name = "ids", rlx.role = "input", rlx.type = memref<4xi32>, llvm.noalias},
// CHECK-SAME: %[[TABLE:[0-9a-z_]+]]: !llvm.ptr {rlx.name = "table", rlx.role = "param", rlx.type = memref<10x8xf32>
// CHECK-SAME: %[[OUT0:[0-9a-z_]+]]: !llvm.ptr {rlx.name = "out0", rlx.role = "output"
// CHECK-SAME: %[[ARENA:[0-9a-z_]+]]: !llvm.ptr {rlx.role = "arena", rlx.arena_bytes = 256 : i64, rlx.naive_bytes = 256 : i64}, %[[P:[0-9a-z_]+]]: i64 {rlx.role = "part"}, %[[PS:[0-9a-z_]+]]: i64 {rlx.role = "parts"}, %{{.*}}: !llvm.ptr {rlx.role = "sync"}) -> i32
// CHECK:      %[[A:.*]] = llvm.getelementptr inbounds %[[ARENA]][0] : (!llvm.ptr) -> !llvm.ptr, i8
// CHECK:      %[[B:.*]] = llvm.getelementptr inbounds %[[ARENA]][128] : (!llvm.ptr) -> !llvm.ptr, i8
// CHECK:      %[[S1:.*]] = llvm.call @entry__gather_0__serial(%[[TABLE]], %[[IDS]], %[[A]], %[[P]], %[[PS]])
// CHECK:      %[[S2:.*]] = llvm.call @entry__gather_0__serial(%[[TABLE]], %[[IDS]], %[[B]], %[[P]], %[[PS]])
// CHECK:      llvm.call @entry__copy_{{[0-9]+}}__serial(%[[A]], %[[OUT0]], %[[P]], %[[PS]])
// CHECK:      %[[FLAT:.*]] = llvm.getelementptr inbounds %[[B]][0] : (!llvm.ptr) -> !llvm.ptr, f32
// CHECK:      llvm.call @entry__copy_{{[0-9]+}}__serial(%[[FLAT]], %{{.*}})
// CHECK-NOT:  llvm.call @rlx_barrier
// CHECK:      %[[OK:.*]] = llvm.mlir.constant(0 : i32) : i32
// CHECK:      %[[OR1:.*]] = llvm.or %[[OK]], %[[S1]] : i32
// CHECK:      %[[OR2:.*]] = llvm.or %[[OR1]], %[[S2]] : i32
// CHECK:      llvm.return %[[OR2]] : i32

// W8: vector<8xf32>
// W8-NOT: vector<16xf32>

// ONLY-LLVM-NOT: {{ (lir|func|memref|arith|scf)\.[a-z_]+ }}
// ONLY-LLVM-NOT: unrealized_conversion_cast
// ONLY-LLVM-NOT: memref<{{.*}}> ins

// IR: define i32 @"entry"(ptr noalias %".1", ptr noalias %".2"
// IR: call ccc i32 @"entry__gather_0__serial"
