"""The lir kernels and the hir blocks that are a mir op at another level are generated
from the mir op (`verifier.twin`): same operands, properties, element types and shape
rule, so the levels cannot drift."""

from __future__ import annotations

import pytest
from xdsl.dialects import test
from xdsl.dialects.builtin import MemRefType, TensorType, f32
from xdsl.irdl import OptOperandDef, OptResultDef, VarOperandDef, VarResultDef
from xdsl.utils.exceptions import VerifyException

from rlx_mlir.dialects import hir, lir, mir
from rlx_mlir.dialects.rlx import ElementwiseFn
from rlx_mlir.dialects.verifier import VerifiesSignature

HAND_WRITTEN = (lir.ElementwiseOp, lir.CopyOp, lir.ConstantOp, lir.InsertRowsOp,
                lir.CacheScatterOp)
"""Kernels whose form differs from their mir op by design (they reuse its rules; the
cache of `insert_rows` and of `cache_scatter` is its `out`, written in place)."""
LIR_TWINS = [op for op in lir.KERNEL_OPS if op not in HAND_WRITTEN]
HIR_TWINS = [op for op in hir.HIR_OPS if getattr(op, "MIR_OP", None) is not None]


def _kind(definition: object) -> str:
    if isinstance(definition, OptOperandDef):
        return "optional"
    return "variadic" if isinstance(definition, VarOperandDef) else "single"


def _operands(op: type[VerifiesSignature]) -> list[tuple[str, str]]:
    return [(name, _kind(d)) for name, d in op.get_irdl_definition().operands]


def test_twins_name_their_mir_op():
    assert all(op.MIR_OP.name == op.name.replace("lir.", "mir.") for op in LIR_TWINS)
    assert lir.RmsNormOp.MIR_OP is mir.RmsNormOp
    assert {op.name for op in HIR_TWINS} == {
        "hir.rms_norm", "hir.layer_norm", "hir.attention", "hir.rope", "hir.dequant_matmul"
    }


IN_PLACE_OPERANDS = {"lir.shared_input_matmul": {"caches"}}
"""mir operands whose buffers a kernel writes in place as some of its outs (not operands)."""


@pytest.mark.parametrize("kernel", LIR_TWINS, ids=lambda op: op.name)
def test_lir_kernel_is_its_mir_op_in_destination_passing_style(kernel):
    source = kernel.MIR_OP
    assert kernel.name == source.name.replace("mir.", "lir.")
    results = source.get_irdl_definition().results
    outs = (kernel.RESULT, *kernel.EXTRA_RESULTS)
    assert outs[0] == "out" and len(outs) == len(results)
    # One out per result, last, optional where the result is (a sequence op's final state),
    # variadic where it is (a shared-input matmul's products). Operands the kernel updates
    # in place are its outs instead (a shared-input matmul's caches, as lir.insert_rows').
    in_place = IN_PLACE_OPERANDS.get(kernel.name, set())
    assert _operands(kernel) == [*(o for o in _operands(source) if o[0] not in in_place), *(
        (out, "optional" if isinstance(d, OptResultDef)
         else "variadic" if isinstance(d, VarResultDef) else "single")
        for out, (_, d) in zip(outs, results, strict=True))]
    mir_props = source.get_irdl_definition().properties
    lir_props = kernel.get_irdl_definition().properties
    for name, prop in mir_props.items():
        assert lir_props[name].constr == prop.constr, name
    # the lir-only layouts of bound weights (lir-pack-weights)
    assert set(lir_props) - set(mir_props) <= {"packed_rhs", "interleaved", "operandSegmentSizes"}
    element_types = source.ELEMENT_TYPES
    for out, (result, _) in zip(outs, results, strict=True):
        element_types = element_types.renamed(result, out)
    assert kernel.ELEMENT_TYPES == element_types
    if any(isinstance(d, VarResultDef) for _, d in results):
        # A hand-written twin (variadic results, docs/adding-an-op.md): its shapes are
        # labelled by its out (`out[i]`), computed by the mir op's own helper.
        assert kernel.RULE is source.RULE
        return
    assert kernel.infer_shape is source.infer_shape
    assert kernel.infer_shapes is source.infer_shapes


@pytest.mark.parametrize("block", HIR_TWINS, ids=lambda op: op.name)
def test_hir_twin_shares_the_mir_definition(block):
    source = block.MIR_OP
    assert _operands(block) == _operands(source)
    assert block.infer_shape is source.infer_shape
    assert block.ELEMENT_TYPES == source.ELEMENT_TYPES


def test_every_elementwise_fn_stands_for_a_mir_op():
    assert set(lir.ELEMENTWISE_MIR_OPS) == set(ElementwiseFn)
    assert lir.ELEMENTWISE_MIR_OPS[ElementwiseFn.ADD] is mir.AddOp


def _values(*types):
    return test.TestOp(result_types=list(types)).results


def test_mir_and_lir_report_a_shape_error_alike():
    x, gamma = _values(TensorType(f32, [4, 8]), TensorType(f32, [4]))
    with pytest.raises(VerifyException) as mir_err:
        mir.RmsNormOp(x, gamma, result_type=x.type).verify()  # a type the rule rejects
    xb, gb, out = _values(MemRefType(f32, [4, 8]), MemRefType(f32, [4]), MemRefType(f32, [4, 8]))
    with pytest.raises(VerifyException) as lir_err:
        lir.RmsNormOp(xb, gb, out).verify()
    message = "gamma: expected shape [8] (N = last dim of x), got [4]"
    assert f"'mir.rms_norm': {message}" in str(mir_err.value)
    assert f"'lir.rms_norm': {message}" in str(lir_err.value)


def test_twins_build_alike():
    """The keyword constructor of every level reads the one definition: the same defaults
    and derived properties, the lir kernel's `out` after the required operands."""
    x, gamma = _values(TensorType(f32, [4, 8]), TensorType(f32, [8]))
    xb, gb, out = _values(MemRefType(f32, [4, 8]), MemRefType(f32, [8]), MemRefType(f32, [4, 8]))
    norms = [mir.RmsNormOp(x, gamma), hir.RmsNormOp(x, gamma), lir.RmsNormOp(xb, gb, out)]
    assert [op.eps.value.data for op in norms] == [pytest.approx(1e-5)] * 3
    for op in norms:
        op.verify()
    attention = [mir.AttentionOp(x, x, x, num_heads=2, head_dim=4),
                 hir.AttentionOp(x, x, x, num_heads=2, head_dim=4),
                 lir.AttentionOp(xb, xb, xb, out, num_heads=2, head_dim=4)]
    for op in attention:
        op.verify()
        assert (op.num_kv_heads.value.data, op.mask_kind.data, op.scale.value.data) == (
            2, "none", pytest.approx(0.5))
    assert hir.RmsNormOp(x, gamma).result.type == x.type  # inferred by the rule
