"""The op registry is complete: every op has its record, interpreter, lowering and kernel
builder, every record's pieces agree with the op, and every Graph method is exercised by
the every-method graph (tests/test_graph.py).

The registry and the tables built from it also check themselves at import; these tests
say what is checked in one place and cover what an import cannot see (the kernel builders
of a higher layer, the hir patterns' behaviour, the shape rules on real ops).
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from test_graph import every_method_graph
from xdsl.dialects import test
from xdsl.dialects.builtin import MemRefType, ModuleOp, TensorType, f32, i32
from xdsl.ir import Block, Operation
from xdsl.pattern_rewriter import PatternRewriteWalker
from xdsl.utils.exceptions import VerifyException

import rlx_mlir as rlx
from rlx_mlir.core import reference_kernels as K
from rlx_mlir.core import shape_inference as si
from rlx_mlir.core.errors import ShapeError
from rlx_mlir.dialects import elementwise_fns, hir, lir, mir, registry
from rlx_mlir.dialects.common import memref_type, shape_of
from rlx_mlir.dialects.registry import Lowering, MirOpRecord, RegistryError
from rlx_mlir.dialects.rlx import ElementwiseFn
from rlx_mlir.dialects.verifier import OpBuildError
from rlx_mlir.dialects.verifier import constructor_parameters as registry_constructor_parameters
from rlx_mlir.interpreters.common import implementations_of
from rlx_mlir.interpreters.hir import HIR_IMPLEMENTATIONS, HirFunctions
from rlx_mlir.interpreters.lir import LIR_IMPLEMENTATIONS, LirFunctions
from rlx_mlir.interpreters.mir import MIR_IMPLEMENTATIONS, MirFunctions
from rlx_mlir.passes import mir_fuse
from rlx_mlir.passes.convert_hir_to_mir import HIR_TO_MIR, ConvertHirToMirPass
from rlx_mlir.passes.convert_mir_to_lir import ELEMENTWISE_FNS, KERNELS, OWN_PATTERNS
from rlx_mlir.passes.lir_to_llvm import elementwise as elementwise_kernels
from rlx_mlir.passes.lir_to_llvm.kernels import kernel_builders

MIR_OPS = [op for op in mir.MIR.operations if op is not mir.YieldOp]
LIR_OPS = [op for op in lir.LIR.operations if op is not lir.YieldOp]


def _ids(ops: list[type[Operation]]) -> list[str]:
    return [op.name for op in ops]


def _has_impl(functions: type, op: type[Operation]) -> bool:
    """`functions` (an InterpreterFunctions class) has an `@impl(op)` method; xDSL keeps
    the table behind `_impls`, which the Interpreter reads the same way."""
    return op in dict(functions._impls())  # pyright: ignore[reportPrivateUsage]


# ----------------------------------------------------------------------------- hir


@pytest.mark.parametrize("op", list(hir.HIR.operations), ids=_ids(list(hir.HIR.operations)))
def test_every_hir_op_has_a_record_an_interpreter_and_a_pattern(op):
    record = registry.HIR[op]
    assert record.reference is not None and record.shape_rule is op.RULE is not None
    assert op in HIR_IMPLEMENTATIONS and _has_impl(HirFunctions, op)
    assert op in HIR_TO_MIR


def _module() -> ModuleOp:
    return every_method_graph().to_module()


def test_each_hir_pattern_rewrites_its_op():
    """Applied alone to the every-method graph, an op's pattern removes exactly that op."""
    for op_type, pattern in HIR_TO_MIR.items():
        module = _module()
        assert any(isinstance(o, op_type) for o in module.walk()), op_type.name
        PatternRewriteWalker(pattern(), apply_recursively=False).rewrite_module(module)
        assert not any(isinstance(o, op_type) for o in module.walk()), op_type.name


# ----------------------------------------------------------------------------- mir


@pytest.mark.parametrize("op", MIR_OPS, ids=_ids(MIR_OPS))
def test_every_mir_op_has_an_interpreter_a_lowering_and_a_kernel_builder(op):
    record = registry.MIR[op]
    assert op in MIR_IMPLEMENTATIONS and _has_impl(MirFunctions, op)
    lowerings = {
        Lowering.ELEMENTWISE: op in ELEMENTWISE_FNS,
        Lowering.KERNEL: op in KERNELS,
        Lowering.PATTERN: op in OWN_PATTERNS,
    }
    assert [kind for kind, has in lowerings.items() if has] == [record.lowering]
    if record.kernel is not None:
        assert record.kernel in kernel_builders(), f"{record.kernel.name} has no kernel builder"
    else:
        # the ops that are always a view, and the scan (a loop around its body's kernels)
        assert op in (mir.ReshapeOp, mir.ExtractRowsOp, mir.ScanOp)


