// RUN: rlx-opt %s --split-input-file -p canonicalize | filecheck %s
// RUN: rlx-opt %s --split-input-file -p canonicalize,cse | filecheck %s --check-prefix=CSE

// The mir folders and canonicalization patterns, applied by xDSL's own `canonicalize`.

func.func @reshape_of_reshape(%x: tensor<2x3x4xf32>) -> tensor<4x6xf32> {
  %a = mir.reshape %x : tensor<2x3x4xf32> -> tensor<6x4xf32>
  %b = mir.reshape %a : tensor<6x4xf32> -> tensor<24xf32>
  %c = mir.reshape %b : tensor<24xf32> -> tensor<4x6xf32>
  func.return %c : tensor<4x6xf32>
}

// CHECK-LABEL: func.func @reshape_of_reshape
// CHECK-SAME:    (%[[X:.*]]: tensor<2x3x4xf32>)
// CHECK-NEXT:    %[[R:.*]] = mir.reshape %[[X]] : tensor<2x3x4xf32> -> tensor<4x6xf32>
// CHECK-NEXT:    func.return %[[R]] : tensor<4x6xf32>

// -----

func.func @reshape_identity(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %a = mir.reshape %x : tensor<2x3xf32> -> tensor<2x3xf32>
  func.return %a : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @reshape_identity
// CHECK-SAME:    (%[[X:.*]]: tensor<2x3xf32>)
// CHECK-NEXT:    func.return %[[X]] : tensor<2x3xf32>

// -----

// A chain that comes back to the input's type disappears (combine, then the identity).
func.func @reshape_round_trip(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %a = mir.reshape %x : tensor<2x3xf32> -> tensor<6xf32>
  %b = mir.reshape %a : tensor<6xf32> -> tensor<2x3xf32>
  func.return %b : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @reshape_round_trip
// CHECK-SAME:    (%[[X:.*]]: tensor<2x3xf32>)
// CHECK-NEXT:    func.return %[[X]] : tensor<2x3xf32>

// -----

// result.shape[i] = input.shape[perm[i]], so p1 then p2 is one transpose by p1[p2[j]]:
// [1, 2, 0] then [1, 0, 2] is [2, 1, 0].
func.func @transpose_of_transpose(%x: tensor<2x3x4xf32>) -> tensor<4x3x2xf32> {
  %a = mir.transpose %x perm [1, 2, 0] : tensor<2x3x4xf32> -> tensor<3x4x2xf32>
  %b = mir.transpose %a perm [1, 0, 2] : tensor<3x4x2xf32> -> tensor<4x3x2xf32>
  func.return %b : tensor<4x3x2xf32>
}

// CHECK-LABEL: func.func @transpose_of_transpose
// CHECK-SAME:    (%[[X:.*]]: tensor<2x3x4xf32>)
// CHECK-NEXT:    %[[T:.*]] = mir.transpose %[[X]] perm [2, 1, 0] : tensor<2x3x4xf32> -> tensor<4x3x2xf32>
// CHECK-NEXT:    func.return %[[T]] : tensor<4x3x2xf32>

// -----

// Inverse permutations (one written with negative entries) cancel.
func.func @transpose_of_transpose_identity(%x: tensor<2x3x4xf32>) -> tensor<2x3x4xf32> {
  %a = mir.transpose %x perm [1, 2, 0] : tensor<2x3x4xf32> -> tensor<3x4x2xf32>
  %b = mir.transpose %a perm [-1, 0, 1] : tensor<3x4x2xf32> -> tensor<2x3x4xf32>
  func.return %b : tensor<2x3x4xf32>
}

// CHECK-LABEL: func.func @transpose_of_transpose_identity
// CHECK-SAME:    (%[[X:.*]]: tensor<2x3x4xf32>)
// CHECK-NEXT:    func.return %[[X]] : tensor<2x3x4xf32>

// -----

func.func @transpose_identity(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %a = mir.transpose %x perm [0, -1] : tensor<2x3xf32> -> tensor<2x3xf32>
  func.return %a : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @transpose_identity
// CHECK-SAME:    (%[[X:.*]]: tensor<2x3xf32>)
// CHECK-NEXT:    func.return %[[X]] : tensor<2x3xf32>

// -----

// A transpose that swaps two equal dimensions keeps its type but is not an identity.
func.func @transpose_same_type_kept(%x: tensor<3x3xf32>) -> tensor<3x3xf32> {
  %a = mir.transpose %x perm [1, 0] : tensor<3x3xf32> -> tensor<3x3xf32>
  func.return %a : tensor<3x3xf32>
}

// CHECK-LABEL: func.func @transpose_same_type_kept
// CHECK-NEXT:    %[[T:.*]] = mir.transpose %{{.*}} perm [1, 0] : tensor<3x3xf32> -> tensor<3x3xf32>
// CHECK-NEXT:    func.return %[[T]] : tensor<3x3xf32>

// -----

func.func @narrow_identity(%x: tensor<4x6xf32>) -> (tensor<4x6xf32>, tensor<4x2xf32>) {
  %a = mir.narrow %x axis -1 start 0 length 6 : tensor<4x6xf32> -> tensor<4x6xf32>
  %b = mir.narrow %x axis 1 start 2 length 2 : tensor<4x6xf32> -> tensor<4x2xf32>
  func.return %a, %b : tensor<4x6xf32>, tensor<4x2xf32>
}

// CHECK-LABEL: func.func @narrow_identity
// CHECK-SAME:    (%[[X:.*]]: tensor<4x6xf32>)
// CHECK-NEXT:    %[[B:.*]] = mir.narrow %[[X]] axis 1 start 2 length 2 : tensor<4x6xf32> -> tensor<4x2xf32>
// CHECK-NEXT:    func.return %[[X]], %[[B]] : tensor<4x6xf32>, tensor<4x2xf32>

// -----

func.func @broadcast_to_identity(%x: tensor<4x6xf32>) -> tensor<4x6xf32> {
  %a = mir.broadcast_to %x : tensor<4x6xf32> -> tensor<4x6xf32>
  func.return %a : tensor<4x6xf32>
}

// CHECK-LABEL: func.func @broadcast_to_identity
// CHECK-SAME:    (%[[X:.*]]: tensor<4x6xf32>)
// CHECK-NEXT:    func.return %[[X]] : tensor<4x6xf32>

// -----

func.func @broadcast_to_of_broadcast_to(%x: tensor<6xf32>) -> tensor<2x4x6xf32> {
  %a = mir.broadcast_to %x : tensor<6xf32> -> tensor<4x6xf32>
  %b = mir.broadcast_to %a : tensor<4x6xf32> -> tensor<2x4x6xf32>
  func.return %b : tensor<2x4x6xf32>
}

// CHECK-LABEL: func.func @broadcast_to_of_broadcast_to
// CHECK-SAME:    (%[[X:.*]]: tensor<6xf32>)
// CHECK-NEXT:    %[[B:.*]] = mir.broadcast_to %[[X]] : tensor<6xf32> -> tensor<2x4x6xf32>
// CHECK-NEXT:    func.return %[[B]] : tensor<2x4x6xf32>

// -----

// Binary elementwise on constants, with a broadcast rank-0 operand.
func.func @fold_binary() -> tensor<3xf32> {
  %a = mir.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
  %b = mir.constant dense<0.5> : tensor<f32>
  %c = mir.mul %a, %b : (tensor<3xf32>, tensor<f32>) -> tensor<3xf32>
  func.return %c : tensor<3xf32>
}

// CHECK-LABEL: func.func @fold_binary
// CHECK-NEXT:    %[[C:.*]] = mir.constant dense<[5.000000e-01, 1.000000e+00, 1.500000e+00]> : tensor<3xf32>
// CHECK-NEXT:    func.return %[[C]] : tensor<3xf32>

// -----

// Unary elementwise ops on constants, computed by the numpy oracle.
func.func @fold_unary() -> (tensor<2xf32>, tensor<2xf32>, tensor<f32>) {
  %a = mir.constant dense<[0.0, 4.0]> : tensor<2xf32>
  %s = mir.sqrt %a : tensor<2xf32>
  %n = mir.constant dense<[-1.5, 2.0]> : tensor<2xf32>
  %r = mir.relu %n : tensor<2xf32>
  %z = mir.constant dense<0.0> : tensor<f32>
  %g = mir.sigmoid %z : tensor<f32>
  func.return %s, %r, %g : tensor<2xf32>, tensor<2xf32>, tensor<f32>
}

// CHECK-LABEL: func.func @fold_unary
// CHECK-DAG:     %[[S:.*]] = mir.constant dense<[0.000000e+00, 2.000000e+00]> : tensor<2xf32>
// CHECK-DAG:     %[[R:.*]] = mir.constant dense<[0.000000e+00, 2.000000e+00]> : tensor<2xf32>
// CHECK-DAG:     %[[G:.*]] = mir.constant dense<5.000000e-01> : tensor<f32>
// CHECK-NOT:     mir.sqrt
// CHECK-NOT:     mir.relu
// CHECK-NOT:     mir.sigmoid
// CHECK:         func.return %{{.*}}, %{{.*}}, %[[G]]

// cse then merges the two equal constants.
// CSE-LABEL: func.func @fold_unary
// CSE-NEXT:    %[[C:.*]] = mir.constant dense<[0.000000e+00, 2.000000e+00]> : tensor<2xf32>
// CSE-NEXT:    %[[G:.*]] = mir.constant dense<5.000000e-01> : tensor<f32>
// CSE-NEXT:    func.return %[[C]], %[[C]], %[[G]] : tensor<2xf32>, tensor<2xf32>, tensor<f32>

// -----

// A chain of constant ops folds all the way.
func.func @fold_chain() -> tensor<2xf32> {
  %a = mir.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %b = mir.add %a, %a : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %c = mir.neg %b : tensor<2xf32>
  %d = mir.abs %c : tensor<2xf32>
  func.return %d : tensor<2xf32>
}

// CHECK-LABEL: func.func @fold_chain
// CHECK-NEXT:    %[[C:.*]] = mir.constant dense<[2.000000e+00, 4.000000e+00]> : tensor<2xf32>
// CHECK-NEXT:    func.return %[[C]] : tensor<2xf32>

// -----

// Integer ops fold with numpy's (wrapping) integer arithmetic.
func.func @fold_integer() -> tensor<2xi32> {
  %a = mir.constant dense<[7, -3]> : tensor<2xi32>
  %b = mir.constant dense<2> : tensor<i32>
  %c = mir.mul %a, %b : (tensor<2xi32>, tensor<i32>) -> tensor<2xi32>
  func.return %c : tensor<2xi32>
}

// CHECK-LABEL: func.func @fold_integer
// CHECK-NEXT:    %[[C:.*]] = mir.constant dense<[14, -6]> : tensor<2xi32>
// CHECK-NEXT:    func.return %[[C]] : tensor<2xi32>

// -----

// Data movement of constants.
func.func @fold_data_movement() -> (tensor<3x2xf32>, tensor<3x2xf32>, tensor<2x3xi64>, tensor<1x2xf32>) {
  %a = mir.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : tensor<2x3xf32>
  %r = mir.reshape %a : tensor<2x3xf32> -> tensor<3x2xf32>
  %t = mir.transpose %a perm [1, 0] : tensor<2x3xf32> -> tensor<3x2xf32>
  %i = mir.constant dense<[0, 7, 9]> : tensor<3xi64>
  %b = mir.broadcast_to %i : tensor<3xi64> -> tensor<2x3xi64>
  %n = mir.narrow %a axis 1 start 1 length 2 : tensor<2x3xf32> -> tensor<2x2xf32>
  %m = mir.narrow %n axis 0 start 1 length 1 : tensor<2x2xf32> -> tensor<1x2xf32>
  func.return %r, %t, %b, %m : tensor<3x2xf32>, tensor<3x2xf32>, tensor<2x3xi64>, tensor<1x2xf32>
}

// CHECK-LABEL: func.func @fold_data_movement
// CHECK-DAG:     %[[R:.*]] = mir.constant dense<{{\[\[}}1.000000e+00, 2.000000e+00], [3.000000e+00, 4.000000e+00], [5.000000e+00, 6.000000e+00]]> : tensor<3x2xf32>
// CHECK-DAG:     %[[T:.*]] = mir.constant dense<{{\[\[}}1.000000e+00, 4.000000e+00], [2.000000e+00, 5.000000e+00], [3.000000e+00, 6.000000e+00]]> : tensor<3x2xf32>
// CHECK-DAG:     %[[B:.*]] = mir.constant dense<{{\[\[}}0, 7, 9], [0, 7, 9]]> : tensor<2x3xi64>
// CHECK-DAG:     %[[M:.*]] = mir.constant dense<{{\[\[}}5.000000e+00, 6.000000e+00]]> : tensor<1x2xf32>
// CHECK-NOT:     mir.reshape
// CHECK-NOT:     mir.transpose
// CHECK-NOT:     mir.broadcast_to
// CHECK-NOT:     mir.narrow
// CHECK:         func.return %[[R]], %[[T]], %[[B]], %[[M]]

// -----

// Not folded: a result above 1024 elements, a non-constant operand, a non-finite result.
func.func @no_fold(%x: tensor<2xf32>) -> (tensor<2048xf32>, tensor<2xf32>, tensor<2xf32>) {
  %a = mir.constant dense<1.0> : tensor<2048xf32>
  %b = mir.exp %a : tensor<2048xf32>
  %c = mir.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %d = mir.add %x, %c : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %z = mir.constant dense<[0.0, 1.0]> : tensor<2xf32>
  %l = mir.log %z : tensor<2xf32>
  func.return %b, %d, %l : tensor<2048xf32>, tensor<2xf32>, tensor<2xf32>
}

// CHECK-LABEL: func.func @no_fold
// CHECK:         %{{.*}} = mir.exp %{{.*}} : tensor<2048xf32>
// CHECK:         %{{.*}} = mir.add %{{.*}}, %{{.*}} : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
// CHECK:         %{{.*}} = mir.log %{{.*}} : tensor<2xf32>

// -----

// canonicalize then cse: the two reshapes become equal and merge; dead constants go.
func.func @cse_after_canonicalize(%x: tensor<2x3xf32>) -> (tensor<6xf32>, tensor<6xf32>) {
  %a = mir.reshape %x : tensor<2x3xf32> -> tensor<3x2xf32>
  %b = mir.reshape %a : tensor<3x2xf32> -> tensor<6xf32>
  %c = mir.reshape %x : tensor<2x3xf32> -> tensor<6xf32>
  %unused = mir.constant dense<1.0> : tensor<f32>
  func.return %b, %c : tensor<6xf32>, tensor<6xf32>
}

// CHECK-LABEL: func.func @cse_after_canonicalize
// CHECK-NEXT:    %[[B:.*]] = mir.reshape %{{.*}} : tensor<2x3xf32> -> tensor<6xf32>
// CHECK-NEXT:    %[[C:.*]] = mir.reshape %{{.*}} : tensor<2x3xf32> -> tensor<6xf32>
// CHECK-NEXT:    func.return %[[B]], %[[C]]

// CSE-LABEL: func.func @cse_after_canonicalize
// CSE-SAME:    (%[[X:.*]]: tensor<2x3xf32>)
// CSE-NEXT:    %[[R:.*]] = mir.reshape %[[X]] : tensor<2x3xf32> -> tensor<6xf32>
// CSE-NEXT:    func.return %[[R]], %[[R]] : tensor<6xf32>, tensor<6xf32>
