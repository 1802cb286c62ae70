"""The `hir` dialect: model blocks (linear layers, norms, attention, decoder blocks).

Each op is one block of a model as a user writes it; `convert-hir-to-mir` expands it
into `mir` primitives. Operands and results are ranked builtin tensors. Compute
operands are f32; `hir.embedding` takes i32/i64 ids and `hir.dequant_matmul` takes the
raw GGUF block bytes as ui8 (as do the quantized matrices of `hir.qwen35_mtp_head`). Every
result is f32.

Shape and dtype rules live in `rlx_mlir.core.shape_inference` (shared with the Graph
builder); the verifiers here only call them and compare the declared result type with
what they infer. Enum properties (activation, mask kind, rope style, quant scheme) are
the shared `rlx` attributes and print as bare keywords:

```mlir
%y = hir.linear %x, %w bias %b activation silu
    : (tensor<4x64xf32>, tensor<64x128xf32>, tensor<128xf32>) -> tensor<4x128xf32>
```
"""

from __future__ import annotations

from abc import ABC
from typing import ClassVar, cast

from xdsl.dialects.builtin import (
    I64,
    DictionaryAttr,
    Float32Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    TensorType,
    UnitAttr,
    f32,
    i64,
)
from xdsl.ir import Attribute, Dialect, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    opt_result_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from rlx_mlir.core import shape_inference as rules
from rlx_mlir.core.shape_inference import Shape
from rlx_mlir.dialects import mir
from rlx_mlir.dialects.common import (
    defined_ops,
    shape_of,
    verify_dtype,
)
from rlx_mlir.dialects.rlx import (
    ActivationAttr,
    MaskKind,
    MaskKindAttr,
    QuantActivations,
    QuantActivationsAttr,
    QuantScheme,
    QuantSchemeAttr,
    RopeStyle,
    RopeStyleAttr,
)
from rlx_mlir.dialects.verifier import (
    INDEX,
    UI8,
    ElementTypes,
    Operand,
    VerifiesSignature,
    twin,
)

DEFAULT_EPS = 1e-5
"""The eps of the norms when none is given (docs/semantics.md)."""


# ----------------------------------------------------------------------------- base


class HirOp(VerifiesSignature, ABC):
    """Base of every hir op: a block with one f32 result; `VerifiesSignature` checks the
    dimensions (every one >= 1), the element types (f32 unless `ELEMENT_TYPES` says
    otherwise), eps and scale, then that the result has the shape `infer_shape` computes
    with the op's rule in `rlx_mlir.core.shape_inference`. An op that is a mir op at the
    block level (rms_norm, layer_norm, attention, rope, dequant_matmul) is the mir op's
    `twin`: the same operands, properties, element types and shape rule.
    """

    traits = traits_def(Pure())


def mir_twin(mir_op: type[VerifiesSignature], **defaults: Attribute) -> type[HirOp]:
    """The base of the hir op that is `mir_op` at the block level (`verifier.twin`), with
    `defaults` for properties the hir syntax may leave out."""
    cls = twin(mir_op, HirOp, dialect="hir", value_type=TensorType, defaults=defaults)
    return cast(type[HirOp], cls)


# ----------------------------------------------------------------------------- linear layers


class DenseLayer(HirOp, ABC):
    """The signature of a dense layer `activation(x[..., K] @ w[K, N] + bias[N])`:
    operands `x`, `w` and the optional `bias`; no activation means identity. Shared by
    `hir.linear` and `hir.linear_fused`, which differ only in their lowering."""

    RULE = rules.linear

    x = operand_def(TensorType)
    w = operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    result = result_def(TensorType)
    activation = opt_prop_def(ActivationAttr)

    assembly_format = (
        "$x `,` $w (`bias` $bias^)? (`activation` $activation^)? attr-dict"
        " `:` functional-type(operands, results)"
    )


@irdl_op_definition
class LinearOp(DenseLayer):
    """A dense layer (`DenseLayer`), lowered to matmul, add and the activation for
    mir-fuse to fuse per the fusion policy."""

    name = "hir.linear"

