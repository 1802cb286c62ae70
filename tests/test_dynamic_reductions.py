"""Ops along a symbolic axis (issue 22, item 7): reductions and softmax over a `?` axis
run compiled (run-time-size kernels) and agree with the reference; the symbol a KV cache
introduces (`T`) is a valid reshape/broadcast_to target.

Every model compiles once and runs several sizes of its symbols (1, 3, 17: not a
multiple of the vector width, 64), or several calls of a stateful graph.
"""

from __future__ import annotations

import numpy as np
import pytest

import rlx_mlir as rlx
from rlx_mlir import ShapeError

SIZES = (1, 3, 17, 64)
RNG = np.random.default_rng(22)
TOL = 2e-5


def _normal(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _agree(got, want, what):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape, what
        np.testing.assert_allclose(a, b, rtol=TOL, atol=TOL, err_msg=what)


def _check_sizes(build, shape_at, sizes=SIZES, threads=None, parallel=False):
    """One graph of input x (shape_at("S")), compiled once, against the reference at
    every size; `parallel`: the kernel is split across threads."""
    g = rlx.Graph("along")
    x = g.input("x", shape_at("S"))
    g.output(build(g, x))
    model, ref = rlx.jit(g, max_dims={"S": max(sizes)}, threads=threads), rlx.reference(g)
    assert "read ? dims natively" in model.summary()
    if parallel:
        assert "1 parallel kernel calls" in model.summary()
    for s in sizes:
        x = _normal(*shape_at(s))
        _agree(model(x=x), ref(x=x), f"S = {s}")
    return model


# ----------------------------------------------------------------------------- reductions along S


@pytest.mark.parametrize("kind", ["sum", "max", "min", "mean"])
@pytest.mark.parametrize("n", [1, 5, 33])
@pytest.mark.parametrize("keepdim", [False, True])
def test_reduce_over_the_rows_of_s_by_n(kind, n, keepdim):
    _check_sizes(lambda g, x: getattr(g, f"reduce_{kind}")(x, 0, keepdim=keepdim),
                 lambda s: (s, n))


@pytest.mark.parametrize("kind", ["sum", "max", "min", "mean"])
@pytest.mark.parametrize("n", [1, 5, 33])
def test_reduce_over_the_last_axis_of_n_by_s(kind, n):
    _check_sizes(lambda g, x: getattr(g, f"reduce_{kind}")(x, -1, keepdim=True),
                 lambda s: (n, s))


@pytest.mark.parametrize(("kind", "axes", "shape_at"), [
    ("mean", (0, 2), lambda s: (s, 3, 5)),    # symbolic and static axes, a kept one between
    ("sum", (0, 1), lambda s: (s, 33)),       # everything
    ("max", (1, 2), lambda s: (2, s, 17)),    # a static batch before S
    ("min", (1,), lambda s: (4, s, 1, 9)),    # a size-1 dim next to S
    ("mean", (0, 1), lambda s: (3, s)),       # a static axis before S
])
def test_reduce_over_several_axes_with_a_symbol(kind, axes, shape_at):
    _check_sizes(lambda g, x: getattr(g, f"reduce_{kind}")(x, axes), shape_at)


def test_reduce_propagates_nan_along_s():
    g = rlx.Graph("nan")
    x = g.input("x", ("S", 5))
    g.output(g.reduce_max(x, 0), g.reduce_min(x, 0))
    model = rlx.jit(g, max_dims={"S": 64})
    x = _normal(17, 5)
    x[11, 2] = np.nan
    for got in model(x=x):
        assert np.isnan(got[2]) and not np.isnan(np.delete(got, 2)).any()


def test_mean_pooling_a_sequence():
    """Project the tokens, mean-pool them over the sequence, classify: [S, 16] -> [1, 3]."""
    w1, w2 = _normal(16, 32), _normal(32, 3)
    g = rlx.Graph("pool")
    x = g.input("x", ("S", 16))
    h = g.linear(x, g.param("w1", (16, 32)), activation="gelu")
    g.output(g.softmax(g.reduce_mean(h, 0, keepdim=True) @ g.param("w2", (32, 3))))
    params = {"w1": w1, "w2": w2}
    model, ref = rlx.jit(g, params=params, max_dims={"S": 64}), rlx.reference(g)
    for s in SIZES:
        x = _normal(s, 16)
        _agree(model(x=x), ref(x=x, **params), f"S = {s}")


# ----------------------------------------------------------------------------- softmax along S


@pytest.mark.parametrize(("axis", "shape_at"), [
    (0, lambda s: (s, 1)),
    (0, lambda s: (s, 5)),
    (0, lambda s: (s, 33)),
    (-1, lambda s: (1, s)),
    (-1, lambda s: (5, s)),
    (-1, lambda s: (33, s)),
    (1, lambda s: (2, s, 3)),      # strided, a static batch
    (0, lambda s: (3, s)),         # a static axis followed by S: columns of run-time width
    (0, lambda s: (s, 1500)),      # wider than one column tile
])
def test_softmax_along_s(axis, shape_at):
    _check_sizes(lambda g, x: g.softmax(x, axis), shape_at)


# ----------------------------------------------------------------------------- threads, target


@pytest.mark.parametrize(("build", "shape_at"), [
    (lambda g, x: g.reduce_mean(x, 0), lambda s: (s, (1 << 18) + 5)),   # column chunks
    (lambda g, x: g.reduce_max(x, 1), lambda s: (1 << 18, s)),          # rows
    (lambda g, x: g.softmax(x, -1), lambda s: (1 << 18, s)),            # rows
    (lambda g, x: g.reduce_sum(x, (0, 1)), lambda s: (s, 1 << 18)),     # part 0 only
])
def test_along_s_with_two_threads(build, shape_at):
    model = _check_sizes(build, shape_at, sizes=(1, 3, 17), threads=2, parallel=True)
    assert model.threads == 2


def test_along_s_for_haswell(monkeypatch):
    monkeypatch.setenv("RLX_TARGET_CPU", "haswell")
    g = rlx.Graph("haswell")
    x = g.input("x", ("S", 5))
    y = g.input("y", (5, "S"))
    g.output(g.reduce_mean(x, 0), g.softmax(x, 0), g.reduce_max(y, -1), g.softmax(y, -1))
    model, ref = rlx.jit(g, max_dims={"S": 64}), rlx.reference(g)
    assert model.target.cpu == "haswell" and model.target.vector_width == 8
    for s in SIZES:
        x, y = _normal(s, 5), _normal(5, s)
        _agree(model(x=x, y=y), ref(x=x, y=y), f"S = {s}")


# ----------------------------------------------------------------------------- caches


def test_reduce_and_softmax_over_the_cache_rows_as_the_state_advances():
    """Each call appends S rows; the outputs reduce over all the rows so far (T)."""
    g = rlx.Graph("cache_pool")
    x = g.input("x", ("S", 6))
    rows = g.cache_append(g.state("k", (48, 6)), x)
    g.output(g.reduce_sum(rows, 0), g.reduce_mean(rows, 0, keepdim=True),
             g.softmax(rows, 0), g.reduce_max(rows, (0, 1)))
    model, ref = rlx.jit(g), rlx.reference(g)
    total = 0
    for s in (3, 1, 17, 5):
        x = _normal(s, 6)
        got, want = model(x=x), ref(x=x)
        total += s
        assert got[2].shape == (total, 6)
        _agree(got, want, f"after {total} rows")
    assert model.position == total


# ----------------------------------------------------------------------------- the cache's symbol


def _cache_reshape_graph() -> rlx.Graph:
    g = rlx.Graph("cache_reshape")
    x = g.input("x", ("S", 8))
    k = g.state("k", (40, 8))
    rows = g.cache_append(k, x)
    batched = g.reshape(rows, (1, "T", 8))
    column = g.reshape(g.reduce_sum(rows, 1, keepdim=True), ("T", 1))
    g.output(batched * 2.0, g.broadcast_to(column, ("T", 8)))
    return g


def test_reshape_and_broadcast_to_take_the_cache_symbol_over_several_calls():
    g = _cache_reshape_graph()
    model, ref = rlx.jit(g), rlx.reference(g)
    total = 0
    for s in (3, 1, 17, 5):
        x = _normal(s, 8)
        got, want = model(x=x), ref(x=x)
        total += s
        assert got[0].shape == (1, total, 8) and got[1].shape == (total, 8)
        _agree(got, want, f"after {total} rows")
    assert model.position == total


def test_the_cache_symbol_is_a_graph_symbol_only_after_an_append():
    g = rlx.Graph("g")
    x = g.input("x", ("S", 8))
    with pytest.raises(ShapeError, match=r"the symbol 'T', which no input of the graph declares"):
        g.reshape(x, ("T", 8))
    g.cache_append(g.state("k", (16, 8)), x)
    assert g.symbols == ["S"]  # the inputs' symbols; T is the cache's
    with pytest.raises(ShapeError, match=r"\(its symbols: S, T\)"):
        g.reshape(x, ("U", 8))


# ----------------------------------------------------------------------------- a symbol behind a static dim


BIAS = np.arange(4, dtype=np.float32).reshape(4, 1)
GAIN = np.linspace(0.5, 1.5, 33, dtype=np.float32)


@pytest.mark.parametrize(("build", "shape_at"), [
    (lambda g, x: g.transpose(x, (1, 0)), lambda s: (s, 4)),
    (lambda g, x: g.transpose(x, (2, 0, 1)), lambda s: (2, s, 5)),
    (lambda g, x: g.transpose(x, (2, 1, 0)), lambda s: (3, s, 20)),         # tiled
    (lambda g, x: g.exp(x), lambda s: (4, s)),
    (lambda g, x: x + g.constant(BIAS), lambda s: (4, s)),                  # broadcast (4, 1)
    (lambda g, x: g.tanh(x * 2.0 + 1.0) - x, lambda s: (4, s)),             # fused
    (lambda g, x: g.softmax(x, -1) * 3.0, lambda s: (5, s)),
    (lambda g, x: g.broadcast_to(x, (2, "S", 8)), lambda s: (1, s, 8)),
    (lambda g, x: g.narrow(x, 0, 1, 2), lambda s: (4, s, 3)),
    (lambda g, x: g.reduce_sum(g.transpose(x, (1, 0)), 0), lambda s: (s, 33)),
    (lambda g, x: g.rms_norm(x, g.constant(GAIN)), lambda s: (2, s, 33)),  # a static batch
    (lambda g, x: g.layer_norm(x, g.constant(GAIN), g.constant(GAIN - 1)), lambda s: (2, s, 33)),
])
def test_map_ops_with_a_symbol_behind_a_static_dim(build, shape_at):
    _check_sizes(build, shape_at)


@pytest.mark.parametrize(("build", "shape_at"), [
    (lambda g, x: g.exp(x), lambda s: (1 << 18, s)),                       # rows of dim 0
    (lambda g, x: g.transpose(x, (1, 0)), lambda s: (s, (1 << 18) + 3)),  # tile-row blocks
    (lambda g, x: g.transpose(x, (0, 2, 1)), lambda s: (2, s, 1 << 17)),    # the batch
    (lambda g, x: g.broadcast_to(x, (2, 1 << 17, "S")), lambda s: (1, 1 << 17, s)),
    (lambda g, x: g.rms_norm(x, g.constant(GAIN)), lambda s: (1 << 13, s, 33)),
])
def test_map_ops_behind_a_static_dim_with_two_threads(build, shape_at):
    _check_sizes(build, shape_at, sizes=(1, 3, 17), threads=2, parallel=True)


CLS = _normal(2, 4)


@pytest.mark.parametrize("build", [
    lambda g, x: g.concat([g.constant(CLS), x], 0),                          # [S+2, 4]
    lambda g, x: g.reduce_mean(g.concat([g.constant(CLS), x], 0), 0),       # pool with CLS
    lambda g, x: g.softmax(g.concat([x, g.constant(CLS)], 0) * 2.0, 0),      # a suffix
    # [4, S+2]: the symbolic axis behind a static dim
    lambda g, x: g.concat([g.constant(np.ascontiguousarray(CLS.T)), g.transpose(x, (1, 0))], 1),
])
def test_concat_along_a_symbolic_axis(build):
    """One symbolic input and static ones along the axis: the result is S+k."""
    _check_sizes(build, lambda s: (s, 4))


@pytest.mark.parametrize(("shape_at", "axis"), [
    (lambda s: (s, 5), 0),        # the first token of a sequence (CLS pooling)
    (lambda s: (3, s, 4), 1),     # the symbol behind a static dim
    (lambda s: (4, s), 1),
])
@pytest.mark.parametrize("threads", [1, 2])
def test_narrow_to_the_first_row_of_a_symbolic_axis(shape_at, axis, threads):
    """narrow(x, axis, 0, 1) along a symbol: every symbol binds >= 1, so the first row
    always exists (no call-time check needed); other slices along it stay refused."""
    g = rlx.Graph("first")
    x = g.input("x", shape_at("S"))
    h = g.exp(x)
    g.output(g.narrow(h, axis, 0, 1), g.reduce_sum(g.narrow(h, axis, 0, 1), axis))
    model, ref = rlx.jit(g, max_dims={"S": 64}, threads=threads), rlx.reference(g)
    for s in SIZES:
        x = _normal(*shape_at(s))
        _agree(model(x=x), ref(x=x), f"S = {s}")
    with pytest.raises(ShapeError, match="narrow needs a static axis"):
        g.narrow(h, axis, 1, 1)


def test_row_separable_ops_stay_row_driven():
    """A symbol leading every shape: the row driver serves the op as before."""
    g = rlx.Graph("rows")
    x = g.input("x", ("S", 8))
    g.output(g.exp(x), g.reduce_sum(x, -1), g.softmax(x, -1))
    assert "0 read ? dims natively, 3 row-driven" in rlx.jit(g, max_dims={"S": 8}).summary()


# ----------------------------------------------------------------------------- still refused


def test_a_product_over_s_is_a_clean_error():
    """x^T x sums over S (a `?` K): no kernel reads it yet, an RlxError naming the op at
    compile time (lir-parallelize's estimate crashed on the `?` K with a TypeError)."""
    g = rlx.Graph("gram")
    x = g.input("x", ("S", 8))
    g.output(g.transpose(x, (1, 0)) @ x)
    with pytest.raises(rlx.RlxError, match=r"lir\.matmul .*K = S must be static"):
        rlx.jit(g, max_dims={"S": 8}, threads=2)


@pytest.mark.parametrize("norm", ["rms_norm", "layer_norm"])
def test_a_norm_over_a_symbolic_axis_is_a_clean_error(norm):
    """Normalizing over S (gamma of S) has no kernel: an RlxError naming the op (it was an
    AssertionError in the kernel builder); the reference runs it."""
    g = rlx.Graph("norm_s")
    x, w = g.input("x", (4, "S")), g.input("w", ("S",))
    g.output(g.rms_norm(x, w) if norm == "rms_norm" else g.layer_norm(x, w, w))
    x, w = _normal(4, 3), _normal(3)
    assert rlx.reference(g)(x=x, w=w).shape == (4, 3)
    with pytest.raises(rlx.RlxError, match=rf"lir\.{norm}: the normalized \(last\) axis must "
                                           r"be static, got x \[4, S\]"):
        rlx.jit(g, max_dims={"S": 8})
