"""`convert-hir-to-mir`: expand every hir block into mir primitives.

One rewrite pattern per hir op, each following docs/semantics.md (the numpy oracle is
`rlx_mlir.core.reference_kernels`). Linear layers become `mir.matmul` (+ `mir.add` of the
bias) (+ the activation's unary op); fusing them into `mir.fused_matmul` is `mir-fuse`'s
job. The norms, `rope`, `attention`, `dequant_matmul` keep a mir op of their own;
`llama_decoder_block` becomes the whole block in primitives. Every replacement ends in a
value of exactly the hir op's result type. After the pass no hir op remains.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    FloatAttr,
    ModuleOp,
    TensorType,
    f32,
    i64,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from rlx_mlir.core.abi import CACHE_DIMS
from rlx_mlir.core.quants import VEC_DOT_TYPES
from rlx_mlir.core.shape_inference import DYNAMIC, UNKNOWN
from rlx_mlir.dialects import hir, mir, registry
from rlx_mlir.dialects.common import shape_of
from rlx_mlir.dialects.rlx import Activation, MaskKind, MaskKindAttr, RopeStyleAttr
from rlx_mlir.dialects.verifier import grouped_operands
from rlx_mlir.passes.provenance import Derive, with_provenance
from rlx_mlir.passes.utils import ACTIVATION_OPS, OpSequence, splat_constant

DEFAULT_CACHE_SYMBOL = "T"
"""The symbol of a KV cache's rows when the function has no `rlx.cache_dims`."""

# ----------------------------------------------------------------------------- expansions
# Module-level builders shared by the patterns (the decoder block reuses the others).


def emit_linear(
    seq: OpSequence,
    x: SSAValue,
    w: SSAValue,
    bias: SSAValue | None,
    activation: Activation | None,
    result_type: Attribute,
) -> SSAValue:
    """`activation(x @ w + bias)` as matmul (+ add) (+ the activation's unary op)."""
    y = seq.emit(mir.MatmulOp(x, w, result_type))
    if bias is not None:
        y = seq.emit(mir.AddOp(y, bias, result_type))
    if activation is not None:
        y = seq.emit(ACTIVATION_OPS[activation](y))
    return y


def emit_swiglu_ffn(
    seq: OpSequence,
    x: SSAValue,
    up: SSAValue,
    gate: SSAValue,
    down: SSAValue,
    result_type: Attribute | None = None,
) -> SSAValue:
    """`(silu(x @ gate) * (x @ up)) @ down`."""
    g = seq.emit(mir.SiluOp(seq.emit(mir.MatmulOp(x, gate))))
    u = seq.emit(mir.MatmulOp(x, up))
    return seq.emit(mir.MatmulOp(seq.emit(mir.MulOp(g, u)), down, result_type))


def emit_rms_norm(
    seq: OpSequence, x: SSAValue, gamma: SSAValue, beta: SSAValue | None, eps: FloatAttr
) -> SSAValue:
    """`x / sqrt(mean(x^2, -1) + eps) * gamma (+ beta)` as one `mir.rms_norm`."""
    return seq.emit(mir.RmsNormOp(x, gamma, beta, eps))


def emit_llama_decoder_block(seq: OpSequence, op: hir.LlamaDecoderBlockOp) -> SSAValue:
    """`h = x + attention(rope(a @ q_w), rope(a @ k_w), a @ v_w) @ o_w` with
    `a = rms_norm(x, ln1)`, then `h + swiglu_ffn(rms_norm(h, ln2))`."""
    head_dim = op.head_dim.value.data
    rope_style: RopeStyleAttr = op.rope_style
    mask_kind: MaskKindAttr = op.mask_kind
    a = emit_rms_norm(seq, op.x, op.ln1_g, op.ln1_b, op.eps)
    q = seq.emit(mir.MatmulOp(a, op.q_w))
    k = seq.emit(mir.MatmulOp(a, op.k_w))
    v = seq.emit(mir.MatmulOp(a, op.v_w))
    # mir.rope's head_dim is per head, so q (num_heads) and k (num_kv_heads) both work.
    q = seq.emit(mir.RopeOp(q, op.cos, op.sin, head_dim, head_dim, rope_style))
    k = seq.emit(mir.RopeOp(k, op.cos, op.sin, head_dim, head_dim, rope_style))
    if op.k_cache is not None and op.v_cache is not None and op.position is not None:
        size = cache_symbol(op)
        k = emit_cache_append(seq, op.k_cache, k, op.position, size)
        v = emit_cache_append(seq, op.v_cache, v, op.position, size)
    att = seq.emit(
        mir.AttentionOp(
            q,
            k,
            v,
            op.mask,
            num_heads=op.num_heads.value.data,
            head_dim=head_dim,
            num_kv_heads=op.num_kv_heads.value.data,
            mask_kind=mask_kind,
            scale=FloatAttr(1.0 / math.sqrt(head_dim), f32),
        )
    )
    h = seq.emit(mir.AddOp(op.x, seq.emit(mir.MatmulOp(att, op.o_w))))
    n2 = emit_rms_norm(seq, h, op.ln2_g, op.ln2_b, op.eps)
    ffn = emit_swiglu_ffn(seq, n2, op.up_w, op.gate_w, op.down_w)
    return seq.emit(mir.AddOp(h, ffn, op.result.type))