def _accepts_i32(op: type[Operation]) -> bool:
    """The mir verifier of elementwise `op` accepts i32 operands."""
    ty = TensorType(i32, [4])
    block = Block(arg_types=[ty, ty])
    operands = block.args[: 2 if op in BINARY else 1]
    try:
        op(*operands).verify()
    except VerifyException:
        return False
    return True


BINARY = {r.op for r in registry.MIR_RECORDS if r.shape_rule is si.broadcast}


@pytest.mark.parametrize("fn", list(ElementwiseFn))
def test_every_elementwise_fn_has_a_vector_kernel_and_a_reference(fn):
    """The `lir.elementwise` kernel of every fn builds from its scalar body, on f32 and,
    where the mir op accepts i32, on i32 too."""
    record = registry.ELEMENTWISE_BY_FN[fn]
    arity = 2 if record.op in BINARY else 1
    for dtype in ("f32", "i32") if _accepts_i32(record.op) else ("f32",):
        *ins, out = Block(arg_types=[memref_type((5,), dtype)] * (arity + 1)).args
        kernel = elementwise_kernels.build_elementwise(lir.ElementwiseOp(fn.value, ins, out),
                                                       f"{fn}_{dtype}", 8)
        kernel.verify()
    assert record.reference is K.ELEMENTWISE[fn.value]


@pytest.mark.parametrize("op", list(registry.ELEMENTWISE_FNS), ids=_ids(list(registry.ELEMENTWISE_FNS)))
def test_every_elementwise_op_fuses(op):
    """mir-fuse has the scalar body of every f32 elementwise op."""
    _, result = elementwise_fns.scalar_block(registry.ELEMENTWISE_FNS[op],
                                             [f32] * (2 if op in BINARY else 1))
    assert result.type == f32


# ----------------------------------------------------------------------------- lir


@pytest.mark.parametrize("op", lir.KERNEL_OPS, ids=_ids(list(lir.KERNEL_OPS)))
def test_every_twin_kernel_belongs_to_the_record_of_its_mir_op(op):
    """A kernel generated from a mir op (`MIR_OP`) is the kernel of that op's record."""
    if hasattr(op, "MIR_OP"):
        assert registry.MIR[op.MIR_OP].kernel is op
        assert registry.MIR_OF_KERNEL[op].op is op.MIR_OP


@pytest.mark.parametrize("op", lir.KERNEL_OPS, ids=_ids(list(lir.KERNEL_OPS)))
def test_every_lir_kernel_has_a_builder_and_an_interpreter(op):
    assert op in registry.LIR_KERNEL_OPS
    assert op in kernel_builders(), f"{op.name} has no kernel builder"
    assert op in LIR_IMPLEMENTATIONS and _has_impl(LirFunctions, op)


@pytest.mark.parametrize("op", LIR_OPS, ids=_ids(LIR_OPS))
def test_every_lir_op_has_an_interpreter(op):
    assert op in LIR_IMPLEMENTATIONS and _has_impl(LirFunctions, op)


# ----------------------------------------------------------------------------- shape rules


def _stages() -> list[ModuleOp]:
    from xdsl.context import Context

    module = _module()
    lowered = module.clone()
    ConvertHirToMirPass().apply(Context(), lowered)
    fused = lowered.clone()
    mir_fuse.MirFusePass().apply(Context(), fused)
    return [module, lowered, fused]


