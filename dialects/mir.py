"""The `mir` dialect: tensor primitives between the hir blocks and the lir kernels.

Every op is `Pure` and works on ranked builtin tensors. Element types are f32 for
compute; integer index tensors (i32, i64) for `gather` indices; the data movement ops
(`reshape`, `transpose`, `narrow`, `concat`, `broadcast_to`, `gather`, `constant`) accept
every rlx element type (f32, i32, i64, ui8); `add sub mul max min neg abs relu` also take
i32 and i64. Shapes follow the rules of `rlx_mlir.core.shape_inference`, which the verifiers
call, so the Graph builder and the verifiers agree. A dimension is never 0.

Each op declares its signature once (its fields, `RULE`, `ELEMENT_TYPES`, optional
`DERIVED` and `verify_attributes`); `verifier.VerifiesSignature` verifies it and builds
the op from it (a keyword constructor that infers the result type); the lir kernels and
the hir blocks that are a mir op at another level are generated from these definitions
(`verifier.twin`).

The ops mirror MLIR's `tosa`/`linalg` named ops loosely; unlike them, binary elementwise
ops broadcast implicitly (numpy rules), and `fused_elementwise` is a `linalg.generic`
restricted to elementwise maps with a scalar `arith`/`math` body.
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from xdsl.dialect_interfaces.constant_materialization import ConstantMaterializationInterface
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    I64,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    Float32Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    StringAttr,
    TensorType,
    UnitAttr,
    f32,
    i64,
)
from xdsl.dialects.utils import AbstractYieldOperation
from xdsl.ir import Attribute, BlockArgument, Dialect, Operation, Region, SSAValue
from xdsl.irdl import (
    AnyAttr,
    AttrSizedOperandSegments,
    IRDLOperation,
    ParamAttrConstraint,
    VarConstraint,
    base,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    opt_result_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.pattern_rewriter import RewritePattern
from xdsl.traits import (
    ConstantLike,
    HasCanonicalizationPatternsTrait,
    HasFolder,
    HasParent,
    IsolatedFromAbove,
    IsTerminator,
    Pure,
)
from xdsl.utils.exceptions import VerifyException

from rlx_mlir.core import shape_inference as si
from rlx_mlir.core.abi import ARG_ROLE, ROLE_STATE
from rlx_mlir.core.quants import VEC_DOT_TYPES
from rlx_mlir.dialects.common import (
    ATTENTION_DEFAULTS,
    ROPE_DEFAULTS,
    defined_ops,
    dtype_of,
    rule_errors,
    shape_of,
    tensor_type,
    verify_result,
)
from rlx_mlir.dialects.rlx import (
    ActivationAttr,
    MaskKindAttr,
    QuantActivations,
    QuantActivationsAttr,
    QuantSchemeAttr,
    ReduceKindAttr,
    RopeStyle,
    RopeStyleAttr,
)
from rlx_mlir.dialects.verifier import (
    ANY_DTYPE,
    FLOAT,
    INDEX,
    NUMERIC,
    UI8,
    ElementTypes,
    Operand,
    VerifiesSignature,
    fused_elementwise_shape,
    verify_scalar_body,
)

# ----------------------------------------------------------------------------- helpers

def _values(*values: SSAValue | Operation) -> list[SSAValue]:
    return [SSAValue.get(v) for v in values]


# ----------------------------------------------------------------------------- folding
# The folders and canonicalization patterns live in `mir_canonicalization.py` (imported on
# first use, like xDSL's `transforms/canonicalization_patterns/`); xDSL's `canonicalize`
# pass applies them, and `MirConstantMaterialization` turns a folded value into a
# `mir.constant`.


class MirFolder(HasFolder):
    """Folds a mir op with `mir_canonicalization.fold`: identities forward their input,
    ops on small constants become a constant."""

    @classmethod
    def fold(cls, op: Operation) -> Sequence[SSAValue | Attribute] | None:
        from rlx_mlir.dialects.mir_canonicalization import fold

        return fold(op)


class ReshapeOpHasCanonicalizationPatterns(HasCanonicalizationPatternsTrait):
    @classmethod
    def get_canonicalization_patterns(cls) -> tuple[RewritePattern, ...]:
        from rlx_mlir.dialects.mir_canonicalization import ReshapeOfReshape

        return (ReshapeOfReshape(),)


class TransposeOpHasCanonicalizationPatterns(HasCanonicalizationPatternsTrait):
    @classmethod
    def get_canonicalization_patterns(cls) -> tuple[RewritePattern, ...]:
        from rlx_mlir.dialects.mir_canonicalization import TransposeOfTranspose

        return (TransposeOfTranspose(),)


class BroadcastToOpHasCanonicalizationPatterns(HasCanonicalizationPatternsTrait):
    @classmethod
    def get_canonicalization_patterns(cls) -> tuple[RewritePattern, ...]:
        from rlx_mlir.dialects.mir_canonicalization import BroadcastToOfBroadcastTo

        return (BroadcastToOfBroadcastTo(),)


class MirConstantMaterialization(ConstantMaterializationInterface):
    """Materializes a folded dense value as a `mir.constant` of the folded result's type."""

    def materialize_constant(self, value: Attribute, type: Attribute) -> Operation | None:
        if not isinstance(value, DenseIntOrFPElementsAttr) or value.get_type() != type:
            return None
        return ConstantOp(value)


# ----------------------------------------------------------------------------- elementwise


FLOAT_BINARY = ElementTypes({"lhs": FLOAT}, same=("lhs", "rhs", "result"))
NUMERIC_BINARY = ElementTypes({"lhs": NUMERIC}, same=("lhs", "rhs", "result"))
FLOAT_UNARY = ElementTypes({"input": FLOAT}, same=("input", "result"))
NUMERIC_UNARY = ElementTypes({"input": NUMERIC}, same=("input", "result"))
DATA_MOVEMENT = ElementTypes({"input": ANY_DTYPE}, same=("input", "result"))
"""Copy-like ops: any rlx element type, kept by the result."""


class BinaryElementwiseOp(VerifiesSignature, ABC):
    """Base of the binary elementwise ops: `result = f(lhs, rhs)` with numpy broadcasting."""

    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    RULE = si.broadcast

    traits = traits_def(Pure(), MirFolder())

    assembly_format = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)"

    ELEMENT_TYPES: ClassVar[ElementTypes] = FLOAT_BINARY

@irdl_op_definition
class AddOp(BinaryElementwiseOp):
    """Elementwise `lhs + rhs` (f32, i32 or i64)."""

    name = "mir.add"
    ELEMENT_TYPES: ClassVar[ElementTypes] = NUMERIC_BINARY


@irdl_op_definition
class SubOp(BinaryElementwiseOp):
    """Elementwise `lhs - rhs` (f32, i32 or i64)."""

    name = "mir.sub"
    ELEMENT_TYPES: ClassVar[ElementTypes] = NUMERIC_BINARY


@irdl_op_definition
class MulOp(BinaryElementwiseOp):
    """Elementwise `lhs * rhs` (f32, i32 or i64)."""

    name = "mir.mul"
    ELEMENT_TYPES: ClassVar[ElementTypes] = NUMERIC_BINARY


@irdl_op_definition
class DivOp(BinaryElementwiseOp):
    """Elementwise `lhs / rhs` (f32)."""

    name = "mir.div"


@irdl_op_definition
class MaxOp(BinaryElementwiseOp):
    """Elementwise `maximum(lhs, rhs)` (f32, i32 or i64)."""

    name = "mir.max"
    ELEMENT_TYPES: ClassVar[ElementTypes] = NUMERIC_BINARY


@irdl_op_definition
class MinOp(BinaryElementwiseOp):
    """Elementwise `minimum(lhs, rhs)` (f32, i32 or i64)."""

    name = "mir.min"
    ELEMENT_TYPES: ClassVar[ElementTypes] = NUMERIC_BINARY


@irdl_op_definition
class PowOp(BinaryElementwiseOp):
    """Elementwise `lhs ** rhs` (f32)."""

    name = "mir.pow"


class UnaryElementwiseOp(VerifiesSignature, ABC):
    """Base of the unary elementwise ops: `result = f(input)`, of the input's type."""

    T: ClassVar = VarConstraint("T", base(TensorType))

    input = operand_def(T)
    result = result_def(T)
    RULE = si.same_shape

    traits = traits_def(Pure(), MirFolder())

    assembly_format = "$input attr-dict `:` type($result)"

    ELEMENT_TYPES: ClassVar[ElementTypes] = FLOAT_UNARY

@irdl_op_definition
class NegOp(UnaryElementwiseOp):
    """Elementwise `-input` (f32, i32 or i64)."""

    name = "mir.neg"
    ELEMENT_TYPES: ClassVar[ElementTypes] = NUMERIC_UNARY


@irdl_op_definition
class ExpOp(UnaryElementwiseOp):
    """Elementwise `exp(input)`."""

    name = "mir.exp"


@irdl_op_definition
class LogOp(UnaryElementwiseOp):
    """Elementwise natural `log(input)`."""

    name = "mir.log"


@irdl_op_definition
class SqrtOp(UnaryElementwiseOp):
    """Elementwise `sqrt(input)`."""

    name = "mir.sqrt"


