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