@irdl_op_definition
class SwigluFfnOp(HirOp):
    """The SwiGLU feed-forward block `(silu(x @ gate) * (x @ up)) @ down` of operands
    `x` [..., D], `up` and `gate` [D, F], `down` [F, E]."""

    name = "hir.swiglu_ffn"
    RULE = rules.swiglu_ffn

    x = operand_def(TensorType)
    up = operand_def(TensorType)
    gate = operand_def(TensorType)
    down = operand_def(TensorType)
    result = result_def(TensorType)

    assembly_format = (
        "$x `,` `up` $up `,` `gate` $gate `,` `down` $down attr-dict"
        " `:` functional-type(operands, results)"
    )

@irdl_op_definition
class DequantMatmulOp(mir_twin(mir.DequantMatmulOp)):
    """`x[..., K] @ dequant(w)^T` where `w` holds a GGUF tensor's raw blocks (ui8
    [N, K/values * bytes]) quantized with `scheme`; result [..., N]. `activations q8`
    quantizes x as ggml does (absent: f32)."""

    assembly_format = (
        "$scheme $x `,` $w (`residual` $residual^)? (`activations` $activations^)? attr-dict"
        " `:` functional-type(operands, results)"
    )

@irdl_op_definition
class EmbeddingOp(HirOp):
    """Row lookup `table[ids]` of operands `table` (f32 [V, D]) and `ids` (i32 or i64,
    any shape); result [*ids.shape, D]."""

    name = "hir.embedding"
    RULE = rules.embedding

    table = operand_def(TensorType)
    ids = operand_def(TensorType)
    result = result_def(TensorType)

    assembly_format = "$table `[` $ids `]` attr-dict `:` functional-type(operands, results)"

    ELEMENT_TYPES: ClassVar[ElementTypes] = ElementTypes({"ids": INDEX})

@irdl_op_definition
class DepthwiseConv1dCausalOp(HirOp):
    """Causal depthwise convolution over time of `x` [B, S, C] with kernel `w` [K, C],
    the optional `left_pad` [B, K-1, C] standing for the previous steps (zeros when
    absent); result [B, S, C]. With `return_state`, a second result `final_state`
    [B, K-1, C]: the last K-1 rows of concat(left_pad, x) over time, for any S."""

    name = "hir.depthwise_conv1d_causal"
    RULE = rules.depthwise_conv1d_causal

    x = operand_def(TensorType)
    w = operand_def(TensorType)
    left_pad = opt_operand_def(TensorType)
    result = result_def(TensorType)
    final_state = opt_result_def(TensorType)
    return_state = opt_prop_def(UnitAttr)

    EXTRA_RESULTS: ClassVar[tuple[str, ...]] = ("final_state",)

    assembly_format = (
        "$x `,` $w (`left_pad` $left_pad^)? (`return_state` $return_state^)? attr-dict"
        " `:` functional-type(operands, results)"
    )

# ----------------------------------------------------------------------------- norms


@irdl_op_definition
class RmsNormOp(mir_twin(mir.RmsNormOp)):
    """RMS normalization over the last axis, `x / sqrt(mean(x^2) + eps) * gamma (+ beta)`,
    of operands `x` [..., N], `gamma` [N] and the optional `beta` [N]."""

    assembly_format = (
        "$x `,` $gamma (`beta` $beta^)? (`eps` $eps^)? attr-dict"
        " `:` functional-type(operands, results)"
    )

@irdl_op_definition
class ResidualRmsNormOp(HirOp):
    """`rms_norm(x + residual, gamma, beta, eps)` of operands `x`, `residual` (same
    shape), `gamma` [N] and the optional `beta` [N]; returns the normalized value only."""

    name = "hir.residual_rms_norm"
    RULE = rules.residual_norm

    x = operand_def(TensorType)
    residual = operand_def(TensorType)
    gamma = operand_def(TensorType)
    beta = opt_operand_def(TensorType)
    result = result_def(TensorType)
    eps = prop_def(FloatAttr[Float32Type], default_value=FloatAttr(DEFAULT_EPS, f32))

    assembly_format = (
        "$x `,` $residual `,` $gamma (`beta` $beta^)? (`eps` $eps^)? attr-dict"
        " `:` functional-type(operands, results)"
    )

