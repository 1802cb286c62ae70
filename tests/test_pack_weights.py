"""Weights bound at compile time are packed once at bind time (lir-pack-weights).

A graph compiled with its params bound gives the numbers of the same graph with the
params passed per call (unpacked), and of the reference, at vector widths 16, 8 and 4.
"""

from __future__ import annotations

import numpy as np
import pytest

import rlx_mlir as rlx
from rlx_mlir.core.packing import pack_rhs, panel_columns
from rlx_mlir.pipeline import PipelineOptions

WIDTHS = (16, 8, 4)
RNG = np.random.default_rng(7)


def _rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _graph() -> tuple[rlx.Graph, dict[str, np.ndarray], np.ndarray]:
    """x[2, 5, 48] (batched lhs) against: w used by a matmul and a fused_matmul (bias +
    gelu), u by a matmul and an elementwise op, v (N = 150: several panels and a
    narrow one at every width) by a matmul."""
    g = rlx.Graph("ffn")
    x = g.input("x", [2, 5, 48])
    w = g.param("w", [48, 70])
    b = g.param("b", [70])
    u = g.param("u", [48, 70])
    v = g.param("v", [70, 150])
    h = g.gelu(g.add(g.matmul(x, w), b))
    y = g.matmul(g.add(h, g.matmul(g.tanh(x), w)), v)
    g.output(y, g.matmul(x, u), g.exp(u))
    params = {"w": _rand(48, 70) * 0.2, "b": _rand(70), "u": _rand(48, 70) * 0.2,
              "v": _rand(70, 150) * 0.2}
    return g, params, _rand(2, 5, 48)


def _check(got, want) -> None:
    for a, e in zip(got, want, strict=True):
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("width", WIDTHS)
def test_bound_params_match_unbound_and_reference(width: int) -> None:
    g, params, x = _graph()
    packed = rlx.jit(g, params=params, vector_width=width, threads=1)
    plain = rlx.jit(g, vector_width=width, threads=1)
    want = rlx.reference(g, params=params)(x)
    got = packed(x)
    _check(got, want)
    _check(got, plain(x, *(params[n] for n in ("w", "b", "u", "v"))))
    assert packed.abi.layouts == {"w": "packed_rhs", "v": "packed_rhs"}
    assert plain.abi.layouts == {}


def test_lir_stage_shows_the_packed_rhs() -> None:
    g, params, _ = _graph()
    model = rlx.jit(g, params=params, threads=1)
    text = model.mlir("lir")
    assert text.count("packed_rhs\n") + text.count("packed_rhs ") >= 3, text
    assert 'rlx.name = "w", rlx.role = "param", rlx.layout = "packed_rhs"' in text
    assert 'rlx.name = "u", rlx.role = "param"}' in text  # also read by exp: row-major
    assert 'rlx.name = "b", rlx.role = "param"}' in text  # a bias, not a matmul rhs
    assert 'rlx.layout = "packed_rhs"' in model.mlir("llvm")
    assert "packed_rhs" not in rlx.jit(g, threads=1).mlir("lir")


def test_the_reference_runs_a_packed_module_on_row_major_params() -> None:
    g, params, x = _graph()
    text = rlx.jit(g, params=params, threads=1).mlir("lir")
    assert "packed_rhs" in text
    _check(rlx.reference(text, params=params)(x), rlx.reference(g, params=params)(x))


def test_only_bound_params_are_packed() -> None:
    g, params, x = _graph()
    model = rlx.jit(g, params={"v": params["v"]}, threads=1)
    assert model.abi.layouts == {"v": "packed_rhs"}
    _check(model(x, params["w"], params["b"], params["u"]), rlx.reference(g, params=params)(x))


@pytest.mark.parametrize("width", WIDTHS)
def test_the_bound_copy_is_packed(width: int) -> None:
    g, params, _ = _graph()
    caller = {k: a.copy() for k, a in params.items()}
    model = rlx.jit(g, params=caller, vector_width=width, threads=1)
    bound = model._bound["v"]
    assert not np.shares_memory(bound, caller["v"])
    np.testing.assert_array_equal(caller["v"], params["v"])  # the caller's array is untouched
    np.testing.assert_array_equal(bound, pack_rhs(params["v"], width))
    assert panel_columns(width) < 150 and not np.array_equal(bound, params["v"])
    np.testing.assert_array_equal(model._bound["u"], params["u"])  # u stays row-major


def test_a_param_used_twice_as_rhs_only() -> None:
    g = rlx.Graph("twice")
    x = g.input("x", [3, 40])
    w = g.param("w", [40, 40])
    g.output(g.matmul(g.matmul(x, w), w))
    params = {"w": _rand(40, 40) * 0.3}
    model = rlx.jit(g, params=params, threads=1)
    x_ = _rand(3, 40)
    assert model.abi.layouts == {"w": "packed_rhs"}
    _check((model(x_),), (rlx.reference(g, params=params)(x_),))


def test_x_at_w_where_w_is_also_an_lhs_stays_unpacked() -> None:
    g = rlx.Graph("square")
    w = g.param("w", [32, 32])
    g.output(g.matmul(w, w))
    params = {"w": _rand(32, 32)}
    model = rlx.jit(g, params=params, threads=1)
    assert model.abi.layouts == {}
    _check((model(),), (params["w"] @ params["w"],))


def test_threads_two_equals_one() -> None:
    g = rlx.Graph("big")
    x = g.input("x", [16, 256])
    w = g.param("w", [256, 512])
    b = g.param("b", [512])
    g.output(g.gelu(g.add(g.matmul(x, w), b)))
    params = {"w": _rand(256, 512) * 0.1, "b": _rand(512)}
    x_ = _rand(16, 256)
    one = rlx.jit(g, params=params, threads=1)
    two = rlx.jit(g, params=params, threads=2)
    assert two.threads == 2 and "packed_rhs" in two.mlir("lir")
    np.testing.assert_allclose(two(x_), one(x_), rtol=1e-6, atol=1e-6)
    _check((two(x_),), (rlx.reference(g, params=params)(x_),))


def test_options_key_the_cache() -> None:
    assert "packed_params=('w',)" in f"{PipelineOptions(packed_params=('w',))}"


def test_a_packed_weight_must_be_bound_at_compile_time():
    g = rlx.Graph("needs_w")
    x = g.input("x", (4, 32))
    g.output(x @ g.param("w", (32, 48)))
    w = np.random.default_rng(0).standard_normal((32, 48)).astype(np.float32)
    lir_text = rlx.jit(g, params={"w": w}).mlir("lir")
    assert "packed_rhs" in lir_text
    with pytest.raises(rlx.ArgumentError, match="w must be bound at compile time"):
        rlx.compile_mlir(lir_text)
    again = rlx.compile_mlir(lir_text, params={"w": w})
    xs = np.ones((4, 32), np.float32)
    np.testing.assert_allclose(again(xs), xs @ w, rtol=1e-5, atol=1e-5)
