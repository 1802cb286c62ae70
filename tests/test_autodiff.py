"""`rlx.grad` / `rlx.grad_values` (SPEC "Automatic differentiation"): gradients against
central differences in float64 on the reference executor (`rlx.reference(g,
dtype="f64")`), custom functions (derived through the body, or a user VJP), the
gradients feeding an update in the same graph, states, and the errors.

The torch.autograd comparisons of the compiled gradients are in test_autodiff_torch.py;
the cases both use are in autodiff_cases.py."""

from __future__ import annotations

import numpy as np
import pytest
from autodiff_cases import BLOCKS, ELEMENTWISE, LINALG, Case, Family

import rlx_mlir as rlx
from rlx_mlir.core.errors import GraphError, RlxError

EPS = 1e-6
"""The central-difference step (float64)."""
FD_RTOL = 1e-6
"""|finite difference - <grad, v>| <= FD_RTOL * max(|<grad, v>|, 1)."""


# ----------------------------------------------------------------------------- central differences


def _wide(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: v.astype(np.float64) for k, v in arrays.items()}


def _reference_gradients(cases: list[Case], seed: int):
    """The family's f64 loss model, its f64 inputs and its gradients by the f64 reference."""
    family = Family(cases, seed, smooth=True)
    g, loss = family.loss_graph()
    grads = rlx.reference(rlx.grad(g, loss, family.wrt()), dtype="f64")(**_wide(family.arrays))
    return family, rlx.reference(g, dtype="f64"), family.split(grads[1:])


@pytest.fixture(scope="module")
def elementwise():
    return _reference_gradients(ELEMENTWISE, 11)


@pytest.fixture(scope="module")
def linalg():
    return _reference_gradients(LINALG, 12)


@pytest.fixture(scope="module")
def blocks():
    return _reference_gradients(BLOCKS, 13)


def directional_errors(case: Case, computed) -> list[tuple[str, float, float]]:
    """(input, central difference, <grad, v>) along a random direction v per input."""
    family, loss, grads = computed
    base = _wide(family.arrays)
    rng = np.random.default_rng(5)
    found = []
    for i in case.differentiated():
        name = f"{case.name}__{i}"
        v = rng.standard_normal(base[name].shape)
        plus, minus = dict(base), dict(base)
        plus[name], minus[name] = base[name] + EPS * v, base[name] - EPS * v
        fd = (float(loss(**plus)) - float(loss(**minus))) / (2 * EPS)
        found.append((name, fd, float(np.sum(grads[name] * v))))
    return found


def _check(case: Case, computed) -> None:
    for name, fd, ad in directional_errors(case, computed):
        assert grads_dtype(computed, name) == np.float64
        assert abs(fd - ad) <= FD_RTOL * max(abs(ad), 1.0), (name, fd, ad)


def grads_dtype(computed, name: str) -> np.dtype:
    return computed[2][name].dtype


@pytest.mark.parametrize("case", ELEMENTWISE, ids=[c.name for c in ELEMENTWISE])
def test_elementwise_gradients_match_central_differences(case, elementwise):
    _check(case, elementwise)


@pytest.mark.parametrize("case", LINALG, ids=[c.name for c in LINALG])
def test_linalg_gradients_match_central_differences(case, linalg):
    _check(case, linalg)


@pytest.mark.parametrize("case", BLOCKS, ids=[c.name for c in BLOCKS])
def test_block_gradients_match_central_differences(case, blocks):
    _check(case, blocks)