@irdl_op_definition
class LayerNormOp(mir_twin(mir.LayerNormOp)):
    """Layer normalization over the last axis (population variance),
    `(x - mean) / sqrt(var + eps) * gamma + beta`, of operands `x` [..., N], `gamma` and
    `beta` [N]."""

    assembly_format = (
        "$x `,` $gamma `,` $beta (`eps` $eps^)? attr-dict `:` functional-type(operands, results)"
    )

# ----------------------------------------------------------------------------- attention


@irdl_op_definition
class AttentionOp(mir_twin(mir.AttentionOp, mask_kind=MaskKindAttr(MaskKind.NONE))):
    """Grouped-query scaled dot-product attention of `q` [B, S, H*D], `k` and `v`
    [B, T, Hkv*D] (B optional) with the optional `mask` ([S, T] or [1|B, 1|H, S, T],
    present exactly when `mask_kind` is custom or bias); result has q's shape. `window`
    W (causal only): query i sees the keys i + (T−S) − W < j ≤ i + (T−S)."""

    assembly_format = (
        "$q `,` $k `,` $v (`mask` $mask^)? (`mask_kind` $mask_kind^)?"
        " `num_heads` $num_heads `num_kv_heads` $num_kv_heads `head_dim` $head_dim"
        " `scale` $scale (`window` $window^)? attr-dict `:` functional-type(operands, results)"
    )

@irdl_op_definition
class RopeOp(mir_twin(mir.RopeOp, style=RopeStyleAttr(RopeStyle.HALF))):
    """Rotary position embedding of `x` [S, H*D] or [B, S, H*D] by the tables `cos` and
    `sin` [S, n_rot/2]: in every head of `head_dim` dims the first `n_rot` rotate in
    `style` pairs (half or interleaved) and the rest pass through."""

    assembly_format = (
        "$x `,` $cos `,` $sin `head_dim` $head_dim `n_rot` $n_rot (`style` $style^)?"
        " attr-dict `:` functional-type(operands, results)"
    )

# ----------------------------------------------------------------------------- decoder block

LLAMA_KV_CACHE = ("k_cache", "v_cache", "position")
"""The optional operands of a decoding `hir.llama_decoder_block`, printed last as
`kv_cache(%k, %v, %position)`."""

LLAMA_SYNTAX_GROUPS: tuple[tuple[str, tuple[str, ...], str | None], ...] = (
    ("ln1", ("ln1_g",), "ln1_b"),
    ("attn", ("q_w", "k_w", "v_w", "o_w"), None),
    ("ln2", ("ln2_g",), "ln2_b"),
    ("ffn", ("gate_w", "up_w", "down_w"), None),
    ("rope", ("cos", "sin"), None),
    ("mask", (), "mask"),
)
"""The keyword groups of the custom syntax of `hir.llama_decoder_block`, in operand
order: (keyword, required operands, optional last operand); a group without required
operands is left out when its operand is absent."""


