// RUN: rlx-opt %s --split-input-file -p convert-hir-to-mir | filecheck %s --check-prefix=MIR
// RUN: rlx-opt %s --split-input-file -p convert-hir-to-mir,canonicalize,cse,mir-fuse | filecheck %s --check-prefix=CANON
// RUN: rlx-opt %s --split-input-file -p convert-hir-to-mir,canonicalize,cse,mir-fuse,convert-mir-to-lir | filecheck %s --check-prefix=LIR
// RUN: rlx-opt %s --split-input-file -p convert-hir-to-mir,canonicalize,cse,mir-fuse,convert-mir-to-lir,lir-plan-arena | filecheck %s --check-prefix=PLAN

// State through the pipeline. A decoding Llama block expands into the cache appends:
// k and v after rope go into their caches at the position (mir.insert_rows, then
// mir.assign of the updated cache) and attention reads their first T rows
// (mir.extract_rows). Bufferized, the appends write the state buffers in place and the
// rows are views of them; no state buffer becomes an arena slot.

// MIR-LABEL: func.func @block
// MIR:         mir.rope
// MIR-NEXT:    %[[K:.*]] = mir.rope
// MIR:         %[[KC:.*]] = mir.insert_rows %[[K]] into %k[%position] : tensor<?x4xf32> into tensor<6x4xf32>
// MIR-NEXT:    mir.assign %[[KC]] to %k : tensor<6x4xf32>
// MIR-NEXT:    %[[KT:.*]] = mir.extract_rows %[[KC]] size "T" : tensor<6x4xf32> -> tensor<?x4xf32>
// MIR-NEXT:    %[[VC:.*]] = mir.insert_rows %{{.*}} into %v[%position] : tensor<?x4xf32> into tensor<6x4xf32>
// MIR-NEXT:    mir.assign %[[VC]] to %v : tensor<6x4xf32>
// MIR-NEXT:    %[[VT:.*]] = mir.extract_rows %[[VC]] size "T" : tensor<6x4xf32> -> tensor<?x4xf32>
// MIR-NEXT:    mir.attention %{{.*}}, %[[KT]], %[[VT]] num_heads 2 head_dim 4 num_kv_heads 1 mask_kind causal

// CANON-LABEL: func.func @block
// CANON-COUNT-2: mir.assign

// LIR-LABEL: func.func @block
// LIR:         lir.insert_rows ins(%{{.*}}, %position : memref<?x4xf32>, index) outs(%k : memref<6x4xf32>)
// LIR-NEXT:    %[[KT:.*]] = lir.view %k[0] dims ["T", 4 : i64] : memref<6x4xf32> -> memref<?x4xf32>
// LIR:         lir.insert_rows ins(%{{.*}}, %position : memref<?x4xf32>, index) outs(%v : memref<6x4xf32>)
// LIR-NEXT:    %[[VT:.*]] = lir.view %v[0] dims ["T", 4 : i64] : memref<6x4xf32> -> memref<?x4xf32>
// LIR:         lir.attention ins(%{{.*}}, %[[KT]], %[[VT]] :
// LIR-NOT:     lir.copy

// PLAN-LABEL: func.func @block
// PLAN-NOT:    lir.slot %arena{{.*}} -> memref<6x4xf32>
// PLAN:        lir.insert_rows ins(%{{.*}}, %position : memref<?x4xf32>, index) outs(%k : memref<6x4xf32>)