def cache_symbol(op: Operation) -> str:
    """The symbol the cache rows take in `op`'s function: the one `rlx.cache_dims` defines
    (the Graph's "T" when the function does not say)."""
    fn = op.parent_op()
    while fn is not None and not isinstance(fn, func.FuncOp):
        fn = fn.parent_op()
    dims = fn.attributes.get(CACHE_DIMS) if fn is not None else None
    if isinstance(dims, DictionaryAttr) and len(dims.data) == 1:
        return next(iter(dims.data))
    return DEFAULT_CACHE_SYMBOL


def emit_cache_append(seq: OpSequence, cache: SSAValue, rows: SSAValue, position: SSAValue,
                      size: str) -> SSAValue:
    """`rows` appended to the state `cache` at `position` (`mir.insert_rows`, then
    `mir.assign` of the updated cache), and its rows [0, position + S) (`mir.extract_rows`)."""
    inserted = seq.emit(mir.InsertRowsOp(rows, cache, position))
    seq.ops.append(mir.AssignOp(inserted, cache))
    return seq.emit(mir.ExtractRowsOp(inserted, size))


def _replace(rewriter: PatternRewriter, op: hir.HirOp, seq: OpSequence) -> None:
    """Replace `op` by the emitted ops; the last one's result takes over its uses."""
    assert seq.result.type == op.results[0].type, (seq.result.type, op.results[0].type)
    rewriter.replace(op, seq.ops)


# ----------------------------------------------------------------------------- patterns


class TwinLowering(RewritePattern):
    """An hir op that is a mir op at the block level (`hir.mir_twin`: rms_norm, layer_norm,
    attention, rope, dequant_matmul) -> that mir op, with the same operands, properties
    and result type."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /) -> None:
        mir_op = getattr(type(op), "MIR_OP", None)
        if not isinstance(op, hir.HirOp) or mir_op is None:
            return
        rewriter.replace(op, mir_op.build(operands=grouped_operands(op),
                                          result_types=[op.result.type],
                                          properties=dict(op.properties)))


class LinearLowering(RewritePattern):
    """`hir.linear` -> `mir.matmul` (+ `mir.add` bias) (+ activation)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: hir.LinearOp, rewriter: PatternRewriter, /) -> None:
        seq = OpSequence()
        act = None if op.activation is None else op.activation.data
        emit_linear(seq, op.x, op.w, op.bias, act, op.result.type)
        _replace(rewriter, op, seq)


class SwigluFfnLowering(RewritePattern):
    """`hir.swiglu_ffn` -> matmul(x, gate), silu, matmul(x, up), mul, matmul(down)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: hir.SwigluFfnOp, rewriter: PatternRewriter, /) -> None:
        seq = OpSequence()
        emit_swiglu_ffn(seq, op.x, op.up, op.gate, op.down, op.result.type)
        _replace(rewriter, op, seq)


class ResidualRmsNormLowering(RewritePattern):
    """`hir.residual_rms_norm` -> `mir.add` + `mir.rms_norm`."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: hir.ResidualRmsNormOp, rewriter: PatternRewriter, /) -> None:
        seq = OpSequence()
        h = seq.emit(mir.AddOp(op.x, op.residual, op.result.type))
        emit_rms_norm(seq, h, op.gamma, op.beta, op.eps)
        _replace(rewriter, op, seq)


class LlamaDecoderBlockLowering(RewritePattern):
    """`hir.llama_decoder_block` -> the whole pre-norm block in mir primitives."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: hir.LlamaDecoderBlockOp, rewriter: PatternRewriter, /) -> None:
        seq = OpSequence()
        emit_llama_decoder_block(seq, op)
        _replace(rewriter, op, seq)


class EmbeddingLowering(RewritePattern):
    """`hir.embedding` -> `mir.gather(table, ids, axis 0)`."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: hir.EmbeddingOp, rewriter: PatternRewriter, /) -> None:
        seq = OpSequence()
        seq.emit(mir.GatherOp(op.table, op.ids, 0, op.result.type))
        _replace(rewriter, op, seq)


