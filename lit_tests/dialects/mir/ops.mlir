// RUN: rlx-opt %s --split-input-file | rlx-opt --split-input-file | filecheck %s
// RUN: rlx-opt %s --split-input-file --print-op-generic | rlx-opt --split-input-file | filecheck %s
// RUN: rlx-opt %s --split-input-file --print-op-generic | filecheck %s --check-prefix=GENERIC

// Round-trip of every mir op in its custom form (and through the generic form).

func.func @binary() {
  %a = "test.op"() : () -> tensor<4x1xf32>
  %b = "test.op"() : () -> tensor<8xf32>
  %s = "test.op"() : () -> tensor<f32>
  %add = mir.add %a, %b : (tensor<4x1xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %sub = mir.sub %add, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %mul = mir.mul %sub, %s : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %div = mir.div %s, %mul : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %max = mir.max %div, %div : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %min = mir.min %max, %a : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %pow = mir.pow %min, %s : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %ss = mir.add %s, %s : (tensor<f32>, tensor<f32>) -> tensor<f32>
  func.return
}

// CHECK-LABEL: func.func @binary()
// CHECK-NEXT:    %[[A:.*]] = "test.op"() : () -> tensor<4x1xf32>
// CHECK-NEXT:    %[[B:.*]] = "test.op"() : () -> tensor<8xf32>
// CHECK-NEXT:    %[[S:.*]] = "test.op"() : () -> tensor<f32>
// CHECK-NEXT:    %[[ADD:.*]] = mir.add %[[A]], %[[B]] : (tensor<4x1xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %[[SUB:.*]] = mir.sub %[[ADD]], %[[B]] : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %[[MUL:.*]] = mir.mul %[[SUB]], %[[S]] : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %[[DIV:.*]] = mir.div %[[S]], %[[MUL]] : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %[[MAX:.*]] = mir.max %[[DIV]], %[[DIV]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %[[MIN:.*]] = mir.min %[[MAX]], %[[A]] : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %{{.*}} = mir.pow %[[MIN]], %[[S]] : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %{{.*}} = mir.add %[[S]], %[[S]] : (tensor<f32>, tensor<f32>) -> tensor<f32>

// GENERIC-LABEL: "func.func"() <{sym_name = "binary"
// GENERIC:         %{{.*}} = "mir.add"(%{{.*}}, %{{.*}}) : (tensor<4x1xf32>, tensor<8xf32>) -> tensor<4x8xf32>

// -----

func.func @binary_int() {
  %i = "test.op"() : () -> tensor<4x8xi32>
  %l = "test.op"() : () -> tensor<8xi64>
  %add = mir.add %i, %i : (tensor<4x8xi32>, tensor<4x8xi32>) -> tensor<4x8xi32>
  %sub = mir.sub %l, %l : (tensor<8xi64>, tensor<8xi64>) -> tensor<8xi64>
  %mul = mir.mul %add, %add : (tensor<4x8xi32>, tensor<4x8xi32>) -> tensor<4x8xi32>
  %max = mir.max %sub, %sub : (tensor<8xi64>, tensor<8xi64>) -> tensor<8xi64>
  %min = mir.min %mul, %i : (tensor<4x8xi32>, tensor<4x8xi32>) -> tensor<4x8xi32>
  func.return
}

// CHECK-LABEL: func.func @binary_int()
// CHECK-NEXT:    %[[I:.*]] = "test.op"() : () -> tensor<4x8xi32>
// CHECK-NEXT:    %[[L:.*]] = "test.op"() : () -> tensor<8xi64>
// CHECK-NEXT:    %[[ADD:.*]] = mir.add %[[I]], %[[I]] : (tensor<4x8xi32>, tensor<4x8xi32>) -> tensor<4x8xi32>
// CHECK-NEXT:    %[[SUB:.*]] = mir.sub %[[L]], %[[L]] : (tensor<8xi64>, tensor<8xi64>) -> tensor<8xi64>
// CHECK-NEXT:    %[[MUL:.*]] = mir.mul %[[ADD]], %[[ADD]] : (tensor<4x8xi32>, tensor<4x8xi32>) -> tensor<4x8xi32>
// CHECK-NEXT:    %{{.*}} = mir.max %[[SUB]], %[[SUB]] : (tensor<8xi64>, tensor<8xi64>) -> tensor<8xi64>
// CHECK-NEXT:    %{{.*}} = mir.min %[[MUL]], %[[I]] : (tensor<4x8xi32>, tensor<4x8xi32>) -> tensor<4x8xi32>

// -----

func.func @unary() {
  %x = "test.op"() : () -> tensor<4x8xf32>
  %s = "test.op"() : () -> tensor<f32>
  %i = "test.op"() : () -> tensor<3xi64>
  %neg = mir.neg %x : tensor<4x8xf32>
  %exp = mir.exp %neg : tensor<4x8xf32>
  %log = mir.log %exp : tensor<4x8xf32>
  %sqrt = mir.sqrt %log : tensor<4x8xf32>
  %rsqrt = mir.rsqrt %sqrt : tensor<4x8xf32>
  %tanh = mir.tanh %rsqrt : tensor<4x8xf32>
  %sigmoid = mir.sigmoid %tanh : tensor<4x8xf32>
  %silu = mir.silu %sigmoid : tensor<4x8xf32>
  %gelu = mir.gelu %silu : tensor<4x8xf32>
  %gelu_tanh = mir.gelu_tanh %gelu : tensor<4x8xf32>
  %relu = mir.relu %gelu_tanh : tensor<4x8xf32>
  %abs = mir.abs %relu : tensor<4x8xf32>
  %exp0 = mir.exp %s : tensor<f32>
  %ineg = mir.neg %i : tensor<3xi64>
  %iabs = mir.abs %ineg : tensor<3xi64>
  %irelu = mir.relu %iabs : tensor<3xi64>
  func.return
}

// CHECK-LABEL: func.func @unary()
// CHECK-NEXT:    %[[X:.*]] = "test.op"() : () -> tensor<4x8xf32>
// CHECK-NEXT:    %[[S:.*]] = "test.op"() : () -> tensor<f32>
// CHECK-NEXT:    %[[I:.*]] = "test.op"() : () -> tensor<3xi64>
// CHECK-NEXT:    %[[NEG:.*]] = mir.neg %[[X]] : tensor<4x8xf32>
// CHECK-NEXT:    %[[EXP:.*]] = mir.exp %[[NEG]] : tensor<4x8xf32>
// CHECK-NEXT:    %[[LOG:.*]] = mir.log %[[EXP]] : tensor<4x8xf32>
// CHECK-NEXT:    %[[SQRT:.*]] = mir.sqrt %[[LOG]] : tensor<4x8xf32>
// CHECK-NEXT:    %[[RSQRT:.*]] = mir.rsqrt %[[SQRT]] : tensor<4x8xf32>
// CHECK-NEXT:    %[[TANH:.*]] = mir.tanh %[[RSQRT]] : tensor<4x8xf32>
// CHECK-NEXT:    %[[SIGMOID:.*]] = mir.sigmoid %[[TANH]] : tensor<4x8xf32>
// CHECK-NEXT:    %[[SILU:.*]] = mir.silu %[[SIGMOID]] : tensor<4x8xf32>
// CHECK-NEXT:    %[[GELU:.*]] = mir.gelu %[[SILU]] : tensor<4x8xf32>
// CHECK-NEXT:    %[[GELU_TANH:.*]] = mir.gelu_tanh %[[GELU]] : tensor<4x8xf32>
// CHECK-NEXT:    %[[RELU:.*]] = mir.relu %[[GELU_TANH]] : tensor<4x8xf32>
// CHECK-NEXT:    %{{.*}} = mir.abs %[[RELU]] : tensor<4x8xf32>
// CHECK-NEXT:    %{{.*}} = mir.exp %[[S]] : tensor<f32>
// CHECK-NEXT:    %[[INEG:.*]] = mir.neg %[[I]] : tensor<3xi64>
// CHECK-NEXT:    %[[IABS:.*]] = mir.abs %[[INEG]] : tensor<3xi64>
// CHECK-NEXT:    %{{.*}} = mir.relu %[[IABS]] : tensor<3xi64>

// GENERIC-LABEL: "func.func"() <{sym_name = "unary"
// GENERIC:         %{{.*}} = "mir.neg"(%{{.*}}) : (tensor<4x8xf32>) -> tensor<4x8xf32>
// GENERIC:         %{{.*}} = "mir.gelu_tanh"(%{{.*}}) : (tensor<4x8xf32>) -> tensor<4x8xf32>

// -----

func.func @matmul() {
  %a = "test.op"() : () -> tensor<4x8xf32>
  %w = "test.op"() : () -> tensor<8x16xf32>
  %bl = "test.op"() : () -> tensor<2x1x4x8xf32>
  %br = "test.op"() : () -> tensor<3x8x16xf32>
  %v = "test.op"() : () -> tensor<8xf32>
  %mm = mir.matmul %a, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %bmm = mir.matmul %bl, %br : (tensor<2x1x4x8xf32>, tensor<3x8x16xf32>) -> tensor<2x3x4x16xf32>
  %mv = mir.matmul %a, %v : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4xf32>
  %vm = mir.matmul %v, %w : (tensor<8xf32>, tensor<8x16xf32>) -> tensor<16xf32>
  %dot = mir.matmul %v, %v : (tensor<8xf32>, tensor<8xf32>) -> tensor<f32>
  func.return
}

// CHECK-LABEL: func.func @matmul()
// CHECK-NEXT:    %[[A:.*]] = "test.op"() : () -> tensor<4x8xf32>
// CHECK-NEXT:    %[[W:.*]] = "test.op"() : () -> tensor<8x16xf32>
// CHECK-NEXT:    %[[BL:.*]] = "test.op"() : () -> tensor<2x1x4x8xf32>
// CHECK-NEXT:    %[[BR:.*]] = "test.op"() : () -> tensor<3x8x16xf32>
// CHECK-NEXT:    %[[V:.*]] = "test.op"() : () -> tensor<8xf32>
// CHECK-NEXT:    %{{.*}} = mir.matmul %[[A]], %[[W]] : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:    %{{.*}} = mir.matmul %[[BL]], %[[BR]] : (tensor<2x1x4x8xf32>, tensor<3x8x16xf32>) -> tensor<2x3x4x16xf32>
// CHECK-NEXT:    %{{.*}} = mir.matmul %[[A]], %[[V]] : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4xf32>
// CHECK-NEXT:    %{{.*}} = mir.matmul %[[V]], %[[W]] : (tensor<8xf32>, tensor<8x16xf32>) -> tensor<16xf32>
// CHECK-NEXT:    %{{.*}} = mir.matmul %[[V]], %[[V]] : (tensor<8xf32>, tensor<8xf32>) -> tensor<f32>

// -----

func.func @fused_matmul() {
  %a = "test.op"() : () -> tensor<2x4x8xf32>
  %w = "test.op"() : () -> tensor<8x16xf32>
  %b = "test.op"() : () -> tensor<16xf32>
  %full = mir.fused_matmul %a, %w, %b activation gelu_tanh : (tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  %bias = mir.fused_matmul %a, %w, %b : (tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  %act = mir.fused_matmul %a, %w activation relu : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %none = mir.fused_matmul %a, %w : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  func.return
}

// CHECK-LABEL: func.func @fused_matmul()
// CHECK-NEXT:    %[[A:.*]] = "test.op"() : () -> tensor<2x4x8xf32>
// CHECK-NEXT:    %[[W:.*]] = "test.op"() : () -> tensor<8x16xf32>
// CHECK-NEXT:    %[[B:.*]] = "test.op"() : () -> tensor<16xf32>
// CHECK-NEXT:    %{{.*}} = mir.fused_matmul %[[A]], %[[W]], %[[B]] activation gelu_tanh : (tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
// CHECK-NEXT:    %{{.*}} = mir.fused_matmul %[[A]], %[[W]], %[[B]] : (tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
// CHECK-NEXT:    %{{.*}} = mir.fused_matmul %[[A]], %[[W]] activation relu : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
// CHECK-NEXT:    %{{.*}} = mir.fused_matmul %[[A]], %[[W]] : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>

// GENERIC-LABEL: "func.func"() <{sym_name = "fused_matmul"
// GENERIC:         "mir.fused_matmul"(%{{.*}}, %{{.*}}, %{{.*}}) <{activation = #rlx<activation gelu_tanh>}> : (tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
// GENERIC:         "mir.fused_matmul"(%{{.*}}, %{{.*}}, %{{.*}}) : (tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
// GENERIC:         "mir.fused_matmul"(%{{.*}}, %{{.*}}) <{activation = #rlx<activation relu>}> : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
// GENERIC:         "mir.fused_matmul"(%{{.*}}, %{{.*}}) : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>

// -----

func.func @dequant_matmul() {
  %x = "test.op"() : () -> tensor<4x64xf32>
  %w8 = "test.op"() : () -> tensor<8x68xui8>
  %w4 = "test.op"() : () -> tensor<8x36xui8>
  %q8 = mir.dequant_matmul %x, %w8 scheme q8_0 : (tensor<4x64xf32>, tensor<8x68xui8>) -> tensor<4x8xf32>
  %q4 = mir.dequant_matmul %x, %w4 scheme q4_0 : (tensor<4x64xf32>, tensor<8x36xui8>) -> tensor<4x8xf32>
  func.return
}

// CHECK-LABEL: func.func @dequant_matmul()
// CHECK-NEXT:    %[[X:.*]] = "test.op"() : () -> tensor<4x64xf32>
// CHECK-NEXT:    %[[W8:.*]] = "test.op"() : () -> tensor<8x68xui8>
// CHECK-NEXT:    %[[W4:.*]] = "test.op"() : () -> tensor<8x36xui8>
// CHECK-NEXT:    %{{.*}} = mir.dequant_matmul %[[X]], %[[W8]] scheme q8_0 : (tensor<4x64xf32>, tensor<8x68xui8>) -> tensor<4x8xf32>
// CHECK-NEXT:    %{{.*}} = mir.dequant_matmul %[[X]], %[[W4]] scheme q4_0 : (tensor<4x64xf32>, tensor<8x36xui8>) -> tensor<4x8xf32>

// GENERIC-LABEL: "func.func"() <{sym_name = "dequant_matmul"
// GENERIC:         "mir.dequant_matmul"(%{{.*}}, %{{.*}}) <{scheme = #rlx<quant_scheme q8_0>}> : (tensor<4x64xf32>, tensor<8x68xui8>) -> tensor<4x8xf32>

// -----

func.func @depthwise_conv1d() {
  %x = "test.op"() : () -> tensor<2x10x16xf32>
  %w = "test.op"() : () -> tensor<3x16xf32>
  %y = mir.depthwise_conv1d %x, %w : (tensor<2x10x16xf32>, tensor<3x16xf32>) -> tensor<2x8x16xf32>
  func.return
}

// CHECK-LABEL: func.func @depthwise_conv1d()
// CHECK-NEXT:    %[[X:.*]] = "test.op"() : () -> tensor<2x10x16xf32>
// CHECK-NEXT:    %[[W:.*]] = "test.op"() : () -> tensor<3x16xf32>
// CHECK-NEXT:    %{{.*}} = mir.depthwise_conv1d %[[X]], %[[W]] : (tensor<2x10x16xf32>, tensor<3x16xf32>) -> tensor<2x8x16xf32>

// -----

func.func @reduce() {
  %x = "test.op"() : () -> tensor<2x4x8xf32>
  %sum = mir.reduce sum %x axes [2] : tensor<2x4x8xf32> -> tensor<2x4xf32>
  %max = mir.reduce max %x axes [-1] keepdim : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %min = mir.reduce min %x axes [0, 2] keepdim : tensor<2x4x8xf32> -> tensor<1x4x1xf32>
  %mean = mir.reduce mean %x axes [0, 1, 2] : tensor<2x4x8xf32> -> tensor<f32>
  func.return
}

// CHECK-LABEL: func.func @reduce()
// CHECK-NEXT:    %[[X:.*]] = "test.op"() : () -> tensor<2x4x8xf32>
// CHECK-NEXT:    %{{.*}} = mir.reduce sum %[[X]] axes [2] : tensor<2x4x8xf32> -> tensor<2x4xf32>
// CHECK-NEXT:    %{{.*}} = mir.reduce max %[[X]] axes [-1] keepdim : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
// CHECK-NEXT:    %{{.*}} = mir.reduce min %[[X]] axes [0, 2] keepdim : tensor<2x4x8xf32> -> tensor<1x4x1xf32>
// CHECK-NEXT:    %{{.*}} = mir.reduce mean %[[X]] axes [0, 1, 2] : tensor<2x4x8xf32> -> tensor<f32>

// GENERIC-LABEL: "func.func"() <{sym_name = "reduce"
// GENERIC:         "mir.reduce"(%{{.*}}) <{kind = #rlx<reduce_kind sum>, axes = array<i64: 2>}> : (tensor<2x4x8xf32>) -> tensor<2x4xf32>
// GENERIC:         "mir.reduce"(%{{.*}}) <{kind = #rlx<reduce_kind max>, axes = array<i64: -1>, keepdim}> : (tensor<2x4x8xf32>) -> tensor<2x4x1xf32>

// -----

func.func @softmax() {
  %x = "test.op"() : () -> tensor<2x4x8xf32>
  %last = mir.softmax %x axis -1 : tensor<2x4x8xf32>
  %first = mir.softmax %x axis 0 : tensor<2x4x8xf32>
  func.return
}

// CHECK-LABEL: func.func @softmax()
// CHECK-NEXT:    %[[X:.*]] = "test.op"() : () -> tensor<2x4x8xf32>
// CHECK-NEXT:    %{{.*}} = mir.softmax %[[X]] axis -1 : tensor<2x4x8xf32>
// CHECK-NEXT:    %{{.*}} = mir.softmax %[[X]] axis 0 : tensor<2x4x8xf32>

// GENERIC-LABEL: "func.func"() <{sym_name = "softmax"
// GENERIC:         "mir.softmax"(%{{.*}}) <{axis = -1 : i64}> : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>

// -----

func.func @norms() {
  %x = "test.op"() : () -> tensor<4x8xf32>
  %g = "test.op"() : () -> tensor<8xf32>
  %b = "test.op"() : () -> tensor<8xf32>
  %rms = mir.rms_norm %x, %g : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %rms_beta = mir.rms_norm %x, %g, %b eps 1.0e-06 : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %rms_default = mir.rms_norm %x, %g eps 1.0e-05 : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %ln = mir.layer_norm %x, %g, %b : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %ln_eps = mir.layer_norm %x, %g, %b eps 1.0e-03 : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  func.return
}

// CHECK-LABEL: func.func @norms()
// CHECK-NEXT:    %[[X:.*]] = "test.op"() : () -> tensor<4x8xf32>
// CHECK-NEXT:    %[[G:.*]] = "test.op"() : () -> tensor<8xf32>
// CHECK-NEXT:    %[[B:.*]] = "test.op"() : () -> tensor<8xf32>
// CHECK-NEXT:    %{{.*}} = mir.rms_norm %[[X]], %[[G]] : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %{{.*}} = mir.rms_norm %[[X]], %[[G]], %[[B]] eps 1.000000e-06 : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %{{.*}} = mir.rms_norm %[[X]], %[[G]] : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %{{.*}} = mir.layer_norm %[[X]], %[[G]], %[[B]] : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:    %{{.*}} = mir.layer_norm %[[X]], %[[G]], %[[B]] eps 1.000000e-03 : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>

// GENERIC-LABEL: "func.func"() <{sym_name = "norms"
// GENERIC:         "mir.rms_norm"(%{{.*}}, %{{.*}}) <{eps = 1.000000e-05 : f32}> : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// GENERIC:         "mir.rms_norm"(%{{.*}}, %{{.*}}, %{{.*}}) <{eps = 1.000000e-06 : f32}> : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// GENERIC:         "mir.layer_norm"(%{{.*}}, %{{.*}}, %{{.*}}) <{eps = 1.000000e-05 : f32}> : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>

// -----

func.func @rope() {
  %x = "test.op"() : () -> tensor<2x6x32xf32>
  %c = "test.op"() : () -> tensor<6x8xf32>
  %s = "test.op"() : () -> tensor<6x8xf32>
  %cp = "test.op"() : () -> tensor<6x4xf32>
  %sp = "test.op"() : () -> tensor<6x4xf32>
  %x2 = "test.op"() : () -> tensor<6x32xf32>
  %half = mir.rope %x, %c, %s head_dim 16 n_rot 16 style half : (tensor<2x6x32xf32>, tensor<6x8xf32>, tensor<6x8xf32>) -> tensor<2x6x32xf32>
  %partial = mir.rope %x, %cp, %sp head_dim 16 n_rot 8 style interleaved : (tensor<2x6x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<2x6x32xf32>
  %rank2 = mir.rope %x2, %c, %s head_dim 16 n_rot 16 style half : (tensor<6x32xf32>, tensor<6x8xf32>, tensor<6x8xf32>) -> tensor<6x32xf32>
  func.return
}

// CHECK-LABEL: func.func @rope()
// CHECK-NEXT:    %[[X:.*]] = "test.op"() : () -> tensor<2x6x32xf32>
// CHECK-NEXT:    %[[C:.*]] = "test.op"() : () -> tensor<6x8xf32>
// CHECK-NEXT:    %[[S:.*]] = "test.op"() : () -> tensor<6x8xf32>
// CHECK-NEXT:    %[[CP:.*]] = "test.op"() : () -> tensor<6x4xf32>
// CHECK-NEXT:    %[[SP:.*]] = "test.op"() : () -> tensor<6x4xf32>
// CHECK-NEXT:    %[[X2:.*]] = "test.op"() : () -> tensor<6x32xf32>
// CHECK-NEXT:    %{{.*}} = mir.rope %[[X]], %[[C]], %[[S]] head_dim 16 n_rot 16 style half : (tensor<2x6x32xf32>, tensor<6x8xf32>, tensor<6x8xf32>) -> tensor<2x6x32xf32>
// CHECK-NEXT:    %{{.*}} = mir.rope %[[X]], %[[CP]], %[[SP]] head_dim 16 n_rot 8 style interleaved : (tensor<2x6x32xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<2x6x32xf32>
// CHECK-NEXT:    %{{.*}} = mir.rope %[[X2]], %[[C]], %[[S]] head_dim 16 n_rot 16 style half : (tensor<6x32xf32>, tensor<6x8xf32>, tensor<6x8xf32>) -> tensor<6x32xf32>

// GENERIC-LABEL: "func.func"() <{sym_name = "rope"
// GENERIC:         "mir.rope"(%{{.*}}, %{{.*}}, %{{.*}}) <{head_dim = 16 : i64, n_rot = 16 : i64, style = #rlx<rope_style half>}> : (tensor<2x6x32xf32>, tensor<6x8xf32>, tensor<6x8xf32>) -> tensor<2x6x32xf32>

// -----

func.func @attention() {
  %q = "test.op"() : () -> tensor<2x6x32xf32>
  %k = "test.op"() : () -> tensor<2x6x16xf32>
  %v = "test.op"() : () -> tensor<2x6x16xf32>
  %m = "test.op"() : () -> tensor<6x6xf32>
  %m4 = "test.op"() : () -> tensor<1x4x6x6xf32>
  %q2 = "test.op"() : () -> tensor<3x32xf32>
  %k2 = "test.op"() : () -> tensor<5x32xf32>
  %none = mir.attention %q, %k, %v num_heads 4 head_dim 8 num_kv_heads 2 mask_kind none scale 0.125 : (tensor<2x6x32xf32>, tensor<2x6x16xf32>, tensor<2x6x16xf32>) -> tensor<2x6x32xf32>
  %causal = mir.attention %q, %k, %v num_heads 4 head_dim 8 num_kv_heads 2 mask_kind causal scale 0.5 : (tensor<2x6x32xf32>, tensor<2x6x16xf32>, tensor<2x6x16xf32>) -> tensor<2x6x32xf32>
  %custom = mir.attention %q, %k, %v, %m num_heads 4 head_dim 8 num_kv_heads 2 mask_kind custom scale 0.125 : (tensor<2x6x32xf32>, tensor<2x6x16xf32>, tensor<2x6x16xf32>, tensor<6x6xf32>) -> tensor<2x6x32xf32>
  %bias = mir.attention %q, %k, %v, %m4 num_heads 4 head_dim 8 num_kv_heads 2 mask_kind bias scale 0.125 : (tensor<2x6x32xf32>, tensor<2x6x16xf32>, tensor<2x6x16xf32>, tensor<1x4x6x6xf32>) -> tensor<2x6x32xf32>
  %rank2 = mir.attention %q2, %k2, %k2 num_heads 4 head_dim 8 num_kv_heads 4 mask_kind causal scale 0.125 : (tensor<3x32xf32>, tensor<5x32xf32>, tensor<5x32xf32>) -> tensor<3x32xf32>
  func.return
}

// CHECK-LABEL: func.func @attention()
// CHECK-NEXT:    %[[Q:.*]] = "test.op"() : () -> tensor<2x6x32xf32>
// CHECK-NEXT:    %[[K:.*]] = "test.op"() : () -> tensor<2x6x16xf32>
// CHECK-NEXT:    %[[V:.*]] = "test.op"() : () -> tensor<2x6x16xf32>
// CHECK-NEXT:    %[[M:.*]] = "test.op"() : () -> tensor<6x6xf32>
// CHECK-NEXT:    %[[M4:.*]] = "test.op"() : () -> tensor<1x4x6x6xf32>
// CHECK-NEXT:    %[[Q2:.*]] = "test.op"() : () -> tensor<3x32xf32>
// CHECK-NEXT:    %[[K2:.*]] = "test.op"() : () -> tensor<5x32xf32>
// CHECK-NEXT:    %{{.*}} = mir.attention %[[Q]], %[[K]], %[[V]] num_heads 4 head_dim 8 num_kv_heads 2 mask_kind none scale 1.250000e-01 : (tensor<2x6x32xf32>, tensor<2x6x16xf32>, tensor<2x6x16xf32>) -> tensor<2x6x32xf32>
// CHECK-NEXT:    %{{.*}} = mir.attention %[[Q]], %[[K]], %[[V]] num_heads 4 head_dim 8 num_kv_heads 2 mask_kind causal scale 5.000000e-01 : (tensor<2x6x32xf32>, tensor<2x6x16xf32>, tensor<2x6x16xf32>) -> tensor<2x6x32xf32>
// CHECK-NEXT:    %{{.*}} = mir.attention %[[Q]], %[[K]], %[[V]], %[[M]] num_heads 4 head_dim 8 num_kv_heads 2 mask_kind custom scale 1.250000e-01 : (tensor<2x6x32xf32>, tensor<2x6x16xf32>, tensor<2x6x16xf32>, tensor<6x6xf32>) -> tensor<2x6x32xf32>
// CHECK-NEXT:    %{{.*}} = mir.attention %[[Q]], %[[K]], %[[V]], %[[M4]] num_heads 4 head_dim 8 num_kv_heads 2 mask_kind bias scale 1.250000e-01 : (tensor<2x6x32xf32>, tensor<2x6x16xf32>, tensor<2x6x16xf32>, tensor<1x4x6x6xf32>) -> tensor<2x6x32xf32>
// CHECK-NEXT:    %{{.*}} = mir.attention %[[Q2]], %[[K2]], %[[K2]] num_heads 4 head_dim 8 num_kv_heads 4 mask_kind causal scale 1.250000e-01 : (tensor<3x32xf32>, tensor<5x32xf32>, tensor<5x32xf32>) -> tensor<3x32xf32>

// GENERIC-LABEL: "func.func"() <{sym_name = "attention"
// GENERIC:         "mir.attention"(%{{.*}}, %{{.*}}, %{{.*}}) <{num_heads = 4 : i64, head_dim = 8 : i64, num_kv_heads = 2 : i64, mask_kind = #rlx<mask_kind none>, scale = 1.250000e-01 : f32}> : (tensor<2x6x32xf32>, tensor<2x6x16xf32>, tensor<2x6x16xf32>) -> tensor<2x6x32xf32>
// GENERIC:         "mir.attention"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) <{num_heads = 4 : i64, head_dim = 8 : i64, num_kv_heads = 2 : i64, mask_kind = #rlx<mask_kind custom>, scale = 1.250000e-01 : f32}>

// -----

func.func @data_movement() {
  %x = "test.op"() : () -> tensor<4x8xf32>
  %y = "test.op"() : () -> tensor<2x8xf32>
  %one = "test.op"() : () -> tensor<1x1xi32>
  %row = "test.op"() : () -> tensor<8xi64>
  %flat = mir.reshape %x : tensor<4x8xf32> -> tensor<32xf32>
  %scalar = mir.reshape %one : tensor<1x1xi32> -> tensor<i32>
  %t = mir.transpose %x perm [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  %tn = mir.transpose %x perm [-1, -2] : tensor<4x8xf32> -> tensor<8x4xf32>
  %n = mir.narrow %x axis 1 start 2 length 4 : tensor<4x8xf32> -> tensor<4x4xf32>
  %nn = mir.narrow %x axis -2 start 0 length 1 : tensor<4x8xf32> -> tensor<1x8xf32>
  %c = mir.concat %x, %y, %x axis 0 : (tensor<4x8xf32>, tensor<2x8xf32>, tensor<4x8xf32>) -> tensor<10x8xf32>
  %c1 = mir.concat %row axis -1 : (tensor<8xi64>) -> tensor<8xi64>
  %b = mir.broadcast_to %row : tensor<8xi64> -> tensor<3x8xi64>
  %b0 = mir.broadcast_to %scalar : tensor<i32> -> tensor<2x2xi32>
  func.return
}

// CHECK-LABEL: func.func @data_movement()
// CHECK-NEXT:    %[[X:.*]] = "test.op"() : () -> tensor<4x8xf32>
// CHECK-NEXT:    %[[Y:.*]] = "test.op"() : () -> tensor<2x8xf32>
// CHECK-NEXT:    %[[ONE:.*]] = "test.op"() : () -> tensor<1x1xi32>
// CHECK-NEXT:    %[[ROW:.*]] = "test.op"() : () -> tensor<8xi64>
// CHECK-NEXT:    %{{.*}} = mir.reshape %[[X]] : tensor<4x8xf32> -> tensor<32xf32>
// CHECK-NEXT:    %[[SCALAR:.*]] = mir.reshape %[[ONE]] : tensor<1x1xi32> -> tensor<i32>
// CHECK-NEXT:    %{{.*}} = mir.transpose %[[X]] perm [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
// CHECK-NEXT:    %{{.*}} = mir.transpose %[[X]] perm [-1, -2] : tensor<4x8xf32> -> tensor<8x4xf32>
// CHECK-NEXT:    %{{.*}} = mir.narrow %[[X]] axis 1 start 2 length 4 : tensor<4x8xf32> -> tensor<4x4xf32>
// CHECK-NEXT:    %{{.*}} = mir.narrow %[[X]] axis -2 start 0 length 1 : tensor<4x8xf32> -> tensor<1x8xf32>
// CHECK-NEXT:    %{{.*}} = mir.concat %[[X]], %[[Y]], %[[X]] axis 0 : (tensor<4x8xf32>, tensor<2x8xf32>, tensor<4x8xf32>) -> tensor<10x8xf32>
// CHECK-NEXT:    %{{.*}} = mir.concat %[[ROW]] axis -1 : (tensor<8xi64>) -> tensor<8xi64>
// CHECK-NEXT:    %{{.*}} = mir.broadcast_to %[[ROW]] : tensor<8xi64> -> tensor<3x8xi64>
// CHECK-NEXT:    %{{.*}} = mir.broadcast_to %[[SCALAR]] : tensor<i32> -> tensor<2x2xi32>

// GENERIC-LABEL: "func.func"() <{sym_name = "data_movement"
// GENERIC:         "mir.reshape"(%{{.*}}) : (tensor<4x8xf32>) -> tensor<32xf32>
// GENERIC:         "mir.transpose"(%{{.*}}) <{perm = array<i64: 1, 0>}> : (tensor<4x8xf32>) -> tensor<8x4xf32>
// GENERIC:         "mir.narrow"(%{{.*}}) <{axis = 1 : i64, start = 2 : i64, length = 4 : i64}> : (tensor<4x8xf32>) -> tensor<4x4xf32>
// GENERIC:         "mir.concat"(%{{.*}}, %{{.*}}, %{{.*}}) <{axis = 0 : i64}> : (tensor<4x8xf32>, tensor<2x8xf32>, tensor<4x8xf32>) -> tensor<10x8xf32>
// GENERIC:         "mir.broadcast_to"(%{{.*}}) : (tensor<8xi64>) -> tensor<3x8xi64>

// -----

func.func @gather() {
  %table = "test.op"() : () -> tensor<16x8xf32>
  %ids = "test.op"() : () -> tensor<2x3xi32>
  %ids64 = "test.op"() : () -> tensor<5xi64>
  %one = "test.op"() : () -> tensor<i64>
  %rows = mir.gather %table, %ids axis 0 : (tensor<16x8xf32>, tensor<2x3xi32>) -> tensor<2x3x8xf32>
  %cols = mir.gather %table, %ids64 axis -1 : (tensor<16x8xf32>, tensor<5xi64>) -> tensor<16x5xf32>
  %row = mir.gather %table, %one axis 0 : (tensor<16x8xf32>, tensor<i64>) -> tensor<8xf32>
  func.return
}

// CHECK-LABEL: func.func @gather()
// CHECK-NEXT:    %[[T:.*]] = "test.op"() : () -> tensor<16x8xf32>
// CHECK-NEXT:    %[[I:.*]] = "test.op"() : () -> tensor<2x3xi32>
// CHECK-NEXT:    %[[I64:.*]] = "test.op"() : () -> tensor<5xi64>
// CHECK-NEXT:    %[[ONE:.*]] = "test.op"() : () -> tensor<i64>
// CHECK-NEXT:    %{{.*}} = mir.gather %[[T]], %[[I]] axis 0 : (tensor<16x8xf32>, tensor<2x3xi32>) -> tensor<2x3x8xf32>
// CHECK-NEXT:    %{{.*}} = mir.gather %[[T]], %[[I64]] axis -1 : (tensor<16x8xf32>, tensor<5xi64>) -> tensor<16x5xf32>
// CHECK-NEXT:    %{{.*}} = mir.gather %[[T]], %[[ONE]] axis 0 : (tensor<16x8xf32>, tensor<i64>) -> tensor<8xf32>

// GENERIC-LABEL: "func.func"() <{sym_name = "gather"
// GENERIC:         "mir.gather"(%{{.*}}, %{{.*}}) <{axis = 0 : i64}> : (tensor<16x8xf32>, tensor<2x3xi32>) -> tensor<2x3x8xf32>

// -----

func.func @constant() {
  %splat = mir.constant dense<1.0> : tensor<4xf32>
  %ints = mir.constant dense<[[1, 2], [3, 4]]> : tensor<2x2xi32>
  %scalar = mir.constant dense<-2.5> : tensor<f32>
  %idx = mir.constant dense<[0, 7]> : tensor<2xi64>
  func.return
}

// CHECK-LABEL: func.func @constant()
// CHECK-NEXT:    %{{.*}} = mir.constant dense<1.000000e+00> : tensor<4xf32>
// CHECK-NEXT:    %{{.*}} = mir.constant dense<{{\[\[}}1, 2], [3, 4]]> : tensor<2x2xi32>
// CHECK-NEXT:    %{{.*}} = mir.constant dense<-2.500000e+00> : tensor<f32>
// CHECK-NEXT:    %{{.*}} = mir.constant dense<[0, 7]> : tensor<2xi64>

// GENERIC-LABEL: "func.func"() <{sym_name = "constant"
// GENERIC:         "mir.constant"() <{value = dense<1.000000e+00> : tensor<4xf32>}> : () -> tensor<4xf32>

// -----

func.func @fused_elementwise() {
  %a = "test.op"() : () -> tensor<4x8xf32>
  %b = "test.op"() : () -> tensor<8xf32>
  %s = "test.op"() : () -> tensor<f32>
  %i = "test.op"() : () -> tensor<4x1xi32>
  %r = mir.fused_elementwise ins(%a, %b, %s : tensor<4x8xf32>, tensor<8xf32>, tensor<f32>) -> tensor<4x8xf32> {
  ^bb0(%x: f32, %y: f32, %z: f32):
    %t = arith.mulf %x, %y : f32
    %u = math.exp %t : f32
    %v = arith.addf %u, %z : f32
    mir.yield %v : f32
  }
  %one = mir.fused_elementwise {rlx.note = "tagged"} ins(%i : tensor<4x1xi32>) -> tensor<4x8xf32> {
  ^bb0(%x: i32):
    %c = arith.constant 1.0 : f32
    %f = arith.sitofp %x : i32 to f32
    %m = arith.maximumf %f, %c : f32
    mir.yield %m : f32
  }
  func.return
}

// CHECK-LABEL: func.func @fused_elementwise()
// CHECK-NEXT:    %[[A:.*]] = "test.op"() : () -> tensor<4x8xf32>
// CHECK-NEXT:    %[[B:.*]] = "test.op"() : () -> tensor<8xf32>
// CHECK-NEXT:    %[[S:.*]] = "test.op"() : () -> tensor<f32>
// CHECK-NEXT:    %[[I:.*]] = "test.op"() : () -> tensor<4x1xi32>
// CHECK-NEXT:    %{{.*}} = mir.fused_elementwise ins(%[[A]], %[[B]], %[[S]] : tensor<4x8xf32>, tensor<8xf32>, tensor<f32>) -> tensor<4x8xf32> {
// CHECK-NEXT:    ^{{.*}}(%[[X:.*]]: f32, %[[Y:.*]]: f32, %[[Z:.*]]: f32):
// CHECK-NEXT:      %[[T:.*]] = arith.mulf %[[X]], %[[Y]] : f32
// CHECK-NEXT:      %[[U:.*]] = math.exp %[[T]] : f32
// CHECK-NEXT:      %[[V:.*]] = arith.addf %[[U]], %[[Z]] : f32
// CHECK-NEXT:      mir.yield %[[V]] : f32
// CHECK-NEXT:    }
// CHECK-NEXT:    %{{.*}} = mir.fused_elementwise {rlx.note = "tagged"} ins(%[[I]] : tensor<4x1xi32>) -> tensor<4x8xf32> {
// CHECK-NEXT:    ^{{.*}}(%[[X2:.*]]: i32):
// CHECK-NEXT:      %[[C:.*]] = arith.constant 1.000000e+00 : f32
// CHECK-NEXT:      %[[F:.*]] = arith.sitofp %[[X2]] : i32 to f32
// CHECK-NEXT:      %[[M:.*]] = arith.maximumf %[[F]], %[[C]] : f32
// CHECK-NEXT:      mir.yield %[[M]] : f32
// CHECK-NEXT:    }

// GENERIC-LABEL: "func.func"() <{sym_name = "fused_elementwise"
// GENERIC:         "mir.fused_elementwise"(%{{.*}}, %{{.*}}, %{{.*}}) ({
// GENERIC-NEXT:    ^{{.*}}(%{{.*}}: f32, %{{.*}}: f32, %{{.*}}: f32):
// GENERIC:           "mir.yield"(%{{.*}}) : (f32) -> ()
// GENERIC-NEXT:    }) : (tensor<4x8xf32>, tensor<8xf32>, tensor<f32>) -> tensor<4x8xf32>

// -----

func.func @softplus(%x: tensor<2x3xf32>, %s: tensor<f32>) -> (tensor<2x3xf32>, tensor<f32>) {
  %y = mir.softplus %x : tensor<2x3xf32>
  %z = mir.softplus %s : tensor<f32>
  func.return %y, %z : tensor<2x3xf32>, tensor<f32>
}

// CHECK-LABEL: func.func @softplus(
// CHECK-SAME:      %[[X:.*]]: tensor<2x3xf32>, %[[S:.*]]: tensor<f32>)
// CHECK-NEXT:    %[[Y:.*]] = mir.softplus %[[X]] : tensor<2x3xf32>
// CHECK-NEXT:    %[[Z:.*]] = mir.softplus %[[S]] : tensor<f32>
// CHECK-NEXT:    func.return %[[Y]], %[[Z]] : tensor<2x3xf32>, tensor<f32>

// GENERIC-LABEL: "func.func"() <{sym_name = "softplus"
// GENERIC:         %{{.*}} = "mir.softplus"(%{{.*}}) : (tensor<2x3xf32>) -> tensor<2x3xf32>

// -----

// Every GGUF scheme family: float rows (f16, bf16), 32-value blocks, 256-value K-quant blocks.
// CHECK-LABEL: func.func @dequant_matmul_schemes
// GENERIC-LABEL: sym_name = "dequant_matmul_schemes"
func.func @dequant_matmul_schemes() {
  %x_f16, %w_f16 = "test.op"() : () -> (tensor<2x5xf32>, tensor<8x10xui8>)
  %y_f16 = mir.dequant_matmul %x_f16, %w_f16 scheme f16 : (tensor<2x5xf32>, tensor<8x10xui8>) -> tensor<2x8xf32>
  %x_bf16, %w_bf16 = "test.op"() : () -> (tensor<2x5xf32>, tensor<8x10xui8>)
  %y_bf16 = mir.dequant_matmul %x_bf16, %w_bf16 scheme bf16 : (tensor<2x5xf32>, tensor<8x10xui8>) -> tensor<2x8xf32>
  %x_q4_1, %w_q4_1 = "test.op"() : () -> (tensor<2x64xf32>, tensor<8x40xui8>)
  %y_q4_1 = mir.dequant_matmul %x_q4_1, %w_q4_1 scheme q4_1 : (tensor<2x64xf32>, tensor<8x40xui8>) -> tensor<2x8xf32>
  %x_q5_0, %w_q5_0 = "test.op"() : () -> (tensor<2x64xf32>, tensor<8x44xui8>)
  %y_q5_0 = mir.dequant_matmul %x_q5_0, %w_q5_0 scheme q5_0 : (tensor<2x64xf32>, tensor<8x44xui8>) -> tensor<2x8xf32>
  %x_q5_1, %w_q5_1 = "test.op"() : () -> (tensor<2x64xf32>, tensor<8x48xui8>)
  %y_q5_1 = mir.dequant_matmul %x_q5_1, %w_q5_1 scheme q5_1 : (tensor<2x64xf32>, tensor<8x48xui8>) -> tensor<2x8xf32>
  %x_q4_k, %w_q4_k = "test.op"() : () -> (tensor<2x256xf32>, tensor<8x144xui8>)
  %y_q4_k = mir.dequant_matmul %x_q4_k, %w_q4_k scheme q4_k : (tensor<2x256xf32>, tensor<8x144xui8>) -> tensor<2x8xf32>
  %x_q5_k, %w_q5_k = "test.op"() : () -> (tensor<2x256xf32>, tensor<8x176xui8>)
  %y_q5_k = mir.dequant_matmul %x_q5_k, %w_q5_k scheme q5_k : (tensor<2x256xf32>, tensor<8x176xui8>) -> tensor<2x8xf32>
  %x_q6_k, %w_q6_k = "test.op"() : () -> (tensor<2x256xf32>, tensor<8x210xui8>)
  %y_q6_k = mir.dequant_matmul %x_q6_k, %w_q6_k scheme q6_k : (tensor<2x256xf32>, tensor<8x210xui8>) -> tensor<2x8xf32>
  func.return
}
// CHECK:        mir.dequant_matmul %{{.*}}, %{{.*}} scheme f16 : (tensor<2x5xf32>, tensor<8x10xui8>) -> tensor<2x8xf32>
// CHECK:        mir.dequant_matmul %{{.*}}, %{{.*}} scheme bf16 : (tensor<2x5xf32>, tensor<8x10xui8>) -> tensor<2x8xf32>
// CHECK:        mir.dequant_matmul %{{.*}}, %{{.*}} scheme q4_1 : (tensor<2x64xf32>, tensor<8x40xui8>) -> tensor<2x8xf32>
// CHECK:        mir.dequant_matmul %{{.*}}, %{{.*}} scheme q5_0 : (tensor<2x64xf32>, tensor<8x44xui8>) -> tensor<2x8xf32>
// CHECK:        mir.dequant_matmul %{{.*}}, %{{.*}} scheme q5_1 : (tensor<2x64xf32>, tensor<8x48xui8>) -> tensor<2x8xf32>
// CHECK:        mir.dequant_matmul %{{.*}}, %{{.*}} scheme q4_k : (tensor<2x256xf32>, tensor<8x144xui8>) -> tensor<2x8xf32>
// CHECK:        mir.dequant_matmul %{{.*}}, %{{.*}} scheme q5_k : (tensor<2x256xf32>, tensor<8x176xui8>) -> tensor<2x8xf32>
// CHECK:        mir.dequant_matmul %{{.*}}, %{{.*}} scheme q6_k : (tensor<2x256xf32>, tensor<8x210xui8>) -> tensor<2x8xf32>
// GENERIC:      "mir.dequant_matmul"(%{{.*}}, %{{.*}}) <{scheme = #rlx<quant_scheme f16>}> : (tensor<2x5xf32>, tensor<8x10xui8>) -> tensor<2x8xf32>
// GENERIC:      "mir.dequant_matmul"(%{{.*}}, %{{.*}}) <{scheme = #rlx<quant_scheme bf16>}> : (tensor<2x5xf32>, tensor<8x10xui8>) -> tensor<2x8xf32>
// GENERIC:      "mir.dequant_matmul"(%{{.*}}, %{{.*}}) <{scheme = #rlx<quant_scheme q4_1>}> : (tensor<2x64xf32>, tensor<8x40xui8>) -> tensor<2x8xf32>
// GENERIC:      "mir.dequant_matmul"(%{{.*}}, %{{.*}}) <{scheme = #rlx<quant_scheme q5_0>}> : (tensor<2x64xf32>, tensor<8x44xui8>) -> tensor<2x8xf32>
// GENERIC:      "mir.dequant_matmul"(%{{.*}}, %{{.*}}) <{scheme = #rlx<quant_scheme q5_1>}> : (tensor<2x64xf32>, tensor<8x48xui8>) -> tensor<2x8xf32>
// GENERIC:      "mir.dequant_matmul"(%{{.*}}, %{{.*}}) <{scheme = #rlx<quant_scheme q4_k>}> : (tensor<2x256xf32>, tensor<8x144xui8>) -> tensor<2x8xf32>
// GENERIC:      "mir.dequant_matmul"(%{{.*}}, %{{.*}}) <{scheme = #rlx<quant_scheme q5_k>}> : (tensor<2x256xf32>, tensor<8x176xui8>) -> tensor<2x8xf32>
// GENERIC:      "mir.dequant_matmul"(%{{.*}}, %{{.*}}) <{scheme = #rlx<quant_scheme q6_k>}> : (tensor<2x256xf32>, tensor<8x210xui8>) -> tensor<2x8xf32>

// -----

// CHECK-LABEL: func.func @dequant_matmul_q8_activations
// GENERIC-LABEL: sym_name = "dequant_matmul_q8_activations"
func.func @dequant_matmul_q8_activations() {
  %x = "test.op"() : () -> tensor<2x64xf32>
  %w = "test.op"() : () -> tensor<8x40xui8>
  %y = mir.dequant_matmul %x, %w scheme q4_1 activations q8 : (tensor<2x64xf32>, tensor<8x40xui8>) -> tensor<2x8xf32>
  func.return
}
// CHECK:        mir.dequant_matmul %{{.*}}, %{{.*}} scheme q4_1 activations q8 : (tensor<2x64xf32>, tensor<8x40xui8>) -> tensor<2x8xf32>
// GENERIC:      "mir.dequant_matmul"(%{{.*}}, %{{.*}}) <{scheme = #rlx<quant_scheme q4_1>, activations = #rlx<quant_activations q8>}> : (tensor<2x64xf32>, tensor<8x40xui8>) -> tensor<2x8xf32>