def test_shape_rules_give_the_result_shapes():
    """Applied to the ops of the every-method graph (hir, mir and fused mir), the shape rule
    each op declares (`RULE`, which its record names) gives the op's result shape."""
    checked: set[str] = set()
    for module in _stages():
        for op in module.walk():
            record = registry.HIR.get(type(op)) or registry.MIR.get(type(op))
            if record is None or record.shape_rule is None:
                continue
            assert record.shape_rule is type(op).RULE, op.name
            assert tuple(op.infer_shape()) == shape_of(op.results[0]), op.name
            checked.add(op.name)
    with_rules = {r.op.name for r in registry.MIR_RECORDS + registry.HIR_RECORDS  # type: ignore
                  if r.shape_rule is not None}
    with_rules -= {"mir.insert_rows", "mir.extract_rows"}  # a stateful graph's: test_state.py
    with_rules -= {"mir.cache_scatter"}  # a stateful graph's: test_slot_cache.py
    assert with_rules <= checked, f"ops not in the every-method graph: {with_rules - checked}"


RULE_OPS = [op for op in [*hir.HIR.operations, *MIR_OPS, *LIR_OPS] if getattr(op, "RULE", None)]
NOT_IN_RULES = {"position", "consts", "out", "state_out", "indices_out", "states_out",
                "d_delta_out", "d_a_out", "d_b_out", "d_c_out", "d_k_out", "d_v_out", "d_g_out",
                "d_beta_out", "d_initial_state_out"}
"""Operands no shape rule reads: a cache position (an index), a scan's consts, an lir out
(a sequence kernel's state_out, top_k's indices_out, a backward kernel's gradients too)."""


@pytest.mark.parametrize("op", RULE_OPS, ids=_ids(RULE_OPS))
def test_rule_parameters_are_the_operands_and_properties(op):
    """Each parameter of an op's shape rule is named as one of its operands or properties
    (or has a default); each operand is a parameter, or goes to the rule's `**operands`."""
    op_def = op.get_irdl_definition()
    operands = {name for name, _ in op_def.operands}
    params = inspect.signature(op.RULE).parameters.values()
    rest = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    named = {p.name for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD}
    for p in params:
        if p.kind is not inspect.Parameter.VAR_KEYWORD and p.default is inspect.Parameter.empty:
            assert p.name in operands or p.name in op_def.properties, (op.name, p.name)
    assert rest or operands - NOT_IN_RULES <= named, (op.name, operands - named)


def test_the_constructor_takes_the_definition():
    """Positional or keyword, Python values or attributes; the result type inferred."""
    x, g = _values(TensorType(f32, [4, 8]), TensorType(f32, [8]))
    assert mir.RmsNormOp(x, g, None, 1e-6).eps == mir.RmsNormOp(x, gamma=g, eps=1e-6).eps
    assert mir.ReduceOp(x, "sum", 1).result.type == TensorType(f32, [4])
    attention = hir.AttentionOp(x, x, x, num_heads=2, head_dim=4)
    assert attention.num_kv_heads.value.data == 2 and attention.mask_kind.data == "none"
    assert registry_constructor_parameters(lir.RmsNormOp) == ("x", "gamma", "out", "beta", "eps")
    with pytest.raises(ShapeError, match="gamma: expected shape"):
        mir.RmsNormOp(x, x)
    with pytest.raises(OpBuildError, match="'mir.matmul': argument 'bias'"):
        mir.MatmulOp(x, x, bias=g)
    with pytest.raises(OpBuildError, match="missing the property 'axes'"):
        mir.ReduceOp(x, "sum")
    with pytest.raises(OpBuildError, match="'mir.reshape': has no shape rule; give its result_type"):
        mir.ReshapeOp(x)


def test_the_constructor_builds_several_results():
    """A sequence op's rule gives the final state's type with `return_state` only; its lir
    twin asks for the state when given a `state_out`."""
    x, a, b = _values(TensorType(f32, [1, 4, 8]), TensorType(f32, [8, 3]), TensorType(f32, [1, 4, 3]))
    scan = mir.SelectiveScanOp(x, x, a, b, b, return_state=True)
    assert [r.type for r in scan.results] == [TensorType(f32, [1, 4, 8]), TensorType(f32, [1, 8, 3])]
    assert len(mir.SelectiveScanOp(x, x, a, b, b).results) == 1
    mx, ma, mb, ms = _values(MemRefType(f32, [1, 4, 8]), MemRefType(f32, [8, 3]),
                             MemRefType(f32, [1, 4, 3]), MemRefType(f32, [1, 8, 3]))
    kernel = lir.SelectiveScanOp(mx, mx, ma, mb, mb, mx, state_out=ms)
    kernel.verify()
    assert kernel.return_state is not None and kernel.outs == (mx, ms)
    assert lir.SelectiveScanOp(mx, mx, ma, mb, mb, mx).return_state is None