def test_f64_reference_computes_in_float64_and_f32_stays_as_it_was():
    g = rlx.Graph("t")
    x = g.input("x", (3,))
    g.output(g.reduce_sum(g.exp(x) * x, 0))
    x64 = np.array([0.1, 0.2, 0.3]) + 1e-9  # not a float32 value
    got = rlx.reference(g, dtype="f64")(x=x64)
    assert got.dtype == np.float64
    assert float(got) == pytest.approx(float(np.sum(np.exp(x64) * x64)), rel=1e-15)
    f32 = rlx.reference(g)(x=x64)
    assert f32.dtype == np.float32
    assert float(f32) != float(got)  # rounded to float32 on the way
    assert float(f32) == pytest.approx(float(got), rel=1e-6)
    with pytest.raises(RlxError, match="dtype: expected one of f32, f64, got 'f16'"):
        rlx.reference(g, dtype="f16")


# ----------------------------------------------------------------------------- the API


def _mlp() -> tuple[rlx.Graph, rlx.Value]:
    g = rlx.Graph("mlp")
    x = g.input("x", (4, 5))
    w = g.param("w", (5, 3))
    b = g.param("b", (3,))
    loss = g.reduce_mean(g.tanh(x @ w + b) ** 2.0, (0, 1))
    g.output(loss)
    return g, loss


MLP_ARRAYS = {"x": np.linspace(-1, 1, 20, dtype=np.float32).reshape(4, 5),
              "w": np.linspace(-0.5, 0.5, 15, dtype=np.float32).reshape(5, 3),
              "b": np.array([0.1, -0.2, 0.3], np.float32)}


def test_grad_is_a_new_graph_of_the_loss_and_named_gradients():
    g, loss = _mlp()
    before = g.to_mlir()
    grads = rlx.grad(g, loss, ["w", "b"])
    assert g.to_mlir() == before  # the original is left as it was
    assert grads.output_names == ["loss", "grad_w", "grad_b"]
    assert grads.inputs == ["x"] and grads.params == ["w", "b"]
    out = rlx.reference(grads)(**MLP_ARRAYS)
    assert out[0] == rlx.reference(g)(**MLP_ARRAYS)
    assert out[1].shape == (5, 3) and out[2].shape == (3,)
    assert "grad." in grads.to_mlir()  # the backward ops are located under the scope grad


def test_compiled_gradients_equal_the_reference():
    g, loss = _mlp()
    grads = rlx.grad(g, loss, ["x", "w", "b"])
    for got, want in zip(rlx.jit(grads)(**MLP_ARRAYS), rlx.reference(grads)(**MLP_ARRAYS),
                         strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_grad_values_feed_an_update_in_the_same_graph():
    g = rlx.Graph("sgd")
    x = g.input("x", (4, 5))
    w = g.state("w", (5, 3))
    loss = g.reduce_sum((x @ w) ** 2.0, (0, 1))
    (dw,) = rlx.grad_values(g, loss, ["w"])
    g.assign(w, w - 0.01 * dw)
    g.output(loss, dw)
    ref = rlx.reference(g)
    x_np = MLP_ARRAYS["x"]
    loss0, dw0 = ref(x=x_np)
    assert float(loss0) == 0.0  # the state starts at zero: so does its gradient
    np.testing.assert_array_equal(dw0, 0.0)
    ref.reset()
    # a non-zero start: one step by hand
    g2 = rlx.Graph("sgd")
    x2, w2 = g2.input("x", (4, 5)), g2.state("w", (5, 3))
    start = g2.input("start", (5, 3))
    loss2 = g2.reduce_sum((x2 @ (w2 + start)) ** 2.0, (0, 1))
    (dw2,) = rlx.grad_values(g2, loss2, ["w"])
    g2.assign(w2, w2 - 0.01 * dw2)
    g2.output(loss2, dw2)
    ref2 = rlx.reference(g2)
    start_np = MLP_ARRAYS["w"]
    _, got = ref2(x=x_np, start=start_np)
    want = 2 * x_np.T.astype(np.float64) @ (x_np @ start_np)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ref2.state["w"], -0.01 * got, rtol=1e-6)  # the state moved


