// RUN: rlx-opt %s --split-input-file --verify-diagnostics | filecheck %s

// One case per rule the sequence ops' reverse passes add to the forward ops' rules.

%x = "test.op"() : () -> tensor<2x5x4xf32>
%a = "test.op"() : () -> tensor<4x3xf32>
%b = "test.op"() : () -> tensor<2x5x3xf32>
%s = "test.op"() : () -> tensor<2x4x3xf32>
%0:6 = mir.selective_scan_backward %x, %x, %a, %b, %b, %b, %s : (tensor<2x5x4xf32>, tensor<2x5x4xf32>, tensor<4x3xf32>, tensor<2x5x3xf32>, tensor<2x5x3xf32>, tensor<2x5x3xf32>, tensor<2x4x3xf32>) -> (tensor<2x5x4xf32>, tensor<2x5x4xf32>, tensor<2x4x3xf32>, tensor<2x5x3xf32>, tensor<2x5x3xf32>, tensor<2x5x4x3xf32>)

// CHECK: 'mir.selective_scan_backward': dy: expected shape [2, 5, 4] (the shape of x [b, s, h]), got [2, 5, 3]

// -----

%x = "test.op"() : () -> tensor<2x5x4xf32>
%a = "test.op"() : () -> tensor<4x3xf32>
%b = "test.op"() : () -> tensor<2x5x3xf32>
%s = "test.op"() : () -> tensor<2x4x3xf32>
%0:6 = mir.selective_scan_backward %x, %x, %a, %b, %b, %x, %b : (tensor<2x5x4xf32>, tensor<2x5x4xf32>, tensor<4x3xf32>, tensor<2x5x3xf32>, tensor<2x5x3xf32>, tensor<2x5x4xf32>, tensor<2x5x3xf32>) -> (tensor<2x5x4xf32>, tensor<2x5x4xf32>, tensor<2x4x3xf32>, tensor<2x5x3xf32>, tensor<2x5x3xf32>, tensor<2x5x4x3xf32>)

// CHECK: 'mir.selective_scan_backward': d_final_state: expected shape [2, 4, 3] ([b, h, n]), got [2, 5, 3]

// -----

%x = "test.op"() : () -> tensor<2x5x4xf32>
%a = "test.op"() : () -> tensor<4x3xf32>
%b = "test.op"() : () -> tensor<2x5x3xf32>
%s = "test.op"() : () -> tensor<2x4x3xf32>
%0:7 = mir.selective_scan_backward %x, %x, %a, %b, %b, %x, %s : (tensor<2x5x4xf32>, tensor<2x5x4xf32>, tensor<4x3xf32>, tensor<2x5x3xf32>, tensor<2x5x3xf32>, tensor<2x5x4xf32>, tensor<2x4x3xf32>) -> (tensor<2x5x4xf32>, tensor<2x5x4xf32>, tensor<2x4x3xf32>, tensor<2x5x3xf32>, tensor<2x5x3xf32>, tensor<2x5x4x3xf32>, tensor<2x4x3xf32>)

// CHECK: 'mir.selective_scan_backward': d_initial_state: expected none (the properties ask for no d_initial_state), got a value of type tensor<2x4x3xf32>

// -----

%q = "test.op"() : () -> tensor<1x3x2x4xf32>
%v = "test.op"() : () -> tensor<1x3x2x5xf32>
%g = "test.op"() : () -> tensor<1x3x2xf32>
%s = "test.op"() : () -> tensor<1x2x4x5xf32>
%0:6 = mir.gated_delta_net_backward %q, %q, %v, %g, %g, %q, %s : (tensor<1x3x2x4xf32>, tensor<1x3x2x4xf32>, tensor<1x3x2x5xf32>, tensor<1x3x2xf32>, tensor<1x3x2xf32>, tensor<1x3x2x4xf32>, tensor<1x2x4x5xf32>) -> (tensor<1x3x2x4xf32>, tensor<1x3x2x4xf32>, tensor<1x3x2x5xf32>, tensor<1x3x2xf32>, tensor<1x3x2xf32>, tensor<1x3x2x4x5xf32>)

// CHECK: 'mir.gated_delta_net_backward': do: expected shape [1, 3, 2, 5] (the shape of v [b, s, H, m]), got [1, 3, 2, 4]