@irdl_op_definition
class RsqrtOp(UnaryElementwiseOp):
    """Elementwise `1 / sqrt(input)`."""

    name = "mir.rsqrt"


@irdl_op_definition
class TanhOp(UnaryElementwiseOp):
    """Elementwise `tanh(input)`."""

    name = "mir.tanh"


@irdl_op_definition
class SigmoidOp(UnaryElementwiseOp):
    """Elementwise `1 / (1 + exp(-input))`."""

    name = "mir.sigmoid"


@irdl_op_definition
class SiluOp(UnaryElementwiseOp):
    """Elementwise `input * sigmoid(input)`."""

    name = "mir.silu"


@irdl_op_definition
class GeluOp(UnaryElementwiseOp):
    """Elementwise exact GELU, `0.5 * input * (1 + erf(input / sqrt(2)))`."""

    name = "mir.gelu"


@irdl_op_definition
class GeluTanhOp(UnaryElementwiseOp):
    """Elementwise tanh-approximated GELU of `input`."""

    name = "mir.gelu_tanh"


@irdl_op_definition
class ReluOp(UnaryElementwiseOp):
    """Elementwise `max(input, 0)` (f32, i32 or i64)."""

    name = "mir.relu"
    ELEMENT_TYPES: ClassVar[ElementTypes] = NUMERIC_UNARY


@irdl_op_definition
class AbsOp(UnaryElementwiseOp):
    """Elementwise `|input|` (f32, i32 or i64)."""

    name = "mir.abs"
    ELEMENT_TYPES: ClassVar[ElementTypes] = NUMERIC_UNARY


@irdl_op_definition
class SoftplusOp(UnaryElementwiseOp):
    """Elementwise `log(1 + exp(input))` (f32)."""

    name = "mir.softplus"


# ----------------------------------------------------------------------------- linear algebra


@irdl_op_definition
class MatmulOp(VerifiesSignature):
    """`np.matmul(lhs, rhs)`: 1-D operands promoted, batch dimensions broadcast (f32)."""

    name = "mir.matmul"
    RULE = si.matmul

    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)

    traits = traits_def(Pure())

    assembly_format = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)"

@irdl_op_definition
class FusedMatmulOp(VerifiesSignature):
    """`activation(lhs @ rhs + bias)`: a matmul (as `mir.matmul`) with an optional bias
    [N] (N = last dim of rhs) and an optional activation fused into its epilogue (f32)."""

    name = "mir.fused_matmul"
    RULE = si.fused_matmul

    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    result = result_def(TensorType)

    activation = opt_prop_def(ActivationAttr)

    traits = traits_def(Pure())

    assembly_format = (
        "$lhs `,` $rhs (`,` $bias^)? (`activation` $activation^)? attr-dict"
        " `:` functional-type(operands, results)"
    )

@irdl_op_definition
class DequantMatmulOp(VerifiesSignature):
    """`x[..., K] @ dequant(w)^T -> [..., N]` with `w` the raw GGUF blocks of a tensor of
    `scheme`, ui8 [N, K/values * bytes]; x and the result are f32. `activations` q8
    quantizes x first as ggml does (the scheme's `vec_dot_type`; absent: f32, x as given;
    docs/semantics.md). A `residual` (mir-fuse: an add of the product) is added to the
    product in the kernel's epilogue: result = residual + product; q8 only.

    ```mlir
    %h2 = mir.dequant_matmul %a, %w residual %h scheme q4_1 activations q8 : (tensor<1x64xf32>, tensor<16x40xui8>, tensor<1x16xf32>) -> tensor<1x16xf32>
    ```
    """

    name = "mir.dequant_matmul"
    RULE = si.dequant_matmul

    x = operand_def(TensorType)
    w = operand_def(TensorType)
    residual = opt_operand_def(TensorType)
    result = result_def(TensorType)

    scheme = prop_def(QuantSchemeAttr)
    activations = opt_prop_def(QuantActivationsAttr)

    traits = traits_def(Pure())

    assembly_format = (
        "$x `,` $w (`residual` $residual^)? `scheme` $scheme (`activations` $activations^)?"
        " attr-dict `:` functional-type(operands, results)"
    )

    ELEMENT_TYPES: ClassVar[ElementTypes] = ElementTypes({"w": UI8})
    ABSENT_VALUES: ClassVar[Mapping[str, Any]] = {"activations": QuantActivations.F32}

    def verify_attributes(self) -> None:
        form = activations_of(self)
        if form == QuantActivations.Q8 and self.scheme.data.value not in VEC_DOT_TYPES:
            raise VerifyException(
                f"'{self.name}': activations q8 needs a block-quantized scheme "
                f"({', '.join(VEC_DOT_TYPES)}), got {self.scheme.data.value}"
            )
        if self.residual is not None and form != QuantActivations.Q8:
            raise VerifyException(f"'{self.name}': a residual needs activations q8 (its "
                                  f"epilogue is the q8 kernels'), got activations {form.value}")


def activations_of(op: IRDLOperation) -> QuantActivations:
    """The activation form of a dequant_matmul at any level (f32 when absent)."""
    form = op.properties.get("activations")
    return QuantActivations.F32 if form is None else QuantActivations(form.data)


@irdl_op_definition
class DepthwiseConv1dOp(VerifiesSignature):
    """Valid depthwise convolution over time: `input` [B, S+K-1, C] (pre-padded), `weight`
    [K, C] -> [B, S, C], `y[b, t, c] = sum_k weight[k, c] * input[b, t+k, c]` (f32); with
    `return_state`, a second result `final_state` [B, K-1, C]: the input's last K-1 rows
    (the window a causal convolution carries to its next call)."""

    name = "mir.depthwise_conv1d"
    RULE = si.depthwise_conv1d

    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    result = result_def(TensorType)
    final_state = opt_result_def(TensorType)
    return_state = opt_prop_def(UnitAttr)

    traits = traits_def(Pure())

    EXTRA_RESULTS: ClassVar[tuple[str, ...]] = ("final_state",)

    assembly_format = (
        "$input `,` $weight (`return_state` $return_state^)? attr-dict"
        " `:` functional-type(operands, results)"
    )

# ----------------------------------------------------------------------------- sequence ops


class SequenceScanOp(VerifiesSignature, ABC):
    """A recurrence over the time axis (axis 1) with a state per batch row and channel or
    head: `initial_state` (zeros when absent) seeds it; with `return_state` the op has a
    second result, `final_state`, the state after the last step (f32)."""

    result = result_def(TensorType)
    final_state = opt_result_def(TensorType)
    return_state = opt_prop_def(UnitAttr)

    traits = traits_def(Pure())

    EXTRA_RESULTS: ClassVar[tuple[str, ...]] = ("final_state",)


@irdl_op_definition
class SelectiveScanOp(SequenceScanOp):
    """Mamba's selective scan: x, delta [b, s, h], a [h, n], b, c [b, s, n] -> y [b, s, h];
    per step state = exp(delta_t·a) ⊙ state + (delta_t·x_t) ⊗ b_t, y_t = state · c_t,
    the state [b, h, n] starting at `initial_state` (zeros when absent); with
    `return_state`, also the final state [b, h, n]."""

    name = "mir.selective_scan"
    RULE = si.selective_scan

    x = operand_def(TensorType)
    delta = operand_def(TensorType)
    a = operand_def(TensorType)
    b = operand_def(TensorType)
    c = operand_def(TensorType)
    initial_state = opt_operand_def(TensorType)

    assembly_format = (
        "$x `,` $delta `,` $a `,` $b `,` $c (`initial_state` $initial_state^)?"
        " (`return_state` $return_state^)? attr-dict `:` functional-type(operands, results)"
    )


@irdl_op_definition
class GatedDeltaNetOp(SequenceScanOp):
    """The gated delta rule (linear attention of Qwen3.5/Qwen3-Next): q, k [b, s, H, n],
    v [b, s, H, m], g, beta [b, s, H] -> out [b, s, H, m]; per batch row and head, with the
    state S [n, m]: S = exp(g_t)·S; δ = beta_t·(v_t − Sᵀk_t); S = S + k_t δᵀ; o_t = Sᵀq_t,
    S starting at `initial_state` [b, H, n, m] (zeros when absent); with `return_state`,
    also the final state [b, H, n, m]."""

    name = "mir.gated_delta_net"
    RULE = si.gated_delta_net

    q = operand_def(TensorType)
    k = operand_def(TensorType)
    v = operand_def(TensorType)
    g = operand_def(TensorType)
    beta = operand_def(TensorType)
    initial_state = opt_operand_def(TensorType)

    assembly_format = (
        "$q `,` $k `,` $v `,` $g `,` $beta (`initial_state` $initial_state^)?"
        " (`return_state` $return_state^)? attr-dict `:` functional-type(operands, results)"
    )


