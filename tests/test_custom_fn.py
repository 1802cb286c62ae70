"""`g.custom_fn(fn, inputs, name=...)` (issue 22 item 6): a sub-graph as one named function.

The function is a private `func.func @name` called by `func.call @name` through hir and
mir; `mir-inline-functions` inlines it first in the lir stage, its ops located under the
function's name. Compiled results equal the reference executor's (which runs the calls).
"""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import func

import rlx_mlir as rlx
from rlx_mlir.core.errors import GraphError
from rlx_mlir.core.locations import origin
from rlx_mlir.dialects import lir

RNG = np.random.default_rng(6)


def _normal(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def gelu_mlp(g2: rlx.Graph, x: rlx.Value, w1: rlx.Value, b1: rlx.Value, w2: rlx.Value) -> rlx.Value:
    return g2.gelu(x @ w1 + b1) @ w2


def mlp_graph(rows: int, width: int, hidden: int, calls: int = 1) -> rlx.Graph:
    """x -> (gelu-MLP as custom_fn "mlp") `calls` times -> softmax."""
    g = rlx.Graph("main")
    x = g.input("x", (rows, width))
    w1, b1 = g.param("w1", (width, hidden)), g.param("b1", (hidden,))
    w2 = g.param("w2", (hidden, width))
    h = x
    for _ in range(calls):
        h = g.custom_fn(gelu_mlp, [h, w1, b1, w2], name="mlp")
    g.output(g.softmax(h))
    return g


def mlp_arrays(rows: int, width: int, hidden: int) -> dict[str, np.ndarray]:
    return {"x": _normal(rows, width), "w1": _normal(width, hidden) * 0.3,
            "b1": _normal(hidden), "w2": _normal(hidden, width) * 0.3}


def _check(g: rlx.Graph, arrays: dict[str, np.ndarray]) -> rlx.CompiledGraph:
    """Compile `g`, compare with the reference on `arrays`; the compiled model."""
    model = rlx.jit(g)
    got, want = model(**arrays), rlx.reference(g)(**arrays)
    for a, b in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    return model


def _call_names(module) -> list[str]:
    return [op.callee.root_reference.data for op in module.walk() if isinstance(op, func.CallOp)]


@pytest.mark.parametrize("rows,width,hidden", [(1, 8, 16), (5, 13, 7), (4, 32, 64)])
def test_one_result_fn_compiles_as_the_reference(rows, width, hidden):
    g = mlp_graph(rows, width, hidden)
    text = g.to_mlir()
    assert "func.func private @mlp(" in text
    assert "func.call @mlp(" in text
    model = _check(g, mlp_arrays(rows, width, hidden))
    assert "func.call @mlp" in model.mlir("mir")
    assert "func.func private @mlp" in model.mlir("mir")
    assert "func.call" not in model.mlir("lir") and "@mlp" not in model.mlir("lir")


def test_fn_used_twice_is_one_function_called_twice():
    g = mlp_graph(3, 12, 20, calls=2)
    module = g.to_module()
    assert _call_names(module) == ["mlp", "mlp"]
    assert [op.sym_name.data for op in module.ops] == ["main", "mlp"]
    _check(g, mlp_arrays(3, 12, 20))


def test_multi_result_fn():
    g = rlx.Graph("main")
    x = g.input("x", (6, 10))
    w = g.param("w", (10, 10))

    def split(g2, x, w):
        h = x @ w
        return g2.tanh(h), h * 0.5, g2.reduce_sum(h, -1)

    a, b, s = g.custom_fn(split, [x, w], name="split")
    assert (a.shape, b.shape, s.shape) == ((6, 10), (6, 10), (6,))
    single = g.custom_fn(lambda g2, v: (g2.exp(v),), [a], name="one_tuple")
    assert isinstance(single, tuple) and len(single) == 1
    g.output(a + b, s, single[0])
    assert "%0, %1, %2 = func.call @split(" in g.to_mlir()
    _check(g, {"x": _normal(6, 10), "w": _normal(10, 10)})


def test_nested_custom_fn():
    g = rlx.Graph("main")
    x = g.input("x", (4, 9))

    def inner(g2, v):
        return g2.silu(v) * 2.0

    def outer(g2, v):
        return g2.custom_fn(inner, [v], name="inner") + g2.custom_fn(inner, [v * 3.0], name="inner")

    g.output(g.custom_fn(outer, [x], name="outer"))
    module = g.to_module()
    assert sorted(op.sym_name.data for op in module.ops) == ["inner", "main", "outer"]
    assert _call_names(module) == ["outer", "inner", "inner"]
    model = _check(g, {"x": _normal(4, 9)})
    names = [origin(op) for op in model.stage_module("lir").walk() if isinstance(op, lir.KernelOp)]
    assert any(n and n.startswith("outer.inner#1.") for n in names), names


def test_graph_module_keeps_the_call_until_lir():
    m = rlx.GraphModule.from_graph(mlp_graph(2, 8, 8))
    mir_module = m.into_mir()
    assert _call_names(mir_module) == ["mlp"]
    assert _call_names(m.into_lir()) == []
    assert [op.sym_name.data for op in m.into_lir().ops] == ["main"]


def test_provenance_and_profile_name_the_function():
    g = rlx.Graph("main")
    x = g.input("x", (8, 16))
    w = g.param("w", (16, 16))
    with g.scope("layer0"):
        h = g.custom_fn(lambda g2, v, w: g2.relu(v @ w), [x, w], name="ffn")
    g.output(g.tanh(h))
    assert 'loc("layer0.ffn")' in g.to_mlir()
    model = _check(g, {"x": _normal(8, 16), "w": _normal(16, 16)})
    origins = {origin(op) for op in model.stage_module("lir").walk() if isinstance(op, lir.KernelOp)}
    assert any(o and o.startswith("layer0.ffn.matmul#0") for o in origins), origins
    prof = model.profile(x=_normal(8, 16), w=_normal(16, 16), repeat=1)
    row = next(r for r in prof.rows if "matmul" in r.op)
    assert row.origin.startswith("layer0.ffn.")
    assert ("layer0", 1) in [(scope, calls) for scope, calls, _, _ in prof.by_scope()]


def test_symbolic_dims_compile_and_run_at_every_size():
    g = rlx.Graph("main")
    x = g.input("x", ("S", 8))
    w = g.param("w", (8, 4))
    y = g.custom_fn(lambda g2, v, w: g2.softmax(g2.tanh(v @ w)), [x, w], name="proj")
    assert y.shape == ("S", 4)
    g.output(y * 2.0)
    assert "func.func private @proj(%arg0: tensor<?x8xf32>" in g.to_mlir()
    ref, model = rlx.reference(g), rlx.jit(g)
    for rows in (1, 3, 7):
        arrays = {"x": _normal(rows, 8), "w": _normal(8, 4)}
        h = np.tanh(arrays["x"] @ arrays["w"])
        want = 2 * np.exp(h) / np.exp(h).sum(-1, keepdims=True)
        np.testing.assert_allclose(ref(**arrays), want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(model(**arrays), want, rtol=1e-4, atol=1e-5)


def test_module_text_round_trips_and_compiles():
    g = mlp_graph(3, 8, 16, calls=2)
    arrays = mlp_arrays(3, 8, 16)
    module = rlx.GraphModule.from_mlir(g.to_mlir())
    assert module.stage is rlx.GraphStage.HIR
    assert _call_names(module.as_hir()) == ["mlp", "mlp"]
    np.testing.assert_allclose(rlx.jit(module)(**arrays), rlx.reference(g)(**arrays),
                               rtol=1e-4, atol=1e-5)


def test_reference_runs_the_call_at_mir():
    g = mlp_graph(3, 8, 8, calls=2)
    arrays = mlp_arrays(3, 8, 8)
    mir_module = rlx.GraphModule.from_graph(g).into_mir()
    assert _call_names(mir_module) == ["mlp", "mlp"]
    np.testing.assert_allclose(rlx.reference(mir_module)(**arrays), rlx.reference(g)(**arrays),
                               rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- errors


def test_outer_value_inside_is_an_error_naming_the_function():
    g = rlx.Graph("main")
    x = g.input("x", (2, 3))
    y = g.input("y", (2, 3))
    with pytest.raises(GraphError, match=r"custom_fn 'leaky': rhs: a Value of graph 'main' is used "
                                         r"inside the custom function 'leaky'"):
        g.custom_fn(lambda g2, v: v + y, [x], name="leaky")
    with pytest.raises(GraphError, match=r"custom_fn 'leaky2': result 0 is a Value of graph 'main'"):
        g.custom_fn(lambda g2, v: y, [x], name="leaky2")
    # the failed functions are not kept: the names are free again
    g.output(g.custom_fn(lambda g2, v: g2.exp(v), [x], name="leaky"))
    assert [op.sym_name.data for op in g.to_module().ops] == ["main", "leaky"]


@pytest.mark.parametrize("returned", [None, 3.0, (), "x"])
def test_bad_return_is_an_error(returned):
    g = rlx.Graph("main")
    x = g.input("x", (2, 3))
    with pytest.raises(GraphError, match="custom_fn 'bad': fn must return a Value"):
        g.custom_fn(lambda g2, v: returned, [x], name="bad")


def test_name_clash_and_bad_names():
    g = rlx.Graph("main")
    x = g.input("x", (2, 3))
    z = g.input("z", (3, 3))
    def exp(g2, v):
        return g2.exp(v)

    g.custom_fn(exp, [x], name="f")
    assert g.custom_fn(exp, [x], name="f").shape == (2, 3)  # the same fn: reused
    with pytest.raises(GraphError, match=r"custom_fn 'f': the name is taken by another fn "
                                         r"\(.*exp\), got .*<lambda>"):
        g.custom_fn(lambda g2, v: g2.tanh(v), [x], name="f")  # would be dropped silently
    with pytest.raises(GraphError, match=r"custom_fn 'f': the name is taken by a function of "
                                         r"inputs \(f32\[2, 3\]\), got inputs \(f32\[3, 3\]\)"):
        g.custom_fn(exp, [z], name="f")
    with pytest.raises(GraphError, match="the graph itself is named 'main'"):
        g.custom_fn(lambda g2, v: v, [x], name="main")
    with pytest.raises(GraphError, match="name: expected a Python identifier"):
        g.custom_fn(lambda g2, v: v, [x], name="a-b")
    with pytest.raises(GraphError, match="calls itself"):
        def rec(g2, v):
            return g2.custom_fn(rec, [v], name="rec")
        g.custom_fn(rec, [x], name="rec")


def test_body_has_no_params_states_or_outputs_and_vjp_must_be_callable():
    g = rlx.Graph("main")
    x = g.input("x", (2, 3))
    for build, what in [(lambda g2, v: g2.param("w", (3, 3)), "g2.param"),
                        (lambda g2, v: g2.state("s", (3, 3)), "g2.state"),
                        (lambda g2, v: g2.input("i", (3, 3)), "g2.input")]:
        with pytest.raises(GraphError, match=f"custom_fn 'body': {what} inside a custom function"):
            g.custom_fn(build, [x], name="body")
    with pytest.raises(GraphError, match="g2.output: return the results"):
        g.custom_fn(lambda g2, v: g2.output(v), [x], name="body")
    with pytest.raises(GraphError, match="vjp: expected a callable"):
        g.custom_fn(lambda g2, v: v, [x], name="body", vjp=3)
    with pytest.raises(GraphError, match=r"inputs\[0\]: expected a graph Value"):
        g.custom_fn(lambda g2, v: v, [np.ones((2, 3))], name="body")


def test_inline_pass_is_registered_first_in_the_lir_stage_and_idempotent():
    from rlx_mlir.passes import get_all_passes
    from rlx_mlir.passes.mir_inline_functions import MirInlineFunctionsPass
    from rlx_mlir.passes.pipeline_stages import STAGE_PASSES
    from rlx_mlir.pipeline import make_pass

    assert get_all_passes()["mir-inline-functions"]() is MirInlineFunctionsPass
    assert STAGE_PASSES["lir"][0] == "mir-inline-functions"
    module = rlx.GraphModule.from_graph(mlp_graph(2, 8, 8, calls=2)).into_mir()
    inline = make_pass("mir-inline-functions")
    inline.apply(None, module)  # pyright: ignore[reportArgumentType]
    once = str(module)
    assert "func.call" not in once and "private" not in once
    inline.apply(None, module)  # pyright: ignore[reportArgumentType]
    assert str(module) == once
    arrays = mlp_arrays(2, 8, 8)
    np.testing.assert_allclose(rlx.reference(module)(**arrays),
                               rlx.reference(mlp_graph(2, 8, 8, calls=2))(**arrays),
                               rtol=1e-5, atol=1e-6)


def test_a_mir_module_refuses_hir_blocks_in_bodies_too():
    m = rlx.GraphModule.mir("main")
    x = m.graph.input("x", (2, 4))
    w = m.graph.param("w", (4, 4))
    with pytest.raises(GraphError, match="custom_fn 'lin': linear: a MIR module's builder takes"):
        m.graph.custom_fn(lambda g2, v, w: g2.linear(v, w), [x, w], name="lin")
    m.graph.output(m.graph.custom_fn(lambda g2, v, w: g2.relu(v @ w), [x, w], name="lin"))
    assert "func.call @lin" in m.to_mlir()
    arrays = {"x": _normal(2, 4), "w": _normal(4, 4)}
    np.testing.assert_allclose(rlx.jit(m)(**arrays), np.maximum(arrays["x"] @ arrays["w"], 0),
                               rtol=1e-4, atol=1e-5)


def test_an_unused_result_gets_no_kernel():
    g = rlx.Graph("main")
    x = g.input("x", (5, 8))
    used, _unused = g.custom_fn(lambda g2, v: (g2.exp(v), g2.tanh(v) @ g2.transpose(v, (1, 0))),
                                [x], name="two")
    g.output(used)
    model = _check(g, {"x": _normal(5, 8)})
    kernels = [op.name for op in model.stage_module("lir").walk() if isinstance(op, lir.KernelOp)]
    assert kernels == ["lir.elementwise"]


def test_no_inputs_and_identity_functions():
    g = rlx.Graph("main")
    x = g.input("x", (3, 4))
    ones = g.custom_fn(lambda g2: g2.constant(np.ones((3, 4), np.float32)), [], name="ones")
    same = g.custom_fn(lambda g2, v: v, [x], name="ident")
    g.output(ones + same * 2.0)
    arrays = {"x": _normal(3, 4)}
    np.testing.assert_allclose(_check(g, arrays)(**arrays), 1 + 2 * arrays["x"], rtol=1e-5)
