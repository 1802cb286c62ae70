// RUN: rlx-opt %s --split-input-file | rlx-opt --split-input-file | filecheck %s
// RUN: rlx-opt %s --split-input-file --print-op-generic | rlx-opt --split-input-file | filecheck %s

// Round-trip of the sequence ops' reverse passes (custom form, and through the generic form).

func.func @selective_scan_backward() {
  %x = "test.op"() : () -> tensor<2x5x4xf32>
  %a = "test.op"() : () -> tensor<4x3xf32>
  %b = "test.op"() : () -> tensor<2x5x3xf32>
  %s = "test.op"() : () -> tensor<2x4x3xf32>
  %0:6 = mir.selective_scan_backward %x, %x, %a, %b, %b, %x, %s : (tensor<2x5x4xf32>, tensor<2x5x4xf32>, tensor<4x3xf32>, tensor<2x5x3xf32>, tensor<2x5x3xf32>, tensor<2x5x4xf32>, tensor<2x4x3xf32>) -> (tensor<2x5x4xf32>, tensor<2x5x4xf32>, tensor<2x4x3xf32>, tensor<2x5x3xf32>, tensor<2x5x3xf32>, tensor<2x5x4x3xf32>)
  %1:7 = mir.selective_scan_backward %x, %x, %a, %b, %b, %x, %s initial_state %s : (tensor<2x5x4xf32>, tensor<2x5x4xf32>, tensor<4x3xf32>, tensor<2x5x3xf32>, tensor<2x5x3xf32>, tensor<2x5x4xf32>, tensor<2x4x3xf32>, tensor<2x4x3xf32>) -> (tensor<2x5x4xf32>, tensor<2x5x4xf32>, tensor<2x4x3xf32>, tensor<2x5x3xf32>, tensor<2x5x3xf32>, tensor<2x5x4x3xf32>, tensor<2x4x3xf32>)
  func.return
}

// CHECK-LABEL: func.func @selective_scan_backward
// CHECK: mir.selective_scan_backward %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : ({{.*}}) -> (tensor<2x5x4xf32>, tensor<2x5x4xf32>, tensor<2x4x3xf32>, tensor<2x5x3xf32>, tensor<2x5x3xf32>, tensor<2x5x4x3xf32>)
// CHECK: mir.selective_scan_backward %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} initial_state %{{.*}} : ({{.*}}) -> ({{.*}}, tensor<2x5x4x3xf32>, tensor<2x4x3xf32>)

// -----

func.func @gated_delta_net_backward() {
  %q = "test.op"() : () -> tensor<1x3x2x4xf32>
  %v = "test.op"() : () -> tensor<1x3x2x5xf32>
  %g = "test.op"() : () -> tensor<1x3x2xf32>
  %s = "test.op"() : () -> tensor<1x2x4x5xf32>
  %0:7 = mir.gated_delta_net_backward %q, %q, %v, %g, %g, %v, %s initial_state %s : (tensor<1x3x2x4xf32>, tensor<1x3x2x4xf32>, tensor<1x3x2x5xf32>, tensor<1x3x2xf32>, tensor<1x3x2xf32>, tensor<1x3x2x5xf32>, tensor<1x2x4x5xf32>, tensor<1x2x4x5xf32>) -> (tensor<1x3x2x4xf32>, tensor<1x3x2x4xf32>, tensor<1x3x2x5xf32>, tensor<1x3x2xf32>, tensor<1x3x2xf32>, tensor<1x3x2x4x5xf32>, tensor<1x2x4x5xf32>)
  func.return
}

// CHECK-LABEL: func.func @gated_delta_net_backward
// CHECK: mir.gated_delta_net_backward %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} initial_state %{{.*}} : ({{.*}}) -> ({{.*}}, tensor<1x3x2x4x5xf32>, tensor<1x2x4x5xf32>)