def test_an_unused_argument_gets_zeros_and_loss_may_be_an_argument():
    g = rlx.Graph("z")
    x = g.input("x", (3,))
    g.input("unused", (2, 2))
    s = g.input("s", ())
    loss = g.reduce_sum(x * x, 0)
    g.output(loss)
    out = rlx.reference(rlx.grad(g, loss, ["unused", "x"]))(
        x=np.array([1.0, 2.0, 3.0], np.float32), unused=np.ones((2, 2), np.float32),
        s=np.float32(1))
    np.testing.assert_array_equal(out[1], np.zeros((2, 2)))
    np.testing.assert_allclose(out[2], [2.0, 4.0, 6.0])
    g2 = rlx.Graph("id")
    s = g2.input("s", ())
    g2.output(s)
    np.testing.assert_array_equal(rlx.reference(rlx.grad(g2, s, "s"))(s=np.float32(3))[1], 1.0)


def test_a_value_used_twice_sums_its_cotangents():
    g = rlx.Graph("twice")
    x = g.input("x", (5,))
    y = g.exp(x)
    loss = g.reduce_sum(y * y + y, 0)  # d/dx = 2 e^2x + e^x
    g.output(loss)
    x_np = np.linspace(-1, 1, 5).astype(np.float32)
    (_, dx) = rlx.reference(rlx.grad(g, loss, "x"))(x=x_np)
    want = 2 * np.exp(2 * x_np.astype(np.float64)) + np.exp(x_np.astype(np.float64))
    np.testing.assert_allclose(dx, want, rtol=1e-6)


# ----------------------------------------------------------------------------- errors


def test_the_loss_must_be_a_rank0_f32_value_of_the_graph():
    g = rlx.Graph("e")
    x = g.input("x", (3, 4))
    ids = g.input("ids", (4,), "i32")
    g.output(x)
    with pytest.raises(RlxError, match=r"loss: expected a rank-0 f32 Value, got f32 of shape \[3, 4\]"):
        rlx.grad(g, x, ["x"])
    with pytest.raises(RlxError, match="loss: expected a rank-0 f32 Value, got i32"):
        rlx.grad(g, g.argmax(g.reduce_sum(x, 0)), ["x"])
    with pytest.raises(RlxError, match="loss: expected a Value of graph 'e', got ndarray"):
        rlx.grad(g, np.zeros(()), ["x"])
    other = rlx.Graph("other")
    with pytest.raises(RlxError, match="loss: expected a Value of graph 'e', got a Value of graph 'other'"):
        rlx.grad(g, other.input("y", ()), ["x"])
    del ids


def test_wrt_names_float_arguments():
    g = rlx.Graph("e")
    x = g.input("x", (3,))
    ids = g.input("ids", (3,), "i32")
    q = g.param("q", (4,), "ui8")
    loss = g.reduce_sum(x, 0)
    g.output(loss)
    with pytest.raises(RlxError, match=r"wrt: 'nope' is not an input, param or state of graph 'e' \(its arguments: x, ids, q\)"):
        rlx.grad(g, loss, ["nope"])
    with pytest.raises(RlxError, match="wrt: 'ids' is not differentiable: expected an f32 input, param or state, got the i32 input 'ids'"):
        rlx.grad(g, loss, ["x", "ids"])
    with pytest.raises(RlxError, match="got the ui8 param 'q'"):
        rlx.grad_values(g, loss, "q")
    del ids, q


def test_an_op_without_a_rule_on_the_path_is_named():
    g = rlx.Graph("e")
    x = g.input("x", (3, 8))
    values, _ = g.top_k(x, 2)
    loss = g.reduce_sum(values, (0, 1))
    g.output(loss)
    with pytest.raises(RlxError, match=r"no VJP rule for mir.top_k \(the op is not differentiable\)"):
        rlx.grad(g, loss, ["x"])


