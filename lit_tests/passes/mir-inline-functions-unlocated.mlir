// RUN: rlx-opt %s --print-debuginfo -p rlx-lower | filecheck %s

// Location-free text: the pipeline names an unlocated call after its callee (`f#0`), so
// the inlined ops' kernels carry the function's name as their scope.

func.func private @f(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %t = mir.tanh %a : tensor<2x3xf32>
  func.return %t : tensor<2x3xf32>
}

func.func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %y = func.call @f(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %y : tensor<2x3xf32>
}

// CHECK: loc("f#0.tanh#0")
// CHECK-NOT: call#0
