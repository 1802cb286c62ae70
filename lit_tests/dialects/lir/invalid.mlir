// RUN: rlx-opt %s --split-input-file --verify-diagnostics | filecheck %s

// One case per verifier rule of the lir dialect; each CHECK is the verifier's message.

%b = lir.alloc : memref<4x8xf32, strided<[8, 1]>>

// CHECK: 'lir.alloc': result: expected the identity layout, got memref<4x8xf32, strided<[8, 1]>>

// -----

%b = lir.alloc : memref<?x8xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.alloc': dims: a buffer with ? dims needs its symbolic dims (lir.alloc dims [...]), got memref<?x8xf32> without

// -----

%b = lir.alloc : memref<4x0xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.alloc': result: every dimension must be >= 1, got shape [4, 0]

// -----

%b = lir.alloc : memref<4xf16>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.alloc': result: expected element type f32 or i32 or i64 or ui8, got f16

// -----

%a = lir.arena size 64 alignment 64 strategy naive : memref<64xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.arena': result: expected element type i8, got f32

// -----

%a = lir.arena size 0 alignment 64 strategy naive : memref<64xi8>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.arena': size: expected >= 1, got 0

// -----

%a = lir.arena size 128 alignment 64 strategy naive : memref<64xi8>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.arena': result: expected memref<128xi8> (size 128), got memref<64xi8>

// -----

%a = lir.arena size 64 alignment 8 strategy naive : memref<8x8xi8>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.arena': result: expected memref<64xi8> (size 64), got memref<8x8xi8>

// -----

%a = lir.arena size 256 alignment 48 strategy naive : memref<256xi8>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.arena': alignment: expected a power of two >= 1, got 48

// -----

%a = lir.arena size 256 alignment 0 strategy naive : memref<256xi8>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.arena': alignment: expected a power of two >= 1, got 0

// -----

%a = lir.arena size 256 alignment 64 strategy "greedy-by-size" max_live_bytes 512 : memref<256xi8>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.arena': max_live_bytes: expected a value in [0, size=256], got 512

// -----

%a = lir.arena size 256 alignment 64 strategy "greedy-by-size" max_live_bytes -1 : memref<256xi8>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.arena': max_live_bytes: expected a value in [0, size=256], got -1

// -----

%a = lir.arena size 256 alignment 64 strategy naive : memref<256xi8>
%v = lir.view %a[0] : memref<256xi8> -> memref<128xi8>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.arena': every use of the arena must be an lir.slot, got lir.view

// -----

%a = lir.arena size 256 alignment 64 strategy naive : memref<256xi8>
"test.op"(%a) : (memref<256xi8>) -> ()

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.arena': every use of the arena must be an lir.slot, got test.op

// -----

%a = lir.arena size 256 alignment 64 strategy naive : memref<256xi8>
%s0 = lir.slot %a[0] live [0, 1] : memref<256xi8> -> memref<32xf32>
%s1 = lir.slot %a[192] live [0, 1] : memref<256xi8> -> memref<32xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.arena': slot at bytes [192, 320) lies outside the arena of 256 bytes

// -----

%a = lir.arena size 512 alignment 64 strategy naive : memref<512xi8>
%s0 = lir.slot %a[0] live [0, 1] : memref<512xi8> -> memref<16xf32>
%s1 = lir.slot %a[96] live [2, 3] : memref<512xi8> -> memref<16xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.arena': slot at offset 96 is not a multiple of the alignment 64

// -----

%a = lir.arena size 256 alignment 64 strategy "greedy-by-size" : memref<256xi8>
%s1 = lir.slot %a[64] live [3, 5] : memref<256xi8> -> memref<32xf32>
%s0 = lir.slot %a[0] live [0, 3] : memref<256xi8> -> memref<32xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.arena': slots overlap: bytes [0, 128) live [0, 3] and bytes [64, 192) live [3, 5] share bytes [64, 128) while both are live

// -----

%a = lir.arena size 256 alignment 8 strategy "greedy-by-size" : memref<256xi8>
%s0 = lir.slot %a[0] live [0, 9] : memref<256xi8> -> memref<64xf32>
%s1 = lir.slot %a[128] live [4, 4] : memref<256xi8> -> memref<1xi64>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.arena': slots overlap: bytes [0, 256) live [0, 9] and bytes [128, 136) live [4, 4] share bytes [128, 136) while both are live

// -----

// In-place reuse (two slots sharing bytes, live together at k only) is accepted for an
// elementwise kernel at position k (arena = 0) writing out over a dying input of the
// same offset and type; each case below breaks one condition and stays an overlap.