def _symbolic_graph() -> tuple[rlx.Graph, rlx.Value]:
    g = rlx.Graph("sym")
    x = g.input("x", ("S", 4))
    w, b, gamma = g.param("w", (4, 3)), g.param("b", (3,)), g.param("gamma", (3,))
    h = g.rms_norm(g.linear(x, w, b, activation="silu"), gamma)
    h = g.softmax(h) * g.reduce_mean(h, 0, keepdim=True)  # a mean over S
    loss = g.reduce_mean(h * h, (0, 1))
    g.output(loss)
    return g, loss


def _symbolic_numpy(x, w, b, gamma):
    """The loss of `_symbolic_graph` in float64 (for central differences)."""
    z = x @ w + b
    h = z / (1 + np.exp(-z))
    h = h / np.sqrt((h * h).mean(-1, keepdims=True) + 1e-5) * gamma
    e = np.exp(h - h.max(-1, keepdims=True))
    h = e / e.sum(-1, keepdims=True) * h.mean(0, keepdims=True)
    return (h * h).mean()


@pytest.mark.parametrize("rows", [1, 5, 17])
def test_symbolic_dims_differentiate_at_every_size(rows):
    """A graph of symbolic S differentiates once and runs (reference, f64) at any S."""
    g, loss = _symbolic_graph()
    grads = rlx.grad(g, loss, ["x", "w", "b", "gamma"])
    rng = np.random.default_rng(rows)
    arrays = {"x": rng.standard_normal((rows, 4)), "w": rng.standard_normal((4, 3)),
              "b": rng.standard_normal(3), "gamma": rng.standard_normal(3)}
    _, *got = rlx.reference(grads, dtype="f64")(**arrays)
    for name, grad in zip(["x", "w", "b", "gamma"], got, strict=True):
        assert grad.shape == arrays[name].shape
        v = rng.standard_normal(grad.shape)
        plus = {**arrays, name: arrays[name] + EPS * v}
        minus = {**arrays, name: arrays[name] - EPS * v}
        fd = (_symbolic_numpy(**plus) - _symbolic_numpy(**minus)) / (2 * EPS)
        ad = float(np.sum(grad * v))
        assert abs(fd - ad) <= FD_RTOL * max(abs(ad), 1.0), (name, fd, ad)


def test_symbolic_dims_compile_for_the_input_gradient():
    """The JIT compiles x's gradient at any S (the weights' would be an lir.matmul over a
    symbolic K, which the dynamic kernels do not take yet)."""
    g, loss = _symbolic_graph()
    grads = rlx.grad(g, loss, ["x"])
    model = rlx.jit(grads)
    rng = np.random.default_rng(4)
    params = {"w": rng.standard_normal((4, 3)).astype(np.float32),
              "b": rng.standard_normal(3).astype(np.float32),
              "gamma": rng.standard_normal(3).astype(np.float32)}
    for rows in (1, 17):
        x = rng.standard_normal((rows, 4)).astype(np.float32)
        got, want = model(x=x, **params), rlx.reference(grads)(x=x, **params)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-4, atol=1e-6)


# ----------------------------------------------------------------------------- custom functions


def naive_softplus(g2: rlx.Graph, x: rlx.Value) -> rlx.Value:
    """log(1 + exp(x)): exp overflows for x > 88, and so does its derived gradient."""
    return g2.log(g2.exp(x) + 1.0)


def stable_vjp(g: rlx.Graph, inputs, outputs, cotangents):
    (x,), (ct,) = inputs, cotangents
    return [g.sigmoid(x) * ct]


def _softplus_graph(vjp) -> tuple[rlx.Graph, rlx.Value]:
    g = rlx.Graph("sp")
    x = g.input("x", (17,))
    y = g.custom_fn(naive_softplus, [x], name="softplus", vjp=vjp)
    loss = g.reduce_sum(y * 0.5, 0)
    g.output(loss)
    return g, loss


SOFTPLUS_X = np.linspace(-20, 100, 17, dtype=np.float32)


