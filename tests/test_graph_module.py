"""`rlx.GraphModule` (staged modules) and `rlx.FusionPolicy` (issue 22 items 1 and 2).

A module knows its stage (HIR < MIR < LIR), lowers one stage at a time with exactly the
passes `rlx.jit` runs for that step (so the code compiled from a module lowered step by
step is the code of `rlx.jit(graph)`), prints `inspect()` per stage, and carries the
fusion policy mir-fuse runs with. Results are equal under every policy; the mir op counts
differ as each flag says.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp

import rlx_mlir as rlx
from rlx_mlir import FusionPolicy, GraphModule, GraphStage
from rlx_mlir.core.errors import GraphError, OptionError, RlxError
from rlx_mlir.ir import module_text
from rlx_mlir.pipeline import PipelineOptions, make_pass

RNG = np.random.default_rng(22)


def _normal(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def mlp(rows: int = 5, width: int = 24, out: int = 40, name: str = "mlp") -> rlx.Graph:
    """matmul + bias + gelu (a fused matmul), an elementwise chain, a per-row rsqrt that
    broadcasts back over the row, and a softmax."""
    g = rlx.Graph(name)
    x = g.input("x", (rows, width))
    w, b = g.param("w", (width, out)), g.param("b", (out,))
    with g.scope("block"):
        h = g.gelu(x @ w + b)
        e = g.exp(g.tanh(h) * 0.5 - h)
        r = e * g.rsqrt(g.reduce_mean(e * e, -1, keepdim=True) + 1e-5)
    g.output(g.softmax(r))
    return g


def mlp_arrays(rows: int = 5, width: int = 24, out: int = 40) -> dict[str, np.ndarray]:
    return {"x": _normal(rows, width), "w": _normal(width, out), "b": _normal(out)}


def _counts(module: ModuleOp) -> Counter[str]:
    """The ops of the entry function's body (not inside fused bodies) by name."""
    fn = next(op for op in module.ops if op.name == "func.func")
    return Counter(op.name for op in fn.body.block.ops if op.name != "func.return")


def _per_row_trees(module: ModuleOp) -> list[str]:
    """The fused elementwise kernels of a per-row (`[rows, 1]`) shape."""
    fn = next(op for op in module.ops if op.name == "func.func")
    return [op.name for op in fn.body.block.ops if op.name == "mir.fused_elementwise"
            and op.results[0].type.get_shape()[-1] == 1]  # pyright: ignore[reportAttributeAccessIssue]


# ----------------------------------------------------------------------------- making modules


def test_define_returns_the_build_result_as_output():
    m = GraphModule.define("mlp", lambda g: g.relu(g.input("x", (2, 3))))
    assert m.stage is GraphStage.HIR and m.name == "mlp"
    assert isinstance(m.as_hir(), ModuleOp) and m.as_mir() is None and m.as_lir() is None
    x = _normal(2, 3)
    np.testing.assert_array_equal(rlx.reference(m)(x=x), np.maximum(x, 0))


def test_define_takes_a_tuple_or_an_output_already_made():
    def two(g):
        x = g.input("x", (2, 3))
        return g.exp(x), g.neg(x)

    def named(g):
        x = g.input("x", (2, 3))
        g.output(y=g.abs(x))

    x = _normal(2, 3)
    a, b = rlx.reference(GraphModule.define("two", two))(x=x)
    np.testing.assert_allclose(a, np.exp(x), rtol=1e-6)
    np.testing.assert_array_equal(b, -x)
    assert rlx.reference(GraphModule.define("named", named)).output_names == ("y",)
    with pytest.raises(GraphError, match="returned nothing"):
        GraphModule.define("none", lambda g: None)


def test_stages_are_ordered():
    assert GraphStage.HIR < GraphStage.MIR < GraphStage.LIR
    assert str(GraphStage.MIR) == "MIR" and GraphStage.LIR.pipeline_name == "lir"