@irdl_op_definition
class LlamaDecoderBlockOp(HirOp):
    """The pre-norm Llama decoder layer: `h = x + o_w-projection of attention(rope(q),
    rope(k), v)` over `rms_norm(x, ln1_g, ln1_b)`, then `h + swiglu_ffn(rms_norm(h, ln2_g,
    ln2_b), up_w, gate_w, down_w)`; weights are [in, out], `cos`/`sin` are [S, D/2],
    `ln1_b`, `ln2_b` and `mask` are optional.

    Custom syntax: operands in keyword groups (in operand order), then the properties
    (`mask_kind`, `rope_style` and `eps` only when not causal, half, 1e-5), then the
    types of the operands present:

    ```mlir
    %y = hir.llama_decoder_block %x ln1(%ln1_g) attn(%q_w, %k_w, %v_w, %o_w)
        ln2(%ln2_g, %ln2_b) ffn(%gate_w, %up_w, %down_w) rope(%cos, %sin) mask(%mask)
        num_heads 4 num_kv_heads 2 head_dim 8 mask_kind bias eps 1.000000e-06
        : (tensor<6x32xf32>, ...) -> tensor<6x32xf32>
    ```

    Decoding with KV caches (states) appends k and v after rope at the position and
    attends over the cache rows [0, P+S) (`kv_cache(%k_cache, %v_cache, %position)` after
    the groups; mask_kind causal or none).
    """

    name = "hir.llama_decoder_block"
    RULE = rules.llama_decoder_block
    DERIVED: ClassVar = {"num_kv_heads": lambda p: p["num_heads"]}

    x = operand_def(TensorType)
    ln1_g = operand_def(TensorType)
    ln1_b = opt_operand_def(TensorType)
    q_w = operand_def(TensorType)
    k_w = operand_def(TensorType)
    v_w = operand_def(TensorType)
    o_w = operand_def(TensorType)
    ln2_g = operand_def(TensorType)
    ln2_b = opt_operand_def(TensorType)
    gate_w = operand_def(TensorType)
    up_w = operand_def(TensorType)
    down_w = operand_def(TensorType)
    cos = operand_def(TensorType)
    sin = operand_def(TensorType)
    mask = opt_operand_def(TensorType)
    k_cache = opt_operand_def(TensorType)
    """With `v_cache` and `position`: decode with KV caches (states [capacity, Hkv*D]):
    k and v after rope are appended at the position, attention reads rows [0, P+S)."""
    v_cache = opt_operand_def(TensorType)
    position = opt_operand_def(IndexType)
    result = result_def(TensorType)
    num_heads = prop_def(IntegerAttr[I64])
    head_dim = prop_def(IntegerAttr[I64])
    num_kv_heads = prop_def(IntegerAttr[I64])
    eps = prop_def(FloatAttr[Float32Type], default_value=FloatAttr(DEFAULT_EPS, f32))
    mask_kind = prop_def(MaskKindAttr, default_value=MaskKindAttr(MaskKind.CAUSAL))
    rope_style = prop_def(RopeStyleAttr, default_value=RopeStyleAttr(RopeStyle.HALF))

    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    @classmethod
    def parse(cls, parser: Parser) -> LlamaDecoderBlockOp:
        names: list[str] = ["x"]
        unresolved = [parser.parse_unresolved_operand()]
        for keyword, required, optional in LLAMA_SYNTAX_GROUPS:
            if required:
                parser.parse_keyword(keyword)
            elif parser.parse_optional_keyword(keyword) is None:
                continue
            parser.parse_punctuation("(")
            for i, operand in enumerate(required):
                if i:
                    parser.parse_punctuation(",")
                names.append(operand)
                unresolved.append(parser.parse_unresolved_operand())
            if optional is not None and (
                not required or parser.parse_optional_punctuation(",") is not None
            ):
                names.append(optional)
                unresolved.append(parser.parse_unresolved_operand())
            parser.parse_punctuation(")")
        if parser.parse_optional_keyword("kv_cache") is not None:
            parser.parse_punctuation("(")
            for i, operand in enumerate(LLAMA_KV_CACHE):
                if i:
                    parser.parse_punctuation(",")
                names.append(operand)
                unresolved.append(parser.parse_unresolved_operand())
            parser.parse_punctuation(")")
        props: dict[str, Attribute] = {}
        for prop in ("num_heads", "num_kv_heads", "head_dim"):
            parser.parse_keyword(prop)
            props[prop] = IntegerAttr.parse_with_type(parser, i64)
        if parser.parse_optional_keyword("mask_kind") is not None:
            props["mask_kind"] = MaskKindAttr(parser.parse_str_enum(MaskKind))
        if parser.parse_optional_keyword("rope_style") is not None:
            props["rope_style"] = RopeStyleAttr(parser.parse_str_enum(RopeStyle))
        if parser.parse_optional_keyword("eps") is not None:
            props["eps"] = FloatAttr.parse_with_type(parser, f32)
        attributes = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        pos = parser.pos
        fn_type = parser.parse_function_type()
        if len(fn_type.outputs) != 1:
            parser.raise_error(
                f"expected one result type, got {len(fn_type.outputs)}", pos, parser.pos
            )
        operands = parser.resolve_operands(unresolved, fn_type.inputs, pos)
        values = dict(zip(names, operands, strict=True))
        op = cls.build(
            operands=[values.get(name) for name, _ in cls.get_irdl_definition().operands],
            result_types=[fn_type.outputs.data[0]],
            properties=props,
            attributes=attributes,
        )
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_ssa_value(self.x)
        for keyword, required, optional in LLAMA_SYNTAX_GROUPS:
            names = required if optional is None else (*required, optional)
            values = [v for v in (getattr(self, name) for name in names) if v is not None]
            if not values:
                continue
            printer.print_string(f" {keyword}(")
            printer.print_list(values, printer.print_ssa_value)
            printer.print_string(")")
        if self.k_cache is not None and self.v_cache is not None and self.position is not None:
            printer.print_string(" kv_cache(")
            printer.print_list([self.k_cache, self.v_cache, self.position], printer.print_ssa_value)
            printer.print_string(")")
        for prop in ("num_heads", "num_kv_heads", "head_dim"):
            printer.print_string(f" {prop} ")
            getattr(self, prop).print_without_type(printer)
        default = self.get_irdl_definition().properties
        if self.mask_kind != default["mask_kind"].default_value:
            printer.print_string(f" mask_kind {self.mask_kind.data}")
        if self.rope_style != default["rope_style"].default_value:
            printer.print_string(f" rope_style {self.rope_style.data}")
        if self.eps != default["eps"].default_value:
            printer.print_string(" eps ")
            self.eps.print_without_type(printer)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_function_type(self.operand_types, self.result_types)

    def infer_shape(self) -> Shape:
        shape = super().infer_shape()
        if self.k_cache is not None and self.v_cache is not None:
            rules.llama_kv_cache(
                shape_of(self.x), shape_of(self.k_cache), shape_of(self.v_cache),
                num_kv_heads=self.num_kv_heads.value.data, head_dim=self.head_dim.value.data,
                mask_kind=str(self.mask_kind.data),
            )
        return shape

    def verify_value(self, label: str, value: SSAValue) -> None:
        if not isinstance(value.type, IndexType):  # the position has no shape
            super().verify_value(label, value)

    def verify_element_types(self, named: list[Operand]) -> None:
        super().verify_element_types([o for o in named if o.name != "position"])

    def verify_attributes(self) -> None:
        present = [name for name in LLAMA_KV_CACHE if getattr(self, name) is not None]
        if present and len(present) != len(LLAMA_KV_CACHE):
            raise VerifyException(
                f"'{self.name}': kv_cache: expected k_cache, v_cache and position together, "
                f"got only {', '.join(present)}"
            )