def test_a_custom_function_is_differentiated_through_its_body():
    g, loss = _softplus_graph(None)
    small = np.linspace(-3, 3, 17, dtype=np.float32)
    _, dx = rlx.reference(rlx.grad(g, loss, "x"))(x=small)
    want = 0.5 / (1 + np.exp(-small.astype(np.float64)))
    np.testing.assert_allclose(dx, want, rtol=1e-6)
    _, dx = rlx.reference(rlx.grad(g, loss, "x"))(x=SOFTPLUS_X)
    assert not np.all(np.isfinite(dx))  # the derived gradient of the naive body overflows


def test_a_user_vjp_replaces_the_derived_gradient():
    g, loss = _softplus_graph(stable_vjp)
    grads = rlx.grad(g, loss, "x")
    want = 0.5 / (1 + np.exp(-SOFTPLUS_X.astype(np.float64)))
    _, dx = rlx.reference(grads)(x=SOFTPLUS_X)
    np.testing.assert_allclose(dx, want, rtol=1e-6, atol=1e-12)
    _, dx = rlx.jit(grads)(x=SOFTPLUS_X)
    np.testing.assert_allclose(dx, want, rtol=1e-5, atol=1e-12)


def test_custom_functions_nest_and_several_inputs_get_gradients():
    def inner(g2, a):
        return g2.tanh(a)

    def outer(g2, a, w):
        return g2.custom_fn(inner, [a @ w], name="inner") * 2.0

    g = rlx.Graph("nest")
    x, w = g.input("x", (3, 4)), g.param("w", (4, 5))
    loss = g.reduce_sum(g.custom_fn(outer, [x, w], name="outer"), (0, 1))
    g.output(loss)
    ref = rlx.reference(rlx.grad(g, loss, ["x", "w"]))
    x_np, w_np = MLP_ARRAYS["x"][:3, :4], MLP_ARRAYS["w"][:4].repeat(2, 1)[:, :5]
    _, dx, dw = ref(x=x_np, w=w_np)
    d = 2 * (1 - np.tanh(x_np.astype(np.float64) @ w_np) ** 2)
    np.testing.assert_allclose(dx, d @ w_np.T, rtol=1e-5)
    np.testing.assert_allclose(dw, x_np.T @ d, rtol=1e-5)


def test_a_user_vjp_is_checked():
    def bad_count(g, inputs, outputs, cotangents):
        return [cotangents[0], cotangents[0]]

    def bad_shape(g, inputs, outputs, cotangents):
        return [g.reduce_sum(cotangents[0], 0)]

    for vjp, message in [(bad_count, "expected 1 cotangents \\(one per input\\), got 2"),
                         (bad_shape, r"cotangent 0: expected f32\[17\] \(the input's shape\), got f32\[\]")]:
        g, loss = _softplus_graph(vjp)
        with pytest.raises(RlxError, match=f"custom_fn 'softplus': vjp: {message}"):
            rlx.grad(g, loss, "x")
    g = rlx.Graph("two")
    x = g.input("x", (3,))
    g.custom_fn(naive_softplus, [x], name="f", vjp=stable_vjp)
    with pytest.raises(GraphError, match="another vjp"):
        g.custom_fn(naive_softplus, [x], name="f")


# ----------------------------------------------------------------------------- fused bodies


