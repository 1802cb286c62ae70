// RUN: rlx-opt %s -p 'lir-parallelize,convert-lir-to-llvm{vector-width=16 profile=true}' | filecheck %s
// RUN: rlx-opt %s -p 'lir-parallelize,convert-lir-to-llvm{vector-width=16}' | filecheck %s --check-prefix=NORMAL

// The profiled build (model.profile): every kernel and barrier call of the entry is
// timed (rdtsc before and after) and recorded by rlx_profile_record into the event log
// that starts at the arena size rounded up to 64 bytes (2097156 -> 2097216); each call
// site carries what it runs as JSON in rlx.profile_site, with its phase (written at the
// lir stage, the kernels have none: the phase rules give them one; a barrier takes the
// phase of the kernel before it). The time stamps clobber memory (and the flags their
// shift sets), so LLVM moves no load or store of an inlined kernel across them: without
// that, a 64-row rms_norm read 0 µs and the matmul after it 5x its time. The normal build
// has none of it.

func.func @big(%x: memref<1024x512xf32> {rlx.name = "x", rlx.role = "input"},
               %out0: memref<1024x512xf32> {rlx.name = "out0", rlx.role = "output"}) {
  %arena = lir.arena size 2097156 alignment 4 strategy "greedy-by-size" : memref<2097156xi8>
  %t = lir.slot %arena[0] live [1, 2] : memref<2097156xi8> -> memref<1024x512xf32>
  lir.elementwise exp ins(%x : memref<1024x512xf32>) outs(%t : memref<1024x512xf32>)
  lir.elementwise neg ins(%t : memref<1024x512xf32>) outs(%out0 : memref<1024x512xf32>)
  func.return
}

// CHECK:      llvm.func @big(
// CHECK-SAME: %[[ARENA:[0-9]+]]: !llvm.ptr {rlx.role = "arena", rlx.arena_bytes = 2097156 : i64
// CHECK-SAME: %[[PART:[0-9]+]]: i64 {rlx.role = "part"}
// CHECK-NEXT: %[[OFFSET:[0-9]+]] = llvm.mlir.constant(2097216) : i64
// CHECK-NEXT: %[[LOG:[0-9]+]] = llvm.getelementptr inbounds %[[ARENA]][%[[OFFSET]]] : (!llvm.ptr, i64) -> !llvm.ptr, i8
// CHECK:      %[[T0:[0-9]+]] = llvm.inline_asm has_side_effects "rdtsc{{.*}}", "={ax},~{dx},~{flags},~{memory}"
// CHECK-NEXT: llvm.call @big__elementwise_0({{.*}}) {rlx.profile_site = "{\22kernel\22: \22big__elementwise_0\22, \22op\22: \22elementwise\22, \22origin\22: \22elementwise#0\22, \22shapes\22: {{\[\[1024, 512\], \[1024, 512\]\]}}
// CHECK-SAME: \22phase\22: \22steady_state\22
// CHECK-NEXT: %[[T1:[0-9]+]] = llvm.inline_asm has_side_effects "rdtsc
// CHECK-NEXT: %[[SITE:[0-9]+]] = llvm.mlir.constant(0) : i64
// CHECK-NEXT: llvm.call @rlx_profile_record(%[[LOG]], %[[PART]], %[[SITE]], %[[T0]], %[[T1]])
// CHECK:      llvm.call @rlx_barrier({{.*}}) {rlx.profile_site = "{\22kernel\22: \22rlx_barrier\22, \22op\22: \22barrier\22
// CHECK-SAME: \22phase\22: \22steady_state\22
// CHECK:      llvm.mlir.constant(1) : i64
// CHECK-NEXT: llvm.call @rlx_profile_record(
// CHECK:      llvm.call @big__elementwise_1({{.*}}) {rlx.profile_site = "{{.*}}\22origin\22: \22elementwise#1\22
// CHECK:      llvm.func @rlx_profile_record(%{{.*}}: !llvm.ptr, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64)
// CHECK:      llvm.func @rlx_profile_clock() -> i64
// CHECK:      llvm.func @big__worker(

// NORMAL-NOT: rdtsc
// NORMAL-NOT: rlx_profile
// NORMAL:     llvm.func @big__worker(
// NORMAL-NOT: rlx_profile