# ----------------------------------------------------------------------------- qwen3.5

MTP_LEADING = ("h_pre_norm", "input_ids", "cos", "sin", "last_token_idx")
"""The operands of `hir.qwen35_mtp_head` printed first, comma-separated."""

MTP_SYNTAX_GROUPS: tuple[tuple[str, tuple[str, ...], str | None], ...] = (
    ("embed", ("embed_w",), None),
    ("hnorm", ("hnorm_w",), "hnorm_b"),
    ("enorm", ("enorm_w",), "enorm_b"),
    ("eh", ("eh_w",), None),
    ("attn_norm", ("attn_norm_w",), "attn_norm_b"),
    ("attn", ("q_gate_w", "k_w", "v_w"), None),
    ("q_norm", ("q_norm_w",), "q_norm_b"),
    ("k_norm", ("k_norm_w",), "k_norm_b"),
    ("o", ("o_w",), None),
    ("post_norm", ("post_norm_w",), "post_norm_b"),
    ("ffn", ("gate_w", "up_w", "down_w"), None),
    ("head_norm", ("head_norm_w",), "head_norm_b"),
    ("lm_head", ("lm_head_w",), None),
)
"""The keyword groups of its custom syntax, in operand order (as LLAMA_SYNTAX_GROUPS)."""