class Qwen35MtpHeadLowering(RewritePattern):
    """`hir.qwen35_mtp_head` -> the whole head in mir primitives (docs/semantics.md): the
    two input norms, concat and projection, the gated causal attention block (per-head q/k
    rms_norm through reshapes, rope on n_rot dims, sigmoid gate), the SwiGLU FFN, then the
    row `last_token_idx[b]` of each batch (two gathers), the head norm and the lm head.
    A matrix given as raw GGUF rows (`schemes`) is multiplied by `mir.dequant_matmul`
    (the op's `activations` for the block-quantized schemes, as the decoder's
    projections), the embedding looked up by `mir.dequant_gather`; f32 ones by
    `mir.matmul` and `mir.gather`."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: hir.Qwen35MtpHeadOp, rewriter: PatternRewriter, /) -> None:
        seq = OpSequence()
        heads, kv_heads = op.num_heads.value.data, op.num_kv_heads.value.data
        d_head, n_rot = op.head_dim.value.data, op.n_rot.value.data
        batch, steps, d = shape_of(op.h_pre_norm)
        ty = op.h_pre_norm.type
        assert isinstance(ty, TensorType)

        def tensor(*shape: int | str, like: TensorType = ty) -> TensorType:
            # a symbolic S (shape_of's UNKNOWN) is the type's `?`
            return TensorType(like.get_element_type(),
                              [DYNAMIC if d == UNKNOWN else d for d in shape])

        def per_head(x: SSAValue, gamma: SSAValue, beta: SSAValue | None, n: int) -> SSAValue:
            split = seq.emit(mir.ReshapeOp(x, tensor(batch, steps, n, d_head)))
            normed = emit_rms_norm(seq, split, gamma, beta, op.eps)
            return seq.emit(mir.ReshapeOp(normed, tensor(batch, steps, n * d_head)))

        raw = op.weight_schemes()

        def project(x: SSAValue, name: str, result_type: Attribute | None = None) -> SSAValue:
            w = getattr(op, name)
            if name not in raw:
                return seq.emit(mir.MatmulOp(x, w, result_type))
            form = op.activations if raw[name] in VEC_DOT_TYPES else None
            return seq.emit(mir.DequantMatmulOp(x, w, scheme=raw[name], activations=form,
                                                result_type=result_type))

        h = emit_rms_norm(seq, op.h_pre_norm, op.hnorm_w, op.hnorm_b, op.eps)
        if "embed_w" in raw:
            tokens = seq.emit(mir.DequantGatherOp(op.embed_w, op.input_ids, raw["embed_w"]))
        else:
            tokens = seq.emit(mir.GatherOp(op.embed_w, op.input_ids, 0))
        e = emit_rms_norm(seq, tokens, op.enorm_w, op.enorm_b, op.eps)
        cur = project(seq.emit(mir.ConcatOp([e, h], 2)), "eh_w")
        a = emit_rms_norm(seq, cur, op.attn_norm_w, op.attn_norm_b, op.eps)
        q_gate = seq.emit(mir.ReshapeOp(project(a, "q_gate_w"),
                                        tensor(batch, steps, heads, 2 * d_head)))
        q = seq.emit(mir.NarrowOp(q_gate, 3, 0, d_head))
        gate = seq.emit(mir.ReshapeOp(seq.emit(mir.NarrowOp(q_gate, 3, d_head, d_head)),
                                      tensor(batch, steps, heads * d_head)))
        q = per_head(seq.emit(mir.ReshapeOp(q, tensor(batch, steps, heads * d_head))),
                     op.q_norm_w, op.q_norm_b, heads)
        k = per_head(project(a, "k_w"), op.k_norm_w, op.k_norm_b, kv_heads)
        v = project(a, "v_w")
        q = seq.emit(mir.RopeOp(q, op.cos, op.sin, d_head, n_rot))
        k = seq.emit(mir.RopeOp(k, op.cos, op.sin, d_head, n_rot))
        att = seq.emit(mir.AttentionOp(
            q, k, v, None, num_heads=heads, head_dim=d_head, num_kv_heads=kv_heads,
            mask_kind=MaskKindAttr(MaskKind.CAUSAL), scale=FloatAttr(1.0 / math.sqrt(d_head), f32)))
        gated = seq.emit(mir.MulOp(att, seq.emit(mir.SigmoidOp(gate))))
        cur = seq.emit(mir.AddOp(cur, project(gated, "o_w")))
        post = emit_rms_norm(seq, cur, op.post_norm_w, op.post_norm_b, op.eps)
        ffn = seq.emit(mir.MulOp(seq.emit(mir.SiluOp(project(post, "gate_w"))),
                                 project(post, "up_w")))
        cur = seq.emit(mir.AddOp(cur, project(ffn, "down_w")))
        # Every batch's rows at every last_token_idx (a checked gather: an index outside
        # [0, S) is a run-time error), then the diagonal [b, b] of the B x B picks.
        picked = seq.emit(mir.GatherOp(cur, op.last_token_idx, 1))
        last = seq.emit(mir.ReshapeOp(picked, tensor(batch * batch, d)))
        if batch > 1:
            diagonal = TensorType(i64, [batch])
            rows = seq.emit(mir.ConstantOp(DenseIntOrFPElementsAttr.from_list(
                diagonal, [b * (batch + 1) for b in range(batch)])))
            last = seq.emit(mir.GatherOp(last, rows, 0))
        normed = emit_rms_norm(seq, last, op.head_norm_w, op.head_norm_b, op.eps)
        project(normed, "lm_head_w", op.result.type)
        _replace(rewriter, op, seq)


class DepthwiseConv1dCausalLowering(RewritePattern):
    """`hir.depthwise_conv1d_causal` -> `mir.concat(left_pad or zeros [B, K-1, C], x)` along
    time, then a valid `mir.depthwise_conv1d`; with K = 1 there is nothing to pad. With
    `return_state` the conv also returns the padded input's last K-1 rows (the window)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(
        self, op: hir.DepthwiseConv1dCausalOp, rewriter: PatternRewriter, /
    ) -> None:
        seq = OpSequence()
        batch, _, channels = shape_of(op.x)
        taps = shape_of(op.w)[0]
        padded = op.x
        if taps > 1:
            pad = op.left_pad
            if pad is None:
                pad = seq.emit(splat_constant((batch, taps - 1, channels)))
            padded = seq.emit(mir.ConcatOp([pad, op.x], 1))
        types = [r.type for r in op.results]
        seq.emit(mir.DepthwiseConv1dOp(padded, op.w, return_state=op.return_state,
                                       result_types=types + [None] * (2 - len(types))))
        _replace(rewriter, op, seq)