// Op 4 (where %s0 ends and %s1 starts) is a matmul: out[i, j] reads a whole row.
func.func @f(%x: memref<4x4xf32>, %w: memref<4x4xf32>, %o: memref<4x4xf32>) {
  %a = lir.arena size 64 alignment 64 strategy "greedy-by-size" : memref<64xi8>
  %s0 = lir.slot %a[0] live [2, 4] : memref<64xi8> -> memref<4x4xf32>
  lir.elementwise exp ins(%x : memref<4x4xf32>) outs(%s0 : memref<4x4xf32>)
  %s1 = lir.slot %a[0] live [4, 5] : memref<64xi8> -> memref<4x4xf32>
  lir.matmul ins(%s0, %w : memref<4x4xf32>, memref<4x4xf32>) outs(%s1 : memref<4x4xf32>)
  lir.copy ins(%s1 : memref<4x4xf32>) outs(%o : memref<4x4xf32>)
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.arena': slots overlap: bytes [0, 64) live [2, 4] and bytes [0, 64) live [4, 5] share bytes [0, 64) while both are live

// -----

// Same offset, different types: the input broadcasts, every out row reads its bytes.
func.func @f(%x: memref<16xf32>, %y: memref<4x16xf32>, %o: memref<4x16xf32>) {
  %a = lir.arena size 256 alignment 64 strategy "greedy-by-size" : memref<256xi8>
  %s0 = lir.slot %a[0] live [2, 4] : memref<256xi8> -> memref<16xf32>
  lir.elementwise exp ins(%x : memref<16xf32>) outs(%s0 : memref<16xf32>)
  %s1 = lir.slot %a[0] live [4, 5] : memref<256xi8> -> memref<4x16xf32>
  lir.elementwise add ins(%s0, %y : memref<16xf32>, memref<4x16xf32>) outs(%s1 : memref<4x16xf32>)
  lir.copy ins(%s1 : memref<4x16xf32>) outs(%o : memref<4x16xf32>)
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.arena': slots overlap: bytes [0, 64) live [2, 4] and bytes [0, 256) live [4, 5] share bytes [0, 64) while both are live

// -----

// Partial overlap at op 4: out[i] lands on in[i + 16].
func.func @f(%x: memref<32xf32>, %o: memref<32xf32>) {
  %a = lir.arena size 192 alignment 64 strategy "greedy-by-size" : memref<192xi8>
  %s0 = lir.slot %a[0] live [2, 4] : memref<192xi8> -> memref<32xf32>
  lir.elementwise exp ins(%x : memref<32xf32>) outs(%s0 : memref<32xf32>)
  %s1 = lir.slot %a[64] live [4, 5] : memref<192xi8> -> memref<32xf32>
  lir.elementwise neg ins(%s0 : memref<32xf32>) outs(%s1 : memref<32xf32>)
  lir.copy ins(%s1 : memref<32xf32>) outs(%o : memref<32xf32>)
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.arena': slots overlap: bytes [0, 128) live [2, 4] and bytes [64, 192) live [4, 5] share bytes [64, 128) while both are live

// -----

// Another input of op 5 is a view of %s0 (its first row, broadcast).
func.func @f(%x: memref<4x16xf32>, %o: memref<4x16xf32>) {
  %a = lir.arena size 256 alignment 64 strategy "greedy-by-size" : memref<256xi8>
  %s0 = lir.slot %a[0] live [2, 5] : memref<256xi8> -> memref<4x16xf32>
  lir.elementwise exp ins(%x : memref<4x16xf32>) outs(%s0 : memref<4x16xf32>)
  %row = lir.view %s0[0] : memref<4x16xf32> -> memref<16xf32>
  %s1 = lir.slot %a[0] live [5, 6] : memref<256xi8> -> memref<4x16xf32>
  lir.elementwise add ins(%s0, %row : memref<4x16xf32>, memref<16xf32>) outs(%s1 : memref<4x16xf32>)
  lir.copy ins(%s1 : memref<4x16xf32>) outs(%o : memref<4x16xf32>)
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.arena': slots overlap: bytes [0, 256) live [2, 5] and bytes [0, 256) live [5, 6] share bytes [0, 256) while both are live

// -----

// Op 4 writes %s1 but does not read %s0.
func.func @f(%x: memref<16xf32>, %o: memref<16xf32>) {
  %a = lir.arena size 64 alignment 64 strategy "greedy-by-size" : memref<64xi8>
  %s0 = lir.slot %a[0] live [2, 4] : memref<64xi8> -> memref<16xf32>
  lir.elementwise exp ins(%x : memref<16xf32>) outs(%s0 : memref<16xf32>)
  %s1 = lir.slot %a[0] live [4, 5] : memref<64xi8> -> memref<16xf32>
  lir.elementwise neg ins(%x : memref<16xf32>) outs(%s1 : memref<16xf32>)
  lir.copy ins(%s1 : memref<16xf32>) outs(%o : memref<16xf32>)
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.arena': slots overlap: bytes [0, 64) live [2, 4] and bytes [0, 64) live [4, 5] share bytes [0, 64) while both are live

// -----

// The elementwise kernel reading %s0 and writing %s1 is op 5, not op 4 where the
// live ranges meet.
func.func @f(%x: memref<16xf32>, %o: memref<16xf32>) {
  %a = lir.arena size 64 alignment 64 strategy "greedy-by-size" : memref<64xi8>
  %s0 = lir.slot %a[0] live [2, 4] : memref<64xi8> -> memref<16xf32>
  lir.elementwise exp ins(%x : memref<16xf32>) outs(%s0 : memref<16xf32>)
  %s1 = lir.slot %a[0] live [4, 5] : memref<64xi8> -> memref<16xf32>
  lir.copy ins(%x : memref<16xf32>) outs(%o : memref<16xf32>)
  lir.elementwise neg ins(%s0 : memref<16xf32>) outs(%s1 : memref<16xf32>)
  lir.copy ins(%s1 : memref<16xf32>) outs(%o : memref<16xf32>)
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.arena': slots overlap: bytes [0, 64) live [2, 4] and bytes [0, 64) live [4, 5] share bytes [0, 64) while both are live

// -----

func.func @f(%m: memref<64xf32>) {
  %s = lir.slot %m[0] live [0, 0] : memref<64xf32> -> memref<4xf32>
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.slot': arena: expected element type i8, got f32

// -----

func.func @f(%m: memref<8x8xi8>) {
  %s = lir.slot %m[0] live [0, 0] : memref<8x8xi8> -> memref<4xf32>
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.slot': arena: expected a 1-D memref of i8, got memref<8x8xi8>

// -----

func.func @f(%m: memref<64xi8>) {
  %s = lir.slot %m[0] live [0, 0] : memref<64xi8> -> memref<4xf32, strided<[2]>>
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.slot': result: expected the identity layout, got memref<4xf32, strided<[2]>>

// -----

func.func @f(%m: memref<64xi8>) {
  %s = lir.slot %m[-4] live [0, 0] : memref<64xi8> -> memref<4xf32>
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.slot': offset: expected >= 0, got -4

// -----

func.func @f(%m: memref<64xi8>) {
  %s = lir.slot %m[0] live [5, 2] : memref<64xi8> -> memref<4xf32>
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.slot': live range: expected 0 <= live_start <= live_end, got [5, 2]

// -----

func.func @f(%m: memref<64xi8>) {
  %s = lir.slot %m[0] live [-1, 2] : memref<64xi8> -> memref<4xf32>
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.slot': live range: expected 0 <= live_start <= live_end, got [-1, 2]

// -----

func.func @f(%m: memref<64xi8>) {
  %s = lir.slot %m[56] live [0, 0] : memref<64xi8> -> memref<2xi64>
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.slot': result: bytes [56, 72) lie outside the arena of 64 bytes

// -----

func.func @f(%b: memref<4x8xf32>) {
  %v = lir.view %b[0] : memref<4x8xf32> -> memref<32xi32>
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.view': result: expected element type f32 (as source), got i32

// -----

func.func @f(%b: memref<4x8xf32>) {
  %v = lir.view %b[-1] : memref<4x8xf32> -> memref<8xf32>
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.view': offset: expected >= 0, got -1

// -----

func.func @f(%b: memref<4x8xf32>) {
  %v = lir.view %b[17] : memref<4x8xf32> -> memref<2x8xf32>
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.view': result: offset 17 + 16 elements exceed the 32 elements of source

// -----

func.func @f(%b: memref<?xf32>) {
  %v = lir.view %b[0] : memref<?xf32> -> memref<2xf32>
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.view': reshape: cannot reshape [?] into [2]: a symbolic dim must stay a whole dim

// -----

func.func @f(%a: memref<4x8xf32>, %b: memref<8xf32>, %o: memref<4x8xf32>) {
  lir.elementwise add ins(%a : memref<4x8xf32>) outs(%o : memref<4x8xf32>)
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.elementwise': inputs: add takes 2 inputs, got 1

// -----

func.func @f(%a: memref<4x8xf32>, %b: memref<8xf32>, %o: memref<4x8xf32>) {
  lir.elementwise exp ins(%a, %b : memref<4x8xf32>, memref<8xf32>) outs(%o : memref<4x8xf32>)
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.elementwise': inputs: exp takes 1 input, got 2

// -----

func.func @f(%a: memref<4x8xf32>, %b: memref<3xf32>, %o: memref<4x8xf32>) {
  lir.elementwise mul ins(%a, %b : memref<4x8xf32>, memref<3xf32>) outs(%o : memref<4x8xf32>)
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.elementwise': inputs[0] [4, 8] and inputs[1] [3] are not broadcast-compatible

// -----

func.func @f(%a: memref<4x8xf32>, %b: memref<8xf32>, %o: memref<4x8xf32>) {
  lir.elementwise sub ins(%a, %b : memref<4x8xf32>, memref<8xf32>) outs(%b : memref<8xf32>)
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.elementwise': out: expected shape [4, 8], got [8]

// -----

func.func @f(%i: memref<4xi32>) {
  lir.elementwise exp ins(%i : memref<4xi32>) outs(%i : memref<4xi32>)
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.elementwise': inputs[0]: expected element type f32, got i32

// -----

func.func @f(%u: memref<4xui8>) {
  lir.elementwise add ins(%u, %u : memref<4xui8>, memref<4xui8>) outs(%u : memref<4xui8>)
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.elementwise': inputs[0]: expected element type f32 or i32 or i64, got ui8

// -----

func.func @f(%i: memref<4xi32>, %o: memref<4xf32>) {
  lir.elementwise neg ins(%i : memref<4xi32>) outs(%o : memref<4xf32>)
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.elementwise': out: expected element type i32 (as inputs[0]), got f32

// -----

func.func @f(%a: memref<4x8xf32>, %b: memref<8xf32>, %o: memref<4x8xf32>) {
  "lir.fused_elementwise"(%o) ({
  ^bb0:
    %c = arith.constant 1.0 : f32
    "lir.yield"(%c) : (f32) -> ()
  }) : (memref<4x8xf32>) -> ()
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.fused_elementwise': inputs: expected at least one input, got none

// -----

func.func @f(%a: memref<4x8xf32>, %b: memref<8xf32>, %o: memref<4x8xf32>) {
  lir.fused_elementwise ins(%a : memref<4x8xf32>) outs(%b : memref<8xf32>) {
  ^bb0(%x: f32):
    lir.yield %x : f32
  }
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.fused_elementwise': inputs[0]: input of shape [4, 8] cannot be broadcast to [8]

// -----

func.func @f(%u: memref<8xui8>, %o: memref<8xf32>) {
  lir.fused_elementwise ins(%u : memref<8xui8>) outs(%o : memref<8xf32>) {
  ^bb0(%x: ui8):
    %c = arith.constant 1.0 : f32
    lir.yield %c : f32
  }
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.fused_elementwise': inputs[0]: expected element type f32 or i32 or i64, got ui8

// -----

func.func @f(%a: memref<4x8xf32>, %b: memref<8xf32>, %o: memref<4x8xf32>) {
  lir.fused_elementwise ins(%a, %b : memref<4x8xf32>, memref<8xf32>) outs(%o : memref<4x8xf32>) {
  ^bb0(%x: f32):
    lir.yield %x : f32
  }
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.fused_elementwise': body: expected 2 block arguments (one per input), got 1

// -----

func.func @f(%a: memref<4x8xf32>, %b: memref<8xf32>, %o: memref<4x8xf32>) {
  lir.fused_elementwise ins(%a, %b : memref<4x8xf32>, memref<8xf32>) outs(%o : memref<4x8xf32>) {
  ^bb0(%x: f32, %y: i32):
    lir.yield %x : f32
  }
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.fused_elementwise': body: block argument 1: expected f32 (element type of inputs[1]), got i32

// -----

func.func @f(%a: memref<4x8xf32>, %b: memref<8xf32>, %o: memref<4x8xf32>) {
  lir.fused_elementwise ins(%a : memref<4x8xf32>) outs(%o : memref<4x8xf32>) {
  ^bb0(%x: f32):
    "test.termop"() : () -> ()
  }
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.fused_elementwise': body: expected to end in 'lir.yield', got 'test.termop'

// -----

func.func @f(%a: memref<4x8xf32>, %b: memref<8xf32>, %o: memref<4x8xf32>) {
  lir.fused_elementwise ins(%a : memref<4x8xf32>) outs(%o : memref<4x8xf32>) {
  ^bb0(%x: f32):
    %y = "test.op"(%x) : (f32) -> f32
    lir.yield %y : f32
  }
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.fused_elementwise': body: expected only arith and math ops, got 'test.op'

// -----

func.func @f(%a: memref<4x8xf32>, %b: memref<8xf32>, %o: memref<4x8xf32>) {
  lir.fused_elementwise ins(%a : memref<4x8xf32>) outs(%o : memref<4x8xf32>) {
  ^bb0(%x: f32):
    %c = arith.constant dense<1.0> : vector<4xf32>
    %d = arith.addf %c, %c : vector<4xf32>
    lir.yield %x : f32
  }
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.fused_elementwise': body: 'arith.constant' must compute a scalar, got a value of type vector<4xf32>

// -----

func.func @f(%a: memref<4x8xf32>, %b: memref<8xf32>, %o: memref<4x8xf32>) {
  lir.fused_elementwise ins(%a : memref<4x8xf32>) outs(%o : memref<4x8xf32>) {
  ^bb0(%x: f32):
    %i = arith.fptosi %x : f32 to i32
    lir.yield %i : i32
  }
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.fused_elementwise': body: 'lir.yield' expected one value of type f32 (element type of out), got (i32)

// -----

func.func @f(%a: memref<4x8xf32>, %b: memref<8xf32>, %o: memref<4x8xf32>) {
  lir.fused_elementwise ins(%a : memref<4x8xf32>) outs(%o : memref<4x8xf32>) {
  ^bb0(%x: f32):
    lir.yield %x, %x : f32, f32
  }
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.fused_elementwise': body: 'lir.yield' expected one value of type f32 (element type of out), got (f32, f32)

// -----

func.func @f(%a: memref<4x8xf32>, %b: memref<8xf32>, %o: memref<4x8xf32>, %c: f32) {
  lir.fused_elementwise ins(%a : memref<4x8xf32>) outs(%o : memref<4x8xf32>) {
  ^bb0(%x: f32):
    %y = arith.addf %x, %c : f32
    lir.yield %y : f32
  }
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: Operation using value defined out of its IsolatedFromAbove parent: AddfOp(%y = arith.addf %x, %c : f32)

// -----

func.func @f(%x: f32) {
  "test.op"() ({
    lir.yield %x : f32
  }) : () -> ()
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.yield' expects parent op to be one of 'lir.fused_elementwise', 'lir.scan'

// -----

func.func @f(%a: memref<4x8xf32>, %w: memref<8x16xf32>, %c: memref<16xf32>, %o: memref<4x16xf32>) {
  lir.matmul ins(%a, %c : memref<4x8xf32>, memref<16xf32>) outs(%o : memref<4x16xf32>)
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.matmul': matmul inner dimensions differ: lhs [4, 8] has K=8, rhs [16] has K=16

// -----

func.func @f(%a: memref<4x8xf32>, %w: memref<8x16xf32>, %c: memref<16xf32>, %o: memref<4x16xf32>) {
  lir.matmul ins(%a, %w : memref<4x8xf32>, memref<8x16xf32>) outs(%c : memref<16xf32>)
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.matmul': out: expected shape [4, 16], got [16]

// -----

func.func @f(%a: memref<4x8xf32>, %w: memref<8x16xi32>, %o: memref<4x16xf32>) {
  lir.matmul ins(%a, %w : memref<4x8xf32>, memref<8x16xi32>) outs(%o : memref<4x16xf32>)
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.matmul': rhs: expected element type f32, got i32

// -----

func.func @f(%a: memref<4x8xf32>, %w: memref<8x16xf32>, %c: memref<16xf32>, %o: memref<4x16xf32>) {
  lir.fused_matmul ins(%a, %w, %o : memref<4x8xf32>, memref<8x16xf32>, memref<4x16xf32>) outs(%o : memref<4x16xf32>) activation relu
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.fused_matmul': bias: expected shape [16] (N = last dim of rhs), got [4, 16]

// -----

func.func @f(%a: memref<4x8xf32>, %w: memref<8x16xf32>, %c: memref<16xf32>, %o: memref<4x16xf32>, %i: memref<16xi64>) {
  lir.fused_matmul ins(%a, %w, %i : memref<4x8xf32>, memref<8x16xf32>, memref<16xi64>) outs(%o : memref<4x16xf32>)
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.fused_matmul': bias: expected element type f32, got i64

// -----

func.func @f(%a: memref<4x8xf32>, %w: memref<8x16xf32>, %c: memref<16xf32>, %o: memref<4x16xf32>) {
  lir.fused_matmul ins(%a, %w : memref<4x8xf32>, memref<8x16xf32>) outs(%a : memref<4x8xf32>)
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.fused_matmul': out: expected shape [4, 16], got [4, 8]

// -----

func.func @f(%x: memref<4x8xf32>, %r: memref<4xf32>, %k: memref<4x1xf32>) {
  lir.reduce sum ins(%x : memref<4x8xf32>) outs(%r : memref<4xf32>) axes [2]
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.reduce': axes: axis 2 is out of range for rank 2

// -----

func.func @f(%x: memref<4x8xf32>, %r: memref<4xf32>, %k: memref<4x1xf32>) {
  lir.reduce sum ins(%x : memref<4x8xf32>) outs(%r : memref<4xf32>) axes [1, -1]
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.reduce': axes: axes (1, -1) repeat an axis

// -----

func.func @f(%x: memref<4x8xf32>, %r: memref<4xf32>, %k: memref<4x1xf32>) {
  lir.reduce min ins(%x : memref<4x8xf32>) outs(%r : memref<4xf32>) axes [1] keepdim
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.reduce': out: expected shape [4, 1], got [4]

// -----

func.func @f(%x: memref<4x8xf32>, %r: memref<4xf32>, %k: memref<4x1xf32>, %i: memref<4xi32>) {
  lir.reduce max ins(%x : memref<4x8xf32>) outs(%i : memref<4xi32>) axes [1]
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.reduce': out: expected element type f32, got i32

// -----

func.func @f(%x: memref<4x8xf32>, %r: memref<4xf32>, %k: memref<4x1xf32>) {
  lir.softmax ins(%x : memref<4x8xf32>) outs(%x : memref<4x8xf32>) axis -3
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.softmax': axis: axis -3 is out of range for rank 2

// -----

func.func @f(%x: memref<4x8xf32>, %r: memref<4xf32>, %k: memref<4x1xf32>) {
  lir.softmax ins(%x : memref<4x8xf32>) outs(%k : memref<4x1xf32>) axis 1
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.softmax': out: expected shape [4, 8], got [4, 1]

// -----

func.func @f(%x: memref<4x8xf32>, %g: memref<8xf32>, %b: memref<4xf32>, %o: memref<4x8xf32>) {
  lir.rms_norm ins(%x, %b : memref<4x8xf32>, memref<4xf32>) outs(%o : memref<4x8xf32>) eps 1.0e-05
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.rms_norm': gamma: expected shape [8] (N = last dim of x), got [4]

// -----

func.func @f(%x: memref<4x8xf32>, %g: memref<8xf32>, %b: memref<4xf32>, %o: memref<4x8xf32>) {
  lir.rms_norm ins(%x, %g, %b : memref<4x8xf32>, memref<8xf32>, memref<4xf32>) outs(%o : memref<4x8xf32>) eps 1.0e-05
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.rms_norm': beta: expected shape [8] (N = last dim of x), got [4]

// -----

func.func @f(%x: memref<4x8xf32>, %g: memref<8xf32>, %b: memref<4xf32>, %o: memref<4x8xf32>) {
  lir.rms_norm ins(%x, %g : memref<4x8xf32>, memref<8xf32>) outs(%o : memref<4x8xf32>) eps 0.0
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.rms_norm': eps: expected a finite value > 0, got 0

// -----

func.func @f(%x: memref<4x8xf32>, %g: memref<8xf32>, %b: memref<4xf32>, %o: memref<4x8xf32>) {
  "lir.rms_norm"(%x, %g, %o) <{eps = 0x7F800000 : f32}> : (memref<4x8xf32>, memref<8xf32>, memref<4x8xf32>) -> ()
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.rms_norm': eps: expected a finite value > 0, got inf

// -----

func.func @f(%x: memref<4x8xf32>, %g: memref<8xf32>, %b: memref<4xf32>, %o: memref<4x8xf32>) {
  lir.layer_norm ins(%x, %g, %b : memref<4x8xf32>, memref<8xf32>, memref<4xf32>) outs(%o : memref<4x8xf32>) eps 1.0e-05
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.layer_norm': beta: expected shape [8] (N = last dim of x), got [4]

// -----

func.func @f(%x: memref<4x8xf32>, %g: memref<8xf32>, %b: memref<4xf32>, %o: memref<4x8xf32>) {
  lir.layer_norm ins(%x, %g, %g : memref<4x8xf32>, memref<8xf32>, memref<8xf32>) outs(%o : memref<4x8xf32>) eps -1.0
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.layer_norm': eps: expected a finite value > 0, got -1

// -----

func.func @f(%x: memref<4x8xf32>, %g: memref<8xf32>, %b: memref<4xf32>, %o: memref<4x8xf32>) {
  lir.layer_norm ins(%x, %g, %g : memref<4x8xf32>, memref<8xf32>, memref<8xf32>) outs(%g : memref<8xf32>) eps 1.0e-05
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.layer_norm': out: expected shape [4, 8], got [8]

// -----

func.func @f(%x: memref<4x8xi32>, %g: memref<8xf32>, %o: memref<4x8xf32>) {
  lir.layer_norm ins(%x, %g, %g : memref<4x8xi32>, memref<8xf32>, memref<8xf32>) outs(%o : memref<4x8xf32>) eps 1.0e-05
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.layer_norm': x: expected element type f32, got i32

// -----

func.func @f(%x: memref<4x16xf32>, %c: memref<4x4xf32>, %o: memref<4x16xf32>) {
  lir.rope ins(%x, %c, %c : memref<4x16xf32>, memref<4x4xf32>, memref<4x4xf32>) outs(%o : memref<4x16xf32>) head_dim 5 n_rot 4 style half
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.rope': head_dim: must divide the last dim of x [4, 16], got 5

// -----

func.func @f(%x: memref<4x16xf32>, %c: memref<4x4xf32>, %o: memref<4x16xf32>) {
  lir.rope ins(%x, %c, %c : memref<4x16xf32>, memref<4x4xf32>, memref<4x4xf32>) outs(%o : memref<4x16xf32>) head_dim 8 n_rot 7 style half
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.rope': n_rot: expected an even value in [2, head_dim=8], got 7

// -----

func.func @f(%x: memref<4x16xf32>, %c: memref<4x4xf32>, %o: memref<4x16xf32>) {
  lir.rope ins(%x, %c, %c : memref<4x16xf32>, memref<4x4xf32>, memref<4x4xf32>) outs(%o : memref<4x16xf32>) head_dim 8 n_rot 4 style interleaved
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.rope': cos: expected shape [4, 2] ([S, n_rot/2]), got [4, 4]

// -----

func.func @f(%x: memref<4x16xf32>, %c: memref<4x4xf32>, %o: memref<4x16xf32>) {
  lir.rope ins(%x, %c, %c : memref<4x16xf32>, memref<4x4xf32>, memref<4x4xf32>) outs(%c : memref<4x4xf32>) head_dim 8 n_rot 8 style half
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.rope': out: expected shape [4, 16], got [4, 4]

// -----

func.func @f(%q: memref<4x16xf32>, %k: memref<6x8xf32>, %m: memref<4x6xf32>, %o: memref<4x16xf32>) {
  lir.attention ins(%q, %k, %k, %m : memref<4x16xf32>, memref<6x8xf32>, memref<6x8xf32>, memref<4x6xf32>) outs(%o : memref<4x16xf32>) num_heads 2 head_dim 8 num_kv_heads 1 mask_kind causal scale 0.125
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.attention': mask: mask_kind 'causal' takes no mask operand, got one

// -----

func.func @f(%q: memref<4x16xf32>, %k: memref<6x8xf32>, %m: memref<4x6xf32>, %o: memref<4x16xf32>) {
  lir.attention ins(%q, %k, %k : memref<4x16xf32>, memref<6x8xf32>, memref<6x8xf32>) outs(%o : memref<4x16xf32>) num_heads 2 head_dim 8 num_kv_heads 1 mask_kind custom scale 0.125
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.attention': mask: mask_kind 'custom' needs a mask operand, got none

// -----

func.func @f(%q: memref<4x16xf32>, %k: memref<6x8xf32>, %m: memref<4x6xf32>, %o: memref<4x16xf32>) {
  lir.attention ins(%q, %k, %k : memref<4x16xf32>, memref<6x8xf32>, memref<6x8xf32>) outs(%o : memref<4x16xf32>) num_heads 2 head_dim 8 num_kv_heads 3 mask_kind none scale 0.125
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.attention': num_kv_heads: must divide num_heads=2 (grouped-query), got 3

// -----

func.func @f(%q: memref<4x16xf32>, %k: memref<6x8xf32>, %m: memref<4x6xf32>, %o: memref<4x16xf32>) {
  lir.attention ins(%q, %k, %k : memref<4x16xf32>, memref<6x8xf32>, memref<6x8xf32>) outs(%o : memref<4x16xf32>) num_heads 4 head_dim 8 num_kv_heads 1 mask_kind none scale 0.125
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.attention': q: last dim must be num_heads*head_dim = 4*8 = 32, got 16

// -----

func.func @f(%q: memref<4x16xf32>, %k: memref<6x8xf32>, %m: memref<4x6xf32>, %o: memref<4x16xf32>) {
  lir.attention ins(%q, %k, %k, %o : memref<4x16xf32>, memref<6x8xf32>, memref<6x8xf32>, memref<4x16xf32>) outs(%o : memref<4x16xf32>) num_heads 2 head_dim 8 num_kv_heads 1 mask_kind bias scale 0.125
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.attention': mask: expected shape [4, 6] ([S, T]), got [4, 16]

// -----

func.func @f(%q: memref<4x16xf32>, %k: memref<6x8xf32>, %m: memref<4x6xf32>, %o: memref<4x16xf32>) {
  "lir.attention"(%q, %k, %k, %o) <{num_heads = 2 : i64, head_dim = 8 : i64, num_kv_heads = 1 : i64, mask_kind = #rlx<mask_kind none>, scale = 0x7FC00000 : f32}> : (memref<4x16xf32>, memref<6x8xf32>, memref<6x8xf32>, memref<4x16xf32>) -> ()
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.attention': scale: expected a finite value, got nan

// -----

func.func @f(%q: memref<4x16xf32>, %k: memref<6x8xf32>, %m: memref<4x6xf32>, %o: memref<4x16xf32>) {
  lir.attention ins(%q, %k, %k : memref<4x16xf32>, memref<6x8xf32>, memref<6x8xf32>) outs(%m : memref<4x6xf32>) num_heads 2 head_dim 8 num_kv_heads 1 mask_kind none scale 0.125
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.attention': out: expected shape [4, 16], got [4, 6]

// -----

func.func @f(%x: memref<4x8xf32>, %t: memref<8x4xf32>, %i: memref<3xi32>, %f: memref<3xf32>) {
  lir.transpose ins(%x : memref<4x8xf32>) outs(%x : memref<4x8xf32>) perm [0, 0]
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.transpose': perm: expected a permutation of 0..1, got (0, 0)

// -----

func.func @f(%x: memref<4x8xf32>, %t: memref<8x4xf32>, %i: memref<3xi32>, %f: memref<3xf32>) {
  lir.transpose ins(%x : memref<4x8xf32>) outs(%t : memref<8x4xf32>) perm [1, 0, 2]
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.transpose': perm: expected 2 entries for rank 2, got (1, 0, 2)

// -----

func.func @f(%x: memref<4x8xf32>, %t: memref<8x4xf32>, %i: memref<3xi32>, %f: memref<3xf32>) {
  lir.transpose ins(%x : memref<4x8xf32>) outs(%x : memref<4x8xf32>) perm [1, 0]
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.transpose': out: expected shape [8, 4], got [4, 8]

// -----

func.func @f(%x: memref<4x8xf32>, %t: memref<8x4xf32>, %i: memref<3xi32>, %f: memref<3xf32>, %ti: memref<8x4xi32>) {
  lir.transpose ins(%x : memref<4x8xf32>) outs(%ti : memref<8x4xi32>) perm [1, 0]
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.transpose': out: expected element type f32 (as input), got i32

// -----

func.func @f(%x: memref<4x8xf32>, %t: memref<8x4xf32>, %i: memref<3xi32>, %f: memref<3xf32>) {
  lir.narrow ins(%x : memref<4x8xf32>) outs(%x : memref<4x8xf32>) axis 1 start 6 length 3
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.narrow': narrow: start=6, length=3 must satisfy 0 <= start, 1 <= length, start+length <= 8 (dim 1 of [4, 8])

// -----

func.func @f(%x: memref<4x8xf32>, %t: memref<8x4xf32>, %i: memref<3xi32>, %f: memref<3xf32>) {
  lir.narrow ins(%x : memref<4x8xf32>) outs(%x : memref<4x8xf32>) axis -1 start 2 length 3
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.narrow': out: expected shape [4, 3], got [4, 8]

// -----

func.func @f(%x: memref<4x8xf32>, %t: memref<8x4xf32>, %i: memref<3xi32>, %f: memref<3xf32>) {
  lir.concat ins(%x, %t : memref<4x8xf32>, memref<8x4xf32>) outs(%x : memref<4x8xf32>) axis 0
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.concat': concat: input 1 has shape [8, 4], expected [4, 8] except along axis 0

// -----

func.func @f(%x: memref<4x8xf32>, %t: memref<8x4xf32>, %i: memref<3xi32>, %f: memref<3xf32>) {
  lir.concat ins(%x, %x : memref<4x8xf32>, memref<4x8xf32>) outs(%x : memref<4x8xf32>) axis 1
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.concat': out: expected shape [4, 16], got [4, 8]

// -----

func.func @f(%x: memref<4x8xf32>, %t: memref<8x4xf32>, %i: memref<3xi32>, %f: memref<3xf32>) {
  lir.concat ins(%f, %i : memref<3xf32>, memref<3xi32>) outs(%f : memref<3xf32>) axis 0
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.concat': inputs[1]: expected element type f32 (as inputs[0]), got i32

// -----

func.func @f(%x: memref<4x8xf32>, %t: memref<8x4xf32>, %i: memref<3xi32>, %f: memref<3xf32>) {
  "lir.concat"(%x) <{axis = 0 : i64}> : (memref<4x8xf32>) -> ()
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.concat': inputs: expected at least one input, got none

// -----

func.func @f(%x: memref<4x8xf32>, %t: memref<8x4xf32>, %i: memref<3xi32>, %f: memref<3xf32>) {
  lir.broadcast_to ins(%f : memref<3xf32>) outs(%x : memref<4x8xf32>)
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.broadcast_to': input of shape [3] cannot be broadcast to [4, 8]

// -----

func.func @f(%x: memref<4x8xf32>, %t: memref<8x4xf32>, %i: memref<3xi32>, %f: memref<3xf32>, %g: memref<3x8xf32>) {
  lir.gather ins(%x, %f : memref<4x8xf32>, memref<3xf32>) outs(%g : memref<3x8xf32>) axis 0
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.gather': indices: expected element type i32 or i64, got f32

// -----

func.func @f(%x: memref<4x8xf32>, %t: memref<8x4xf32>, %i: memref<3xi32>, %f: memref<3xf32>, %g: memref<3x8xf32>) {
  lir.gather ins(%x, %i : memref<4x8xf32>, memref<3xi32>) outs(%g : memref<3x8xf32>) axis 2
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.gather': axis: axis 2 is out of range for rank 2

// -----

func.func @f(%x: memref<4x8xf32>, %t: memref<8x4xf32>, %i: memref<3xi32>, %f: memref<3xf32>, %g: memref<3x8xf32>) {
  lir.gather ins(%x, %i : memref<4x8xf32>, memref<3xi32>) outs(%g : memref<3x8xf32>) axis 1
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.gather': out: expected shape [4, 3], got [3, 8]

// -----

func.func @f(%x: memref<4x8xf32>, %t: memref<8x4xf32>, %i: memref<3xi32>, %f: memref<3xf32>, %g: memref<3x8xi32>) {
  lir.gather ins(%x, %i : memref<4x8xf32>, memref<3xi32>) outs(%g : memref<3x8xi32>) axis 0
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.gather': out: expected element type f32 (as input), got i32

// -----

func.func @f(%x: memref<4x8xf32>, %t: memref<8x4xf32>, %i: memref<3xi32>, %f: memref<3xf32>) {
  lir.constant dense<[1.0, 2.0]> : tensor<2xf32> outs(%f : memref<3xf32>)
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.constant': out: expected shape [2], got [3]

// -----

func.func @f(%x: memref<4x8xf32>, %t: memref<8x4xf32>, %i: memref<3xi32>, %f: memref<3xf32>) {
  lir.constant dense<[1, 2, 3]> : tensor<3xi32> outs(%f : memref<3xf32>)
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.constant': out: expected element type i32 (the value's), got f32

// -----

func.func @f(%x: memref<4x8xf32>, %t: memref<8x4xf32>, %i: memref<3xi32>, %f: memref<3xf32>) {
  lir.copy ins(%x : memref<4x8xf32>) outs(%t : memref<8x4xf32>)
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.copy': out: expected shape [4, 8], got [8, 4]

// -----

func.func @f(%x: memref<4x8xf32>, %t: memref<8x4xf32>, %i: memref<3xi32>, %f: memref<3xf32>) {
  lir.copy ins(%f : memref<3xf32>) outs(%i : memref<3xi32>)
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.copy': out: expected element type f32 (as input), got i32

// -----

func.func @f(%x: memref<4x64xf32>, %w: memref<16x68xui8>, %o: memref<4x16xf32>, %wf: memref<16x68xf32>) {
  lir.dequant_matmul q8_0 ins(%x, %wf : memref<4x64xf32>, memref<16x68xf32>) outs(%o : memref<4x16xf32>)
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.dequant_matmul': w: expected element type ui8, got f32

// -----

func.func @f(%x: memref<4x64xf32>, %w: memref<16x68xui8>, %o: memref<4x16xf32>, %xi: memref<4x64xi32>) {
  lir.dequant_matmul q8_0 ins(%xi, %w : memref<4x64xi32>, memref<16x68xui8>) outs(%o : memref<4x16xf32>)
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.dequant_matmul': x: expected element type f32, got i32

// -----

func.func @f(%x: memref<4x64xf32>, %w: memref<16x68xui8>, %o: memref<4x16xf32>) {
  lir.dequant_matmul q4_0 ins(%x, %w : memref<4x64xf32>, memref<16x68xui8>) outs(%o : memref<4x16xf32>)
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.dequant_matmul': w: expected shape [16, 36] (q4_0: K/32 blocks of 18 bytes), got [16, 68]

// -----

func.func @f(%x: memref<4x64xf32>, %w: memref<16x68xui8>, %o: memref<4x16xf32>, %x48: memref<4x48xf32>) {
  lir.dequant_matmul q8_0 ins(%x48, %w : memref<4x48xf32>, memref<16x68xui8>) outs(%o : memref<4x16xf32>)
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.dequant_matmul': x: last dim K must be a multiple of 32 (a q8_0 block), got 48

// -----

func.func @f(%x: memref<4x64xf32>, %w: memref<16x68xui8>, %o: memref<4x16xf32>) {
  lir.dequant_matmul q8_0 ins(%x, %w : memref<4x64xf32>, memref<16x68xui8>) outs(%o : memref<4x16xf32>) activations q8 interleaved 12
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.dequant_matmul': interleaved expects 8 or 16 rows, got 12

// -----

func.func @f(%x: memref<4x64xf32>, %w: memref<16x68xui8>, %o: memref<4x16xf32>) {
  lir.dequant_matmul q8_0 ins(%x, %w : memref<4x64xf32>, memref<16x68xui8>) outs(%o : memref<4x16xf32>) interleaved 16
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.dequant_matmul': interleaved expects activations q8 (the int8 kernels read that layout), got f32

// -----

func.func @f(%x: memref<4x256xf32>, %w: memref<16x136xui8>, %o: memref<4x16xf32>) {
  lir.shared_input_matmul iq4_xs ins(%x, %w : memref<4x256xf32>, memref<16x136xui8>) outs(%o : memref<4x16xf32>) activations q8 interleaved 16
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.shared_input_matmul': interleaved expects a scheme of q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, q5_k, q6_k, q2_k, q3_k, got iq4_xs

// -----

func.func @f(%x: memref<4x64xf32>, %w: memref<16x68xui8>, %o: memref<4x16xf32>) {
  lir.dequant_matmul q8_0 ins(%x, %w : memref<4x64xf32>, memref<16x68xui8>) outs(%x : memref<4x64xf32>)
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.dequant_matmul': out: expected shape [4, 16], got [4, 64]

// -----

func.func @f(%p: memref<1x10x8xf32>, %k: memref<3x8xf32>, %y: memref<1x8x8xf32>, %s: memref<1x2x8xf32>) {
  lir.depthwise_conv1d ins(%s, %k : memref<1x2x8xf32>, memref<3x8xf32>) outs(%y : memref<1x8x8xf32>)
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.depthwise_conv1d': x: time dim must be >= K=3 (input is pre-padded), got 2

// -----

func.func @f(%p: memref<1x10x8xf32>, %k: memref<3x8xf32>, %y: memref<1x8x8xf32>, %k4: memref<3x4xf32>) {
  lir.depthwise_conv1d ins(%p, %k4 : memref<1x10x8xf32>, memref<3x4xf32>) outs(%y : memref<1x8x8xf32>)
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.depthwise_conv1d': w: expected shape [3, 8] ([K, C] with C = channels of x), got [3, 4]

// -----

func.func @f(%p: memref<1x10x8xf32>, %k: memref<3x8xf32>, %y: memref<1x8x8xf32>) {
  lir.depthwise_conv1d ins(%p, %k : memref<1x10x8xf32>, memref<3x8xf32>) outs(%p : memref<1x10x8xf32>)
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.depthwise_conv1d': out: expected shape [1, 8, 8], got [1, 10, 8]

// -----

func.func @f(%p: memref<1x10x8xf32>, %k: memref<3x8xf32>, %y: memref<1x8x8xf32>, %ki: memref<3x8xi64>) {
  lir.depthwise_conv1d ins(%p, %ki : memref<1x10x8xf32>, memref<3x8xi64>) outs(%y : memref<1x8x8xf32>)
  func.return
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.depthwise_conv1d': weight: expected element type f32, got i64

// -----

// lir.matmul: packed_rhs needs a 2-D weight
%a, %v, %o = "test.op"() : () -> (memref<4x8xf32>, memref<8xf32>, memref<4xf32>)
lir.matmul ins(%a, %v : memref<4x8xf32>, memref<8xf32>) outs(%o : memref<4xf32>) packed_rhs
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.matmul': packed_rhs needs a 2-D rhs [K, N], got rank 1

// -----

// lir.dequant_matmul q4_1: x does not fit the scheme's blocks
%x, %w, %o = "test.op"() : () -> (memref<2x48xf32>, memref<8x40xui8>, memref<2x8xf32>)
lir.dequant_matmul q4_1 ins(%x, %w : memref<2x48xf32>, memref<8x40xui8>) outs(%o : memref<2x8xf32>)
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.dequant_matmul': x: last dim K must be a multiple of 32 (a q4_1 block), got 48

// -----

// lir.dequant_matmul q4_k: x does not fit the scheme's blocks
%x, %w, %o = "test.op"() : () -> (memref<2x128xf32>, memref<8x144xui8>, memref<2x8xf32>)
lir.dequant_matmul q4_k ins(%x, %w : memref<2x128xf32>, memref<8x144xui8>) outs(%o : memref<2x8xf32>)
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.dequant_matmul': x: last dim K must be a multiple of 256 (a q4_k block), got 128

// -----

// lir.dequant_matmul f16: w does not fit the scheme's blocks
%x, %w, %o = "test.op"() : () -> (memref<2x5xf32>, memref<8x5xui8>, memref<2x8xf32>)
lir.dequant_matmul f16 ins(%x, %w : memref<2x5xf32>, memref<8x5xui8>) outs(%o : memref<2x8xf32>)
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.dequant_matmul': w: expected shape [8, 10] (f16: K/1 blocks of 2 bytes), got [8, 5]

// -----

// lir.selective_scan return_state: the final state goes to a second out
%x, %a, %b, %o = "test.op"() : () -> (memref<1x4x8xf32>, memref<8x3xf32>, memref<1x4x3xf32>, memref<1x4x8xf32>)
lir.selective_scan ins(%x, %x, %a, %b, %b : memref<1x4x8xf32>, memref<1x4x8xf32>, memref<8x3xf32>, memref<1x4x3xf32>, memref<1x4x3xf32>) outs(%o : memref<1x4x8xf32>) return_state
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.selective_scan': state_out: expected a value of shape [1, 8, 3], got none

// -----

// lir.gated_delta_net: state_out [b, H, n, m]
%q, %g, %o, %s = "test.op"() : () -> (memref<1x3x2x4xf32>, memref<1x3x2xf32>, memref<1x3x2x4xf32>, memref<1x4x2x4xf32>)
lir.gated_delta_net ins(%q, %q, %q, %g, %g : memref<1x3x2x4xf32>, memref<1x3x2x4xf32>, memref<1x3x2x4xf32>, memref<1x3x2xf32>, memref<1x3x2xf32>) outs(%o, %s : memref<1x3x2x4xf32>, memref<1x4x2x4xf32>) return_state
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.gated_delta_net': state_out: expected shape [1, 2, 4, 4], got [1, 4, 2, 4]

// -----

// lir.shared_input_matmul: packed_rhs is for f32 weights only
%x, %g, %o = "test.op"() : () -> (memref<2x64xf32>, memref<8x40xui8>, memref<2x8xf32>)
lir.shared_input_matmul q4_1 ins(%x, %g, %g : memref<2x64xf32>, memref<8x40xui8>, memref<8x40xui8>) outs(%o, %o : memref<2x8xf32>, memref<2x8xf32>) packed_rhs
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.shared_input_matmul': packed_rhs needs f32 weights, got scheme q4_1

// -----

// lir.shared_input_matmul: a fused rms_norm is the q8 kernels' prologue
%x, %g, %o, %gamma = "test.op"() : () -> (memref<2x64xf32>, memref<8x40xui8>, memref<2x8xf32>, memref<64xf32>)
lir.shared_input_matmul q4_1 ins(%x, %g, %g : memref<2x64xf32>, memref<8x40xui8>, memref<8x40xui8>) norm(%gamma : memref<64xf32>) eps 1.0e-05 outs(%o, %o : memref<2x8xf32>, memref<2x8xf32>)
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.shared_input_matmul': a norm_weight needs activations q8 (its prologue is the q8 kernels'), got activations f32

// -----

// lir.shared_input_matmul: the norm's gamma is [K]
%x, %g, %o, %gamma = "test.op"() : () -> (memref<2x64xf32>, memref<8x40xui8>, memref<2x8xf32>, memref<32xf32>)
lir.shared_input_matmul q4_1 ins(%x, %g, %g : memref<2x64xf32>, memref<8x40xui8>, memref<8x40xui8>) norm(%gamma : memref<32xf32>) eps 1.0e-05 outs(%o, %o : memref<2x8xf32>, memref<2x8xf32>) activations q8
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.shared_input_matmul': norm_weight: expected shape [64] (K = last dim of x), got [32]

// -----

// lir.dequant_matmul: a residual has the out's shape
%x, %g, %r, %o = "test.op"() : () -> (memref<2x64xf32>, memref<8x40xui8>, memref<2x4xf32>, memref<2x8xf32>)
lir.dequant_matmul q4_1 ins(%x, %g, %r : memref<2x64xf32>, memref<8x40xui8>, memref<2x4xf32>) outs(%o : memref<2x8xf32>) activations q8
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.dequant_matmul': residual: expected shape [2, 8] (the result's shape), got [2, 4]

// -----

lir.barrier "everyone"
// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'lir.barrier': kind: expected one of gather, release or none (a full barrier), got 'everyone'
