// RUN: rlx-opt %s --split-input-file | rlx-opt --split-input-file | filecheck %s
// RUN: rlx-opt %s --split-input-file --print-op-generic | rlx-opt --split-input-file | filecheck %s

// Round-trip of the state ops (custom form, and through the generic form): a KV-cache
// append (insert_rows at the position, assign of the updated cache, its first T rows),
// and a recurrent state's assign.

func.func @append(%x: tensor<?x8xf32> {rlx.name = "x", rlx.role = "input", rlx.dims = ["S", 8]}, %k: tensor<16x8xf32> {rlx.name = "k", rlx.role = "state"}, %position: index {rlx.name = "position", rlx.role = "position"}) -> (tensor<?x8xf32> {rlx.dims = ["T", 8]}) attributes {rlx.cache_dims = {T = ["S", 16]}} {
  %k2 = mir.insert_rows %x into %k[%position] : tensor<?x8xf32> into tensor<16x8xf32>
  mir.assign %k2 to %k : tensor<16x8xf32>
  %rows = mir.extract_rows %k2 size "T" : tensor<16x8xf32> -> tensor<?x8xf32>
  func.return %rows : tensor<?x8xf32>
}

// CHECK-LABEL: func.func @append
// CHECK-SAME:    attributes {rlx.cache_dims = {T = ["S", 16 : i64]}}
// CHECK:         %[[K2:.*]] = mir.insert_rows %x into %k[%position] : tensor<?x8xf32> into tensor<16x8xf32>
// CHECK-NEXT:    mir.assign %[[K2]] to %k : tensor<16x8xf32>
// CHECK-NEXT:    %{{.*}} = mir.extract_rows %[[K2]] size "T" : tensor<16x8xf32> -> tensor<?x8xf32>

// -----

func.func @recurrent(%x: tensor<1x8xf32> {rlx.name = "x", rlx.role = "input"}, %h: tensor<1x8xf32> {rlx.name = "h", rlx.role = "state"}) -> tensor<1x8xf32> {
  %n = mir.add %x, %h : (tensor<1x8xf32>, tensor<1x8xf32>) -> tensor<1x8xf32>
  mir.assign %n to %h : tensor<1x8xf32>
  func.return %h : tensor<1x8xf32>
}

// CHECK-LABEL: func.func @recurrent
// CHECK:         %[[N:.*]] = mir.add
// CHECK-NEXT:    mir.assign %[[N]] to %h : tensor<1x8xf32>
// CHECK-NEXT:    func.return %h
