// RUN: rlx-opt %s | rlx-opt | filecheck %s
// RUN: rlx-opt %s --print-op-generic | rlx-opt | filecheck %s

// The sampling ops round-trip in custom and generic form.

// CHECK-LABEL: func.func @sampling
// CHECK:       mir.argmax %{{.*}} : tensor<2x10xf32> -> tensor<2xi32>
// CHECK:       mir.top_k %{{.*}} k 3 : (tensor<2x10xf32>) -> (tensor<2x3xf32>, tensor<2x3xi32>)
// CHECK:       mir.sample %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x10xf32>, tensor<f32>, tensor<i32>, tensor<f32>, tensor<i64>) -> tensor<2xi32>
// CHECK:       mir.sample %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} position %{{.*}} : (tensor<2x10xf32>, tensor<f32>, tensor<i32>, tensor<f32>, tensor<i64>, index) -> tensor<2xi32>
// CHECK:       mir.sample %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} row_positions(%{{.*}} : tensor<2xi64>) : (tensor<2x10xf32>, tensor<2xf32>, tensor<i32>, tensor<f32>, tensor<2xi64>) -> tensor<2xi32>
func.func @sampling(%x: tensor<2x10xf32>, %t: tensor<f32>, %k: tensor<i32>, %p: tensor<f32>, %s: tensor<i64>, %pos: index, %tr: tensor<2xf32>, %sr: tensor<2xi64>, %rp: tensor<2xi64>) {
  %a = mir.argmax %x : tensor<2x10xf32> -> tensor<2xi32>
  %v, %i = mir.top_k %x k 3 : (tensor<2x10xf32>) -> (tensor<2x3xf32>, tensor<2x3xi32>)
  %d = mir.sample %x, %t, %k, %p, %s : (tensor<2x10xf32>, tensor<f32>, tensor<i32>, tensor<f32>, tensor<i64>) -> tensor<2xi32>
  %e = mir.sample %x, %t, %k, %p, %s position %pos : (tensor<2x10xf32>, tensor<f32>, tensor<i32>, tensor<f32>, tensor<i64>, index) -> tensor<2xi32>
  %f = mir.sample %x, %tr, %k, %p, %sr row_positions(%rp : tensor<2xi64>) : (tensor<2x10xf32>, tensor<2xf32>, tensor<i32>, tensor<f32>, tensor<2xi64>) -> tensor<2xi32>
  func.return
}
