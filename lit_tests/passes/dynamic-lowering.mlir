// RUN: rlx-opt %s -p 'lir-plan-arena{max-dims="S=256"}' | filecheck %s --check-prefix=ARENA
// RUN: rlx-opt %s -p 'lir-plan-arena{max-dims="S=256"},lir-pack-weights{params=w}' | filecheck %s --check-prefix=PACK
// RUN: rlx-opt %s -p 'lir-plan-arena{max-dims="S=256"},lir-parallelize' | filecheck %s --check-prefix=PAR
// RUN: rlx-opt %s -p 'lir-plan-arena{max-dims="S=256"},lir-parallelize,convert-lir-to-llvm' | filecheck %s --check-prefix=LLVM
// RUN: not rlx-opt %s -p 'lir-plan-arena{max-dims="S=0"}' 2>&1 | filecheck %s --check-prefix=BAD

// The passes after bufferization on a dynamic module (issue 9): x is [S, 64] for any S
// up to its bound, w a static weight.
// - lir-plan-arena sizes the ? buffer at S = 256 and records the bound on the arena;
// - lir-pack-weights packs a weight whose lhs has ? rows like any other;
// - lir-parallelize counts a ? dim as 1 (one decoded token): the matmul (64·96 = 6144
//   multiply-adds per row) stays serial at the default min-work;
// - convert-lir-to-llvm: the entry takes the size of S (role "dim") and passes it to the
//   kernels; the matmul reads its rows at run time, the elementwise kernel is a static
//   one-row kernel called by a driver over the run-time rows. The size argument carries
//   the bound the arena was planned for (rlx.bound).

func.func @rows(%x: memref<?x64xf32> {rlx.name = "x", rlx.role = "input", rlx.dims = ["S", 64]},
                %w: memref<64x96xf32> {rlx.name = "w", rlx.role = "param"},
                %out: memref<?x96xf32> {rlx.name = "out0", rlx.role = "output", rlx.dims = ["S", 96]}) {
  %h = lir.alloc dims ["S", 96] : memref<?x96xf32>
  lir.matmul ins(%x, %w : memref<?x64xf32>, memref<64x96xf32>) outs(%h : memref<?x96xf32>)
  lir.elementwise silu ins(%h : memref<?x96xf32>) outs(%out : memref<?x96xf32>)
  func.return
}

// ARENA:      %arena = lir.arena size 98304 alignment 64 strategy "greedy-by-size" max_live_bytes 98304 max_dims {S = 256 : i64} : memref<98304xi8>
// ARENA-NEXT: %[[H:.*]] = lir.slot %arena[0] live [2, 3] dims ["S", 96 : i64] : memref<98304xi8> -> memref<?x96xf32>
// ARENA-NEXT: lir.matmul ins(%{{.*}}, %{{.*}} : memref<?x64xf32>, memref<64x96xf32>) outs(%[[H]] : memref<?x96xf32>)

// PACK: lir.matmul ins(%{{.*}}, %{{.*}} : memref<?x64xf32>, memref<64x96xf32>) outs(%{{.*}} : memref<?x96xf32>) packed_rhs

// PAR-NOT:  rlx.parallel
// PAR-NOT:  lir.barrier

// LLVM:       llvm.func @rows__matmul_0(%{{.*}}: !llvm.ptr {{.*}}, %{{.*}}: !llvm.ptr {{.*}}, %{{.*}}: !llvm.ptr {{.*}}, %{{.*}}: i64)
// LLVM:       llvm.func @rows__elementwise_1_row(
// LLVM:       llvm.func @rows__elementwise_1(%{{.*}}: !llvm.ptr {{.*}}, %{{.*}}: !llvm.ptr {{.*}}, %{{.*}}: i64)
// LLVM:       llvm.call @rows__elementwise_1_row(
// LLVM:       llvm.func @rows(%{{.*}}: !llvm.ptr {{.*}}rlx.dims = ["S", 64 : i64]{{.*}}, %[[S:.*]]: i64 {rlx.role = "dim", rlx.name = "S", rlx.bound = 256 : i64}, %{{.*}}: !llvm.ptr {rlx.role = "arena", rlx.arena_bytes = 98304 : i64
// LLVM:       llvm.call @rows__matmul_0__serial(%{{.*}}, %{{.*}}, %{{.*}}, %[[S]], %{{.*}}, %{{.*}})
// LLVM:       llvm.call @rows__elementwise_1__serial(%{{.*}}, %{{.*}}, %[[S]], %{{.*}}, %{{.*}})

// BAD: lir-plan-arena: max-dims: expected SYMBOL=BOUND entries with a bound >= 1 (e.g. S=2048), got 'S=0'
