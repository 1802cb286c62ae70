// RUN: rlx-opt %s --split-input-file | rlx-opt --split-input-file | filecheck %s
// RUN: rlx-opt %s --split-input-file --print-op-generic | rlx-opt --split-input-file | filecheck %s

// Round-trip of the sequence ops (custom form, and through the generic form).

func.func @selective_scan() {
  %x = "test.op"() : () -> tensor<2x5x4xf32>
  %a = "test.op"() : () -> tensor<4x3xf32>
  %b = "test.op"() : () -> tensor<2x5x3xf32>
  %s = "test.op"() : () -> tensor<2x4x3xf32>
  %y = mir.selective_scan %x, %x, %a, %b, %b : (tensor<2x5x4xf32>, tensor<2x5x4xf32>, tensor<4x3xf32>, tensor<2x5x3xf32>, tensor<2x5x3xf32>) -> tensor<2x5x4xf32>
  %p, %f = mir.selective_scan %x, %x, %a, %b, %b initial_state %s return_state : (tensor<2x5x4xf32>, tensor<2x5x4xf32>, tensor<4x3xf32>, tensor<2x5x3xf32>, tensor<2x5x3xf32>, tensor<2x4x3xf32>) -> (tensor<2x5x4xf32>, tensor<2x4x3xf32>)
  func.return
}

// CHECK-LABEL: func.func @selective_scan
// CHECK: mir.selective_scan %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : ({{.*}}) -> tensor<2x5x4xf32>
// CHECK: %{{.*}}, %{{.*}} = mir.selective_scan %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} initial_state %{{.*}} return_state : ({{.*}}, tensor<2x4x3xf32>) -> (tensor<2x5x4xf32>, tensor<2x4x3xf32>)

// -----

func.func @gated_delta_net() {
  %q = "test.op"() : () -> tensor<1x3x2x4xf32>
  %v = "test.op"() : () -> tensor<1x3x2x5xf32>
  %g = "test.op"() : () -> tensor<1x3x2xf32>
  %s = "test.op"() : () -> tensor<1x2x4x5xf32>
  %o = mir.gated_delta_net %q, %q, %v, %g, %g : (tensor<1x3x2x4xf32>, tensor<1x3x2x4xf32>, tensor<1x3x2x5xf32>, tensor<1x3x2xf32>, tensor<1x3x2xf32>) -> tensor<1x3x2x5xf32>
  %p, %f = mir.gated_delta_net %q, %q, %v, %g, %g initial_state %s return_state : (tensor<1x3x2x4xf32>, tensor<1x3x2x4xf32>, tensor<1x3x2x5xf32>, tensor<1x3x2xf32>, tensor<1x3x2xf32>, tensor<1x2x4x5xf32>) -> (tensor<1x3x2x5xf32>, tensor<1x2x4x5xf32>)
  %y, %u = mir.gated_delta_net %q, %q, %v, %g, %g return_state : (tensor<1x3x2x4xf32>, tensor<1x3x2x4xf32>, tensor<1x3x2x5xf32>, tensor<1x3x2xf32>, tensor<1x3x2xf32>) -> (tensor<1x3x2x5xf32>, tensor<1x2x4x5xf32>)
  func.return
}

// CHECK-LABEL: func.func @gated_delta_net
// CHECK: mir.gated_delta_net %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : ({{.*}}) -> tensor<1x3x2x5xf32>
// CHECK: %{{.*}}, %{{.*}} = mir.gated_delta_net %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} initial_state %{{.*}} return_state : ({{.*}}) -> (tensor<1x3x2x5xf32>, tensor<1x2x4x5xf32>)
// CHECK: %{{.*}}, %{{.*}} = mir.gated_delta_net %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} return_state : ({{.*}}) -> (tensor<1x3x2x5xf32>, tensor<1x2x4x5xf32>)