def _values(*types):
    return test.TestOp(result_types=list(types)).results


# ----------------------------------------------------------------------------- Graph


def test_every_graph_method_is_in_the_every_method_graph(monkeypatch):
    called: set[str] = set()
    public = [
        name for name, _ in inspect.getmembers(rlx.Graph)
        if not name.startswith("_") and not isinstance(inspect.getattr_static(rlx.Graph, name), property)
    ]
    for name in public:
        method = getattr(rlx.Graph, name)

        def record(self, *args, __name=name, __method=method, **kwargs):
            called.add(__name)
            return __method(self, *args, **kwargs)

        monkeypatch.setattr(rlx.Graph, name, record)
    every_method_graph().to_mlir()
    # The state methods make a stateful model; tests/test_state.py builds them at every stage.
    stateful = {"state", "cache_append", "assign"}
    no_op = {"scope",  # names the ops built inside it (their locations); builds none itself
             "op_count"}  # how many ops the graph holds (GraphModule's builder modules)
    # what graph transformations (rlx.grad) read and build: no op of their own
    no_op |= {"arguments", "body_ops", "add_op", "custom_function", "duplicate", "shape_of"}
    assert sorted(set(public) - called - stateful - no_op) == []


# ----------------------------------------------------------------------------- the checks fail


def test_a_missing_op_is_named():
    with pytest.raises(RegistryError, match=r"missing mir\.sub; unexpected none"):
        registry.check_complete("ops", [mir.AddOp, mir.SubOp], [mir.AddOp])
    with pytest.raises(RegistryError, match=r"missing none; unexpected mir\.add"):
        registry.check_complete("ops", [], [mir.AddOp])


def test_a_record_without_an_implementation_is_an_error():
    record = MirOpRecord(mir.ReshapeOp, None, Lowering.PATTERN, None)
    with pytest.raises(RegistryError, match="'mir.reshape'.*got neither"):
        implementations_of([record], {}, "mir")
    with_reference = MirOpRecord(mir.ExpOp, K.exp, Lowering.ELEMENTWISE,
                                 lir.ElementwiseOp, ElementwiseFn.EXP)
    with pytest.raises(RegistryError, match="'mir.exp'.*got both"):
        implementations_of([with_reference], {mir.ExpOp: lambda op, args, props: None}, "mir")


def test_a_malformed_record_is_an_error():
    with pytest.raises(RegistryError, match="'mir.exp': an elementwise lowering needs `fn`"):
        MirOpRecord(mir.ExpOp, K.exp, Lowering.ELEMENTWISE, lir.ElementwiseOp)
    with pytest.raises(RegistryError, match="'mir.matmul': Lowering.KERNEL needs a kernel"):
        MirOpRecord(mir.MatmulOp, K.matmul, Lowering.KERNEL, None)


def test_records_are_unique():
    assert len(registry.MIR_RECORDS) == len(registry.MIR) == len(MIR_OPS)
    assert len(registry.HIR_RECORDS) == len(registry.HIR) == len(list(hir.HIR.operations))
    assert np.unique([r.fn for r in registry.MIR_RECORDS if r.fn]).size == len(ElementwiseFn)


# ----------------------------------------------------------------------------- autodiff

def test_every_differentiable_mir_op_has_a_vjp_rule():
    from rlx_mlir.autodiff.rules import VJP_RULES

    differentiable = {r.op.name for r in registry.MIR_RECORDS if r.differentiable}
    missing = sorted(differentiable - set(VJP_RULES))
    assert not missing, f"differentiable mir ops without a VJP rule: {missing}"
    stray = sorted(set(VJP_RULES) - {op.name for op in registry.MIR_OPS})
    assert not stray, f"VJP rules of no mir op: {stray}"
    no_grad = sorted({r.op.name for r in registry.MIR_RECORDS if not r.differentiable}
                     & set(VJP_RULES))
    assert not no_grad, f"non-differentiable ops with a VJP rule: {no_grad}"


def test_no_two_rule_families_name_the_same_op():
    from rlx_mlir.autodiff.rules import FAMILIES

    seen: dict[str, str] = {}
    for family in FAMILIES:
        for name in family.RULES:
            assert name not in seen, f"{name} has a rule in {seen[name]} and {family.__name__}"
            seen[name] = family.__name__
