// RUN: rlx-opt %s -p convert-mir-to-lir | filecheck %s
// RUN: rlx-opt %s -p convert-mir-to-lir | filecheck %s --check-prefix=NOTENSOR

// Bufferization leaves no tensor type anywhere (types, attributes, constants).
// NOTENSOR-NOT: tensor
// NOTENSOR-NOT: mir.

// The signature: tensor args become memrefs (attributes kept), one output arg per
// result, no results. Elementwise ops (table-driven) write into fresh allocs, the
// returned one straight into its output argument.

// CHECK-LABEL: func.func @elementwise(
// CHECK-SAME:      %[[A:.*]]: memref<4x8xf32> {rlx.name = "a", rlx.role = "input"},
// CHECK-SAME:      %[[B:.*]]: memref<8xf32> {rlx.name = "b", rlx.role = "param"},
// CHECK-SAME:      %[[OUT:.*]]: memref<4x8xf32> {rlx.name = "out0", rlx.role = "output"}) {
// CHECK-NEXT:    %[[S:.*]] = lir.alloc : memref<4x8xf32>
// CHECK-NEXT:    lir.elementwise add ins(%[[A]], %[[B]] : memref<4x8xf32>, memref<8xf32>) outs(%[[S]] : memref<4x8xf32>)
// CHECK-NEXT:    %[[E:.*]] = lir.alloc : memref<4x8xf32>
// CHECK-NEXT:    lir.elementwise exp ins(%[[S]] : memref<4x8xf32>) outs(%[[E]] : memref<4x8xf32>)
// CHECK-NEXT:    lir.elementwise gelu_tanh ins(%[[E]] : memref<4x8xf32>) outs(%[[OUT]] : memref<4x8xf32>)
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }
func.func @elementwise(%a: tensor<4x8xf32> {rlx.name = "a", rlx.role = "input"}, %b: tensor<8xf32> {rlx.name = "b", rlx.role = "param"}) -> tensor<4x8xf32> {
  %s = mir.add %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %e = mir.exp %s : tensor<4x8xf32>
  %y = mir.gelu_tanh %e : tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @elementwise_int(
// CHECK-SAME:      %[[A:.*]]: memref<5xi32>, %[[B:.*]]: memref<5xi32>, %[[OUT:.*]]: memref<5xi32> {rlx.name = "out0", rlx.role = "output"}) {
// CHECK-NEXT:    %[[M:.*]] = lir.alloc : memref<5xi32>
// CHECK-NEXT:    lir.elementwise max ins(%[[A]], %[[B]] : memref<5xi32>, memref<5xi32>) outs(%[[M]] : memref<5xi32>)
// CHECK-NEXT:    lir.elementwise neg ins(%[[M]] : memref<5xi32>) outs(%[[OUT]] : memref<5xi32>)
func.func @elementwise_int(%a: tensor<5xi32>, %b: tensor<5xi32>) -> tensor<5xi32> {
  %m = mir.max %a, %b : (tensor<5xi32>, tensor<5xi32>) -> tensor<5xi32>
  %y = mir.neg %m : tensor<5xi32>
  func.return %y : tensor<5xi32>
}

// The body region moves over; its mir.yield becomes lir.yield.

// CHECK-LABEL: func.func @fused_elementwise(
// CHECK-SAME:      %[[A:.*]]: memref<4x8xf32>, %[[C:.*]]: memref<f32>, %[[OUT:.*]]: memref<4x8xf32> {rlx.name = "out0", rlx.role = "output"}) {
// CHECK-NEXT:    lir.fused_elementwise ins(%[[A]], %[[C]] : memref<4x8xf32>, memref<f32>) outs(%[[OUT]] : memref<4x8xf32>) {
// CHECK-NEXT:    ^{{.*}}(%[[X:.*]]: f32, %[[Y:.*]]: f32):
// CHECK-NEXT:      %[[M:.*]] = arith.mulf %[[X]], %[[Y]] : f32
// CHECK-NEXT:      %[[R:.*]] = math.tanh %[[M]] : f32
// CHECK-NEXT:      lir.yield %[[R]] : f32
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return
func.func @fused_elementwise(%a: tensor<4x8xf32>, %c: tensor<f32>) -> tensor<4x8xf32> {
  %y = mir.fused_elementwise ins(%a, %c : tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32> {
  ^bb0(%x: f32, %s: f32):
    %m = arith.mulf %x, %s : f32
    %r = math.tanh %m : f32
    mir.yield %r : f32
  }
  func.return %y : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @matmul(
// CHECK-SAME:      %[[A:.*]]: memref<2x4x8xf32>, %[[B:.*]]: memref<8x16xf32>, %[[BIAS:.*]]: memref<16xf32>, %[[OUT:.*]]: memref<2x4x16xf32> {{.*}}) {
// CHECK-NEXT:    %[[M:.*]] = lir.alloc : memref<2x4x16xf32>
// CHECK-NEXT:    lir.matmul ins(%[[A]], %[[B]] : memref<2x4x8xf32>, memref<8x16xf32>) outs(%[[M]] : memref<2x4x16xf32>)
// CHECK-NEXT:    %[[F:.*]] = lir.alloc : memref<2x4x16xf32>
// CHECK-NEXT:    lir.fused_matmul ins(%[[A]], %[[B]], %[[BIAS]] : memref<2x4x8xf32>, memref<8x16xf32>, memref<16xf32>) outs(%[[F]] : memref<2x4x16xf32>) activation silu
// CHECK-NEXT:    %[[G:.*]] = lir.alloc : memref<2x4x16xf32>
// CHECK-NEXT:    lir.fused_matmul ins(%[[A]], %[[B]] : memref<2x4x8xf32>, memref<8x16xf32>) outs(%[[G]] : memref<2x4x16xf32>)
// CHECK-NEXT:    %[[S:.*]] = lir.alloc : memref<2x4x16xf32>
// CHECK-NEXT:    lir.elementwise add ins(%[[M]], %[[F]] : {{.*}}) outs(%[[S]] : memref<2x4x16xf32>)
// CHECK-NEXT:    lir.elementwise add ins(%[[S]], %[[G]] : {{.*}}) outs(%[[OUT]] : memref<2x4x16xf32>)
func.func @matmul(%a: tensor<2x4x8xf32>, %b: tensor<8x16xf32>, %bias: tensor<16xf32>) -> tensor<2x4x16xf32> {
  %m = mir.matmul %a, %b : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %f = mir.fused_matmul %a, %b, %bias activation silu : (tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  %g = mir.fused_matmul %a, %b : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %s = mir.add %m, %f : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %y = mir.add %s, %g : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  func.return %y : tensor<2x4x16xf32>
}

// Two results: reduce writes the first output, softmax the second.

// CHECK-LABEL: func.func @reduce_softmax(
// CHECK-SAME:      %[[X:.*]]: memref<4x8xf32>, %[[OUT0:.*]]: memref<4x1xf32> {rlx.name = "out0", rlx.role = "output"}, %[[OUT1:.*]]: memref<f32> {rlx.name = "out1", rlx.role = "output"}) {
// CHECK-NEXT:    lir.reduce max ins(%[[X]] : memref<4x8xf32>) outs(%[[OUT0]] : memref<4x1xf32>) axes [1] keepdim
// CHECK-NEXT:    %[[SM:.*]] = lir.alloc : memref<4x8xf32>
// CHECK-NEXT:    lir.softmax ins(%[[X]] : memref<4x8xf32>) outs(%[[SM]] : memref<4x8xf32>) axis 0
// CHECK-NEXT:    lir.reduce mean ins(%[[SM]] : memref<4x8xf32>) outs(%[[OUT1]] : memref<f32>) axes [0, 1]
// CHECK-NEXT:    func.return
func.func @reduce_softmax(%x: tensor<4x8xf32>) -> (tensor<4x1xf32>, tensor<f32>) {
  %m = mir.reduce max %x axes [1] keepdim : tensor<4x8xf32> -> tensor<4x1xf32>
  %sm = mir.softmax %x axis 0 : tensor<4x8xf32>
  %a = mir.reduce mean %sm axes [0, 1] : tensor<4x8xf32> -> tensor<f32>
  func.return %m, %a : tensor<4x1xf32>, tensor<f32>
}

// CHECK-LABEL: func.func @norms(
// CHECK-SAME:      %[[X:.*]]: memref<4x8xf32>, %[[G:.*]]: memref<8xf32>, %[[B:.*]]: memref<8xf32>, %[[OUT:.*]]: memref<4x8xf32> {{.*}}) {
// CHECK-NEXT:    %[[R:.*]] = lir.alloc : memref<4x8xf32>
// CHECK-NEXT:    lir.rms_norm ins(%[[X]], %[[G]] : memref<4x8xf32>, memref<8xf32>) outs(%[[R]] : memref<4x8xf32>) eps 1.000000e-05
// CHECK-NEXT:    %[[RB:.*]] = lir.alloc : memref<4x8xf32>
// CHECK-NEXT:    lir.rms_norm ins(%[[R]], %[[G]], %[[B]] : memref<4x8xf32>, memref<8xf32>, memref<8xf32>) outs(%[[RB]] : memref<4x8xf32>) eps 1.000000e-06
// CHECK-NEXT:    lir.layer_norm ins(%[[RB]], %[[G]], %[[B]] : memref<4x8xf32>, memref<8xf32>, memref<8xf32>) outs(%[[OUT]] : memref<4x8xf32>) eps 1.000000e-03
func.func @norms(%x: tensor<4x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %r = mir.rms_norm %x, %g : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %rb = mir.rms_norm %r, %g, %b eps 1.0e-06 : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %y = mir.layer_norm %rb, %g, %b eps 1.0e-03 : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @rope_attention(
// CHECK-SAME:      %[[Q:.*]]: memref<4x16xf32>, %[[K:.*]]: memref<6x8xf32>, %[[V:.*]]: memref<6x8xf32>, %[[COS:.*]]: memref<4x4xf32>, %[[SIN:.*]]: memref<4x4xf32>, %[[MASK:.*]]: memref<4x6xf32>, %[[OUT:.*]]: memref<4x16xf32> {{.*}}) {
// CHECK-NEXT:    %[[QR:.*]] = lir.alloc : memref<4x16xf32>
// CHECK-NEXT:    lir.rope ins(%[[Q]], %[[COS]], %[[SIN]] : memref<4x16xf32>, memref<4x4xf32>, memref<4x4xf32>) outs(%[[QR]] : memref<4x16xf32>) head_dim 8 n_rot 8 style interleaved
// CHECK-NEXT:    %[[A:.*]] = lir.alloc : memref<4x16xf32>
// CHECK-NEXT:    lir.attention ins(%[[QR]], %[[K]], %[[V]] : memref<4x16xf32>, memref<6x8xf32>, memref<6x8xf32>) outs(%[[A]] : memref<4x16xf32>) num_heads 2 head_dim 8 num_kv_heads 1 mask_kind causal scale 0.353553385
// CHECK-NEXT:    lir.attention ins(%[[A]], %[[K]], %[[V]], %[[MASK]] : memref<4x16xf32>, memref<6x8xf32>, memref<6x8xf32>, memref<4x6xf32>) outs(%[[OUT]] : memref<4x16xf32>) num_heads 2 head_dim 8 num_kv_heads 1 mask_kind bias scale 2.500000e-01
func.func @rope_attention(%q: tensor<4x16xf32>, %k: tensor<6x8xf32>, %v: tensor<6x8xf32>, %cos: tensor<4x4xf32>, %sin: tensor<4x4xf32>, %mask: tensor<4x6xf32>) -> tensor<4x16xf32> {
  %qr = mir.rope %q, %cos, %sin head_dim 8 n_rot 8 style interleaved : (tensor<4x16xf32>, tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x16xf32>
  %a = mir.attention %qr, %k, %v num_heads 2 head_dim 8 num_kv_heads 1 mask_kind causal scale 0.35355339 : (tensor<4x16xf32>, tensor<6x8xf32>, tensor<6x8xf32>) -> tensor<4x16xf32>
  %y = mir.attention %a, %k, %v, %mask num_heads 2 head_dim 8 num_kv_heads 1 mask_kind bias scale 0.25 : (tensor<4x16xf32>, tensor<6x8xf32>, tensor<6x8xf32>, tensor<4x6xf32>) -> tensor<4x16xf32>
  func.return %y : tensor<4x16xf32>
}

// A reshape is a view at offset 0 (no copy); a reshape of a view views the base; a
// reshape back to the base's type is the base itself. The abs result's only use is a
// returned reshape, so abs writes into a view of the output argument.

// CHECK-LABEL: func.func @reshape_view(
// CHECK-SAME:      %[[X:.*]]: memref<4x8xf32>, %[[OUT0:.*]]: memref<8x4xf32> {{.*}}, %[[OUT1:.*]]: memref<8x4xf32> {{.*}}, %[[OUT2:.*]]: memref<2x16xf32> {{.*}}) {
// CHECK-NEXT:    %[[E:.*]] = lir.alloc : memref<4x8xf32>
// CHECK-NEXT:    lir.elementwise exp ins(%[[X]] : memref<4x8xf32>) outs(%[[E]] : memref<4x8xf32>)
// CHECK-NEXT:    %[[V:.*]] = lir.view %[[E]][0] : memref<4x8xf32> -> memref<2x16xf32>
// CHECK-NEXT:    %[[W:.*]] = lir.view %[[E]][0] : memref<4x8xf32> -> memref<32xf32>
// CHECK-NEXT:    %[[S:.*]] = lir.alloc : memref<2x16xf32>
// CHECK-NEXT:    lir.elementwise sqrt ins(%[[V]] : memref<2x16xf32>) outs(%[[S]] : memref<2x16xf32>)
// CHECK-NEXT:    %[[T:.*]] = lir.view %[[OUT0]][0] : memref<8x4xf32> -> memref<32xf32>
// CHECK-NEXT:    lir.elementwise abs ins(%[[W]] : memref<32xf32>) outs(%[[T]] : memref<32xf32>)
// CHECK-NEXT:    %[[U:.*]] = lir.view %[[S]][0] : memref<2x16xf32> -> memref<8x4xf32>
// CHECK-NEXT:    lir.elementwise neg ins(%[[U]] : memref<8x4xf32>) outs(%[[OUT1]] : memref<8x4xf32>)
// CHECK-NEXT:    lir.elementwise neg ins(%[[S]] : memref<2x16xf32>) outs(%[[OUT2]] : memref<2x16xf32>)
// CHECK-NEXT:    func.return
func.func @reshape_view(%x: tensor<4x8xf32>) -> (tensor<8x4xf32>, tensor<8x4xf32>, tensor<2x16xf32>) {
  %e = mir.exp %x : tensor<4x8xf32>
  %v = mir.reshape %e : tensor<4x8xf32> -> tensor<2x16xf32>
  %w = mir.reshape %v : tensor<2x16xf32> -> tensor<32xf32>
  %s = mir.sqrt %v : tensor<2x16xf32>
  %t = mir.abs %w : tensor<32xf32>
  %y = mir.reshape %t : tensor<32xf32> -> tensor<8x4xf32>
  %u = mir.reshape %s : tensor<2x16xf32> -> tensor<8x4xf32>
  %b = mir.reshape %u : tensor<8x4xf32> -> tensor<32xf32>
  %b2 = mir.reshape %b : tensor<32xf32> -> tensor<2x16xf32>
  %n1 = mir.neg %u : tensor<8x4xf32>
  %n2 = mir.neg %b2 : tensor<2x16xf32>
  func.return %y, %n1, %n2 : tensor<8x4xf32>, tensor<8x4xf32>, tensor<2x16xf32>
}

// A returned reshape of a single-use value: the producer writes into a view of the
// output argument, and the reshape is the output argument itself (no copy).

// CHECK-LABEL: func.func @reshape_of_result(
// CHECK-SAME:      %[[X:.*]]: memref<4x8xf32>, %[[OUT:.*]]: memref<2x2x8xf32> {{.*}}) {
// CHECK-NEXT:    %[[V:.*]] = lir.view %[[OUT]][0] : memref<2x2x8xf32> -> memref<4x8xf32>
// CHECK-NEXT:    lir.elementwise relu ins(%[[X]] : memref<4x8xf32>) outs(%[[V]] : memref<4x8xf32>)
// CHECK-NEXT:    func.return
func.func @reshape_of_result(%x: tensor<4x8xf32>) -> tensor<2x2x8xf32> {
  %r = mir.relu %x : tensor<4x8xf32>
  %f = mir.reshape %r : tensor<4x8xf32> -> tensor<32xf32>
  %y = mir.reshape %f : tensor<32xf32> -> tensor<2x2x8xf32>
  func.return %y : tensor<2x2x8xf32>
}

// A narrow whose leading dims are all 1 is one contiguous range: a view at
// start * (elements per step of the axis), views of views flattened into one view of
// the base (the intermediate views go); a strided narrow is the lir.narrow kernel.

// CHECK-LABEL: func.func @narrow(
// CHECK-SAME:      %[[X:.*]]: memref<1x6x8xf32>, %[[OUT0:.*]]: memref<1x2x8xf32> {{.*}}, %[[OUT1:.*]]: memref<1x6x3xf32> {{.*}}, %[[OUT2:.*]]: memref<2x8xf32> {{.*}}) {
// CHECK-NEXT:    %[[E:.*]] = lir.alloc : memref<1x6x8xf32>
// CHECK-NEXT:    lir.elementwise exp ins(%[[X]] : memref<1x6x8xf32>) outs(%[[E]] : memref<1x6x8xf32>)
// CHECK-NEXT:    %[[C:.*]] = lir.view %[[E]][24] : memref<1x6x8xf32> -> memref<1x2x8xf32>
// CHECK-NEXT:    lir.narrow ins(%[[E]] : memref<1x6x8xf32>) outs(%[[OUT1]] : memref<1x6x3xf32>) axis -1 start 5 length 3
// CHECK-NEXT:    %[[D:.*]] = lir.view %[[E]][16] : memref<1x6x8xf32> -> memref<2x8xf32>
// CHECK-NEXT:    lir.copy ins(%[[C]] : memref<1x2x8xf32>) outs(%[[OUT0]] : memref<1x2x8xf32>)
// CHECK-NEXT:    lir.copy ins(%[[D]] : memref<2x8xf32>) outs(%[[OUT2]] : memref<2x8xf32>)
// CHECK-NEXT:    func.return
func.func @narrow(%x: tensor<1x6x8xf32>) -> (tensor<1x2x8xf32>, tensor<1x6x3xf32>, tensor<2x8xf32>) {
  %e = mir.exp %x : tensor<1x6x8xf32>
  %c = mir.narrow %e axis 1 start 3 length 2 : tensor<1x6x8xf32> -> tensor<1x2x8xf32>
  %s = mir.narrow %e axis -1 start 5 length 3 : tensor<1x6x8xf32> -> tensor<1x6x3xf32>
  %r = mir.reshape %e : tensor<1x6x8xf32> -> tensor<6x8xf32>
  %n = mir.narrow %r axis 0 start 1 length 5 : tensor<6x8xf32> -> tensor<5x8xf32>
  %d = mir.narrow %n axis 0 start 1 length 2 : tensor<5x8xf32> -> tensor<2x8xf32>
  func.return %c, %s, %d : tensor<1x2x8xf32>, tensor<1x6x3xf32>, tensor<2x8xf32>
}

// CHECK-LABEL: func.func @data_movement(
// CHECK-SAME:      %[[A:.*]]: memref<2x8xf32>, %[[B:.*]]: memref<3x8xf32>, %[[T:.*]]: memref<10x8xf32>, %[[IDS:.*]]: memref<2x3xi64>, %[[OUT0:.*]]: memref<8x5xf32> {{.*}}, %[[OUT1:.*]]: memref<2x3x8xf32> {{.*}}, %[[OUT2:.*]]: memref<4x3x8xf32> {{.*}}) {
// CHECK-NEXT:    %[[C:.*]] = lir.alloc : memref<5x8xf32>
// CHECK-NEXT:    lir.concat ins(%[[A]], %[[B]] : memref<2x8xf32>, memref<3x8xf32>) outs(%[[C]] : memref<5x8xf32>) axis 0
// CHECK-NEXT:    lir.transpose ins(%[[C]] : memref<5x8xf32>) outs(%[[OUT0]] : memref<8x5xf32>) perm [1, 0]
// CHECK-NEXT:    lir.gather ins(%[[T]], %[[IDS]] : memref<10x8xf32>, memref<2x3xi64>) outs(%[[OUT1]] : memref<2x3x8xf32>) axis 0
// CHECK-NEXT:    lir.broadcast_to ins(%[[B]] : memref<3x8xf32>) outs(%[[OUT2]] : memref<4x3x8xf32>)
// CHECK-NEXT:    func.return
func.func @data_movement(%a: tensor<2x8xf32>, %b: tensor<3x8xf32>, %t: tensor<10x8xf32>, %ids: tensor<2x3xi64>) -> (tensor<8x5xf32>, tensor<2x3x8xf32>, tensor<4x3x8xf32>) {
  %c = mir.concat %a, %b axis 0 : (tensor<2x8xf32>, tensor<3x8xf32>) -> tensor<5x8xf32>
  %tr = mir.transpose %c perm [1, 0] : tensor<5x8xf32> -> tensor<8x5xf32>
  %g = mir.gather %t, %ids axis 0 : (tensor<10x8xf32>, tensor<2x3xi64>) -> tensor<2x3x8xf32>
  %bc = mir.broadcast_to %b : tensor<3x8xf32> -> tensor<4x3x8xf32>
  func.return %tr, %g, %bc : tensor<8x5xf32>, tensor<2x3x8xf32>, tensor<4x3x8xf32>
}

// The constant's value is retyped as a memref (no tensor type remains).

// CHECK-LABEL: func.func @constant(
// CHECK-SAME:      %[[X:.*]]: memref<2xf32>, %[[OUT0:.*]]: memref<2xf32> {{.*}}, %[[OUT1:.*]]: memref<2x2xui8> {{.*}}) {
// CHECK-NEXT:    %[[C:.*]] = lir.alloc : memref<2xf32>
// CHECK-NEXT:    lir.constant dense<[1.000000e+00, 2.000000e+00]> : memref<2xf32> outs(%[[C]] : memref<2xf32>)
// CHECK-NEXT:    lir.elementwise mul ins(%[[X]], %[[C]] : memref<2xf32>, memref<2xf32>) outs(%[[OUT0]] : memref<2xf32>)
// CHECK-NEXT:    lir.constant dense<{{\[\[}}1, 2], [3, 255]]> : memref<2x2xui8> outs(%[[OUT1]] : memref<2x2xui8>)
// CHECK-NEXT:    func.return
func.func @constant(%x: tensor<2xf32>) -> (tensor<2xf32>, tensor<2x2xui8>) {
  %c = mir.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %y = mir.mul %x, %c : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %u = mir.constant dense<[[1, 2], [3, 255]]> : tensor<2x2xui8>
  func.return %y, %u : tensor<2xf32>, tensor<2x2xui8>
}

// CHECK-LABEL: func.func @dequant_conv(
// CHECK-SAME:      %[[X:.*]]: memref<4x64xf32>, %[[W:.*]]: memref<16x36xui8>, %[[P:.*]]: memref<1x6x16xf32>, %[[K:.*]]: memref<3x16xf32>, %[[OUT0:.*]]: memref<4x16xf32> {{.*}}, %[[OUT1:.*]]: memref<1x4x16xf32> {{.*}}) {
// CHECK-NEXT:    lir.dequant_matmul q4_0 ins(%[[X]], %[[W]] : memref<4x64xf32>, memref<16x36xui8>) outs(%[[OUT0]] : memref<4x16xf32>)
// CHECK-NEXT:    lir.depthwise_conv1d ins(%[[P]], %[[K]] : memref<1x6x16xf32>, memref<3x16xf32>) outs(%[[OUT1]] : memref<1x4x16xf32>)
// CHECK-NEXT:    func.return
func.func @dequant_conv(%x: tensor<4x64xf32>, %w: tensor<16x36xui8>, %p: tensor<1x6x16xf32>, %k: tensor<3x16xf32>) -> (tensor<4x16xf32>, tensor<1x4x16xf32>) {
  %d = mir.dequant_matmul %x, %w scheme q4_0 : (tensor<4x64xf32>, tensor<16x36xui8>) -> tensor<4x16xf32>
  %c = mir.depthwise_conv1d %p, %k : (tensor<1x6x16xf32>, tensor<3x16xf32>) -> tensor<1x4x16xf32>
  func.return %d, %c : tensor<4x16xf32>, tensor<1x4x16xf32>
}

// A returned argument is copied; a value returned twice is written once and copied
// into the second output; a returned value may still feed later kernels.

// CHECK-LABEL: func.func @returns(
// CHECK-SAME:      %[[X:.*]]: memref<3xf32> {rlx.name = "x", rlx.role = "input"},
// CHECK-SAME:      %[[OUT0:.*]]: memref<3xf32> {rlx.name = "out0", rlx.role = "output"},
// CHECK-SAME:      %[[OUT1:.*]]: memref<3xf32> {rlx.name = "out1", rlx.role = "output"},
// CHECK-SAME:      %[[OUT2:.*]]: memref<3xf32> {rlx.name = "out2", rlx.role = "output"},
// CHECK-SAME:      %[[OUT3:.*]]: memref<3xf32> {rlx.name = "out3", rlx.role = "output"}) {
// CHECK-NEXT:    lir.elementwise tanh ins(%[[X]] : memref<3xf32>) outs(%[[OUT1]] : memref<3xf32>)
// CHECK-NEXT:    lir.elementwise sigmoid ins(%[[OUT1]] : memref<3xf32>) outs(%[[OUT3]] : memref<3xf32>)
// CHECK-NEXT:    lir.copy ins(%[[X]] : memref<3xf32>) outs(%[[OUT0]] : memref<3xf32>)
// CHECK-NEXT:    lir.copy ins(%[[OUT1]] : memref<3xf32>) outs(%[[OUT2]] : memref<3xf32>)
// CHECK-NEXT:    func.return
func.func @returns(%x: tensor<3xf32> {rlx.name = "x", rlx.role = "input"}) -> (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) {
  %t = mir.tanh %x : tensor<3xf32>
  %s = mir.sigmoid %t : tensor<3xf32>
  func.return %x, %t, %t, %s : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
}

// Functions that are already bufferized, or have no tensors, are left alone.

// CHECK-LABEL: func.func @already_lir(
// CHECK-SAME:      %[[X:.*]]: memref<3xf32>, %[[O:.*]]: memref<3xf32>) {
// CHECK-NEXT:    lir.elementwise log ins(%[[X]] : memref<3xf32>) outs(%[[O]] : memref<3xf32>)
// CHECK-NEXT:    func.return
func.func @already_lir(%x: memref<3xf32>, %o: memref<3xf32>) {
  lir.elementwise log ins(%x : memref<3xf32>) outs(%o : memref<3xf32>)
  func.return
}

// The activation form is carried to lir.
// CHECK-LABEL: func.func @dequant_matmul_q8_activations(
// CHECK:         lir.dequant_matmul q5_0 ins(%{{.*}}, %{{.*}} : memref<3x64xf32>, memref<8x44xui8>) outs(%{{.*}} : memref<3x8xf32>) activations q8
func.func @dequant_matmul_q8_activations(%x: tensor<3x64xf32>, %w: tensor<8x44xui8>) -> tensor<3x8xf32> {
  %y = mir.dequant_matmul %x, %w scheme q5_0 activations q8 : (tensor<3x64xf32>, tensor<8x44xui8>) -> tensor<3x8xf32>
  func.return %y : tensor<3x8xf32>
}

// A shared-input matmul is one kernel in every form (x read, and with q8 activations
// quantized, once), one out per weight.
// CHECK-LABEL: func.func @shared_input_q8(
// CHECK-SAME:      %[[X:.*]]: memref<2x64xf32>, %[[G:.*]]: memref<6x36xui8>, %[[U:.*]]: memref<4x36xui8>, %[[O0:.*]]: memref<2x6xf32> {{.*}}, %[[O1:.*]]: memref<2x4xf32> {{.*}}) {
// CHECK-NEXT:    lir.shared_input_matmul q4_0 ins(%[[X]], %[[G]], %[[U]] : memref<2x64xf32>, memref<6x36xui8>, memref<4x36xui8>) outs(%[[O0]], %[[O1]] : memref<2x6xf32>, memref<2x4xf32>) activations q8
// CHECK-NEXT:    func.return
func.func @shared_input_q8(%x: tensor<2x64xf32>, %g: tensor<6x36xui8>, %u: tensor<4x36xui8>) -> (tensor<2x6xf32>, tensor<2x4xf32>) {
  %a, %b = mir.shared_input_matmul %x, %g, %u scheme q4_0 activations q8 : (tensor<2x64xf32>, tensor<6x36xui8>, tensor<4x36xui8>) -> (tensor<2x6xf32>, tensor<2x4xf32>)
  func.return %a, %b : tensor<2x6xf32>, tensor<2x4xf32>
}

// CHECK-LABEL: func.func @shared_input_f32(
// CHECK-SAME:      %[[X:.*]]: memref<2x8xf32>, %[[A:.*]]: memref<8x3xf32>, %[[B:.*]]: memref<8x5xf32>, %[[O0:.*]]: memref<2x3xf32> {{.*}}, %[[O1:.*]]: memref<2x5xf32> {{.*}}) {
// CHECK-NEXT:    lir.shared_input_matmul ins(%[[X]], %[[A]], %[[B]] : memref<2x8xf32>, memref<8x3xf32>, memref<8x5xf32>) outs(%[[O0]], %[[O1]] : memref<2x3xf32>, memref<2x5xf32>)
// CHECK-NOT:     lir.matmul
// CHECK-NEXT:    func.return
func.func @shared_input_f32(%x: tensor<2x8xf32>, %a: tensor<8x3xf32>, %b: tensor<8x5xf32>) -> (tensor<2x3xf32>, tensor<2x5xf32>) {
  %p, %q = mir.shared_input_matmul %x, %a, %b : (tensor<2x8xf32>, tensor<8x3xf32>, tensor<8x5xf32>) -> (tensor<2x3xf32>, tensor<2x5xf32>)
  func.return %p, %q : tensor<2x3xf32>, tensor<2x5xf32>
}

// GGUF weights with f32 activations (the exact form; here q6_k over 3 weights): one kernel.
// CHECK-LABEL: func.func @shared_input_dequant_f32(
// CHECK-SAME:      %[[X:.*]]: memref<?x256xf32> {{.*}}, %[[Q:.*]]: memref<8x210xui8>, %[[K:.*]]: memref<4x210xui8>, %[[V:.*]]: memref<1x210xui8>, %[[O0:.*]]: memref<?x8xf32> {{.*}}, %[[O1:.*]]: memref<?x4xf32> {{.*}}, %[[O2:.*]]: memref<?x1xf32> {{.*}}
// CHECK-NEXT:    lir.shared_input_matmul q6_k ins(%[[X]], %[[Q]], %[[K]], %[[V]] : memref<?x256xf32>, memref<8x210xui8>, memref<4x210xui8>, memref<1x210xui8>) outs(%[[O0]], %[[O1]], %[[O2]] : memref<?x8xf32>, memref<?x4xf32>, memref<?x1xf32>)
// CHECK-NEXT:    func.return
func.func @shared_input_dequant_f32(%x: tensor<?x256xf32> {rlx.dims = ["S", 256]}, %q: tensor<8x210xui8>, %k: tensor<4x210xui8>, %v: tensor<1x210xui8>) -> (tensor<?x8xf32>, tensor<?x4xf32>, tensor<?x1xf32>) {
  %a, %b, %c = mir.shared_input_matmul %x, %q, %k, %v scheme q6_k : (tensor<?x256xf32>, tensor<8x210xui8>, tensor<4x210xui8>, tensor<1x210xui8>) -> (tensor<?x8xf32>, tensor<?x4xf32>, tensor<?x1xf32>)
  func.return %a, %b, %c : tensor<?x8xf32>, tensor<?x4xf32>, tensor<?x1xf32>
}
