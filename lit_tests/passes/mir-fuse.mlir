// RUN: rlx-opt %s -p mir-fuse | filecheck %s
// RUN: rlx-opt %s -p 'mir-fuse{fuse-broadcast=true}' | filecheck %s --check-prefix=BCAST
// The op count of @llama_block (the convert-hir-to-mir output of examples/llama_block.mlir)
// before and after fusion:
// RUN: rlx-opt %s | sed -n '/func.func @llama_block/,/func.return/p' | grep -c ' = mir\.' | filecheck %s --check-prefix=LLAMA-BEFORE --match-full-lines
// RUN: rlx-opt %s -p mir-fuse | sed -n '/func.func @llama_block/,/func.return/p' | grep -c ' = mir\.' | filecheck %s --check-prefix=LLAMA-AFTER --match-full-lines
// RUN: rlx-opt %s -p 'mir-fuse{shared-input=false}' | sed -n '/func.func @llama_block/,/func.return/p' | grep -c ' = mir\.' | filecheck %s --check-prefix=LLAMA-APART --match-full-lines
// Sibling products of one input (shared-input, on by default), and with the option off:
// RUN: rlx-opt %s -p mir-fuse | filecheck %s --check-prefix=SHARED
// RUN: rlx-opt %s -p 'mir-fuse{shared-input=false}' | filecheck %s --check-prefix=APART
// LLAMA-BEFORE: 16
// LLAMA-AFTER: 13
// LLAMA-APART: 15

// ----------------------------------------------------------------------------- matmul epilogues