def test_lower_goes_one_stage_at_a_time_and_leaves_the_module_as_it_was():
    m = GraphModule.from_graph(mlp())
    before = m.to_mlir()
    mid = m.lower()
    low = mid.lower()
    assert (mid.stage, low.stage) == (GraphStage.MIR, GraphStage.LIR)
    assert m.to_mlir() == before and m.stage is GraphStage.HIR
    assert not any(op.name.startswith("hir.") for op in mid.as_mir().walk())
    assert any(op.name.startswith("lir.") for op in low.as_lir().walk())
    assert mid.as_hir() is None and low.as_mir() is None
    with pytest.raises(RlxError, match="LIR, the last stage"):
        low.lower()


def test_into_lowers_a_copy_once():
    m = GraphModule.from_graph(mlp())
    hir_text = m.to_mlir()
    mir_module = m.into_mir()
    assert m.into_mir() is mir_module  # the same objects each time (phases name them)
    assert module_text(mir_module) == module_text(m.lower().as_mir())
    assert module_text(m.into_lir()) == module_text(m.lower().lower().as_lir())
    assert m.to_mlir() == hir_text
    low = m.lower().lower()
    assert low.into_lir() is low.as_lir()
    with pytest.raises(RlxError, match="past MIR"):
        low.into_mir()


def test_from_mlir_detects_the_stage_and_round_trips():
    m = GraphModule.from_graph(mlp())
    for staged in (m, m.lower(), m.lower().lower()):
        again = GraphModule.from_mlir(staged.to_mlir())
        assert again.stage is staged.stage and again.name == "mlp"
        assert again.to_mlir() == staged.to_mlir()
    # tensor ops only, no hir op and no `rlx.stage` mark: HIR (a Graph's `x @ w`)
    g = rlx.Graph("plain")
    g.output(g.exp(g.input("x", (2, 2))))
    assert GraphModule.from_mlir(g.to_mlir()).stage is GraphStage.HIR
    llvm_text = rlx.jit(g).mlir("llvm")
    with pytest.raises(RlxError, match="llvm-dialect module"):
        GraphModule.from_mlir(llvm_text)
    with pytest.raises(RlxError, match="does not parse"):
        GraphModule.from_mlir("builtin.module { nope }")


def test_hir_builder_module():
    m = GraphModule.hir("built")
    g = m.graph
    x = g.input("x", (3, 8))
    w = g.param("w", (8, 4))
    g.output(g.linear(x, w, activation="relu"))
    assert m.stage is GraphStage.HIR and m.name == "built"
    assert m.as_hir() is m.as_hir()  # made once while the graph does not grow
    arrays = {"x": _normal(3, 8), "w": _normal(8, 4)}
    np.testing.assert_allclose(rlx.jit(m)(**arrays), np.maximum(arrays["x"] @ arrays["w"], 0),
                               rtol=1e-5, atol=1e-5)
    with pytest.raises(RlxError, match="only those have a builder"):
        GraphModule.from_graph(mlp()).graph  # noqa: B018


def test_a_builders_module_follows_the_graph():
    m = GraphModule.hir("growing")
    g = m.graph
    x = g.input("x", (2, 4))
    with pytest.raises(GraphError, match="has no output"):
        m.as_hir()
    y = g.exp(x)
    g.output(y)
    first = m.into_mir()
    assert m.into_mir() is first
    g.neg(y)  # dead, but the module is the graph's: into_mir lowers it again
    assert m.into_mir() is not first


def test_jit_refuses_other_things():
    with pytest.raises(RlxError, match="jit: expected an rlx.Graph or rlx.GraphModule, got str"):
        rlx.jit("builtin.module {}")  # pyright: ignore[reportArgumentType]
    low = GraphModule.from_graph(mlp()).lower().lower()
    with pytest.raises(OptionError, match="alignment, max_dims: the module is at LIR"):
        rlx.jit(low, alignment=128, max_dims={"S": 8})
    with pytest.raises(OptionError, match="strategy: the module is at LIR"):
        rlx.jit(low, strategy="naive")