MTP_PROPERTIES = ("num_heads", "num_kv_heads", "head_dim", "n_rot")


@irdl_op_definition
class Qwen35MtpHeadOp(HirOp):
    """The Qwen3.5 multi-token-prediction head (docs/semantics.md): `h =
    rms_norm(h_pre_norm, hnorm)`, `e = rms_norm(embed_w[input_ids], enorm)`, `cur =
    concat(e, h) @ eh_w`, a causal gated-attention block on `cur` (per-head rms_norm of q
    and k, half rope on the first n_rot dims of each head, `attention · sigmoid(gate)`,
    then `@ o_w` added), `+ swiglu_ffn(rms_norm(cur, post_norm))`, the row
    `last_token_idx[b]` of each batch, `rms_norm(head_norm) @ lm_head_w` -> logits [B, V].
    The norm betas are optional.

    A matrix operand (`rules.QWEN35_MTP_MATRICES`) is f32 [in, out] (the embedding table
    [V, d]) or, named in `schemes` with its GGUF scheme, the raw rows of a quantized (or
    f16/bf16) tensor, ui8 [out, in/values * bytes] as `hir.dequant_matmul`'s w (the
    embedding: as `mir.dequant_gather`'s table). The custom syntax puts the scheme before
    the operand; `activations q8` quantizes the activations of the block-quantized ones as
    ggml does (f16/bf16 and f32 ones multiply in f32):

    ```mlir
    %l = hir.qwen35_mtp_head %h, %ids, %cos, %sin, %last embed(%emb) hnorm(%hn, %hb)
        enorm(%en) eh(%eh) attn_norm(%an) attn(%qg, %k, %v) q_norm(%qn) k_norm(%kn) o(%o)
        post_norm(%pn) ffn(%g, %u, %d) head_norm(%hd) lm_head(%lm)
        num_heads 4 num_kv_heads 2 head_dim 8 n_rot 4 : (...) -> tensor<2x64xf32>
    %l = hir.qwen35_mtp_head ... embed(q6_k %emb) ... ffn(q4_k %g, q4_k %u, q8_0 %d)
        lm_head(q6_k %lm) num_heads 4 num_kv_heads 2 head_dim 8 n_rot 4 activations q8 ...
    ```
    (`eps` only when not 1e-6; a beta is the second operand of its norm's group.)
    """

    name = "hir.qwen35_mtp_head"
    RULE = rules.qwen35_mtp_head

    h_pre_norm = operand_def(TensorType)
    input_ids = operand_def(TensorType)
    cos = operand_def(TensorType)
    sin = operand_def(TensorType)
    last_token_idx = operand_def(TensorType)
    embed_w = operand_def(TensorType)
    hnorm_w = operand_def(TensorType)
    hnorm_b = opt_operand_def(TensorType)
    enorm_w = operand_def(TensorType)
    enorm_b = opt_operand_def(TensorType)
    eh_w = operand_def(TensorType)
    attn_norm_w = operand_def(TensorType)
    attn_norm_b = opt_operand_def(TensorType)
    q_gate_w = operand_def(TensorType)
    k_w = operand_def(TensorType)
    v_w = operand_def(TensorType)
    q_norm_w = operand_def(TensorType)
    q_norm_b = opt_operand_def(TensorType)
    k_norm_w = operand_def(TensorType)
    k_norm_b = opt_operand_def(TensorType)
    o_w = operand_def(TensorType)
    post_norm_w = operand_def(TensorType)
    post_norm_b = opt_operand_def(TensorType)
    gate_w = operand_def(TensorType)
    up_w = operand_def(TensorType)
    down_w = operand_def(TensorType)
    head_norm_w = operand_def(TensorType)
    head_norm_b = opt_operand_def(TensorType)
    lm_head_w = operand_def(TensorType)
    result = result_def(TensorType)

    num_heads = prop_def(IntegerAttr[I64])
    num_kv_heads = prop_def(IntegerAttr[I64])
    head_dim = prop_def(IntegerAttr[I64])
    n_rot = prop_def(IntegerAttr[I64])
    eps = prop_def(FloatAttr[Float32Type], default_value=FloatAttr(1e-6, f32))
    schemes = opt_prop_def(DictionaryAttr)
    """Matrix operand name -> its QuantSchemeAttr, for the ones given as raw GGUF rows."""
    activations = opt_prop_def(QuantActivationsAttr)

    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    ELEMENT_TYPES: ClassVar[ElementTypes] = ElementTypes(
        {"input_ids": INDEX, "last_token_idx": INDEX})
    ABSENT_VALUES: ClassVar[dict[str, QuantActivations]] = {"activations": QuantActivations.F32}

    def weight_schemes(self) -> dict[str, str]:
        """The scheme of each matrix operand given as raw GGUF rows, by operand name."""
        if self.schemes is None:
            return {}
        return {name: str(attr.data.value) if isinstance(attr, QuantSchemeAttr) else str(attr)
                for name, attr in self.schemes.data.items()}

    def verify_element_types(self, named: list[Operand]) -> None:
        """The matrices named in `schemes` (checked first) are ui8, the others as declared."""
        self.verify_schemes()
        raw = self.weight_schemes()
        super().verify_element_types([o for o in named if o.name not in raw])
        for operand in named:
            if operand.name in raw:
                for label, value in operand.values:
                    verify_dtype(self, label, value, UI8)

    def verify_schemes(self) -> None:
        """`schemes` maps matrix operands (rules.QWEN35_MTP_MATRICES) to quant schemes."""
        for name, attr in (self.schemes.data.items() if self.schemes is not None else ()):
            if name not in rules.QWEN35_MTP_MATRICES:
                raise VerifyException(
                    f"'{self.name}': schemes: {name!r} is no matrix operand (expected some of "
                    f"{', '.join(rules.QWEN35_MTP_MATRICES)})")
            if not isinstance(attr, QuantSchemeAttr):
                raise VerifyException(f"'{self.name}': schemes: {name}: expected a "
                                      f"#rlx.quant_scheme, got {attr}")

    @classmethod
    def parse(cls, parser: Parser) -> Qwen35MtpHeadOp:
        names = list(MTP_LEADING)
        schemes: dict[str, Attribute] = {}
        unresolved = [parser.parse_unresolved_operand()]
        for _ in MTP_LEADING[1:]:
            parser.parse_punctuation(",")
            unresolved.append(parser.parse_unresolved_operand())
        for keyword, required, optional in MTP_SYNTAX_GROUPS:
            parser.parse_keyword(keyword)
            parser.parse_punctuation("(")
            for i, operand in enumerate(required):
                if i:
                    parser.parse_punctuation(",")
                if operand in rules.QWEN35_MTP_MATRICES and (
                        scheme := _parse_optional_scheme(parser)) is not None:
                    schemes[operand] = scheme
                names.append(operand)
                unresolved.append(parser.parse_unresolved_operand())
            if optional is not None and parser.parse_optional_punctuation(",") is not None:
                names.append(optional)
                unresolved.append(parser.parse_unresolved_operand())
            parser.parse_punctuation(")")
        props: dict[str, Attribute] = {}
        for prop in MTP_PROPERTIES:
            parser.parse_keyword(prop)
            props[prop] = IntegerAttr.parse_with_type(parser, i64)
        if schemes:
            props["schemes"] = DictionaryAttr(schemes)
        if parser.parse_optional_keyword("activations") is not None:
            props["activations"] = QuantActivationsAttr(QuantActivationsAttr.parse_parameter(parser))
        if parser.parse_optional_keyword("eps") is not None:
            props["eps"] = FloatAttr.parse_with_type(parser, f32)
        attributes = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        pos = parser.pos
        fn_type = parser.parse_function_type()
        if len(fn_type.outputs) != 1:
            parser.raise_error(
                f"expected one result type, got {len(fn_type.outputs)}", pos, parser.pos
            )
        values = dict(zip(names, parser.resolve_operands(unresolved, fn_type.inputs, pos),
                          strict=True))
        return cls.build(
            operands=[values.get(name) for name, _ in cls.get_irdl_definition().operands],
            result_types=[fn_type.outputs.data[0]], properties=props, attributes=attributes,
        )

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_list([getattr(self, name) for name in MTP_LEADING], printer.print_ssa_value)
        raw = self.weight_schemes()

        def print_operand(name: str) -> None:
            if name in raw:
                printer.print_string(f"{raw[name]} ")
            printer.print_ssa_value(getattr(self, name))

        for keyword, required, optional in MTP_SYNTAX_GROUPS:
            names = required if optional is None else (*required, optional)
            printer.print_string(f" {keyword}(")
            printer.print_list([n for n in names if getattr(self, n) is not None], print_operand)
            printer.print_string(")")
        for prop in MTP_PROPERTIES:
            printer.print_string(f" {prop} ")
            getattr(self, prop).print_without_type(printer)
        if self.activations is not None:
            printer.print_string(f" activations {self.activations.data.value}")
        if self.eps != self.get_irdl_definition().properties["eps"].default_value:
            printer.print_string(" eps ")
            self.eps.print_without_type(printer)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_function_type(self.operand_types, self.result_types)