@irdl_op_definition
class SelectiveScanBackwardOp(VerifiesSignature):
    """The reverse pass of `mir.selective_scan`: its operands (x, delta, a, b, c and
    `initial_state` when the forward had one), the cotangents of its output `dy`
    [b, s, h] and of its final state `d_final_state` [b, h, n] (zeros when unused) ->
    dx (`result`), d_delta, d_a (per batch row, [b, h, n]: their sum is A's), d_b, d_c,
    `states` [b, s, h, n] (the forward's state before each step, recomputed and kept for
    the reversed recurrence) and, with `initial_state`, d_initial_state."""

    name = "mir.selective_scan_backward"
    RULE = si.selective_scan_backward

    x = operand_def(TensorType)
    delta = operand_def(TensorType)
    a = operand_def(TensorType)
    b = operand_def(TensorType)
    c = operand_def(TensorType)
    dy = operand_def(TensorType)
    d_final_state = operand_def(TensorType)
    initial_state = opt_operand_def(TensorType)
    result = result_def(TensorType)
    d_delta = result_def(TensorType)
    d_a = result_def(TensorType)
    d_b = result_def(TensorType)
    d_c = result_def(TensorType)
    states = result_def(TensorType)
    d_initial_state = opt_result_def(TensorType)
    """Present when `initial_state` is."""

    traits = traits_def(Pure())

    EXTRA_RESULTS: ClassVar[tuple[str, ...]] = ("d_delta", "d_a", "d_b", "d_c", "states",
                                                "d_initial_state")

    assembly_format = (
        "$x `,` $delta `,` $a `,` $b `,` $c `,` $dy `,` $d_final_state"
        " (`initial_state` $initial_state^)? attr-dict `:` functional-type(operands, results)"
    )


@irdl_op_definition
class GatedDeltaNetBackwardOp(VerifiesSignature):
    """The reverse pass of `mir.gated_delta_net`: its operands (q, k, v, g, beta and
    `initial_state` when the forward had one), the cotangents of its output `do`
    [b, s, H, m] and of its final state `d_final_state` [b, H, n, m] (zeros when unused)
    -> dq (`result`), d_k, d_v, d_g, d_beta, `states` [b, s, H, n, m] (the forward's
    state before each step, recomputed and kept for the reversed recurrence) and, with
    `initial_state`, d_initial_state."""

    name = "mir.gated_delta_net_backward"
    RULE = si.gated_delta_net_backward

    q = operand_def(TensorType)
    k = operand_def(TensorType)
    v = operand_def(TensorType)
    g = operand_def(TensorType)
    beta = operand_def(TensorType)
    do = operand_def(TensorType)
    d_final_state = operand_def(TensorType)
    initial_state = opt_operand_def(TensorType)
    result = result_def(TensorType)
    d_k = result_def(TensorType)
    d_v = result_def(TensorType)
    d_g = result_def(TensorType)
    d_beta = result_def(TensorType)
    states = result_def(TensorType)
    d_initial_state = opt_result_def(TensorType)
    """Present when `initial_state` is."""

    traits = traits_def(Pure())

    EXTRA_RESULTS: ClassVar[tuple[str, ...]] = ("d_k", "d_v", "d_g", "d_beta", "states",
                                                "d_initial_state")

    assembly_format = (
        "$q `,` $k `,` $v `,` $g `,` $beta `,` $do `,` $d_final_state"
        " (`initial_state` $initial_state^)? attr-dict `:` functional-type(operands, results)"
    )


# ----------------------------------------------------------------------------- reductions, norms


@irdl_op_definition
class ReduceOp(VerifiesSignature):
    """Reduce `input` with `kind` (sum, max, min, mean) over `axes` (non-empty, may be
    negative, no repeats); `keepdim` keeps the reduced axes as size 1 (f32)."""

    name = "mir.reduce"
    RULE = si.reduce

    input = operand_def(TensorType)
    result = result_def(TensorType)

    kind = prop_def(ReduceKindAttr)
    axes = prop_def(DenseArrayBase.constr(i64))
    keepdim = opt_prop_def(UnitAttr)

    traits = traits_def(Pure())

    assembly_format = (
        "$kind $input `axes` $axes (`keepdim` $keepdim^)? attr-dict"
        " `:` type($input) `->` type($result)"
    )

    def verify_attributes(self) -> None:
        if not self.axes.get_values():
            raise VerifyException(f"'{self.name}': axes: expected at least one axis, got none")

@irdl_op_definition
class SoftmaxOp(VerifiesSignature):
    """Numerically stable softmax of `input` along `axis` (may be negative) (f32)."""

    name = "mir.softmax"
    RULE = si.softmax
    DERIVED: ClassVar = {"axis": lambda _: -1}

    T: ClassVar = VarConstraint("T", base(TensorType))

    input = operand_def(T)
    result = result_def(T)

    axis = prop_def(IntegerAttr[I64])

    traits = traits_def(Pure())

    assembly_format = "$input `axis` $axis attr-dict `:` type($result)"

class NormOp(VerifiesSignature, ABC):
    """Base of the norms over the last axis of `x`: gamma and beta are exactly [N]."""

    traits = traits_def(Pure())
    RULE = si.norm

@irdl_op_definition
class RmsNormOp(NormOp):
    """`x / sqrt(mean(x^2, -1) + eps) * gamma (+ beta)` over the last axis (f32)."""

    name = "mir.rms_norm"

    x = operand_def(TensorType)
    gamma = operand_def(TensorType)
    beta = opt_operand_def(TensorType)
    result = result_def(TensorType)

    eps = prop_def(FloatAttr[Float32Type], default_value=FloatAttr(1e-5, f32))

    assembly_format = (
        "$x `,` $gamma (`,` $beta^)? (`eps` $eps^)? attr-dict"
        " `:` functional-type(operands, results)"
    )

@irdl_op_definition
class LayerNormOp(NormOp):
    """`(x - mean) / sqrt(var + eps) * gamma + beta` over the last axis, population
    variance (f32)."""

    name = "mir.layer_norm"

    x = operand_def(TensorType)
    gamma = operand_def(TensorType)
    beta = operand_def(TensorType)
    result = result_def(TensorType)

    eps = prop_def(FloatAttr[Float32Type], default_value=FloatAttr(1e-5, f32))

    assembly_format = (
        "$x `,` $gamma `,` $beta (`eps` $eps^)? attr-dict `:` functional-type(operands, results)"
    )

# ----------------------------------------------------------------------------- transformer


@irdl_op_definition
class RopeOp(VerifiesSignature):
    """Rotary embedding of `x` [S, H*D] or [B, S, H*D] by `cos`, `sin` [S, n_rot/2]: in each
    head of `head_dim` the first `n_rot` dims rotate in `style` pairs, the rest pass (f32)."""

    name = "mir.rope"
    RULE = si.rope
    DERIVED: ClassVar = ROPE_DEFAULTS

    x = operand_def(TensorType)
    cos = operand_def(TensorType)
    sin = operand_def(TensorType)
    result = result_def(TensorType)

    head_dim = prop_def(IntegerAttr[I64])
    n_rot = prop_def(IntegerAttr[I64])
    style = prop_def(RopeStyleAttr)

    traits = traits_def(Pure())

    assembly_format = (
        "$x `,` $cos `,` $sin `head_dim` $head_dim `n_rot` $n_rot `style` $style attr-dict"
        " `:` functional-type(operands, results)"
    )

@irdl_op_definition
class AttentionOp(VerifiesSignature):
    """Grouped-query scaled dot-product attention, heads packed in the last axis: `q`
    [B?, S, H*D], `k` and `v` [B?, T, Hkv*D], optional `mask` (custom or bias kinds);
    the result has q's shape (f32)."""

    name = "mir.attention"
    RULE = si.attention
    DERIVED: ClassVar = ATTENTION_DEFAULTS

    q = operand_def(TensorType)
    k = operand_def(TensorType)
    v = operand_def(TensorType)
    mask = opt_operand_def(TensorType)
    result = result_def(TensorType)

    num_heads = prop_def(IntegerAttr[I64])
    head_dim = prop_def(IntegerAttr[I64])
    num_kv_heads = prop_def(IntegerAttr[I64])
    mask_kind = prop_def(MaskKindAttr)
    scale = prop_def(FloatAttr[Float32Type])
    window = opt_prop_def(IntegerAttr[I64])
    """Sliding-window attention (causal only): query i sees the keys j with
    i + (T−S) − window < j ≤ i + (T−S); absent: every causal key."""

    traits = traits_def(Pure())

    assembly_format = (
        "$q `,` $k `,` $v (`,` $mask^)? `num_heads` $num_heads `head_dim` $head_dim"
        " `num_kv_heads` $num_kv_heads `mask_kind` $mask_kind `scale` $scale"
        " (`window` $window^)? attr-dict `:` functional-type(operands, results)"
    )

# ----------------------------------------------------------------------------- data movement


@irdl_op_definition
class ReshapeOp(VerifiesSignature):
    """`input` reinterpreted (row-major) with the result's shape; element counts agree."""

    name = "mir.reshape"

    input = operand_def(TensorType)
    result = result_def(TensorType)

    traits = traits_def(Pure(), MirFolder(), ReshapeOpHasCanonicalizationPatterns())

    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    ELEMENT_TYPES: ClassVar[ElementTypes] = DATA_MOVEMENT

    def infer_shape(self) -> si.Shape:
        return si.reshape(shape_of(self.input), self.declared_shape())