def test_a_fused_elementwise_op_is_differentiated_through_its_body():
    """mir.fused_elementwise appears after mir-fuse; its rule walks the scalar body (here
    softplus's, with its select and comparisons, and silu's times a broadcast input)."""
    from rlx_mlir.autodiff.rules_elementwise import elementwise
    from rlx_mlir.dialects.elementwise_fns import BODIES, ElementwiseFn

    class Ctx:  # the builder part of a VjpContext is all `elementwise` needs
        def __init__(self, g):
            self.g = g

    g = rlx.Graph("fused")
    x, b = g.input("x", (5, 17)), g.input("b", (17,))
    ctx = Ctx(g)
    sp = elementwise(ctx, [x], BODIES[ElementwiseFn.SOFTPLUS])
    y = elementwise(ctx, [sp, b], lambda s, u, v: s.mul(BODIES[ElementwiseFn.SILU](s, u), v))
    loss = g.reduce_sum(y, (0, 1))
    g.output(loss)
    assert "mir.fused_elementwise" in g.to_mlir()
    x_np = np.linspace(-30, 30, 85, dtype=np.float32).reshape(5, 17)
    b_np = np.linspace(-1, 1, 17, dtype=np.float32)
    grads = rlx.grad(g, loss, ["x", "b"])
    _, dx, db = rlx.reference(grads, dtype="f64")(x=x_np, b=b_np)
    x64 = x_np.astype(np.float64)
    s = np.logaddexp(0, x64)
    sig = 1 / (1 + np.exp(-s))
    dsilu = sig * (1 + s * (1 - sig))
    np.testing.assert_allclose(dx, dsilu * b_np / (1 + np.exp(-x64)), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(db, np.sum(s * sig, 0), rtol=1e-9)
    got = rlx.jit(grads)(x=x_np, b=b_np)
    np.testing.assert_allclose(got[1], dx, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[2], db, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- quantized weights


def test_quantized_weights_pass_gradients_to_x_only():
    """dequant_matmul (x @ dequant(w)^T) and a shared_input_matmul of quantized weights:
    x gets the cotangent times the dequantized weights; the bytes get none."""
    from rlx_mlir.core import reference_kernels as K
    from rlx_mlir.dialects import mir

    rng = np.random.default_rng(3)
    w1, w2 = (K.quantize_q8_0(rng.standard_normal((n, 64)).astype(np.float32)) for n in (7, 5))
    x_np = rng.standard_normal((3, 64)).astype(np.float32)
    ct1, ct2 = rng.standard_normal((3, 7)), rng.standard_normal((3, 5))
    g = rlx.Graph("q")
    x = g.input("x", (3, 64))
    q1, q2 = g.param("q1", w1.shape, "ui8"), g.param("q2", w2.shape, "ui8")
    y1 = g.dequant_matmul(x, q1, "q8_0")
    shared = mir.SharedInputMatmulOp(x.ssa, [q1.ssa, q2.ssa], scheme="q8_0")
    g.add_op(shared)
    p1 = rlx.Value(g, shared.products[0], (3, 7), "f32")
    p2 = rlx.Value(g, shared.products[1], (3, 5), "f32")
    loss = (g.reduce_sum((y1 + p1) * g.constant(ct1), (0, 1))
            + g.reduce_sum(p2 * g.constant(ct2), (0, 1)))
    g.output(loss)
    grads = rlx.grad(g, loss, ["x"])
    d1, d2 = K.dequantize_q8_0(w1).astype(np.float64), K.dequantize_q8_0(w2).astype(np.float64)
    want = 2 * ct1.astype(np.float32) @ d1 + ct2.astype(np.float32) @ d2
    arrays = {"x": x_np, "q1": w1, "q2": w2}
    np.testing.assert_allclose(rlx.reference(grads)(**arrays)[1], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rlx.jit(grads)(**arrays)[1], want, rtol=1e-4, atol=1e-5)
    with pytest.raises(RlxError, match="'q1' is not differentiable"):
        rlx.grad(g, loss, ["q1"])


def test_gradients_through_a_kv_cache_are_refused():
    g = rlx.Graph("cache")
    x = g.input("x", (2, 4))
    cache = g.state("k", (8, 4))
    rows = g.cache_append(cache, x * 2.0)
    loss = g.reduce_sum(rows, (0, 1))
    g.output(loss)
    with pytest.raises(RlxError, match="mir.extract_rows: gradients through a KV cache"):
        rlx.grad(g, loss, ["x"])
