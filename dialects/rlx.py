"""The `rlx` dialect: enum attributes shared by hir, mir and lir.

`ElementwiseFn` (the fn of `lir.elementwise`) is defined with the scalar body of each
function in `elementwise_fns.py`, and is importable from here too.

Each enum prints as a bare keyword in the custom syntax of the ops that carry it
(`hir.linear %x, %w activation silu`) and as `#rlx<activation silu>` in generic form.
"""

from __future__ import annotations

from xdsl.dialects.utils import EnumAttribute
from xdsl.ir import Dialect, SpacedOpaqueSyntaxAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.utils.str_enum import StrEnum

from rlx_mlir.dialects.elementwise_fns import ElementwiseFn


class Activation(StrEnum):
    RELU = "relu"
    GELU = "gelu"
    GELU_TANH = "gelu_tanh"
    SILU = "silu"
    SIGMOID = "sigmoid"
    TANH = "tanh"


class MaskKind(StrEnum):
    NONE = "none"
    CAUSAL = "causal"
    CUSTOM = "custom"
    BIAS = "bias"


class RopeStyle(StrEnum):
    HALF = "half"
    INTERLEAVED = "interleaved"


class ReduceKind(StrEnum):
    SUM = "sum"
    MAX = "max"
    MIN = "min"
    MEAN = "mean"


class QuantScheme(StrEnum):
    """The GGUF tensor types `dequant_matmul` reads (lowercase ggml names)."""

    Q8_0 = "q8_0"
    Q4_0 = "q4_0"
    F16 = "f16"
    BF16 = "bf16"
    Q4_1 = "q4_1"
    Q5_0 = "q5_0"
    Q5_1 = "q5_1"
    Q4_K = "q4_k"
    Q5_K = "q5_k"
    Q6_K = "q6_k"
    Q2_K = "q2_k"
    Q3_K = "q3_k"
    IQ4_NL = "iq4_nl"
    IQ4_XS = "iq4_xs"


class QuantActivations(StrEnum):
    """How `dequant_matmul` treats its activations: `f32` as given, or `q8` quantized to
    8-bit blocks first (ggml's `vec_dot_type` of the scheme, docs/semantics.md)."""

    F32 = "f32"
    Q8 = "q8"


class ArenaStrategy(StrEnum):
    GREEDY_BY_SIZE = "greedy-by-size"
    NAIVE = "naive"


@irdl_attr_definition
class ActivationAttr(EnumAttribute[Activation], SpacedOpaqueSyntaxAttribute):
    """The activation applied after a linear layer or matmul epilogue."""

    name = "rlx.activation"


@irdl_attr_definition
class MaskKindAttr(EnumAttribute[MaskKind], SpacedOpaqueSyntaxAttribute):
    """How attention masks scores: none, causal, custom (0 drops) or additive bias."""

    name = "rlx.mask_kind"


@irdl_attr_definition
class RopeStyleAttr(EnumAttribute[RopeStyle], SpacedOpaqueSyntaxAttribute):
    """Rotary embedding pairing: `half` (HF/NeoX) or `interleaved` (GPT-J/GGML)."""

    name = "rlx.rope_style"


@irdl_attr_definition
class ReduceKindAttr(EnumAttribute[ReduceKind], SpacedOpaqueSyntaxAttribute):
    """The combining function of a reduction."""

    name = "rlx.reduce_kind"


@irdl_attr_definition
class QuantSchemeAttr(EnumAttribute[QuantScheme], SpacedOpaqueSyntaxAttribute):
    """A GGUF block quantization scheme."""

    name = "rlx.quant_scheme"


@irdl_attr_definition
class QuantActivationsAttr(EnumAttribute[QuantActivations], SpacedOpaqueSyntaxAttribute):
    """The activation form of a `dequant_matmul` (absent: f32)."""

    name = "rlx.quant_activations"


@irdl_attr_definition
class ArenaStrategyAttr(EnumAttribute[ArenaStrategy], SpacedOpaqueSyntaxAttribute):
    """How lir-plan-arena assigned offsets: greedy-by-size reuse or naive (no reuse)."""

    name = "rlx.arena_strategy"


@irdl_attr_definition
class ElementwiseFnAttr(EnumAttribute[ElementwiseFn], SpacedOpaqueSyntaxAttribute):
    """The scalar function an `lir.elementwise` kernel applies."""

    name = "rlx.elementwise_fn"


RLX = Dialect(
    "rlx",
    [],
    [
        ActivationAttr,
        MaskKindAttr,
        RopeStyleAttr,
        ReduceKindAttr,
        QuantSchemeAttr,
        QuantActivationsAttr,
        ArenaStrategyAttr,
        ElementwiseFnAttr,
    ],
)
