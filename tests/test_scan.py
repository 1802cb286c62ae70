"""g.scan (SPEC "Sequence ops from RLX"): a region op lowered to a native loop around the
kernels of its body. Compiled and reference results against numpy loops written here,
the region at every stage, threads around it, and build errors."""

from __future__ import annotations

import numpy as np
import pytest

import rlx_mlir as rlx
from rlx_mlir.core.errors import GraphError, ShapeError

RTOL, ATOL = 1e-4, 1e-5


def rnn_body(n: int, k: int) -> rlx.Graph:
    """h' = tanh(h @ w + x) + 0.5·b: carry h [n], one xs slice x [n], consts w [n, n], b [k]
    broadcast to n when k = 1."""
    body = rlx.Graph("rnn_step")
    h, x = body.input("h", (n,)), body.input("x", (n,))
    w, b = body.input("w", (n, n)), body.input("b", (k,))
    body.output(body.tanh(body.matmul(h, w) + x) + b * 0.5)
    return body


def rnn_np(h, xs, w, b):
    carries = []
    for x in xs:
        h = np.tanh(h.astype(np.float64) @ w + x) + 0.5 * b
        carries.append(h)
    return h, np.stack(carries)


def rnn_data(rng, length, n, k=None):
    return dict(h0=rng.standard_normal(n).astype(np.float32),
                xs=rng.standard_normal((length, n)).astype(np.float32),
                w=(rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32),
                b=rng.standard_normal(k or n).astype(np.float32))


def rnn_graph(length, n, k=None, trajectory=False):
    g = rlx.Graph("rnn")
    h0, xs = g.input("h0", (n,)), g.input("xs", (length, n))
    w, b = g.param("w", (n, n)), g.param("b", (k or n,))
    result = g.scan(h0, rnn_body(n, k or n), length, xs=[xs], consts=[w, b],
                    trajectory=trajectory)
    g.output(*(result if trajectory else (result,)))
    return g


def close(got, want):
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("length, n", [(1, 4), (5, 4), (7, 33), (3, 1)])
def test_scan_final_carry(length, n):
    data = rnn_data(np.random.default_rng(length * n), length, n)
    want, _ = rnn_np(**{k: v for k, v in data.items() if k != "h0"}, h=data["h0"])
    g = rnn_graph(length, n)
    close(rlx.reference(g)(**data), want)
    close(rlx.jit(g)(**data), want)


@pytest.mark.parametrize("length, n", [(1, 3), (6, 17)])
def test_scan_trajectory(length, n):
    data = rnn_data(np.random.default_rng(n), length, n)
    want_last, want_all = rnn_np(data["h0"], data["xs"], data["w"], data["b"])
    g = rnn_graph(length, n, trajectory=True)
    for run in (rlx.reference(g), rlx.jit(g)):
        last, carries = run(**data)
        close(last, want_last)
        close(carries, want_all)


def test_scan_body_with_blocks_and_several_xs():
    """A body with an hir block (linear + activation), two xs and a carry of rank 2."""
    body = rlx.Graph("step")
    h = body.input("h", (2, 8))
    x, y = body.input("x", (2, 8)), body.input("y", (8,))
    w = body.input("w", (8, 8))
    body.output(body.linear(h, w, y, activation="silu") * x)
    g = rlx.Graph("outer")
    h0, xs, ys = g.input("h0", (2, 8)), g.input("xs", (4, 2, 8)), g.input("ys", (4, 8))
    w = g.input("w", (8, 8))
    g.output(g.scan(h0, body, 4, xs=[xs, ys], consts=[w]))
    rng = np.random.default_rng(3)
    data = {"h0": rng.standard_normal((2, 8)), "xs": rng.standard_normal((4, 2, 8)),
            "ys": rng.standard_normal((4, 8)), "w": rng.standard_normal((8, 8)) / 3}
    data = {k: v.astype(np.float32) for k, v in data.items()}
    h = data["h0"].astype(np.float64)
    for t in range(4):
        z = h @ data["w"] + data["ys"][t]
        h = z / (1 + np.exp(-z)) * data["xs"][t]
    close(rlx.reference(g)(**data), h)
    close(rlx.jit(g)(**data), h)


def test_scan_between_parallel_kernels():
    """Large kernels split over threads before and after the scan: the scan waits for
    every share of its inputs, the next kernel for the scan."""
    n, length = 64, 5
    g = rlx.Graph("mixed")
    a, m = g.input("a", (256, n)), g.param("m", (n, n))
    big = g.matmul(a, m)                                   # parallel
    h0 = g.reduce_mean(big, 0)                             # the carry comes from it
    xs = g.narrow(big, 0, 0, length)
    body = rlx.Graph("step")
    h, x, w = body.input("h", (n,)), body.input("x", (n,)), body.input("w", (n, n))
    body.output(body.tanh(body.matmul(h, w) + x))
    last = g.scan(h0, body, length, xs=[xs], consts=[m])
    g.output(g.matmul(a, g.reshape(last, (n, 1))) + big)  # parallel again, reads the scan
    rng = np.random.default_rng(9)
    data = {"a": rng.standard_normal((256, n)).astype(np.float32),
            "m": (rng.standard_normal((n, n)) / 8).astype(np.float32)}
    want = rlx.reference(g)(**data)
    for threads in (1, 2, 4):
        close(rlx.jit(g, threads=threads)(**data), want)