class SharedLinearPairLowering(RewritePattern):
    """`hir.shared_linear_pair` -> one `mir.shared_input_matmul` of the two weights."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: hir.SharedLinearPairOp, rewriter: PatternRewriter, /) -> None:
        rewriter.replace(op, mir.SharedInputMatmulOp(op.x, [op.w_first, op.w_second]))


class LinearFusedLowering(RewritePattern):
    """`hir.linear_fused` -> one `mir.fused_matmul` (bias and activation in its epilogue),
    whatever mir-fuse's policy."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: hir.LinearFusedOp, rewriter: PatternRewriter, /) -> None:
        rewriter.replace(op, mir.FusedMatmulOp(op.x, op.w, op.bias, activation=op.activation,
                                               result_type=op.result.type))


HIR_TO_MIR: dict[type[hir.HirOp], type[RewritePattern]] = {
    hir.LinearOp: LinearLowering,
    hir.SwigluFfnOp: SwigluFfnLowering,
    hir.RmsNormOp: TwinLowering,
    hir.ResidualRmsNormOp: ResidualRmsNormLowering,
    hir.LayerNormOp: TwinLowering,
    hir.AttentionOp: TwinLowering,
    hir.RopeOp: TwinLowering,
    hir.LlamaDecoderBlockOp: LlamaDecoderBlockLowering,
    hir.EmbeddingOp: EmbeddingLowering,
    hir.DequantMatmulOp: TwinLowering,
    hir.DepthwiseConv1dCausalOp: DepthwiseConv1dCausalLowering,
    hir.Qwen35MtpHeadOp: Qwen35MtpHeadLowering,
    hir.SharedLinearPairOp: SharedLinearPairLowering,
    hir.LinearFusedOp: LinearFusedLowering,
}
"""The pattern of each hir op (every op of the registry has one: checked at import)."""

registry.check_complete("convert-hir-to-mir: hir ops with a pattern", registry.HIR_OPS, HIR_TO_MIR)

HIR_TO_MIR_PATTERNS: tuple[type[RewritePattern], ...] = tuple(dict.fromkeys(HIR_TO_MIR.values()))
"""The patterns of the hir ops (one serves every twin)."""


@dataclass(frozen=True)
class ConvertHirToMirPass(ModulePass):
    """Expand every hir block op into mir primitives (docs/semantics.md "The pipeline's order")."""

    name = "convert-hir-to-mir"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            with_provenance(GreedyRewritePatternApplier(
                [pattern() for pattern in HIR_TO_MIR_PATTERNS], dce_enabled=False
            ), Derive.EXPAND),  # "layer3.attention" -> "layer3.attention/softmax"
            apply_recursively=False,
        ).rewrite_module(op)


__all__ = ["HIR_TO_MIR", "HIR_TO_MIR_PATTERNS", "ConvertHirToMirPass"]