func.func @matmul_bias(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<4x16xf32> {
  %m = mir.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %y = mir.add %m, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  func.return %y : tensor<4x16xf32>
}

// CHECK-LABEL: func.func @matmul_bias
// CHECK-SAME:    (%[[X:.*]]: tensor<4x8xf32>, %[[W:.*]]: tensor<8x16xf32>, %[[B:.*]]: tensor<16xf32>)
// CHECK-NEXT:    %[[Y:.*]] = mir.fused_matmul %[[X]], %[[W]], %[[B]] : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:    func.return %[[Y]] : tensor<4x16xf32>

func.func @bias_on_the_left(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<4x16xf32> {
  %m = mir.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %y = mir.add %b, %m : (tensor<16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  func.return %y : tensor<4x16xf32>
}

// CHECK-LABEL: func.func @bias_on_the_left
// CHECK-SAME:    (%[[X:.*]]: tensor<4x8xf32>, %[[W:.*]]: tensor<8x16xf32>, %[[B:.*]]: tensor<16xf32>)
// CHECK-NEXT:    %[[Y:.*]] = mir.fused_matmul %[[X]], %[[W]], %[[B]] : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:    func.return %[[Y]] : tensor<4x16xf32>

func.func @matmul_bias_activation(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<4x16xf32> {
  %m = mir.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %y = mir.add %m, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %z = mir.gelu_tanh %y : tensor<4x16xf32>
  func.return %z : tensor<4x16xf32>
}

// CHECK-LABEL: func.func @matmul_bias_activation
// CHECK-SAME:    (%[[X:.*]]: tensor<4x8xf32>, %[[W:.*]]: tensor<8x16xf32>, %[[B:.*]]: tensor<16xf32>)
// CHECK-NEXT:    %[[Z:.*]] = mir.fused_matmul %[[X]], %[[W]], %[[B]] activation gelu_tanh : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:    func.return %[[Z]] : tensor<4x16xf32>

// A plain matmul takes the activation too (here batched, with a 2-D weight).
func.func @matmul_activation(%x: tensor<2x4x8xf32>, %w: tensor<8x16xf32>) -> tensor<2x4x16xf32> {
  %m = mir.matmul %x, %w : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %y = mir.relu %m : tensor<2x4x16xf32>
  func.return %y : tensor<2x4x16xf32>
}

// CHECK-LABEL: func.func @matmul_activation
// CHECK-SAME:    (%[[X:.*]]: tensor<2x4x8xf32>, %[[W:.*]]: tensor<8x16xf32>)
// CHECK-NEXT:    %[[Y:.*]] = mir.fused_matmul %[[X]], %[[W]] activation relu : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
// CHECK-NEXT:    func.return %[[Y]] : tensor<2x4x16xf32>

// A batched weight [B, K, N] takes a bias [N] as well.
func.func @batched_weight_bias_silu(%x: tensor<2x4x8xf32>, %w: tensor<2x8x16xf32>, %b: tensor<16xf32>) -> tensor<2x4x16xf32> {
  %m = mir.matmul %x, %w : (tensor<2x4x8xf32>, tensor<2x8x16xf32>) -> tensor<2x4x16xf32>
  %y = mir.add %m, %b : (tensor<2x4x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  %z = mir.silu %y : tensor<2x4x16xf32>
  func.return %z : tensor<2x4x16xf32>
}

// CHECK-LABEL: func.func @batched_weight_bias_silu
// CHECK-SAME:    (%[[X:.*]]: tensor<2x4x8xf32>, %[[W:.*]]: tensor<2x8x16xf32>, %[[B:.*]]: tensor<16xf32>)
// CHECK-NEXT:    %[[Z:.*]] = mir.fused_matmul %[[X]], %[[W]], %[[B]] activation silu : (tensor<2x4x8xf32>, tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
// CHECK-NEXT:    func.return %[[Z]] : tensor<2x4x16xf32>

// A product with a second use, and a biased value with a second use, stay unfused.
func.func @not_single_use(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>) {
  %m = mir.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %y = mir.add %m, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %n = mir.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %t = mir.add %n, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %s = mir.sigmoid %t : tensor<4x16xf32>
  func.return %m, %y, %s, %t : tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>
}

// CHECK-LABEL: func.func @not_single_use
// CHECK-SAME:    (%[[X:.*]]: tensor<4x8xf32>, %[[W:.*]]: tensor<8x16xf32>, %[[B:.*]]: tensor<16xf32>)
// CHECK-NEXT:    %[[M:.*]] = mir.matmul %[[X]], %[[W]] : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:    %[[Y:.*]] = mir.add %[[M]], %[[B]] : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:    %[[T:.*]] = mir.fused_matmul %[[X]], %[[W]], %[[B]] : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:    %[[S:.*]] = mir.sigmoid %[[T]] : tensor<4x16xf32>
// CHECK-NEXT:    func.return %[[M]], %[[Y]], %[[S]], %[[T]]

// Not a bias: a [4, 16] addend (residual), a [1, 16] addend, or a 1-D weight. A second
// activation stays after the first one's fused_matmul.
func.func @not_a_bias(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %r: tensor<4x16xf32>, %b: tensor<1x16xf32>, %v: tensor<8xf32>, %c: tensor<4xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>, tensor<4xf32>, tensor<4x16xf32>) {
  %m = mir.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %y = mir.add %m, %r : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %n = mir.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %z = mir.add %n, %b : (tensor<4x16xf32>, tensor<1x16xf32>) -> tensor<4x16xf32>
  %p = mir.matmul %x, %v : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4xf32>
  %q = mir.add %p, %c : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %o = mir.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %a1 = mir.tanh %o : tensor<4x16xf32>
  %a2 = mir.gelu %a1 : tensor<4x16xf32>
  func.return %y, %z, %q, %a2 : tensor<4x16xf32>, tensor<4x16xf32>, tensor<4xf32>, tensor<4x16xf32>
}

// CHECK-LABEL: func.func @not_a_bias
// (the two unfused products of %x then share it: shared-input)
// CHECK-NEXT:    %[[M:.*]], %[[N:.*]] = mir.shared_input_matmul
// CHECK-NEXT:    %{{.*}} = mir.add %[[M]], %{{.*}} : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:    %{{.*}} = mir.add %[[N]], %{{.*}} : (tensor<4x16xf32>, tensor<1x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:    %[[P:.*]] = mir.matmul
// CHECK-NEXT:    %{{.*}} = mir.add %[[P]], %{{.*}} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    %[[O:.*]] = mir.fused_matmul %{{.*}}, %{{.*}} activation tanh
// CHECK-NEXT:    %{{.*}} = mir.gelu %[[O]] : tensor<4x16xf32>
// CHECK-NEXT:    func.return

// An elementwise op after the epilogue stays on its own (a tree of one op).
func.func @epilogue_then_elementwise(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<4x16xf32> {
  %m = mir.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %y = mir.add %m, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %z = mir.gelu %y : tensor<4x16xf32>
  %two = mir.constant dense<2.0> : tensor<f32>
  %t = mir.mul %z, %two : (tensor<4x16xf32>, tensor<f32>) -> tensor<4x16xf32>
  func.return %t : tensor<4x16xf32>
}

// CHECK-LABEL: func.func @epilogue_then_elementwise
// CHECK-NEXT:    %[[Z:.*]] = mir.fused_matmul %{{.*}}, %{{.*}}, %{{.*}} activation gelu
// CHECK-NEXT:    %[[TWO:.*]] = mir.constant dense<2.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[T:.*]] = mir.mul %[[Z]], %[[TWO]] : (tensor<4x16xf32>, tensor<f32>) -> tensor<4x16xf32>
// CHECK-NEXT:    func.return %[[T]]

// ----------------------------------------------------------------------------- elementwise trees

func.func @elementwise_chain(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %a = mir.neg %x : tensor<4x8xf32>
  %b = mir.exp %a : tensor<4x8xf32>
  %c = mir.mul %b, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %c : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @elementwise_chain
// CHECK-SAME:    (%[[X:.*]]: tensor<4x8xf32>)
// CHECK-NEXT:    %[[F:.*]] = mir.fused_elementwise ins(%[[X]] : tensor<4x8xf32>) -> tensor<4x8xf32> {
// CHECK-NEXT:    ^{{.*}}(%[[S:.*]]: f32):
// CHECK-NEXT:      %[[A:.*]] = arith.negf %[[S]] : f32
// CHECK-NEXT:      %[[B:.*]] = math.exp %[[A]] : f32
// CHECK-NEXT:      %[[C:.*]] = arith.mulf %[[B]], %[[S]] : f32
// CHECK-NEXT:      mir.yield %[[C]] : f32
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[F]] : tensor<4x8xf32>

// Leaves of smaller shapes broadcast to the root's shape; a rank-0 constant becomes an
// arith.constant of the body.
func.func @tree_with_broadcast_leaves(%x: tensor<4x8xf32>, %row: tensor<8xf32>, %col: tensor<4x1xf32>) -> tensor<4x8xf32> {
  %half = mir.constant dense<5.000000e-01> : tensor<f32>
  %a = mir.mul %x, %half : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %b = mir.add %a, %row : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %c = mir.sub %col, %x : (tensor<4x1xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %d = mir.div %b, %c : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %d : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @tree_with_broadcast_leaves
// CHECK-SAME:    (%[[X:.*]]: tensor<4x8xf32>, %[[ROW:.*]]: tensor<8xf32>, %[[COL:.*]]: tensor<4x1xf32>)
// CHECK-NEXT:    %[[F:.*]] = mir.fused_elementwise ins(%[[X]], %[[ROW]], %[[COL]] : tensor<4x8xf32>, tensor<8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32> {
// CHECK-NEXT:    ^{{.*}}(%[[SX:.*]]: f32, %[[SR:.*]]: f32, %[[SC:.*]]: f32):
// CHECK-NEXT:      %[[H:.*]] = arith.constant 5.000000e-01 : f32
// CHECK-NEXT:      %[[A:.*]] = arith.mulf %[[SX]], %[[H]] : f32
// CHECK-NEXT:      %[[B:.*]] = arith.addf %[[A]], %[[SR]] : f32
// CHECK-NEXT:      %[[C:.*]] = arith.subf %[[SC]], %[[SX]] : f32
// CHECK-NEXT:      %[[D:.*]] = arith.divf %[[B]], %[[C]] : f32
// CHECK-NEXT:      mir.yield %[[D]] : f32
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[F]] : tensor<4x8xf32>

// The same value used by several ops of the tree is one input; a splat constant is
// absorbed (and its op erased once unused).
func.func @shared_leaf_dedup(%x: tensor<8xf32>) -> tensor<8xf32> {
  %ones = mir.constant dense<1.0> : tensor<8xf32>
  %a = mir.mul %x, %x : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %b = mir.add %a, %ones : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %c = mir.sqrt %b : tensor<8xf32>
  %d = mir.div %x, %c : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  func.return %d : tensor<8xf32>
}

// CHECK-LABEL: func.func @shared_leaf_dedup
// CHECK-SAME:    (%[[X:.*]]: tensor<8xf32>)
// CHECK-NEXT:    %[[F:.*]] = mir.fused_elementwise ins(%[[X]] : tensor<8xf32>) -> tensor<8xf32> {
// CHECK-NEXT:    ^{{.*}}(%[[S:.*]]: f32):
// CHECK-NEXT:      %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK-NEXT:      %[[A:.*]] = arith.mulf %[[S]], %[[S]] : f32
// CHECK-NEXT:      %[[B:.*]] = arith.addf %[[A]], %[[ONE]] : f32
// CHECK-NEXT:      %[[C:.*]] = math.sqrt %[[B]] : f32
// CHECK-NEXT:      %[[D:.*]] = arith.divf %[[S]], %[[C]] : f32
// CHECK-NEXT:      mir.yield %[[D]] : f32
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[F]] : tensor<8xf32>

// A value with two uses ends a tree and is a leaf of the trees that use it.
func.func @multi_use_splits_trees(%x: tensor<8xf32>, %y: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %a = mir.add %x, %y : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %b = mir.tanh %a : tensor<8xf32>
  %c = mir.exp %b : tensor<8xf32>
  %d = mir.sub %c, %b : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %e = mir.abs %d : tensor<8xf32>
  func.return %e, %b : tensor<8xf32>, tensor<8xf32>
}

// CHECK-LABEL: func.func @multi_use_splits_trees
// CHECK-SAME:    (%[[X:.*]]: tensor<8xf32>, %[[Y:.*]]: tensor<8xf32>)
// CHECK-NEXT:    %[[B:.*]] = mir.fused_elementwise ins(%[[X]], %[[Y]] : tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32> {
// CHECK-NEXT:    ^{{.*}}(%[[SX:.*]]: f32, %[[SY:.*]]: f32):
// CHECK-NEXT:      %[[A:.*]] = arith.addf %[[SX]], %[[SY]] : f32
// CHECK-NEXT:      %[[T:.*]] = math.tanh %[[A]] : f32
// CHECK-NEXT:      mir.yield %[[T]] : f32
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[E:.*]] = mir.fused_elementwise ins(%[[B]] : tensor<8xf32>) -> tensor<8xf32> {
// CHECK-NEXT:    ^{{.*}}(%[[SB:.*]]: f32):
// CHECK-NEXT:      %[[C:.*]] = math.exp %[[SB]] : f32
// CHECK-NEXT:      %[[D:.*]] = arith.subf %[[C]], %[[SB]] : f32
// CHECK-NEXT:      %[[ABS:.*]] = math.absf %[[D]] : f32
// CHECK-NEXT:      mir.yield %[[ABS]] : f32
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[E]], %[[B]]

// A tree of one op, and integer ops, are left as they are.
func.func @single_op_not_fused(%x: tensor<8xf32>, %i: tensor<8xi32>) -> (tensor<8xf32>, tensor<8xi32>) {
  %a = mir.exp %x : tensor<8xf32>
  %b = mir.add %i, %i : (tensor<8xi32>, tensor<8xi32>) -> tensor<8xi32>
  %c = mir.neg %b : tensor<8xi32>
  func.return %a, %c : tensor<8xf32>, tensor<8xi32>
}

// CHECK-LABEL: func.func @single_op_not_fused
// CHECK-NEXT:    %[[A:.*]] = mir.exp %{{.*}} : tensor<8xf32>
// CHECK-NEXT:    %[[B:.*]] = mir.add %{{.*}}, %{{.*}} : (tensor<8xi32>, tensor<8xi32>) -> tensor<8xi32>
// CHECK-NEXT:    %[[C:.*]] = mir.neg %[[B]] : tensor<8xi32>
// CHECK-NEXT:    func.return %[[A]], %[[C]]

// The scalar body of every unary op, in one chain.
func.func @every_unary_op(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = mir.neg %x : tensor<8xf32>
  %1 = mir.exp %0 : tensor<8xf32>
  %2 = mir.log %1 : tensor<8xf32>
  %3 = mir.sqrt %2 : tensor<8xf32>
  %4 = mir.rsqrt %3 : tensor<8xf32>
  %5 = mir.tanh %4 : tensor<8xf32>
  %6 = mir.abs %5 : tensor<8xf32>
  %7 = mir.relu %6 : tensor<8xf32>
  %8 = mir.sigmoid %7 : tensor<8xf32>
  %9 = mir.silu %8 : tensor<8xf32>
  %10 = mir.gelu %9 : tensor<8xf32>
  %11 = mir.gelu_tanh %10 : tensor<8xf32>
  func.return %11 : tensor<8xf32>
}

// CHECK-LABEL: func.func @every_unary_op
// CHECK-SAME:    (%[[X:.*]]: tensor<8xf32>)
// CHECK-NEXT:    %[[F:.*]] = mir.fused_elementwise ins(%[[X]] : tensor<8xf32>) -> tensor<8xf32> {
// CHECK-NEXT:    ^{{.*}}(%[[S:.*]]: f32):
// neg exp log sqrt rsqrt tanh abs
// CHECK-NEXT:      %[[NEG:.*]] = arith.negf %[[S]] : f32
// CHECK-NEXT:      %[[EXP:.*]] = math.exp %[[NEG]] : f32
// CHECK-NEXT:      %[[LOG:.*]] = math.log %[[EXP]] : f32
// CHECK-NEXT:      %[[SQRT:.*]] = math.sqrt %[[LOG]] : f32
// CHECK-NEXT:      %[[RSQRT:.*]] = math.rsqrt %[[SQRT]] : f32
// CHECK-NEXT:      %[[TANH:.*]] = math.tanh %[[RSQRT]] : f32
// CHECK-NEXT:      %[[ABS:.*]] = math.absf %[[TANH]] : f32
// relu = x < 0 ? 0 : x
// CHECK-NEXT:      %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT:      %[[NEGATIVE:.*]] = arith.cmpf olt, %[[ABS]], %[[ZERO]] : f32
// CHECK-NEXT:      %[[RELU:.*]] = arith.select %[[NEGATIVE]], %[[ZERO]], %[[ABS]] : f32
// sigmoid = 1 / (1 + exp(-x))
// CHECK-NEXT:      %[[N1:.*]] = arith.negf %[[RELU]] : f32
// CHECK-NEXT:      %[[E1:.*]] = math.exp %[[N1]] : f32
// CHECK-NEXT:      %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK-NEXT:      %[[D1:.*]] = arith.addf %[[ONE]], %[[E1]] : f32
// CHECK-NEXT:      %[[SIG:.*]] = arith.divf %[[ONE]], %[[D1]] : f32
// silu = x * sigmoid(x)
// CHECK-NEXT:      %[[N2:.*]] = arith.negf %[[SIG]] : f32
// CHECK-NEXT:      %[[E2:.*]] = math.exp %[[N2]] : f32
// CHECK-NEXT:      %[[D2:.*]] = arith.addf %[[ONE]], %[[E2]] : f32
// CHECK-NEXT:      %[[S2:.*]] = arith.divf %[[ONE]], %[[D2]] : f32
// CHECK-NEXT:      %[[SILU:.*]] = arith.mulf %[[SIG]], %[[S2]] : f32
// gelu = 0.5 * x * (1 + erf(x / sqrt(2)))
// CHECK-NEXT:      %[[RSQRT2:.*]] = arith.constant 0.707106769 : f32
// CHECK-NEXT:      %[[G1:.*]] = arith.mulf %[[SILU]], %[[RSQRT2]] : f32
// CHECK-NEXT:      %[[ERF:.*]] = math.erf %[[G1]] : f32
// CHECK-NEXT:      %[[G2:.*]] = arith.addf %[[ONE]], %[[ERF]] : f32
// CHECK-NEXT:      %[[HALF:.*]] = arith.constant 5.000000e-01 : f32
// CHECK-NEXT:      %[[G3:.*]] = arith.mulf %[[HALF]], %[[SILU]] : f32
// CHECK-NEXT:      %[[GELU:.*]] = arith.mulf %[[G3]], %[[G2]] : f32
// gelu_tanh = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
// CHECK-NEXT:      %[[X2:.*]] = arith.mulf %[[GELU]], %[[GELU]] : f32
// CHECK-NEXT:      %[[X3:.*]] = arith.mulf %[[X2]], %[[GELU]] : f32
// CHECK-NEXT:      %[[K:.*]] = arith.constant 4.471500e-02 : f32
// CHECK-NEXT:      %[[KX3:.*]] = arith.mulf %[[K]], %[[X3]] : f32
// CHECK-NEXT:      %[[IN:.*]] = arith.addf %[[GELU]], %[[KX3]] : f32
// CHECK-NEXT:      %[[C:.*]] = arith.constant 0.797884583 : f32
// CHECK-NEXT:      %[[U:.*]] = arith.mulf %[[C]], %[[IN]] : f32
// CHECK-NEXT:      %[[TH:.*]] = math.tanh %[[U]] : f32
// CHECK-NEXT:      %[[T1:.*]] = arith.addf %[[ONE]], %[[TH]] : f32
// CHECK-NEXT:      %[[T2:.*]] = arith.mulf %[[HALF]], %[[GELU]] : f32
// CHECK-NEXT:      %[[GT:.*]] = arith.mulf %[[T2]], %[[T1]] : f32
// CHECK-NEXT:      mir.yield %[[GT]] : f32
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[F]] : tensor<8xf32>

// The scalar body of every binary op (operands broadcast either way).
func.func @every_binary_op(%a: tensor<4x8xf32>, %b: tensor<8xf32>, %c: tensor<4x1xf32>) -> tensor<4x8xf32> {
  %0 = mir.add %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %1 = mir.sub %0, %c : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %2 = mir.mul %b, %1 : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = mir.div %2, %a : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %4 = mir.max %3, %c : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %5 = mir.min %4, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %6 = mir.pow %5, %a : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %6 : tensor<4x8xf32>
}

// Inputs come in the order the tree's leaves are first reached (depth first from the root).
// CHECK-LABEL: func.func @every_binary_op
// CHECK-SAME:    (%[[A:.*]]: tensor<4x8xf32>, %[[B:.*]]: tensor<8xf32>, %[[C:.*]]: tensor<4x1xf32>)
// CHECK-NEXT:    %[[F:.*]] = mir.fused_elementwise ins(%[[B]], %[[A]], %[[C]] : tensor<8xf32>, tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32> {
// CHECK-NEXT:    ^{{.*}}(%[[SB:.*]]: f32, %[[SA:.*]]: f32, %[[SC:.*]]: f32):
// CHECK-NEXT:      %[[V0:.*]] = arith.addf %[[SA]], %[[SB]] : f32
// CHECK-NEXT:      %[[V1:.*]] = arith.subf %[[V0]], %[[SC]] : f32
// CHECK-NEXT:      %[[V2:.*]] = arith.mulf %[[SB]], %[[V1]] : f32
// CHECK-NEXT:      %[[V3:.*]] = arith.divf %[[V2]], %[[SA]] : f32
// CHECK-NEXT:      %[[V4:.*]] = arith.maximumf %[[V3]], %[[SC]] : f32
// CHECK-NEXT:      %[[V5:.*]] = arith.minimumf %[[V4]], %[[SB]] : f32
// CHECK-NEXT:      %[[V6:.*]] = math.powf %[[V5]], %[[SA]] : f32
// CHECK-NEXT:      mir.yield %[[V6]] : f32
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[F]] : tensor<4x8xf32>

// An existing fused_elementwise joins a tree: its body is inlined.
func.func @refuse_fused_elementwise(%x: tensor<8xf32>, %y: tensor<8xf32>) -> tensor<8xf32> {
  %f = mir.fused_elementwise ins(%x, %y : tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32> {
  ^bb0(%a: f32, %b: f32):
    %s = arith.addf %a, %b : f32
    mir.yield %s : f32
  }
  %g = mir.exp %f : tensor<8xf32>
  func.return %g : tensor<8xf32>
}

// CHECK-LABEL: func.func @refuse_fused_elementwise
// CHECK-SAME:    (%[[X:.*]]: tensor<8xf32>, %[[Y:.*]]: tensor<8xf32>)
// CHECK-NEXT:    %[[G:.*]] = mir.fused_elementwise ins(%[[X]], %[[Y]] : tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32> {
// CHECK-NEXT:    ^{{.*}}(%[[A:.*]]: f32, %[[B:.*]]: f32):
// CHECK-NEXT:      %[[S:.*]] = arith.addf %[[A]], %[[B]] : f32
// CHECK-NEXT:      %[[E:.*]] = math.exp %[[S]] : f32
// CHECK-NEXT:      mir.yield %[[E]] : f32
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[G]] : tensor<8xf32>

// When every leaf is a splat constant, one stays an input (a fused op has at least one).
func.func @constant_leaves_only() -> tensor<4xf32> {
  %c = mir.constant dense<2.0> : tensor<4xf32>
  %d = mir.constant dense<3.0> : tensor<f32>
  %a = mir.mul %c, %d : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %b = mir.exp %a : tensor<4xf32>
  func.return %b : tensor<4xf32>
}

// CHECK-LABEL: func.func @constant_leaves_only
// CHECK-NEXT:    %[[C:.*]] = mir.constant dense<2.000000e+00> : tensor<4xf32>
// CHECK-NEXT:    %[[F:.*]] = mir.fused_elementwise ins(%[[C]] : tensor<4xf32>) -> tensor<4xf32> {
// CHECK-NEXT:    ^{{.*}}(%[[S:.*]]: f32):
// CHECK-NEXT:      %[[D:.*]] = arith.constant 3.000000e+00 : f32
// CHECK-NEXT:      %[[M:.*]] = arith.mulf %[[S]], %[[D]] : f32
// CHECK-NEXT:      %[[E:.*]] = math.exp %[[M]] : f32
// CHECK-NEXT:      mir.yield %[[E]] : f32
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[F]] : tensor<4xf32>

// rms_norm in primitives. A per-row value ([S, 1]) feeding a per-element product stays
// its own tree by default (no recomputation); `fuse-broadcast=true` takes it in.
func.func @rms_norm_primitives(%x: tensor<4x8xf32>, %gamma: tensor<8xf32>) -> tensor<4x8xf32> {
  %sq = mir.mul %x, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %ms = mir.reduce mean %sq axes [1] keepdim : tensor<4x8xf32> -> tensor<4x1xf32>
  %eps = mir.constant dense<1.0e-05> : tensor<f32>
  %v = mir.add %ms, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %r = mir.rsqrt %v : tensor<4x1xf32>
  %n = mir.mul %x, %r : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %y = mir.mul %n, %gamma : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @rms_norm_primitives
// CHECK-SAME:    (%[[X:.*]]: tensor<4x8xf32>, %[[G:.*]]: tensor<8xf32>)
// CHECK-NEXT:    %[[SQ:.*]] = mir.mul %[[X]], %[[X]]
// CHECK-NEXT:    %[[MS:.*]] = mir.reduce mean %[[SQ]]
// CHECK-NEXT:    %[[R:.*]] = mir.fused_elementwise ins(%[[MS]] : tensor<4x1xf32>) -> tensor<4x1xf32> {
// CHECK-NEXT:    ^{{.*}}(%[[S:.*]]: f32):
// CHECK-NEXT:      %[[EPS:.*]] = arith.constant 1.000000e-05 : f32
// CHECK-NEXT:      %[[V:.*]] = arith.addf %[[S]], %[[EPS]] : f32
// CHECK-NEXT:      %[[RS:.*]] = math.rsqrt %[[V]] : f32
// CHECK-NEXT:      mir.yield %[[RS]] : f32
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[Y:.*]] = mir.fused_elementwise ins(%[[X]], %[[R]], %[[G]] : tensor<4x8xf32>, tensor<4x1xf32>, tensor<8xf32>) -> tensor<4x8xf32> {
// CHECK-NEXT:    ^{{.*}}(%[[SX:.*]]: f32, %[[SR:.*]]: f32, %[[SG:.*]]: f32):
// CHECK-NEXT:      %[[N:.*]] = arith.mulf %[[SX]], %[[SR]] : f32
// CHECK-NEXT:      %[[O:.*]] = arith.mulf %[[N]], %[[SG]] : f32
// CHECK-NEXT:      mir.yield %[[O]] : f32
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[Y]] : tensor<4x8xf32>

// BCAST-LABEL: func.func @rms_norm_primitives
// BCAST-SAME:    (%[[X:.*]]: tensor<4x8xf32>, %[[G:.*]]: tensor<8xf32>)
// BCAST-NEXT:    %[[SQ:.*]] = mir.mul %[[X]], %[[X]]
// BCAST-NEXT:    %[[MS:.*]] = mir.reduce mean %[[SQ]]
// BCAST-NEXT:    %[[Y:.*]] = mir.fused_elementwise ins(%[[X]], %[[MS]], %[[G]] : tensor<4x8xf32>, tensor<4x1xf32>, tensor<8xf32>) -> tensor<4x8xf32> {
// BCAST-NEXT:    ^{{.*}}(%[[SX:.*]]: f32, %[[SM:.*]]: f32, %[[SG:.*]]: f32):
// BCAST-NEXT:      %[[EPS:.*]] = arith.constant 1.000000e-05 : f32
// BCAST-NEXT:      %[[V:.*]] = arith.addf %[[SM]], %[[EPS]] : f32
// BCAST-NEXT:      %[[RS:.*]] = math.rsqrt %[[V]] : f32
// BCAST-NEXT:      %[[N:.*]] = arith.mulf %[[SX]], %[[RS]] : f32
// BCAST-NEXT:      %[[O:.*]] = arith.mulf %[[N]], %[[SG]] : f32
// BCAST-NEXT:      mir.yield %[[O]] : f32
// BCAST-NEXT:    }
// BCAST-NEXT:    func.return %[[Y]] : tensor<4x8xf32>

// ----------------------------------------------------------------------------- a Llama block

// The output of `rlx-opt examples/llama_block.mlir -p convert-hir-to-mir` (argument
// attributes dropped). The gate projection takes its silu: 16 mir ops become 15 (the RUN
// lines at the top count them).
func.func @llama_block(%x: tensor<32x512xf32>, %cos: tensor<32x32xf32>, %sin: tensor<32x32xf32>, %ln1_g: tensor<512xf32>, %q_w: tensor<512x512xf32>, %k_w: tensor<512x128xf32>, %v_w: tensor<512x128xf32>, %o_w: tensor<512x512xf32>, %ln2_g: tensor<512xf32>, %gate_w: tensor<512x1408xf32>, %up_w: tensor<512x1408xf32>, %down_w: tensor<1408x512xf32>) -> tensor<32x512xf32> {
  %0 = mir.rms_norm %x, %ln1_g : (tensor<32x512xf32>, tensor<512xf32>) -> tensor<32x512xf32>
  %1 = mir.matmul %0, %q_w : (tensor<32x512xf32>, tensor<512x512xf32>) -> tensor<32x512xf32>
  %2 = mir.matmul %0, %k_w : (tensor<32x512xf32>, tensor<512x128xf32>) -> tensor<32x128xf32>
  %3 = mir.matmul %0, %v_w : (tensor<32x512xf32>, tensor<512x128xf32>) -> tensor<32x128xf32>
  %4 = mir.rope %1, %cos, %sin head_dim 64 n_rot 64 style half : (tensor<32x512xf32>, tensor<32x32xf32>, tensor<32x32xf32>) -> tensor<32x512xf32>
  %5 = mir.rope %2, %cos, %sin head_dim 64 n_rot 64 style half : (tensor<32x128xf32>, tensor<32x32xf32>, tensor<32x32xf32>) -> tensor<32x128xf32>
  %6 = mir.attention %4, %5, %3 num_heads 8 head_dim 64 num_kv_heads 2 mask_kind causal scale 1.250000e-01 : (tensor<32x512xf32>, tensor<32x128xf32>, tensor<32x128xf32>) -> tensor<32x512xf32>
  %7 = mir.matmul %6, %o_w : (tensor<32x512xf32>, tensor<512x512xf32>) -> tensor<32x512xf32>
  %8 = mir.add %x, %7 : (tensor<32x512xf32>, tensor<32x512xf32>) -> tensor<32x512xf32>
  %9 = mir.rms_norm %8, %ln2_g : (tensor<32x512xf32>, tensor<512xf32>) -> tensor<32x512xf32>
  %10 = mir.matmul %9, %gate_w : (tensor<32x512xf32>, tensor<512x1408xf32>) -> tensor<32x1408xf32>
  %11 = mir.silu %10 : tensor<32x1408xf32>
  %12 = mir.matmul %9, %up_w : (tensor<32x512xf32>, tensor<512x1408xf32>) -> tensor<32x1408xf32>
  %13 = mir.mul %11, %12 : (tensor<32x1408xf32>, tensor<32x1408xf32>) -> tensor<32x1408xf32>
  %14 = mir.matmul %13, %down_w : (tensor<32x1408xf32>, tensor<1408x512xf32>) -> tensor<32x512xf32>
  %15 = mir.add %8, %14 : (tensor<32x512xf32>, tensor<32x512xf32>) -> tensor<32x512xf32>
  func.return %15 : tensor<32x512xf32>
}

// CHECK-LABEL: func.func @llama_block
// CHECK-NOT:     mir.silu
// CHECK:         %[[GATE:.*]] = mir.fused_matmul %[[N2:.*]], %{{.*}} activation silu : (tensor<32x512xf32>, tensor<512x1408xf32>) -> tensor<32x1408xf32>
// CHECK-NEXT:    %[[UP:.*]] = mir.matmul %[[N2]], %{{.*}} : (tensor<32x512xf32>, tensor<512x1408xf32>) -> tensor<32x1408xf32>
// CHECK-NEXT:    %[[H:.*]] = mir.mul %[[GATE]], %[[UP]] : (tensor<32x1408xf32>, tensor<32x1408xf32>) -> tensor<32x1408xf32>
// CHECK-NEXT:    %[[DOWN:.*]] = mir.matmul %[[H]], %{{.*}} : (tensor<32x1408xf32>, tensor<1408x512xf32>) -> tensor<32x512xf32>
// CHECK-NEXT:    %[[OUT:.*]] = mir.add %{{.*}}, %[[DOWN]] : (tensor<32x512xf32>, tensor<32x512xf32>) -> tensor<32x512xf32>
// CHECK-NEXT:    func.return %[[OUT]] : tensor<32x512xf32>

// ----------------------------------------------------------------------------- shared inputs

// q/k/v: three matmuls of one x (2-D weights) -> one shared_input_matmul at the first;
// a matmul with a bias stays a fused_matmul (the epilogue round runs first); a batched
// (3-D) weight stays apart.
func.func @qkv(%x: tensor<3x8xf32>, %wq: tensor<8x8xf32>, %wk: tensor<8x4xf32>, %wv: tensor<8x4xf32>, %wb: tensor<8x5xf32>, %b: tensor<5xf32>, %w3: tensor<3x8x2xf32>) -> (tensor<3x8xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x5xf32>, tensor<3x3x2xf32>) {
  %q = mir.matmul %x, %wq : (tensor<3x8xf32>, tensor<8x8xf32>) -> tensor<3x8xf32>
  %k = mir.matmul %x, %wk : (tensor<3x8xf32>, tensor<8x4xf32>) -> tensor<3x4xf32>
  %m = mir.matmul %x, %wb : (tensor<3x8xf32>, tensor<8x5xf32>) -> tensor<3x5xf32>
  %y = mir.add %m, %b : (tensor<3x5xf32>, tensor<5xf32>) -> tensor<3x5xf32>
  %v = mir.matmul %x, %wv : (tensor<3x8xf32>, tensor<8x4xf32>) -> tensor<3x4xf32>
  %z = mir.matmul %x, %w3 : (tensor<3x8xf32>, tensor<3x8x2xf32>) -> tensor<3x3x2xf32>
  func.return %q, %k, %v, %y, %z : tensor<3x8xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x5xf32>, tensor<3x3x2xf32>
}

// SHARED-LABEL: func.func @qkv
// SHARED-SAME:    (%[[X:.*]]: tensor<3x8xf32>, %[[WQ:.*]]: tensor<8x8xf32>, %[[WK:.*]]: tensor<8x4xf32>, %[[WV:.*]]: tensor<8x4xf32>,
// SHARED-NEXT:    %[[Q:.*]], %[[K:.*]], %[[V:.*]] = mir.shared_input_matmul %[[X]], %[[WQ]], %[[WK]], %[[WV]] : (tensor<3x8xf32>, tensor<8x8xf32>, tensor<8x4xf32>, tensor<8x4xf32>) -> (tensor<3x8xf32>, tensor<3x4xf32>, tensor<3x4xf32>)
// SHARED-NEXT:    %[[Y:.*]] = mir.fused_matmul %[[X]]
// SHARED-NEXT:    %[[Z:.*]] = mir.matmul %[[X]]
// SHARED-NEXT:    func.return %[[Q]], %[[K]], %[[V]], %[[Y]], %[[Z]]
// APART-LABEL:  func.func @qkv
// APART-NOT:      mir.shared_input_matmul
// APART:          func.return

// gate/up as dequant_matmuls of one scheme and activation form; another form stays apart.
func.func @gate_up(%x: tensor<2x32xf32>, %wg: tensor<6x18xui8>, %wu: tensor<6x18xui8>, %wo: tensor<6x18xui8>) -> (tensor<2x6xf32>, tensor<2x6xf32>, tensor<2x6xf32>) {
  %g = mir.dequant_matmul %x, %wg scheme q4_0 activations q8 : (tensor<2x32xf32>, tensor<6x18xui8>) -> tensor<2x6xf32>
  %o = mir.dequant_matmul %x, %wo scheme q4_0 : (tensor<2x32xf32>, tensor<6x18xui8>) -> tensor<2x6xf32>
  %u = mir.dequant_matmul %x, %wu scheme q4_0 activations q8 : (tensor<2x32xf32>, tensor<6x18xui8>) -> tensor<2x6xf32>
  func.return %g, %u, %o : tensor<2x6xf32>, tensor<2x6xf32>, tensor<2x6xf32>
}

// SHARED-LABEL: func.func @gate_up
// SHARED-SAME:    (%[[X:.*]]: tensor<2x32xf32>, %[[WG:.*]]: tensor<6x18xui8>, %[[WU:.*]]: tensor<6x18xui8>, %[[WO:.*]]: tensor<6x18xui8>)
// SHARED-NEXT:    %[[G:.*]], %[[U:.*]] = mir.shared_input_matmul %[[X]], %[[WG]], %[[WU]] scheme q4_0 activations q8 : (tensor<2x32xf32>, tensor<6x18xui8>, tensor<6x18xui8>) -> (tensor<2x6xf32>, tensor<2x6xf32>)
// SHARED-NEXT:    %[[O:.*]] = mir.dequant_matmul %[[X]], %[[WO]] scheme q4_0 :
// SHARED-NEXT:    func.return %[[G]], %[[U]], %[[O]]
// APART-LABEL:  func.func @gate_up
// APART-NOT:      mir.shared_input_matmul
// APART:          func.return