@irdl_op_definition
class TransposeOp(VerifiesSignature):
    """Permute the axes of `input`: `result.shape[i] = input.shape[perm[i]]` (perm entries
    may be negative)."""

    name = "mir.transpose"
    RULE = si.transpose

    input = operand_def(TensorType)
    result = result_def(TensorType)

    perm = prop_def(DenseArrayBase.constr(i64))

    traits = traits_def(Pure(), MirFolder(), TransposeOpHasCanonicalizationPatterns())

    assembly_format = "$input `perm` $perm attr-dict `:` type($input) `->` type($result)"

    ELEMENT_TYPES: ClassVar[ElementTypes] = DATA_MOVEMENT

@irdl_op_definition
class NarrowOp(VerifiesSignature):
    """The slice `[start, start + length)` of `input` along `axis` (may be negative)."""

    name = "mir.narrow"
    RULE = si.narrow

    input = operand_def(TensorType)
    result = result_def(TensorType)

    axis = prop_def(IntegerAttr[I64])
    start = prop_def(IntegerAttr[I64])
    length = prop_def(IntegerAttr[I64])

    traits = traits_def(Pure(), MirFolder())

    assembly_format = (
        "$input `axis` $axis `start` $start `length` $length attr-dict"
        " `:` type($input) `->` type($result)"
    )

    ELEMENT_TYPES: ClassVar[ElementTypes] = DATA_MOVEMENT

@irdl_op_definition
class ConcatOp(VerifiesSignature):
    """Concatenate `inputs` (at least one, same element type) along `axis`."""

    name = "mir.concat"
    RULE = si.concat

    inputs = var_operand_def(TensorType)
    result = result_def(TensorType)

    axis = prop_def(IntegerAttr[I64])

    traits = traits_def(Pure())

    assembly_format = "$inputs `axis` $axis attr-dict `:` functional-type($inputs, $result)"

    ELEMENT_TYPES: ClassVar[ElementTypes] = ElementTypes(
        {"inputs": ANY_DTYPE}, same=("inputs", "result")
    )

@irdl_op_definition
class BroadcastToOp(VerifiesSignature):
    """Broadcast `input` (numpy rules) to the result's shape."""

    name = "mir.broadcast_to"

    input = operand_def(TensorType)
    result = result_def(TensorType)

    traits = traits_def(Pure(), MirFolder(), BroadcastToOpHasCanonicalizationPatterns())

    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    ELEMENT_TYPES: ClassVar[ElementTypes] = DATA_MOVEMENT

    def infer_shape(self) -> si.Shape:
        return si.broadcast_to(shape_of(self.input), self.declared_shape(), keep_symbols=True)


@irdl_op_definition
class GatherOp(VerifiesSignature):
    """`np.take(input, indices, axis)`: result shape is
    `input.shape[:axis] + indices.shape + input.shape[axis+1:]`; indices are i32 or i64."""

    name = "mir.gather"
    RULE = si.gather
    DERIVED: ClassVar = {"axis": lambda _: 0}

    input = operand_def(TensorType)
    indices = operand_def(TensorType)
    result = result_def(TensorType)

    axis = prop_def(IntegerAttr[I64])

    traits = traits_def(Pure())

    assembly_format = (
        "$input `,` $indices `axis` $axis attr-dict `:` functional-type(operands, results)"
    )

    ELEMENT_TYPES: ClassVar[ElementTypes] = ElementTypes(
        {"input": ANY_DTYPE, "indices": INDEX}, same=("input", "result")
    )

@irdl_op_definition
class DequantGatherOp(VerifiesSignature):
    """Rows `ids` of a GGUF-quantized table, dequantized (an embedding lookup that decodes
    only the rows it reads): `table` ui8 [V, K/values * bytes] holds the raw blocks of
    `scheme` (like dequant_matmul's `w`), `ids` i32/i64 [...] -> f32 [..., K]."""

    name = "mir.dequant_gather"
    RULE = si.dequant_gather

    table = operand_def(TensorType)
    ids = operand_def(TensorType)
    result = result_def(TensorType)

    scheme = prop_def(QuantSchemeAttr)

    traits = traits_def(Pure())

    assembly_format = "$table `,` $ids `scheme` $scheme attr-dict `:` functional-type(operands, results)"

    ELEMENT_TYPES: ClassVar[ElementTypes] = ElementTypes({"table": UI8, "ids": INDEX})


@irdl_op_definition
class ScatterAddOp(VerifiesSignature):
    """The transpose of `mir.gather` (its backward, and an embedding's): zeros of shape
    `updates.shape[:axis] + [dim_size] + updates.shape[axis + indices.rank:]` with each
    row of `updates` added at its index along `axis`, repeated indices accumulating:
    `result[o, indices[i], r] += updates[o, i, r]` (f32 updates, i32/i64 indices; an
    index outside [0, dim_size) is a run-time error).

    ```mlir
    %d = mir.scatter_add %g, %ids axis 0 dim_size 100 : (tensor<4x8xf32>, tensor<4xi32>) -> tensor<100x8xf32>
    ```
    """

    name = "mir.scatter_add"
    RULE = si.scatter_add

    updates = operand_def(TensorType)
    indices = operand_def(TensorType)
    result = result_def(TensorType)

    axis = prop_def(IntegerAttr[I64])
    dim_size = prop_def(IntegerAttr[I64])

    traits = traits_def(Pure())

    assembly_format = (
        "$updates `,` $indices `axis` $axis `dim_size` $dim_size attr-dict"
        " `:` functional-type(operands, results)"
    )

    ELEMENT_TYPES: ClassVar[ElementTypes] = ElementTypes(
        {"updates": FLOAT, "indices": INDEX}, same=("updates", "result")
    )

@irdl_op_definition
class ConstantOp(VerifiesSignature):
    """A tensor constant: the result has exactly the type of the dense `value`."""

    name = "mir.constant"

    T: ClassVar = VarConstraint("T", base(TensorType))

    result = result_def(T)

    value = prop_def(ParamAttrConstraint(DenseIntOrFPElementsAttr, (T, AnyAttr())))

    traits = traits_def(Pure(), ConstantLike(), MirFolder())

    assembly_format = "$value attr-dict"

    ELEMENT_TYPES: ClassVar[ElementTypes] = ElementTypes({"result": ANY_DTYPE})

    def __init__(self, value: DenseIntOrFPElementsAttr):
        IRDLOperation.__init__(self, result_types=[value.get_type()], properties={"value": value})

    def infer_shape(self) -> si.Shape:
        return tuple(self.value.get_shape())


# ----------------------------------------------------------------------------- state
# A state is a function argument with `rlx.role = "state"` that persists across calls and
# is updated in place after bufferization. At the tensor level its updates are values:
# `insert_rows` is the cache with rows written (like `tensor.insert_slice` with a dynamic
# offset), `extract_rows` its first rows (like `tensor.extract_slice` with a dynamic
# size), and `assign` says what the state holds after the call.


def state_argument_error(op: Operation, name: str, value: SSAValue) -> str | None:
    """Why `value` (operand `name` of `op`) is not a state argument of its function, or
    None when it is one (a block argument of a `func.func` with `rlx.role = "state"`)."""
    if not isinstance(value, BlockArgument):
        owner = value.owner.name if isinstance(value.owner, Operation) else "a block"
        return f"{name}: expected a state argument of the function, got the result of {owner}"
    fn = value.block.parent_op()
    attrs = fn.arg_attrs if isinstance(fn, func.FuncOp) else None
    role = None
    if attrs is not None and value.index < len(attrs.data):
        role_attr = attrs.data[value.index].data.get(ARG_ROLE)
        role = role_attr.data if isinstance(role_attr, StringAttr) else None
    if role != ROLE_STATE:
        return (f"{name}: expected a function argument with rlx.role = \"{ROLE_STATE}\", "
                f"got argument {value.index} with role {role or 'none'}")
    return None


class IndexOperandsMixin(VerifiesSignature, ABC):
    """An op with `index` operands besides its tensors: the signature checks skip them
    (an index has no shape nor rlx element type)."""

    def verify_value(self, label: str, value: SSAValue) -> None:
        if not isinstance(value.type, IndexType):
            super().verify_value(label, value)

    def verify_element_types(self, named: list[Operand]) -> None:
        tensors = [o for o in named if all(not isinstance(v.type, IndexType) for _, v in o.values)]
        super().verify_element_types(tensors)


@irdl_op_definition
class InsertRowsOp(IndexOperandsMixin):
    """`cache` [capacity, *tail] with `rows` [S, *tail] written at rows
    [position, position + S): appending to a KV cache (`tensor.insert_slice` with a
    dynamic offset). The cache is a state; bufferization writes the rows in place.
    `position + S <= capacity` is checked by the call ("cache full").

    ```mlir
    %k2 = mir.insert_rows %rows into %cache[%position] : tensor<?x64xf32> into tensor<2048x64xf32>
    ```
    """

    name = "mir.insert_rows"
    RULE = si.insert_rows

    T: ClassVar = VarConstraint("T", base(TensorType))

    rows = operand_def(TensorType)
    cache = operand_def(T)
    position = operand_def(IndexType)
    result = result_def(T)

    traits = traits_def(Pure())

    assembly_format = (
        "$rows `into` $cache `[` $position `]` attr-dict `:` type($rows) `into` type($cache)"
    )

    ELEMENT_TYPES: ClassVar[ElementTypes] = ElementTypes(
        {"rows": ANY_DTYPE}, same=("rows", "cache", "result")
    )