def test_mir_builder_takes_primitives_and_runs_no_fusion():
    m = GraphModule.mir("prims")
    g = m.graph
    x, w, b = g.input("x", (3, 8)), g.param("w", (8, 5)), g.param("b", (5,))
    with pytest.raises(GraphError, match="mir primitives only.*hir.linear"):
        g.linear(x, w, b)
    g.output(g.gelu(x @ w + b))
    assert m.stage is GraphStage.MIR
    assert GraphModule.from_mlir(m.to_mlir()).stage is GraphStage.MIR
    low = m.lower()
    kernels = _counts(low.as_lir())
    assert kernels["lir.matmul"] == 1 and "lir.fused_matmul" not in kernels  # built as it is
    arrays = {"x": _normal(3, 8), "w": _normal(8, 5), "b": _normal(5)}
    expected = rlx.reference(m)(**arrays)
    for staged in (m, low):
        np.testing.assert_allclose(rlx.jit(staged, threads=1)(**arrays), expected,
                                   rtol=1e-5, atol=1e-6)


def test_inspect_per_stage():
    m = GraphModule.from_graph(mlp())
    hir_report = m.inspect()
    assert hir_report.startswith("GraphModule @mlp: HIR, fusion (matmul_epilogue, elementwise, "
                                 "shared_input, q8_edges)")
    assert "mir.matmul" in hir_report and "param   w" in hir_report and "3840 B" in hir_report
    assert "values: " in hir_report
    mir_report = m.lower().inspect()
    assert "mir.fused_matmul" in mir_report and "mir.matmul " not in mir_report
    lir_report = m.lower().lower().inspect()
    model = rlx.jit(m, threads=1)
    assert (f"arena: {model.arena_bytes} B planned vs {model.naive_bytes} B naive"
            in lir_report), lir_report
    assert "arena slots" in lir_report and "output  out0" in lir_report
    assert "slot [0, " in lir_report and "block.gelu" in lir_report  # each slot's origin
    symbolic = rlx.Graph("rows")
    symbolic.output(symbolic.exp(symbolic.input("x", ("S", 4))))
    assert "? B (symbolic)" in GraphModule.from_graph(symbolic).inspect()


# ----------------------------------------------------------------------------- same code as jit


def _symbolic():
    g = rlx.Graph("rows")
    x = g.input("x", ("S", 24))
    gamma, w = g.param("gamma", (24,)), g.param("w", (24, 40))
    g.output(g.softmax(g.matmul(g.rms_norm(g.silu(x), gamma), w), axis=-1))
    return g, {"x": _normal(7, 24), "gamma": _normal(24), "w": _normal(24, 40)}, {}


def _packed():
    g = rlx.Graph("ffn")
    x = g.input("x", (2, 5, 48))
    w, v = g.param("w", (48, 70)), g.param("v", (70, 150))
    g.output(g.matmul(g.gelu(g.matmul(x, w)), v))
    params = {"w": _normal(48, 70), "v": _normal(70, 150)}
    return g, {"x": _normal(2, 5, 48)}, {"params": params}


CASES = {
    "mlp": lambda: (mlp(), mlp_arrays(), {}),
    "no-fusion": lambda: (mlp(), mlp_arrays(), {"fusion": FusionPolicy.none()}),
    "symbolic": _symbolic,
    "packed": _packed,
}


@pytest.mark.parametrize("case", CASES)
def test_lowered_step_by_step_compiles_to_the_code_of_jit(case):
    graph, arrays, options = CASES[case]()
    fusion = options.pop("fusion", None)
    direct = rlx.jit(graph, threads=1, fusion=fusion, **options)
    m = GraphModule.from_graph(graph)
    if fusion is not None:
        m = m.with_fusion_policy(fusion)
    expected = direct(**arrays)
    for staged in (m, m.lower(), m.lower().lower()):
        model = rlx.jit(staged, threads=1, **options)
        # the llvm-dialect module the backend compiles (`model.llvm_ir` is not compared:
        # a fresh build's text is taken after codegen's IR passes, a disk-cache load's
        # before them, so it depends on the cache, not on the module)
        assert model.mlir("llvm") == direct.mlir("llvm"), staged
        np.testing.assert_array_equal(model(**arrays), expected)
        reference = rlx.reference(staged, options.get("params"))(**arrays)
        np.testing.assert_allclose(reference, expected, rtol=1e-4, atol=1e-5)


