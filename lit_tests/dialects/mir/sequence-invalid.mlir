// RUN: rlx-opt %s --split-input-file --verify-diagnostics | filecheck %s

// One case per rule of the sequence ops' verifiers.

%x = "test.op"() : () -> tensor<2x5x4xf32>
%d = "test.op"() : () -> tensor<2x5x3xf32>
%a = "test.op"() : () -> tensor<4x3xf32>
%b = "test.op"() : () -> tensor<2x5x3xf32>
%y = mir.selective_scan %x, %d, %a, %b, %b : (tensor<2x5x4xf32>, tensor<2x5x3xf32>, tensor<4x3xf32>, tensor<2x5x3xf32>, tensor<2x5x3xf32>) -> tensor<2x5x4xf32>

// CHECK: 'mir.selective_scan': delta: expected shape [2, 5, 4] (the shape of x [b, s, h]), got [2, 5, 3]

// -----

%x = "test.op"() : () -> tensor<2x5x4xf32>
%a = "test.op"() : () -> tensor<4x3xf32>
%b = "test.op"() : () -> tensor<2x5x3xf32>
%s = "test.op"() : () -> tensor<2x3x4xf32>
%y = mir.selective_scan %x, %x, %a, %b, %b initial_state %s : (tensor<2x5x4xf32>, tensor<2x5x4xf32>, tensor<4x3xf32>, tensor<2x5x3xf32>, tensor<2x5x3xf32>, tensor<2x3x4xf32>) -> tensor<2x5x4xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.selective_scan': initial_state: expected shape [2, 4, 3] ([b, h, n]), got [2, 3, 4]

// -----

// with return_state the op has a second result, the final state
%x = "test.op"() : () -> tensor<2x5x4xf32>
%a = "test.op"() : () -> tensor<4x3xf32>
%b = "test.op"() : () -> tensor<2x5x3xf32>
%y = mir.selective_scan %x, %x, %a, %b, %b return_state : (tensor<2x5x4xf32>, tensor<2x5x4xf32>, tensor<4x3xf32>, tensor<2x5x3xf32>, tensor<2x5x3xf32>) -> tensor<2x5x4xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.selective_scan': final_state: expected a value of shape [2, 4, 3], got none

// -----

// and only then
%x = "test.op"() : () -> tensor<2x5x4xf32>
%a = "test.op"() : () -> tensor<4x3xf32>
%b = "test.op"() : () -> tensor<2x5x3xf32>
%y, %s = mir.selective_scan %x, %x, %a, %b, %b : (tensor<2x5x4xf32>, tensor<2x5x4xf32>, tensor<4x3xf32>, tensor<2x5x3xf32>, tensor<2x5x3xf32>) -> (tensor<2x5x4xf32>, tensor<2x4x3xf32>)

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.selective_scan': final_state: expected none (the properties ask for no final_state), got a value of type tensor<2x4x3xf32>

// -----

%q = "test.op"() : () -> tensor<1x3x2x4xf32>
%v = "test.op"() : () -> tensor<1x3x2x5xf32>
%g = "test.op"() : () -> tensor<1x3x2xf32>
%o, %s = mir.gated_delta_net %q, %q, %v, %g, %g return_state : (tensor<1x3x2x4xf32>, tensor<1x3x2x4xf32>, tensor<1x3x2x5xf32>, tensor<1x3x2xf32>, tensor<1x3x2xf32>) -> (tensor<1x3x2x5xf32>, tensor<1x2x5x4xf32>)

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.gated_delta_net': final_state: expected shape [1, 2, 4, 5], got [1, 2, 5, 4]

// -----

%q = "test.op"() : () -> tensor<1x3x2x4xf32>
%k = "test.op"() : () -> tensor<1x3x2x5xf32>
%g = "test.op"() : () -> tensor<1x3x2xf32>
%o = mir.gated_delta_net %q, %k, %q, %g, %g : (tensor<1x3x2x4xf32>, tensor<1x3x2x5xf32>, tensor<1x3x2x4xf32>, tensor<1x3x2xf32>, tensor<1x3x2xf32>) -> tensor<1x3x2x4xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.gated_delta_net': k: expected shape [1, 3, 2, 4] (the shape of q [b, s, H, n]), got [1, 3, 2, 5]

// -----

%q = "test.op"() : () -> tensor<1x3x2x4xf32>
%g = "test.op"() : () -> tensor<1x3x1xf32>
%o = mir.gated_delta_net %q, %q, %q, %g, %g : (tensor<1x3x2x4xf32>, tensor<1x3x2x4xf32>, tensor<1x3x2x4xf32>, tensor<1x3x1xf32>, tensor<1x3x1xf32>) -> tensor<1x3x2x4xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.gated_delta_net': g: expected shape [1, 3, 2] ([b, s, H]), got [1, 3, 1]

// -----

%q = "test.op"() : () -> tensor<1x3x2x4xi32>
%g = "test.op"() : () -> tensor<1x3x2xf32>
%o = mir.gated_delta_net %q, %q, %q, %g, %g : (tensor<1x3x2x4xi32>, tensor<1x3x2x4xi32>, tensor<1x3x2x4xi32>, tensor<1x3x2xf32>, tensor<1x3x2xf32>) -> tensor<1x3x2x4xi32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.gated_delta_net': q: expected element type f32, got i32

// -----

%q = "test.op"() : () -> tensor<1x3x2x4xf32>
%g = "test.op"() : () -> tensor<1x3x2xf32>
%s = "test.op"() : () -> tensor<1x2x4x3xf32>
%o = mir.gated_delta_net %q, %q, %q, %g, %g initial_state %s : (tensor<1x3x2x4xf32>, tensor<1x3x2x4xf32>, tensor<1x3x2x4xf32>, tensor<1x3x2xf32>, tensor<1x3x2xf32>, tensor<1x2x4x3xf32>) -> tensor<1x3x2x4xf32>

// CHECK: {{^// -{5}$}}
// CHECK-NEXT: 'mir.gated_delta_net': initial_state: expected shape [1, 2, 4, 4] ([b, H, n, m]), got [1, 2, 4, 3]