@irdl_op_definition
class ExtractRowsOp(VerifiesSignature):
    """The first `size` rows of `cache` [capacity, *tail] -> [size, *tail]
    (`tensor.extract_slice` with a dynamic size): the rows a KV cache holds after an
    append. `size` names the symbol each call binds to position + appended rows (the
    function's `rlx.cache_dims`).

    ```mlir
    %kt = mir.extract_rows %k2 size "T" : tensor<2048x64xf32> -> tensor<?x64xf32>
    ```
    """

    name = "mir.extract_rows"
    RULE = si.extract_rows

    cache = operand_def(TensorType)
    result = result_def(TensorType)

    size = prop_def(StringAttr)

    traits = traits_def(Pure())

    assembly_format = "$cache `size` $size attr-dict `:` type($cache) `->` type($result)"

    ELEMENT_TYPES: ClassVar[ElementTypes] = ElementTypes(
        {"cache": ANY_DTYPE}, same=("cache", "result")
    )

    def verify_attributes(self) -> None:
        result = shape_of(self.result)
        if result and si.is_static(result[0]):
            raise VerifyException(
                f"'{self.name}': result: expected a ? first dim (its size is the symbol "
                f"{self.size.data}), got {self.result.type}"
            )


@irdl_op_definition
class AssignOp(IRDLOperation):
    """After the call, the state `state` holds `value` (same type). It has no result and
    is not `Pure`, so no canonicalization, CSE or DCE removes it; bufferization copies
    `value` into the state buffer after every other use of the state.

    ```mlir
    mir.assign %h_new to %h : tensor<4x8xf32>
    ```
    """

    name = "mir.assign"

    T: ClassVar = VarConstraint("T", base(TensorType))

    value = operand_def(T)
    state = operand_def(T)

    assembly_format = "$value `to` $state attr-dict `:` type($state)"

    def __init__(self, value: SSAValue | Operation, state: SSAValue | Operation):
        super().__init__(operands=_values(value, state))

    def verify_(self) -> None:
        problem = state_argument_error(self, "state", self.state)
        if problem is not None:
            raise VerifyException(f"'{self.name}': {problem}")


@irdl_op_definition
class CacheScatterOp(VerifiesSignature):
    """The slot cache `cache` [n_slots, capacity, *tail] with row r of `rows` [R, *tail]
    written at [slots[r], positions[r]] (`slots`, `positions` i32 [R]): the KV rows of a
    ragged batch of sequences, each in its own slot (batched decoding); rows [B, S, *tail]
    with slots and positions [B, S] are the B·S rows in order. The cache is a
    state; bufferization writes the rows in place. Every slot in [0, n_slots) and
    position in [0, capacity) is checked by the call.

    ```mlir
    %k2 = mir.cache_scatter %rows into %cache[%slots, %positions] : tensor<?x64xf32>, tensor<?xi32>, tensor<?xi32> into tensor<4x2048x64xf32>
    ```
    """

    name = "mir.cache_scatter"
    RULE = si.cache_scatter

    T: ClassVar = VarConstraint("T", base(TensorType))

    rows = operand_def(TensorType)
    cache = operand_def(T)
    slots = operand_def(TensorType)
    positions = operand_def(TensorType)
    result = result_def(T)

    traits = traits_def(Pure())

    assembly_format = (
        "$rows `into` $cache `[` $slots `,` $positions `]` attr-dict `:` type($rows) `,` "
        "type($slots) `,` type($positions) `into` type($cache)"
    )

    ELEMENT_TYPES: ClassVar[ElementTypes] = ElementTypes(
        {"rows": ANY_DTYPE, "slots": ("i32",), "positions": ("i32",)},
        same=("rows", "cache", "result"),
    )


@irdl_op_definition
class SlotAttentionOp(VerifiesSignature):
    """Row r of `q` [R, H*D] attends the keys and values [n_slots, capacity, Hkv*D] of
    slot slots[r] at the positions j in [lo, positions[r]] (lo = 0, or with `window` W
    max(0, positions[r] − W + 1)), grouped-query (head h reads kv head h // (H/Hkv)),
    scores scaled by `scale`: the attention of a ragged batch of sequences over their
    slot caches (`mir.cache_scatter`'s results); q [B, S, H*D] with slots and positions
    [B, S] is the B·S rows in order. The result has q's shape.

    ```mlir
    %o = mir.slot_attention %q, %k, %v, %slots, %positions num_heads 2 head_dim 8 num_kv_heads 1 scale 3.535534e-01 : (tensor<?x16xf32>, tensor<4x32x8xf32>, tensor<4x32x8xf32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x16xf32>
    ```
    """

    name = "mir.slot_attention"
    RULE = si.slot_attention
    DERIVED: ClassVar = ATTENTION_DEFAULTS  # num_kv_heads = num_heads, scale 1/sqrt(D)

    q = operand_def(TensorType)
    keys = operand_def(TensorType)
    values = operand_def(TensorType)
    slots = operand_def(TensorType)
    positions = operand_def(TensorType)
    result = result_def(TensorType)

    num_heads = prop_def(IntegerAttr[I64])
    head_dim = prop_def(IntegerAttr[I64])
    num_kv_heads = prop_def(IntegerAttr[I64])
    scale = prop_def(FloatAttr[Float32Type])
    window = opt_prop_def(IntegerAttr[I64])
    """Sliding-window attention: row r sees the keys j with positions[r] − window < j."""

    traits = traits_def(Pure())

    assembly_format = (
        "$q `,` $keys `,` $values `,` $slots `,` $positions `num_heads` $num_heads"
        " `head_dim` $head_dim `num_kv_heads` $num_kv_heads `scale` $scale"
        " (`window` $window^)? attr-dict `:` functional-type(operands, results)"
    )

    ELEMENT_TYPES: ClassVar[ElementTypes] = ElementTypes(
        {"slots": ("i32",), "positions": ("i32",)})


# ----------------------------------------------------------------------------- fusion


@irdl_op_definition
class FusedElementwiseOp(VerifiesSignature):
    """A fused chain of elementwise ops: every `inputs` tensor (possibly rank-0) broadcasts
    to the result's shape, and `body` computes one result element from the scalar
    elements of the inputs (its block arguments, in order) with `arith`/`math` ops,
    ending in `mir.yield`. Like `linalg.generic` with identity (broadcast) maps."""

    name = "mir.fused_elementwise"

    inputs = var_operand_def(TensorType)
    result = result_def(TensorType)

    body = region_def("single_block")

    traits = traits_def(Pure(), IsolatedFromAbove())

    assembly_format = "attr-dict `ins` `(` $inputs `:` type($inputs) `)` `->` type($result) $body"

    ELEMENT_TYPES: ClassVar[ElementTypes] = ElementTypes(default=NUMERIC)

    def __init__(
        self,
        inputs: Sequence[SSAValue | Operation],
        result_type: Attribute,
        body: Region,
    ):
        IRDLOperation.__init__(self, operands=[_values(*inputs)], result_types=[result_type], regions=[body])

    def infer_shape(self) -> si.Shape:
        """Every input broadcasts to the result's shape."""
        return fused_elementwise_shape(self.inputs, self.declared_shape())

    def verify_regions(self) -> None:
        # The lir twin shares this check, ending in its own `lir.yield`.
        result = getattr(self, self.RESULT)
        yield_name = f"{self.dialect_name()}.yield"
        verify_scalar_body(self, self.body.block, list(self.inputs), result, yield_name)


# ----------------------------------------------------------------------------- scan


def scan_body_types(op: IRDLOperation) -> list[Attribute]:
    """The types of a scan body's block arguments: the carry (as `init`), one slice of each
    of `xs` along its first axis, then each of `consts` (mir tensors or lir memrefs)."""
    types: list[Attribute] = [op.init.type]
    for x in op.xs:
        ty = x.type  # a TensorType or a MemRefType: both are (element type, shape)
        types.append(type(ty)(ty.get_element_type(), ty.get_shape()[1:]))  # pyright: ignore
    return types + [c.type for c in op.consts]


def verify_scan_region(op: IRDLOperation, carry_type: Attribute, yield_name: str) -> None:
    """A scan body: block arguments of `scan_body_types`, ending in one `yield_name` of
    the carry's type."""

    def fail(message: str) -> VerifyException:
        return VerifyException(f"'{op.name}': body: {message}")

    block = op.body.block
    want = scan_body_types(op)
    got = [arg.type for arg in block.args]
    if len(got) != len(want):
        raise fail(f"expected {len(want)} block arguments (carry, {len(op.xs)} xs slices, "
                   f"{len(op.consts)} consts), got {len(got)}")
    labels = ["carry", *(f"xs[{i}] slice" for i in range(len(op.xs))),
              *(f"consts[{i}]" for i in range(len(op.consts)))]
    for label, w, g in zip(labels, want, got, strict=True):
        if w != g:
            raise fail(f"block argument for the {label}: expected {w}, got {g}")
    last = block.last_op
    if last is None or last.name != yield_name:
        raise fail(f"expected to end in '{yield_name}', got {'nothing' if last is None else repr(last.name)}")
    yielded = [v.type for v in last.operands]
    if yielded != [carry_type]:
        raise fail(f"'{yield_name}' expected one value of the carry's type {carry_type}, got "
                   f"({', '.join(map(str, yielded))})")