def test_compile_of_module_text_at_mir_runs_only_the_later_passes():
    m = GraphModule.from_graph(mlp()).with_fusion_policy(FusionPolicy.none())
    model = rlx.compile_mlir(m.lower().to_mlir(), threads=1)  # the mark keeps it unfused
    assert model.stages == ("mir", "lir", "llvm")
    assert model.mlir("llvm") == rlx.jit(m, threads=1).mlir("llvm")


# ----------------------------------------------------------------------------- fusion policy


POLICIES = {
    "default": FusionPolicy(),
    "no-matmul-epilogue": FusionPolicy(matmul_epilogue=False),
    "no-elementwise": FusionPolicy(elementwise=False),
    "no-shared-input": FusionPolicy(shared_input=False),
    "no-q8-edges": FusionPolicy(q8_edges=False),
    "broadcast": FusionPolicy(broadcast=True),
    "none": FusionPolicy.none(),
}


def test_fusion_policy_fields():
    assert FusionPolicy() == FusionPolicy(True, True, False, True, True)
    assert FusionPolicy.none() == FusionPolicy(False, False, False, False, False)
    with pytest.raises(OptionError, match="FusionPolicy.elementwise: expected True or False, got 1"):
        FusionPolicy(elementwise=1)  # pyright: ignore[reportArgumentType]
    with pytest.raises(AttributeError):
        FusionPolicy().elementwise = False  # pyright: ignore[reportAttributeAccessIssue]


@pytest.mark.parametrize("policy", POLICIES)
def test_mir_fuse_takes_the_policy(policy):
    fuse = make_pass("mir-fuse", PipelineOptions(fusion=POLICIES[policy]))
    p = POLICIES[policy]
    assert (fuse.matmul_epilogue, fuse.elementwise, fuse.fuse_broadcast, fuse.shared_input) == (
        p.matmul_epilogue, p.elementwise, p.broadcast, p.shared_input)
    lower = make_pass("rlx-lower", PipelineOptions(fusion=p))
    assert lower.options.fusion == p
    assert PipelineOptions.from_pipeline(PipelineOptions(fusion=p).pipeline()).fusion == p


@pytest.mark.parametrize("shape", [(5, 24, 40), (1, 7, 17), (3, 16, 1)])
def test_results_are_equal_under_every_policy(shape):
    graph = mlp(*shape)
    arrays = mlp_arrays(*shape)
    expected = rlx.jit(graph, threads=1)(**arrays)
    np.testing.assert_allclose(expected, rlx.reference(graph)(**arrays), rtol=1e-4, atol=1e-6)
    for name, policy in POLICIES.items():
        got = rlx.jit(graph, threads=1, fusion=policy)(**arrays)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7, err_msg=name)


