// RUN: rlx-opt %s --split-input-file --verify-diagnostics | filecheck %s

// One case per rule of the mir.scan verifier.

%h = "test.op"() : () -> tensor<4xf32>
%xs = "test.op"() : () -> tensor<6x4xf32>
%r = mir.scan %h xs(%xs : tensor<6x4xf32>) length 5 : tensor<4xf32> -> tensor<4xf32> {
^bb0(%c: tensor<4xf32>, %x: tensor<4xf32>):
  mir.yield %c : tensor<4xf32>
}

// CHECK: 'mir.scan': xs[0]: expected first dim 5 (the scan's length), got shape [6, 4]

// -----

%h = "test.op"() : () -> tensor<4xf32>
%r = mir.scan %h length 0 : tensor<4xf32> -> tensor<4xf32> {
^bb0(%c: tensor<4xf32>):
  mir.yield %c : tensor<4xf32>
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.scan': length: expected an int >= 1, got 0

// -----

%h = "test.op"() : () -> tensor<4xf32>
%r = mir.scan %h length 2 trajectory : tensor<4xf32> -> tensor<4xf32> {
^bb0(%c: tensor<4xf32>):
  mir.yield %c : tensor<4xf32>
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.scan': result: expected shape [2, 4], got [4]

// -----

%h = "test.op"() : () -> tensor<4xf32>
%xs = "test.op"() : () -> tensor<2x4xf32>
%r = mir.scan %h xs(%xs : tensor<2x4xf32>) length 2 : tensor<4xf32> -> tensor<4xf32> {
^bb0(%c: tensor<4xf32>):
  mir.yield %c : tensor<4xf32>
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.scan': body: expected 2 block arguments (carry, 1 xs slices, 0 consts), got 1

// -----

%h = "test.op"() : () -> tensor<4xf32>
%xs = "test.op"() : () -> tensor<2x4xf32>
%r = mir.scan %h xs(%xs : tensor<2x4xf32>) length 2 : tensor<4xf32> -> tensor<4xf32> {
^bb0(%c: tensor<4xf32>, %x: tensor<2x4xf32>):
  mir.yield %c : tensor<4xf32>
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.scan': body: block argument for the xs[0] slice: expected tensor<4xf32>, got tensor<2x4xf32>

// -----

%h = "test.op"() : () -> tensor<4xf32>
%r = mir.scan %h length 2 : tensor<4xf32> -> tensor<4xf32> {
^bb0(%c: tensor<4xf32>):
  %s = mir.reduce sum %c axes [0] : tensor<4xf32> -> tensor<f32>
  mir.yield %s : tensor<f32>
}

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.scan': body: 'mir.yield' expected one value of the carry's type tensor<4xf32>, got (tensor<f32>)