@irdl_op_definition
class ScanOp(VerifiesSignature):
    """A bounded loop (like `scf.for` with one iter_arg): `body` runs `length` times on
    (carry, the step's slice of each of `xs` along axis 0, each of `consts`) and yields the
    next carry, starting from `init`. The result is the final carry, or with `trajectory`
    every carry, [length, *carry]."""

    name = "mir.scan"
    RULE = si.scan

    init = operand_def(TensorType)
    xs = var_operand_def(TensorType)
    consts = var_operand_def(TensorType)
    result = result_def(TensorType)

    length = prop_def(IntegerAttr[I64])
    trajectory = opt_prop_def(UnitAttr)

    body = region_def("single_block")

    traits = traits_def(Pure(), IsolatedFromAbove())
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    EMPTY_VARIADICS: ClassVar[tuple[str, ...]] = ("xs", "consts")

    assembly_format = (
        "$init (`xs` `(` $xs^ `:` type($xs) `)`)? (`consts` `(` $consts^ `:` type($consts) `)`)?"
        " `length` $length (`trajectory` $trajectory^)? `:` type($init) `->` type($result) attr-dict-with-keyword"
        " $body"
    )

    ELEMENT_TYPES: ClassVar[ElementTypes] = ElementTypes(
        {"init": ANY_DTYPE, "xs": ANY_DTYPE, "consts": ANY_DTYPE}, same=("init", "result"))

    def __init__(
        self,
        init: SSAValue | Operation,
        xs: Sequence[SSAValue | Operation],
        consts: Sequence[SSAValue | Operation],
        length: int,
        body: Region,
        trajectory: bool = False,
    ):
        init = SSAValue.get(init)
        ty = init.type
        assert isinstance(ty, TensorType)
        shape = (length, *ty.get_shape()) if trajectory else ty.get_shape()
        properties: dict[str, Attribute] = {"length": IntegerAttr(length, i64)}
        if trajectory:
            properties["trajectory"] = UnitAttr()
        IRDLOperation.__init__(self, operands=[init, _values(*xs), _values(*consts)],
                         result_types=[TensorType(ty.get_element_type(), shape)],
                         properties=properties, regions=[body])

    def verify_regions(self) -> None:
        verify_scan_region(self, self.init.type, f"{self.dialect_name()}.yield")


@irdl_op_definition
class YieldOp(AbstractYieldOperation[Attribute]):
    """Terminator of a `mir.fused_elementwise` body (the result's scalar element) and of a
    `mir.scan` body (the next carry)."""

    name = "mir.yield"

    traits = traits_def(IsTerminator(), HasParent(FusedElementwiseOp, ScanOp), Pure())


# ----------------------------------------------------------------------------- sampling


@irdl_op_definition
class ArgmaxOp(VerifiesSignature):
    """The index (i32) of the largest value along the last axis of `input` (f32), ties to
    the lower index, a NaN larger than every number: `input.shape[:-1]`.

    ```mlir
    %i = mir.argmax %x : tensor<2x10xf32> -> tensor<2xi32>
    ```
    """

    name = "mir.argmax"
    RULE = si.argmax

    input = operand_def(TensorType)
    result = result_def(TensorType)

    traits = traits_def(Pure())

    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    ELEMENT_TYPES: ClassVar[ElementTypes] = ElementTypes({"input": FLOAT, "result": ("i32",)})


@irdl_op_definition
class TopKOp(VerifiesSignature):
    """The `k` largest values of `input` (f32) along the last axis, sorted descending
    (equal values by the lower index, NaNs first), and their indices (i32): two [..., k].

    ```mlir
    %v, %i = mir.top_k %x k 3 : (tensor<2x10xf32>) -> (tensor<2x3xf32>, tensor<2x3xi32>)
    ```
    """

    name = "mir.top_k"
    RULE = si.top_k

    input = operand_def(TensorType)
    result = result_def(TensorType)
    indices = opt_result_def(TensorType)
    """Always present (optional in the definition only: extra results are, see
    `VerifiesSignature.EXTRA_RESULTS`)."""

    k = prop_def(IntegerAttr[I64])

    traits = traits_def(Pure())

    assembly_format = "$input `k` $k attr-dict `:` functional-type(operands, results)"

    EXTRA_RESULTS: ClassVar[tuple[str, ...]] = ("indices",)
    ELEMENT_TYPES: ClassVar[ElementTypes] = ElementTypes(
        {"input": FLOAT, "result": FLOAT, "indices": ("i32",)})


@irdl_op_definition
class SampleOp(IndexOperandsMixin):
    """One token id (i32) per row of `logits` [..., V] (f32): greedy (argmax) when
    `temperature` <= 0; else top-k (`top_k` <= 0 keeps all), top-p on the softmax of the
    raw logits (`top_p` >= 1 keeps all), the softmax at `temperature`, and one Philox4x32-10
    draw keyed by `seed` and counted by (row, `position`) (docs/modules.md "Sampling
    ops"). The parameters (f32, i32, f32, i64) are rank-0 tensors, so one compiled graph
    serves every setting, or, for logits [R, V], one value per row [R] (batched decoding:
    every sequence its own setting); `position` is the model's (absent: 0). With
    `row_positions` (i64 [R]; exclusive with `position`) row r is counted as row 0 at
    position row_positions[r]: it draws what a one-row call at that position draws.

    ```mlir
    %ids = mir.sample %l, %t, %k, %p, %s position %pos : (tensor<1x50xf32>, tensor<f32>, tensor<i32>, tensor<f32>, tensor<i64>, index) -> tensor<1xi32>
    %ids = mir.sample %l, %t, %k, %p, %s row_positions(%rp : tensor<3xi64>) : (tensor<3x50xf32>, tensor<3xf32>, tensor<i32>, tensor<f32>, tensor<3xi64>) -> tensor<3xi32>
    ```
    """

    name = "mir.sample"
    RULE = si.sample

    logits = operand_def(TensorType)
    temperature = operand_def(TensorType)
    top_k = operand_def(TensorType)
    top_p = operand_def(TensorType)
    seed = operand_def(TensorType)
    position = opt_operand_def(IndexType)
    row_positions = opt_operand_def(TensorType)
    result = result_def(TensorType)

    traits = traits_def(Pure())
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    assembly_format = (
        "$logits `,` $temperature `,` $top_k `,` $top_p `,` $seed (`position` $position^)?"
        " (`row_positions` `(` $row_positions^ `:` type($row_positions) `)`)? attr-dict `:`"
        " `(` type($logits) `,` type($temperature) `,` type($top_k) `,` type($top_p) `,`"
        " type($seed) (`,` type($position)^)? `)` `->` type($result)"
    )

    ELEMENT_TYPES: ClassVar[ElementTypes] = ElementTypes(
        {"logits": FLOAT, "temperature": FLOAT, "top_k": ("i32",), "top_p": FLOAT,
         "seed": ("i64",), "row_positions": ("i64",), "result": ("i32",)})

    # (the lir twin takes this check too)
    def verify_attributes(self) -> None:
        if self.position is not None and self.row_positions is not None:
            raise VerifyException(
                f"'{self.name}': position and row_positions: expected at most one "
                f"(row_positions gives every row its own position), got both")