def test_op_counts_differ_as_each_flag_says():
    m = GraphModule.from_graph(mlp())
    modules = {name: m.with_fusion_policy(p).into_mir() for name, p in POLICIES.items()}
    counts = {name: _counts(module) for name, module in modules.items()}
    default = counts["default"]
    assert default["mir.fused_matmul"] == 1 and default["mir.fused_elementwise"] >= 2
    assert "mir.gelu" not in default and "mir.tanh" not in default
    # no matmul epilogue: the matmul stays, and its bias add and gelu join an elementwise tree
    assert "mir.fused_matmul" not in counts["no-matmul-epilogue"]
    assert counts["no-matmul-epilogue"]["mir.matmul"] == 1
    # no elementwise trees: the epilogue still fuses
    assert "mir.fused_elementwise" not in counts["no-elementwise"]
    assert counts["no-elementwise"]["mir.fused_matmul"] == 1
    assert counts["no-elementwise"]["mir.tanh"] == 1 and counts["no-elementwise"]["mir.exp"] == 1
    # broadcast: the per-row rsqrt joins the per-element tree: fewer ops, no rsqrt kernel
    assert sum(counts["broadcast"].values()) < sum(default.values())
    assert counts["broadcast"]["mir.mul"] == default["mir.mul"] - 1
    assert len(_per_row_trees(modules["default"])) == 1 and not _per_row_trees(modules["broadcast"])
    # nothing fused at all
    assert not {"mir.fused_matmul", "mir.fused_elementwise"} & set(counts["none"])
    assert counts["none"]["mir.matmul"] == 1 and counts["none"]["mir.rsqrt"] == 1
    # shared_input has nothing to merge here (one matmul): same as the default
    assert counts["no-shared-input"] == default


def test_jit_takes_the_modules_policy_and_refuses_another_past_hir():
    m = GraphModule.from_graph(mlp()).with_fusion_policy(FusionPolicy.none())
    assert m.fusion_policy == FusionPolicy.none()
    model = rlx.jit(m, threads=1)
    assert model.options.fusion == FusionPolicy.none()
    assert "fused" not in model.mlir("mir")
    assert rlx.jit(m, threads=1, fusion=FusionPolicy()).options.fusion == FusionPolicy()
    lowered = m.lower()
    assert lowered.fusion_policy == FusionPolicy.none()
    rlx.jit(lowered, threads=1, fusion=FusionPolicy.none())  # its own policy: fine
    with pytest.raises(RlxError, match="at MIR, fused with"):
        rlx.jit(lowered, fusion=FusionPolicy())
    with pytest.raises(RlxError, match="expected a module at the HIR stage, got MIR"):
        lowered.with_fusion_policy(FusionPolicy())


def test_fusion_option_must_be_a_policy():
    g = mlp()
    for bad in (False, "none", {"elementwise": False}):
        with pytest.raises(OptionError, match="fusion: expected an rlx.FusionPolicy"):
            rlx.jit(g, fusion=bad)  # pyright: ignore[reportArgumentType]
        with pytest.raises(OptionError, match="fusion: expected an rlx.FusionPolicy"):
            rlx.compile_mlir(g.to_mlir(), fusion=bad)  # pyright: ignore[reportArgumentType]
    with pytest.raises(OptionError, match="fusion: expected"):
        GraphModule.from_graph(g).with_fusion_policy("none")  # pyright: ignore[reportArgumentType]


def test_the_policy_is_part_of_the_build():
    """Two policies are two builds (the cache key has the options), and compile_mlir
    takes the policy too."""
    g = mlp()
    fused = rlx.jit(g, threads=1)
    unfused = rlx.jit(g, threads=1, fusion=FusionPolicy.none())
    assert "mir.fused_matmul" in fused.mlir("mir") and "mir.fused_matmul" not in unfused.mlir("mir")
    assert fused.options != unfused.options
    assert fused._executable is not unfused._executable  # another cache key, another build
    assert fused._executable.engine.get_function_address("mlp__fused_matmul_0")
    assert not unfused._executable.engine.get_function_address("mlp__fused_matmul_0")
    text = rlx.compile_mlir(g.to_mlir(), threads=1, fusion=FusionPolicy.none())
    assert text.mlir("llvm") == unfused.mlir("llvm") and text.options == unfused.options


def test_the_docs_example_runs(capsys):
    """The example of docs/modules.md "GraphModule and FusionPolicy" runs as printed."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "modules.md").read_text()
    section = text.split("## GraphModule and FusionPolicy", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    exec(compile(code.group(1), "docs/modules.md", "exec"), {})  # noqa: S102
    out = capsys.readouterr().out
    assert out.startswith("HIR mlp\nGraphModule @mlp: HIR") and "GraphModule @mlp: LIR" in out