def gather_scan_graph(length: int, n: int, vocab: int) -> rlx.Graph:
    """A gather before the scan, one in its body (ids from the xs), one after: each may
    read out of range."""
    g = rlx.Graph("lookups")
    table = g.param("table", (vocab, n))
    first, ids = g.input("first", (1,), dtype="i64"), g.input("ids", (length, 1), dtype="i64")
    last = g.input("last", (1,), dtype="i64")
    body = rlx.Graph("lookup_step")
    h, i, t = body.input("h", (n,)), body.input("i", (1,), dtype="i64"), body.input("t", (vocab, n))
    body.output(body.tanh(h + body.reshape(body.gather(t, i), (n,))))
    h0 = g.reshape(g.gather(table, first), (n,))
    final = g.scan(h0, body, length, xs=[ids], consts=[table])
    g.output(final + g.reshape(g.gather(table, last), (n,)))
    return g


@pytest.mark.parametrize("threads", [1, 2])
def test_scan_reports_a_bad_index_inside_its_body(threads):
    """The loop carries the statuses of its body's checked kernels (and of those before
    it) to the entry's return: a bad id at any step, before or after the scan, is an
    error, and the next good call still matches the reference."""
    length, n, vocab = 4, 8, 5
    g = gather_scan_graph(length, n, vocab)
    rng = np.random.default_rng(3)
    data = {"table": rng.standard_normal((vocab, n)).astype(np.float32),
            "first": np.array([1]), "ids": np.array([[0], [4], [2], [3]]), "last": np.array([2])}
    model = rlx.jit(g, threads=threads)
    want = rlx.reference(g)(**data)
    close(model(**data), want)
    for name, bad in (("ids", np.array([[0], [4], [5], [3]])), ("ids", np.array([[-1], [0], [0], [0]])),
                      ("ids", np.array([[0], [0], [0], [7]])), ("first", np.array([5])),
                      ("last", np.array([9]))):
        with pytest.raises(rlx.RlxError, match="out of range"):
            model(**{**data, name: bad})
    close(model(**data), want)


def test_scan_region_through_every_stage():
    model = rlx.jit(rnn_graph(3, 4, trajectory=True))
    assert "mir.scan" in model.mlir("hir")
    mir_text = model.mlir("mir")
    assert "mir.scan" in mir_text and "mir.yield" in mir_text
    lir_text = model.mlir("lir")
    assert "lir.scan" in lir_text and "lir.yield" in lir_text and "lir.slot" in lir_text
    llvm_text = model.mlir("llvm")
    assert "scan" not in llvm_text.replace("rnn_step", "") and "llvm.cond_br" in llvm_text


def test_scan_errors():
    g = rlx.Graph("bad")
    h0, xs, w = g.input("h0", (4,)), g.input("xs", (5, 4)), g.input("w", (4, 4))
    body = rnn_body(4, 4)
    b = g.input("b", (4,))
    with pytest.raises(ShapeError, match="scan: xs\\[0\\]: expected first dim 6"):
        g.scan(h0, body, 6, xs=[xs], consts=[w, b])
    with pytest.raises(ShapeError, match="scan: length: expected an int >= 1, got 0"):
        g.scan(h0, body, 0, xs=[xs], consts=[w, b])
    with pytest.raises(GraphError, match="scan: body: graph 'rnn_step' has 4 inputs, expected 3"):
        g.scan(h0, body, 5, xs=[xs], consts=[w])
    with pytest.raises(ShapeError, match="scan: body: input 'w' \\(the consts\\[0\\]\\): expected"):
        g.scan(h0, body, 5, xs=[xs], consts=[g.input("w2", (4, 5)), b])
    wrong_out = rlx.Graph("wrong")
    c = wrong_out.input("c", (4,))
    wrong_out.output(wrong_out.reduce_sum(c, 0))
    with pytest.raises(ShapeError, match="one output of the carry's type"):
        g.scan(h0, wrong_out, 5)
    with_param = rlx.Graph("param")
    c = with_param.input("c", (4,))
    with_param.output(c * with_param.param("p", (4,)))
    with pytest.raises(GraphError, match="params or states"):
        g.scan(h0, with_param, 5)
    with pytest.raises(GraphError, match="body: expected an rlx_mlir.Graph"):
        g.scan(h0, "body", 5)