@irdl_op_definition
class SharedInputMatmulOp(VerifiesSignature):
    """One input `x` [..., K] times N >= 2 `weights` (1 with a `norm_weight`), one f32
    result each, computed by one kernel that reads x once (q/k/v, gate/up; mir-fuse
    forms it from sibling matmuls).
    f32 weights [K, N_i] give `x @ w_i`; with a `scheme`, every weight is the raw GGUF
    blocks of that scheme, ui8 [N_i, K/values·bytes], giving `x @ dequant(w_i)^T` as
    `mir.dequant_matmul` with the same `activations`.

    ```mlir
    %q, %k = mir.shared_input_matmul %x, %wq, %wk : (tensor<4x64xf32>, tensor<64x32xf32>, tensor<64x16xf32>) -> (tensor<4x32xf32>, tensor<4x16xf32>)
    %g, %u = mir.shared_input_matmul %x, %wg, %wu scheme q4_0 activations q8 : (tensor<1x64xf32>, tensor<8x36xui8>, tensor<8x36xui8>) -> (tensor<1x8xf32>, tensor<1x8xf32>)
    %q, %k = mir.shared_input_matmul %h, %wq, %wk norm(%g : tensor<64xf32>) eps 1.0e-05 scheme q4_0 activations q8 : (tensor<1x64xf32>, tensor<8x36xui8>, tensor<8x36xui8>) -> (tensor<1x8xf32>, tensor<1x8xf32>)
    ```

    With a `norm_weight` [K] (mir-fuse: the rms_norm that x came from), the kernel reads
    the un-normalized rows and RMS-normalizes each (`mir.rms_norm` with that gamma and
    `norm_eps`) before quantizing it; q8 only. With a norm_weight one weight is enough:
    mir-fuse gives a norm read by q8 products of different schemes (a Q4_K_M file's Q8_0
    `attn_v` beside its Q5_0 q/k) to each of them, and a lone product becomes such an op.

    With `glu act` (mir-fuse: a gated linear unit, `act(x @ w_0) * (x @ w_1)`, e.g.
    SwiGLU), exactly two weights of one N: the first product is `act(p_0) * p_1`, computed
    as each tile of both is stored; the second stays `p_1`. q8 only.

    With `residual(h, g1) eps e1` (mir-fuse: the sandwich norm of Gemma 3, x = h +
    rms_norm(p, g1) then rms_norm(x, norm_weight)), the op takes p for x: each row becomes
    h + rms_norm(p, g1, e1) before the norm_weight's norm (needed), and that sum is one
    more result, last (the next residual). q8 only.

    ```mlir
    %g, %u, %s = mir.shared_input_matmul %p, %wg, %wu residual(%h, %g1 : tensor<1x64xf32>, tensor<64xf32>) eps 1.0e-06 norm(%g2 : tensor<64xf32>) eps 1.0e-06 scheme q4_0 activations q8 : (tensor<1x64xf32>, tensor<8x36xui8>, tensor<8x36xui8>) -> (tensor<1x8xf32>, tensor<1x8xf32>, tensor<1x64xf32>)
    ```

    ```mlir
    %h, %u = mir.shared_input_matmul %x, %wg, %wu scheme q4_0 activations q8 glu silu : (tensor<1x64xf32>, tensor<8x36xui8>, tensor<8x36xui8>) -> (tensor<1x8xf32>, tensor<1x8xf32>)
    ```

    With `rope(cos, sin) [i, ...] head_dim D n_rot R style interleaved` (mir-fuse: a
    `mir.rope` of a product), the listed products come out rotated as `mir.rope` with
    those operands would rotate them (x [S, K], cos/sin [S, R/2]; the interleaved style
    only: each pair sits in one tile as it is stored). With `into(caches) [i, ...] at P`
    (mir-fuse: a `mir.insert_rows` of a product), each listed product is written into its
    cache [capacity, N_i] at rows P..P+S and that product is the updated cache, as
    `mir.insert_rows(p_i, cache, P)` would give it (bufferized, the kernel writes the
    cache in place, so no copy and no kernel stand between the products and the
    attention). Both q8 only.

    ```mlir
    %q, %kc, %vc = mir.shared_input_matmul %x, %wq, %wk, %wv rope(%cos, %sin : tensor<1x4xf32>, tensor<1x4xf32>) [0, 1] head_dim 8 n_rot 8 style interleaved into(%kcache, %vcache : tensor<64x8xf32>, tensor<64x8xf32>) [1, 2] at %pos scheme q8_0 activations q8 : (tensor<1x64xf32>, tensor<16x68xui8>, tensor<8x68xui8>, tensor<8x68xui8>) -> (tensor<1x16xf32>, tensor<64x8xf32>, tensor<64x8xf32>)
    ```
    """

    name = "mir.shared_input_matmul"
    RULE = si.shared_input_matmul

    x = operand_def(TensorType)
    weights = var_operand_def(TensorType)
    residual = opt_operand_def(TensorType)
    residual_norm_weight = opt_operand_def(TensorType)
    norm_weight = opt_operand_def(TensorType)
    rope_cos = opt_operand_def(TensorType)
    rope_sin = opt_operand_def(TensorType)
    caches = var_operand_def(TensorType)
    position = opt_operand_def(IndexType)
    products = var_result_def(TensorType)

    scheme = opt_prop_def(QuantSchemeAttr)
    activations = opt_prop_def(QuantActivationsAttr)
    norm_eps = opt_prop_def(FloatAttr[Float32Type])
    residual_eps = opt_prop_def(FloatAttr[Float32Type])
    glu = opt_prop_def(ActivationAttr)
    rope_products = opt_prop_def(DenseArrayBase.constr(i64))
    """The products rotated by the fused rope (with rope_cos, rope_sin and the rope_ props)."""
    rope_head_dim = opt_prop_def(IntegerAttr[I64])
    rope_n_rot = opt_prop_def(IntegerAttr[I64])
    rope_style = opt_prop_def(RopeStyleAttr)
    cache_products = opt_prop_def(DenseArrayBase.constr(i64))
    """The products written into `caches` (one each, in order) at rows `position`..."""

    traits = traits_def(Pure())
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    assembly_format = (
        "$x `,` $weights (`residual` `(` $residual^ `,` $residual_norm_weight `:` type($residual)"
        " `,` type($residual_norm_weight) `)` `eps` $residual_eps)?"
        " (`norm` `(` $norm_weight^ `:` type($norm_weight) `)` `eps` $norm_eps)?"
        " (`rope` `(` $rope_cos^ `,` $rope_sin `:` type($rope_cos) `,` type($rope_sin) `)`"
        " $rope_products `head_dim` $rope_head_dim `n_rot` $rope_n_rot `style` $rope_style)?"
        " (`into` `(` $caches^ `:` type($caches) `)` $cache_products `at` $position)?"
        " (`scheme` $scheme^)? (`activations` $activations^)? (`glu` $glu^)? attr-dict"
        " `:` `(` type($x) `,` type($weights) `)` `->` `(` type($products) `)`"
    )

    RESULT: ClassVar[str] = "products"
    ABSENT_VALUES: ClassVar[Mapping[str, Any]] = {"activations": QuantActivations.F32}
    EMPTY_VARIADICS: ClassVar[tuple[str, ...]] = ("caches",)

    # The results are variadic (one per weight): the rule gives their shapes as a list.
    @classmethod
    def rule_shapes(cls, shapes: Mapping[str, Any], properties: Mapping[str, Any]
                    ) -> list[si.Shape | None]:
        return list(cls.rule_shape(shapes, properties))

    @classmethod
    def infer_result_types(cls, operands: Mapping[str, Any],
                           properties: Mapping[str, Attribute]) -> list[Attribute]:
        shapes = {name: [shape_of(v) for v in value] if isinstance(value, list) else shape_of(value)
                  for name, value in operands.items() if value is not None and name != "position"}
        # one group: the variadic `products` (a cache product's is its cache's shape)
        return [[tensor_type(shape, "f32") for shape in cls.rule_shapes(shapes, properties)]]  # pyright: ignore[reportReturnType]

    def verify_value(self, label: str, value: SSAValue) -> None:
        if not isinstance(value.type, IndexType):
            super().verify_value(label, value)

    def infer_shape(self) -> si.Shape:
        return self.infer_shapes()["products[0]"]

    def infer_shapes(self) -> dict[str, si.Shape]:
        return shared_products_shapes(self)

    def declared_shape(self) -> si.Shape:
        return shape_of(self.products[0])

    def verify_element_types(self, named: list[Operand]) -> None:
        verify_shared_dtypes(self, self.products, "products")

    def verify_attributes(self) -> None:
        verify_shared_activations(self)

    def verify_results(self) -> None:
        verify_shared_products(self, self.products, "products")


SHARED_INPUT_EDGES: tuple[str, ...] = (
    "residual", "residual_norm_weight", "norm_weight", "rope_cos", "rope_sin", "position",
    "scheme", "activations", "residual_eps", "norm_eps", "glu", "rope_products",
    "rope_head_dim", "rope_n_rot", "rope_style", "cache_products")
"""The operands and properties a shared-input matmul has besides x, its weights and its
caches, under one name in mir and lir (constructor keywords of both ops)."""


def shared_products_shapes(op: IRDLOperation, label: str = "products") -> dict[str, si.Shape]:
    """The shape of each product of a shared-input matmul (mir op or lir kernel), by
    label `products[i]` (the rule's errors name `op`)."""
    x, weights, norm_weight = op.operands[0], op.weights, op.norm_weight
    props = op.properties
    edges = {name: shape_of(value)
             for name in ("rope_cos", "rope_sin", "residual", "residual_norm_weight")
             if (value := getattr(op, name)) is not None}
    if isinstance(op, SharedInputMatmulOp) and op.caches:
        edges["caches"] = [shape_of(c) for c in op.caches]
    for name in ("rope_head_dim", "rope_n_rot"):
        if (attr := props.get(name)) is not None:
            edges[name] = attr.value.data  # pyright: ignore[reportAttributeAccessIssue]
    with rule_errors(op):
        shapes = si.shared_input_matmul(shape_of(x), [shape_of(w) for w in weights],
                                        _scheme_name(op),
                                        None if norm_weight is None else shape_of(norm_weight),
                                        rope_products=indices_of(op, "rope_products"),
                                        cache_products=indices_of(op, "cache_products"), **edges)
    return {f"{label}[{i}]": shape for i, shape in enumerate(shapes)}


def _scheme_name(op: IRDLOperation) -> str | None:
    scheme = op.properties.get("scheme")
    return None if scheme is None else scheme.data.value  # pyright: ignore[reportAttributeAccessIssue]


