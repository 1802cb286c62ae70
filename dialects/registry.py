"""The op registry: one declarative record per hir and mir op.

A record names, for one op, what every layer above the dialects needs to know about it:

- `op`: the hir or mir op class;
- `shape_rule`: its shape rule in `rlx_mlir.core.shape_inference`, the op's own `RULE`
  (what the Graph builder, the constructor and the verifier apply), or None when the
  result type states the shape (reshape, broadcast_to, constant, fused_elementwise);
- `reference`: its numpy reference kernel in `rlx_mlir.core.reference_kernels`, called as
  `reference(*operands, **properties)` by the interpreters; None for the few ops the
  interpreters implement themselves (`rlx_mlir.interpreters` then must have a special
  implementation, checked at its import);
- for a mir op, `lowering` (how convert-mir-to-lir lowers it, `Lowering`) and `kernel`:
  the lir kernel op it becomes. Its kernel builder is `kernel_builders()[kernel]` in
  `passes/lir_to_llvm/kernels.py`: the builders live in a higher layer, so the record
  names the builder by that key instead of importing it; tests/test_registry.py checks
  every key has a builder.

Built from the records, and used by the layers above instead of lists of their own:
`HIR_OPS`, `MIR_OPS`, `LIR_KERNEL_OPS` (the op lists), the interpreter tables of
`rlx_mlir.interpreters` (one `@impl` per record), and the `ELEMENTWISE_FNS` / `KERNELS`
tables of convert-mir-to-lir. At import this module checks that the records and the
dialects agree (every op of `hir.HIR`, `mir.MIR` and `lir.KERNEL_OPS` has exactly one
record), so an op added to a dialect without a record, or the other way round, fails
at import with an error naming it.

Adding an op: docs/adding-an-op.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from xdsl.ir import Operation

from rlx_mlir.core import reference_kernels as K
from rlx_mlir.core import shape_inference as si
from rlx_mlir.core.errors import RlxError
from rlx_mlir.dialects import hir, lir, mir
from rlx_mlir.dialects.rlx import ElementwiseFn

ShapeRule = Callable[..., si.Shape]
Reference = Callable[..., Any]


class RegistryError(RlxError):
    """The op registry and the dialects disagree (an op without a record, a record
    without its pieces)."""


class Lowering(Enum):
    """How convert-mir-to-lir lowers a mir op."""

    KERNEL = "kernel"
    """Its destination-passing lir twin `kernel`: the same operands (optional ones
    included), then `out`, and the same properties (the pass's `KernelLowering`)."""
    ELEMENTWISE = "elementwise"
    """`lir.elementwise` with the record's `fn` (the pass's `ElementwiseLowering`)."""
    PATTERN = "pattern"
    """A pattern of its own in convert-mir-to-lir (views, constants, fused bodies); the
    pass checks at import that it has one for every such record."""


@dataclass(frozen=True)
class HirOpRecord:
    """An hir block: interpreted by its reference kernel, expanded into mir primitives by
    its convert-hir-to-mir pattern (checked at that pass's import)."""

    op: type[hir.HirOp]
    reference: Reference

    @property
    def shape_rule(self) -> ShapeRule | None:
        """The op's shape rule (`RULE`)."""
        return self.op.RULE


@dataclass(frozen=True)
class MirOpRecord:
    """A mir primitive and the lir kernel it lowers to."""

    op: type[Operation]
    reference: Reference | None
    lowering: Lowering
    kernel: type[lir.KernelOp] | None
    """The lir kernel op (key of `kernel_builders()`); None only for a pure view."""
    fn: ElementwiseFn | None = None
    """The `lir.elementwise` function, for `Lowering.ELEMENTWISE`."""
    differentiable: bool = True
    """Whether `rlx.grad` differentiates through it: such an op has a VJP rule in
    `rlx_mlir.autodiff.rules.VJP_RULES` (checked by tests/test_registry.py). False for
    ops whose results are integers or carry no gradient (argmax, top_k, sample)."""

    @property
    def shape_rule(self) -> ShapeRule | None:
        """The op's shape rule (`RULE`; None for an op that is not `VerifiesSignature`)."""
        return getattr(self.op, "RULE", None)

    def __post_init__(self) -> None:
        elementwise = self.lowering is Lowering.ELEMENTWISE
        if elementwise != (self.fn is not None and self.kernel is lir.ElementwiseOp):
            raise RegistryError(
                f"registry record of '{self.op.name}': an elementwise lowering needs `fn` and "
                f"kernel lir.ElementwiseOp, got lowering {self.lowering.name}, fn {self.fn}, "
                f"kernel {self.kernel and self.kernel.name}"
            )
        if self.lowering is Lowering.KERNEL and self.kernel is None:
            raise RegistryError(
                f"registry record of '{self.op.name}': Lowering.KERNEL needs a kernel, got None"
            )


@dataclass(frozen=True)
class LirKernelRecord:
    """An lir kernel no mir op lowers to by itself (inserted by the passes), interpreted
    by `reference` writing into `out` (None: an interpreter special implementation)."""

    op: type[lir.KernelOp]
    reference: Reference | None


# ----------------------------------------------------------------------------- constructors


def _elementwise(op: type[Operation]) -> MirOpRecord:
    """The record of an elementwise op, derived from its name: `mir.<fn>` is the
    `lir.elementwise` fn `<fn>` with the reference kernel `ELEMENTWISE[<fn>]`."""
    fn = op.name.removeprefix("mir.")
    if fn not in K.ELEMENTWISE or fn not in set(ElementwiseFn):
        raise RegistryError(f"registry record of '{op.name}': an elementwise op needs the "
                            f"reference ELEMENTWISE[{fn!r}] and ElementwiseFn {fn!r}")
    return MirOpRecord(op, K.ELEMENTWISE[fn], Lowering.ELEMENTWISE, lir.ElementwiseOp,
                       ElementwiseFn(fn))


def _kernel(op: type[Operation], kernel: type[lir.KernelOp], reference: Reference | None,
            differentiable: bool = True) -> MirOpRecord:
    return MirOpRecord(op, reference, Lowering.KERNEL, kernel, differentiable=differentiable)


# ----------------------------------------------------------------------------- the records

HIR_RECORDS: tuple[HirOpRecord, ...] = (
    HirOpRecord(hir.LinearOp, K.linear),
    HirOpRecord(hir.SwigluFfnOp, K.swiglu_ffn),
    HirOpRecord(hir.RmsNormOp, K.rms_norm),
    HirOpRecord(hir.ResidualRmsNormOp, K.residual_rms_norm),
    HirOpRecord(hir.LayerNormOp, K.layer_norm),
    HirOpRecord(hir.AttentionOp, K.attention),
    HirOpRecord(hir.RopeOp, K.rope),
    HirOpRecord(hir.LlamaDecoderBlockOp, K.llama_decoder_block),
    HirOpRecord(hir.DequantMatmulOp, K.dequant_matmul),
    HirOpRecord(hir.EmbeddingOp, K.embedding),
    HirOpRecord(hir.DepthwiseConv1dCausalOp, K.depthwise_conv1d_causal),
    HirOpRecord(hir.Qwen35MtpHeadOp, K.qwen35_mtp_head),
    # one input, several products (docs/modules.md "shared_linear_pair and linear_fused")
    HirOpRecord(hir.SharedLinearPairOp, K.shared_linear_pair),
    HirOpRecord(hir.LinearFusedOp, K.linear),
)
"""One record per hir op."""

MIR_RECORDS: tuple[MirOpRecord, ...] = (
    # elementwise: one `lir.elementwise` kernel each, its `fn` and reference by the op's name
    *(_elementwise(op) for op in (*mir.BINARY_ELEMENTWISE_OPS, *mir.UNARY_ELEMENTWISE_OPS)),
    # linear algebra
    _kernel(mir.MatmulOp, lir.MatmulOp, K.matmul),
    _kernel(mir.FusedMatmulOp, lir.FusedMatmulOp, K.fused_matmul),
    _kernel(mir.DequantMatmulOp, lir.DequantMatmulOp, K.dequant_matmul),
    _kernel(mir.DepthwiseConv1dOp, lir.DepthwiseConv1dOp, K.depthwise_conv1d),
    # sequence ops
    _kernel(mir.SelectiveScanOp, lir.SelectiveScanOp, K.selective_scan),
    _kernel(mir.GatedDeltaNetOp, lir.GatedDeltaNetOp, K.gated_delta_net),
    # their reverse passes (the VJP rules' ops): no rule of their own, no second order
    _kernel(mir.SelectiveScanBackwardOp, lir.SelectiveScanBackwardOp, K.selective_scan_backward,
            differentiable=False),
    _kernel(mir.GatedDeltaNetBackwardOp, lir.GatedDeltaNetBackwardOp, K.gated_delta_net_backward,
            differentiable=False),
    # reductions and norms
    _kernel(mir.ReduceOp, lir.ReduceOp, K.reduce),
    _kernel(mir.SoftmaxOp, lir.SoftmaxOp, K.softmax),
    _kernel(mir.RmsNormOp, lir.RmsNormOp, K.rms_norm),
    _kernel(mir.LayerNormOp, lir.LayerNormOp, K.layer_norm),
    # transformer
    _kernel(mir.RopeOp, lir.RopeOp, K.rope),
    _kernel(mir.AttentionOp, lir.AttentionOp, K.attention),
    # data movement
    _kernel(mir.TransposeOp, lir.TransposeOp, K.transpose),
    _kernel(mir.ConcatOp, lir.ConcatOp, K.concat),
    _kernel(mir.BroadcastToOp, lir.BroadcastToOp, None),
    _kernel(mir.GatherOp, lir.GatherOp, K.gather),
    # a ui8 table of raw GGUF blocks at integer ids: no operand has a gradient
    _kernel(mir.DequantGatherOp, lir.DequantGatherOp, K.dequant_gather, differentiable=False),
    _kernel(mir.ScatterAddOp, lir.ScatterAddOp, K.scatter_add),
    MirOpRecord(mir.ReshapeOp, None, Lowering.PATTERN, None),  # always an lir.view
    MirOpRecord(mir.NarrowOp, K.narrow, Lowering.PATTERN, lir.NarrowOp),  # or a view
    MirOpRecord(mir.ConstantOp, None, Lowering.PATTERN, lir.ConstantOp),
    MirOpRecord(mir.FusedElementwiseOp, None, Lowering.PATTERN, lir.FusedElementwiseOp),
    # a region op: lir.scan around the kernels of its body (not a kernel itself)
    MirOpRecord(mir.ScanOp, None, Lowering.PATTERN, None),
    # state: the cache append is written in place, its rows are a view, assign a copy
    MirOpRecord(mir.InsertRowsOp, K.insert_rows, Lowering.PATTERN, lir.InsertRowsOp),
    MirOpRecord(mir.ExtractRowsOp, None, Lowering.PATTERN, None),  # always an lir.view
    MirOpRecord(mir.AssignOp, None, Lowering.PATTERN, lir.CopyOp),
    # sampling (docs/modules.md "Sampling ops")
    _kernel(mir.ArgmaxOp, lir.ArgmaxOp, K.argmax, differentiable=False),
    _kernel(mir.TopKOp, lir.TopKOp, K.top_k, differentiable=False),
    _kernel(mir.SampleOp, lir.SampleOp, K.sample, differentiable=False),
    # one input, several products (docs/modules.md "shared_linear_pair and linear_fused"):
    # one kernel reading x once where it has one (q8 activations), else one per weight
    MirOpRecord(mir.SharedInputMatmulOp, K.shared_input_matmul, Lowering.PATTERN,
                lir.SharedInputMatmulOp),
    # batched decoding (SPEC "Serving and batched decoding"): rows scattered into slot
    # caches in place, and the attention of each row over its slot (no gradients)
    MirOpRecord(mir.CacheScatterOp, K.cache_scatter, Lowering.PATTERN, lir.CacheScatterOp,
                differentiable=False),
    _kernel(mir.SlotAttentionOp, lir.SlotAttentionOp, K.slot_attention, differentiable=False),
)
"""One record per mir op (`mir.yield`, a terminator of fused bodies, has none)."""

LIR_RECORDS: tuple[LirKernelRecord, ...] = (
    LirKernelRecord(lir.CopyOp, None),  # an output written from a value that is not its buffer
)
"""The lir kernels that no mir record names as its `kernel`."""


# ----------------------------------------------------------------------------- derived tables


def _by_op(records: Iterable[Any]) -> dict[type[Operation], Any]:
    table: dict[type[Operation], Any] = {}
    for record in records:
        if record.op in table:
            raise RegistryError(f"'{record.op.name}' has two registry records, expected one")
        table[record.op] = record
    return table


HIR: dict[type[hir.HirOp], HirOpRecord] = _by_op(HIR_RECORDS)
"""The hir records by op class."""

MIR: dict[type[Operation], MirOpRecord] = _by_op(MIR_RECORDS)
"""The mir records by op class."""

HIR_OPS: tuple[type[hir.HirOp], ...] = tuple(HIR)
MIR_OPS: tuple[type[Operation], ...] = tuple(MIR)
LIR_KERNEL_OPS: tuple[type[lir.KernelOp], ...] = tuple(
    dict.fromkeys(
        [*(r.kernel for r in MIR_RECORDS if r.kernel is not None), *(r.op for r in LIR_RECORDS)]
    )
)
"""Every lir kernel op, the key of its kernel builder in `kernel_builders()`."""

ELEMENTWISE_FNS: dict[type[Operation], ElementwiseFn] = {
    r.op: r.fn for r in MIR_RECORDS if r.lowering is Lowering.ELEMENTWISE and r.fn is not None
}
"""The `lir.elementwise` function of each mir elementwise op."""

ELEMENTWISE_BY_FN: dict[ElementwiseFn, MirOpRecord] = {
    r.fn: r for r in MIR_RECORDS if r.fn is not None
}
"""The mir elementwise record of each `lir.elementwise` function."""

KERNELS: dict[type[Operation], type[lir.KernelOp]] = {
    r.op: r.kernel for r in MIR_RECORDS if r.lowering is Lowering.KERNEL and r.kernel is not None
}
"""mir ops lowered to their lir twin: same operands, then `out`, same properties."""

MIR_OF_KERNEL: dict[type[lir.KernelOp], MirOpRecord] = {
    r.kernel: r for r in MIR_RECORDS if r.kernel is not None and r.lowering is not Lowering.ELEMENTWISE
}
"""The mir record whose op lowers to each lir kernel (lir.elementwise excepted: many do)."""


def check_complete(what: str, expected: Iterable[type[Operation]],
                   present: Iterable[type[Operation]]) -> None:
    """Raise a RegistryError naming the ops of `expected` missing from `present` and the
    ones `present` has beyond `expected`."""
    expected, present = set(expected), set(present)
    missing = sorted(op.name for op in expected - present)
    extra = sorted(op.name for op in present - expected)
    if missing or extra:
        raise RegistryError(
            f"{what}: missing {', '.join(missing) or 'none'}; "
            f"unexpected {', '.join(extra) or 'none'}"
        )


def _check_dialects() -> None:
    check_complete("hir ops with a registry record", hir.HIR.operations, HIR_OPS)
    mir_ops = [op for op in mir.MIR.operations if op is not mir.YieldOp]
    check_complete("mir ops with a registry record", mir_ops, MIR_OPS)
    check_complete("lir kernel ops named by a registry record", lir.KERNEL_OPS, LIR_KERNEL_OPS)
    for record in MIR_RECORDS:  # a twin kernel says which mir op it was generated from
        twin_of = getattr(record.kernel, "MIR_OP", record.op)
        if record.kernel is not lir.ElementwiseOp and twin_of is not record.op:
            raise RegistryError(
                f"registry record of '{record.op.name}': kernel {record.kernel.name} is the "
                f"twin of '{twin_of.name}', expected the twin of '{record.op.name}'"
            )
    missing_fns = sorted(set(ElementwiseFn) - set(ELEMENTWISE_BY_FN))
    if missing_fns:
        raise RegistryError(f"lir.elementwise functions without a mir record: {missing_fns}")


_check_dialects()

__all__ = [
    "ELEMENTWISE_BY_FN",
    "ELEMENTWISE_FNS",
    "HIR",
    "HIR_OPS",
    "HIR_RECORDS",
    "KERNELS",
    "LIR_KERNEL_OPS",
    "LIR_RECORDS",
    "MIR",
    "MIR_OF_KERNEL",
    "MIR_OPS",
    "MIR_RECORDS",
    "HirOpRecord",
    "LirKernelRecord",
    "Lowering",
    "MirOpRecord",
    "RegistryError",
    "check_complete",
]