func.func @block(%x: tensor<?x8xf32> {rlx.name = "x", rlx.role = "input", rlx.dims = ["S", 8 : i64]}, %cos: tensor<?x2xf32> {rlx.name = "cos", rlx.role = "input", rlx.dims = ["S", 2 : i64]}, %sin: tensor<?x2xf32> {rlx.name = "sin", rlx.role = "input", rlx.dims = ["S", 2 : i64]}, %k: tensor<6x4xf32> {rlx.name = "k", rlx.role = "state"}, %v: tensor<6x4xf32> {rlx.name = "v", rlx.role = "state"}, %ln1: tensor<8xf32> {rlx.name = "ln1", rlx.role = "param"}, %wq: tensor<8x8xf32> {rlx.name = "wq", rlx.role = "param"}, %wk: tensor<8x4xf32> {rlx.name = "wk", rlx.role = "param"}, %wv: tensor<8x4xf32> {rlx.name = "wv", rlx.role = "param"}, %wo: tensor<8x8xf32> {rlx.name = "wo", rlx.role = "param"}, %ln2: tensor<8xf32> {rlx.name = "ln2", rlx.role = "param"}, %wg: tensor<8x16xf32> {rlx.name = "wg", rlx.role = "param"}, %wu: tensor<8x16xf32> {rlx.name = "wu", rlx.role = "param"}, %wd: tensor<16x8xf32> {rlx.name = "wd", rlx.role = "param"}, %position: index {rlx.name = "position", rlx.role = "position"}) -> (tensor<?x8xf32> {rlx.dims = ["S", 8 : i64]}) attributes {rlx.cache_dims = {T = ["S", 6 : i64]}} {
  %0 = hir.llama_decoder_block %x ln1(%ln1) attn(%wq, %wk, %wv, %wo) ln2(%ln2) ffn(%wg, %wu, %wd) rope(%cos, %sin) kv_cache(%k, %v, %position) num_heads 2 num_kv_heads 1 head_dim 4 : (tensor<?x8xf32>, tensor<8xf32>, tensor<8x8xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x8xf32>, tensor<8xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<16x8xf32>, tensor<?x2xf32>, tensor<?x2xf32>, tensor<6x4xf32>, tensor<6x4xf32>, index) -> tensor<?x8xf32>
  func.return %0 : tensor<?x8xf32>
}

// -----

// An append whose rows nobody reads still happens: mir.assign has no result and is not
// Pure, so canonicalize (DCE) and cse keep it and the insert it uses.

// CANON-LABEL: func.func @unused_rows
// CANON:         %[[KC:.*]] = mir.insert_rows %x into %k[%position]
// CANON-NEXT:    mir.assign %[[KC]] to %k
// CANON-NOT:     mir.extract_rows

// LIR-LABEL: func.func @unused_rows
// LIR:         lir.insert_rows ins(%x, %position : memref<?x4xf32>, index) outs(%k : memref<8x4xf32>)
// LIR-NEXT:    lir.elementwise neg

func.func @unused_rows(%x: tensor<?x4xf32> {rlx.name = "x", rlx.role = "input", rlx.dims = ["S", 4 : i64]}, %k: tensor<8x4xf32> {rlx.name = "k", rlx.role = "state"}, %position: index {rlx.name = "position", rlx.role = "position"}) -> (tensor<?x4xf32> {rlx.dims = ["S", 4 : i64]}) attributes {rlx.cache_dims = {T = ["S", 8 : i64]}} {
  %k2 = mir.insert_rows %x into %k[%position] : tensor<?x4xf32> into tensor<8x4xf32>
  mir.assign %k2 to %k : tensor<8x4xf32>
  %rows = mir.extract_rows %k2 size "T" : tensor<8x4xf32> -> tensor<?x4xf32>
  %y = mir.neg %x : tensor<?x4xf32>
  func.return %y : tensor<?x4xf32>
}

// -----

// A recurrent state returned as well as assigned: the output takes the old value, so
// its copy comes before the state's (placed last, after every read of the state).

// LIR-LABEL: func.func @recurrent
// LIR:         lir.elementwise add ins(%x, %h : memref<1x8xf32>, memref<1x8xf32>) outs(%[[N:.*]] : memref<1x8xf32>)
// LIR-NEXT:    lir.copy ins(%h : memref<1x8xf32>) outs(%out0 : memref<1x8xf32>)
// LIR-NEXT:    lir.copy ins(%[[N]] : memref<1x8xf32>) outs(%h : memref<1x8xf32>)
// LIR-NEXT:    func.return

// PLAN-LABEL: func.func @recurrent
// PLAN:        lir.arena size 64
// PLAN-COUNT-1: lir.slot

func.func @recurrent(%x: tensor<1x8xf32> {rlx.name = "x", rlx.role = "input"}, %h: tensor<1x8xf32> {rlx.name = "h", rlx.role = "state"}) -> tensor<1x8xf32> {
  %n = mir.add %x, %h : (tensor<1x8xf32>, tensor<1x8xf32>) -> tensor<1x8xf32>
  mir.assign %n to %h : tensor<1x8xf32>
  func.return %h : tensor<1x8xf32>
}