def verify_shared_dtypes(op: IRDLOperation, products: Sequence[SSAValue], label: str) -> None:
    """A shared-input matmul's element types: f32 x and products (`label`), the weights
    f32, or ui8 with a scheme."""
    weight = "f32" if _scheme_name(op) is None else "ui8"
    x, weights = op.operands[0], op.weights
    optional = [(name, getattr(op, name)) for name in ("norm_weight", "rope_cos", "rope_sin")]
    edges = [(name, value, "f32") for name, value in optional if value is not None]
    caches = [(f"caches[{i}]", c, "f32") for i, c in enumerate(getattr(op, "caches", ()))]
    for name, value, want in [("x", x, "f32"), *edges, *caches,
                              *((f"weights[{i}]", w, weight) for i, w in enumerate(weights)),
                              *((f"{label}[{i}]", r, "f32") for i, r in enumerate(products))]:
        if (got := dtype_of(value)) != want:
            raise VerifyException(f"'{op.name}': {name}: expected element type {want}, got {got}")


def verify_shared_products(op: IRDLOperation, products: Sequence[SSAValue], label: str) -> None:
    """A shared-input matmul's products (`label`): one per weight, of the rule's shapes; a
    product written into a cache (`cache_products`) is that cache [capacity, N_i]."""
    shapes = shared_products_shapes(op, label)
    if len(products) != len(shapes):
        raise VerifyException(f"'{op.name}': {label}: expected {len(shapes)} (one per weight, "
                              f"and the residual's sum when there is one), "
                              f"got {len(products)}")
    # an lir kernel's cache out is the cache buffer; the rule gives its rows' shape
    in_place = () if isinstance(op, SharedInputMatmulOp) else indices_of(op, "cache_products")
    for index, ((name, shape), value) in enumerate(zip(shapes.items(), products, strict=True)):
        if index not in in_place:
            verify_result(op, value, lambda shape=shape: shape, name)
            continue
        with rule_errors(op):
            si.insert_rows(shape_of(value), shape)


def indices_of(op: IRDLOperation, name: str) -> tuple[int, ...]:
    """The product indices a shared-input matmul lists in `name` (rope_products,
    cache_products; () when absent)."""
    attr = op.properties.get(name)
    return () if attr is None else tuple(attr.get_values())  # pyright: ignore[reportAttributeAccessIssue]


def verify_rope_edge(op: IRDLOperation, form: QuantActivations, count: int) -> None:
    """The fused rope of a shared-input matmul (`rope_*`, `count` products): all or none of
    its operands and properties, q8, no glu, the interleaved style, an even head size,
    products listed once each (their shapes: the shape rule's)."""
    parts = [op.properties.get(f"rope_{name}") for name in ("products", "head_dim", "n_rot", "style")]
    given = [*parts, op.rope_cos, op.rope_sin]  # pyright: ignore[reportAttributeAccessIssue]
    if all(part is None for part in given):
        return
    if any(part is None for part in given):
        raise VerifyException(f"'{op.name}': rope: expected rope_cos, rope_sin, rope_products, "
                              f"rope_head_dim, rope_n_rot and rope_style together, got some")
    if form != QuantActivations.Q8:
        raise VerifyException(f"'{op.name}': rope needs activations q8 (its epilogue is the q8 "
                              f"kernels'), got activations {form.value}")
    if op.properties.get("glu") is not None:
        raise VerifyException(f"'{op.name}': rope and glu: expected at most one epilogue, got both")
    if (style := RopeStyle(parts[3].data)) != RopeStyle.INTERLEAVED:  # pyright: ignore[reportAttributeAccessIssue]
        raise VerifyException(f"'{op.name}': rope_style: expected interleaved (a pair stays in "
                              f"one tile of the product), got {style.value}")
    if (head_dim := parts[1].value.data) % 2:  # pyright: ignore[reportAttributeAccessIssue]
        raise VerifyException(f"'{op.name}': rope_head_dim: expected an even value (every pair "
                              f"starts at an even column), got {head_dim}")
    _product_indices(op, "rope_products", count)


def verify_cache_edge(op: IRDLOperation, form: QuantActivations, count: int,
                      caches: Sequence[SSAValue] | None) -> None:
    """The fused cache inserts of a shared-input matmul (`cache_products`, `position`, and
    in mir the `caches`, one per listed product; `count` products): q8, products listed
    once each (their shapes: the shape rule's)."""
    indices = op.properties.get("cache_products")
    position = op.position  # pyright: ignore[reportAttributeAccessIssue]
    if indices is None and position is None and not caches:
        return
    if indices is None or position is None:
        raise VerifyException(f"'{op.name}': cache_products and position come together, got "
                              f"{'position' if indices is None else 'cache_products'} alone")
    if form != QuantActivations.Q8:
        raise VerifyException(f"'{op.name}': cache_products needs activations q8 (the q8 "
                              f"kernels write the caches), got activations {form.value}")
    listed = _product_indices(op, "cache_products", count)
    if caches is not None and len(caches) != len(listed):
        raise VerifyException(f"'{op.name}': caches: expected one per cache product "
                              f"({len(listed)}), got {len(caches)}")


def _product_indices(op: IRDLOperation, name: str, count: int) -> tuple[int, ...]:
    indices = indices_of(op, name)
    if not indices or len(set(indices)) != len(indices) or not all(0 <= i < count for i in indices):
        raise VerifyException(f"'{op.name}': {name}: expected distinct product indices in "
                              f"[0, {count}), got {list(indices)}")
    return indices


def verify_shared_activations(op: IRDLOperation) -> None:
    """`activations` only with a scheme, q8 only for a block-quantized one."""
    scheme, form = _scheme_name(op), activations_of(op)
    if scheme is None and form != QuantActivations.F32:
        raise VerifyException(f"'{op.name}': activations needs a scheme (f32 weights take x "
                              f"as given), got activations {form.value}")
    if form == QuantActivations.Q8 and scheme not in VEC_DOT_TYPES:
        raise VerifyException(f"'{op.name}': activations q8 needs a block-quantized scheme "
                              f"({', '.join(VEC_DOT_TYPES)}), got {scheme}")
    norm, eps = op.norm_weight, op.properties.get("norm_eps")
    if (norm is None) != (eps is None):
        raise VerifyException(f"'{op.name}': norm_weight and norm_eps come together, got "
                              f"{'norm_weight' if eps is None else 'norm_eps'} alone")
    if norm is not None and form != QuantActivations.Q8:
        raise VerifyException(f"'{op.name}': a norm_weight needs activations q8 (its prologue "
                              f"is the q8 kernels'), got activations {form.value}")
    verify_residual_edge(op)
    if op.properties.get("glu") is not None:
        verify_glu(op, form)
    if op.properties.keys() & {"rope_products", "cache_products"} or op.position is not None:
        verify_rope_edge(op, form, len(op.weights))
        verify_cache_edge(op, form, len(op.weights), getattr(op, "caches", None))
        shared_products_shapes(op)  # the products' shapes with these edges: the rule's
    elif op.rope_cos is not None or op.rope_sin is not None or getattr(op, "caches", None):
        raise VerifyException(f"'{op.name}': rope_cos, rope_sin and caches need rope_products "
                              f"or cache_products, got neither")


def verify_residual_edge(op: IRDLOperation) -> None:
    """`residual(h, g1) eps`: all three or none, with a norm_weight (the sum is normalized
    again before it is quantized)."""
    parts = {"residual": op.residual, "residual_norm_weight": op.residual_norm_weight,  # pyright: ignore[reportAttributeAccessIssue]
             "residual_eps": op.properties.get("residual_eps")}
    given = [name for name, part in parts.items() if part is not None]
    if given and len(given) != len(parts):
        raise VerifyException(f"'{op.name}': residual, residual_norm_weight and residual_eps "
                              f"come together, got {', '.join(given)}")
    if given and op.norm_weight is None:  # pyright: ignore[reportAttributeAccessIssue]
        raise VerifyException(f"'{op.name}': a residual needs a norm_weight (the sum's rows "
                              f"are normalized before they are quantized), got none")


def verify_glu(op: IRDLOperation, form: QuantActivations) -> None:
    """`glu`: q8, and two weights of one N (act(p_0) * p_1 pairs their columns)."""
    if form != QuantActivations.Q8:
        raise VerifyException(f"'{op.name}': glu needs activations q8 (its epilogue is the q8 "
                              f"kernels'), got activations {form.value}")
    rows = [shape_of(w)[0] for w in op.weights]
    if len(rows) != 2 or rows[0] != rows[1]:
        raise VerifyException(f"'{op.name}': glu needs exactly two weights of the same N "
                              f"(act(p_0) * p_1), got N = {rows}")


BINARY_ELEMENTWISE_OPS: tuple[type[BinaryElementwiseOp], ...] = defined_ops(
    globals(), "mir.", BinaryElementwiseOp
)
UNARY_ELEMENTWISE_OPS: tuple[type[UnaryElementwiseOp], ...] = defined_ops(
    globals(), "mir.", UnaryElementwiseOp
)
"""The elementwise ops, each one `fn` of `lir.elementwise`."""

MIR = Dialect(
    "mir", list(defined_ops(globals(), "mir.")), [], [MirConstantMaterialization()]
)
