// RUN: rlx-opt %s --split-input-file | rlx-opt --split-input-file | filecheck %s
// RUN: rlx-opt %s --split-input-file --print-op-generic | rlx-opt --split-input-file | filecheck %s

// mir.scan round-trips: a carry, xs and consts, a body ending in mir.yield.

// CHECK-LABEL: func.func @rnn
// CHECK:         %{{.*}} = mir.scan %{{.*}} xs(%{{.*}} : tensor<5x4xf32>) consts(%{{.*}} : tensor<4x4xf32>) length 5 trajectory : tensor<4xf32> -> tensor<5x4xf32> {
// CHECK-NEXT:    ^bb0(%{{.*}}: tensor<4xf32>, %{{.*}}: tensor<4xf32>, %{{.*}}: tensor<4x4xf32>):
// CHECK-NEXT:      %{{.*}} = mir.matmul
// CHECK-NEXT:      %{{.*}} = mir.add
// CHECK-NEXT:      mir.yield %{{.*}} : tensor<4xf32>
// CHECK-NEXT:    }
func.func @rnn(%h: tensor<4xf32>, %xs: tensor<5x4xf32>, %w: tensor<4x4xf32>) -> tensor<5x4xf32> {
  %r = mir.scan %h xs(%xs : tensor<5x4xf32>) consts(%w : tensor<4x4xf32>) length 5 trajectory : tensor<4xf32> -> tensor<5x4xf32> {
  ^bb0(%c: tensor<4xf32>, %x: tensor<4xf32>, %m: tensor<4x4xf32>):
    %p = mir.matmul %c, %m : (tensor<4xf32>, tensor<4x4xf32>) -> tensor<4xf32>
    %n = mir.add %p, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mir.yield %n : tensor<4xf32>
  }
  func.return %r : tensor<5x4xf32>
}

// -----

// No xs nor consts: a carry only.
// CHECK-LABEL: func.func @repeat
// CHECK:         mir.scan %{{.*}} length 3 : tensor<2xf32> -> tensor<2xf32> {
func.func @repeat(%h: tensor<2xf32>) -> tensor<2xf32> {
  %r = mir.scan %h length 3 : tensor<2xf32> -> tensor<2xf32> {
  ^bb0(%c: tensor<2xf32>):
    %n = mir.tanh %c : tensor<2xf32>
    mir.yield %n : tensor<2xf32>
  }
  func.return %r : tensor<2xf32>
}