def _parse_optional_scheme(parser: Parser) -> QuantSchemeAttr | None:
    """The GGUF scheme keyword before a matrix operand of `hir.qwen35_mtp_head`, if any."""
    pos = parser.pos
    name = parser.parse_optional_identifier()
    if name is None:
        return None
    if name not in {scheme.value for scheme in QuantScheme}:
        parser.raise_error(f"expected a quant scheme ({', '.join(QuantScheme)}), got {name!r}",
                           pos, parser.pos)
    return QuantSchemeAttr(QuantScheme(name))


# ----------------------------------------------------------------------------- shared input, fused linear


@irdl_op_definition
class SharedLinearPairOp(HirOp):
    """`(x[..., K] @ w_first[K, N_1], x @ w_second[K, N_2])`: two projections of one input
    (gate/up, k/v) as one op; it lowers to `mir.shared_input_matmul`, whose kernel reads x
    once."""

    name = "hir.shared_linear_pair"
    RULE = rules.shared_linear_pair

    x = operand_def(TensorType)
    w_first = operand_def(TensorType)
    w_second = operand_def(TensorType)
    result = result_def(TensorType)
    second = opt_result_def(TensorType)
    """Always present (optional in the definition only: extra results are)."""

    assembly_format = "$x `,` $w_first `,` $w_second attr-dict `:` functional-type(operands, results)"

    EXTRA_RESULTS: ClassVar[tuple[str, ...]] = ("second",)


@irdl_op_definition
class LinearFusedOp(DenseLayer):
    """A dense layer (`DenseLayer`) as `hir.linear`, but lowered to one `mir.fused_matmul`
    whatever the fusion policy (the fused linear as one op)."""

    name = "hir.linear_fused"


HIR_OPS: tuple[type[HirOp], ...] = defined_ops(globals(), "hir.", HirOp)

HIR = Dialect("hir", list(HIR_OPS), [])

__all__ = [
    "HIR",
    "HIR_OPS",
    "AttentionOp",
    "DepthwiseConv1dCausalOp",
    "DequantMatmulOp",
    "EmbeddingOp",
    "HirOp",
    "LayerNormOp",
    "LinearFusedOp",
    "LinearOp",
    "LlamaDecoderBlockOp",
    "ResidualRmsNormOp",
    "RmsNormOp",
    "RopeOp",
    "SharedLinearPairOp",
    "SwigluFfnOp",
]
