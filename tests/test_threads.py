"""Multi-threaded calls: the same numbers as one thread, small graphs stay single-threaded,
RLX_NUM_THREADS caps the team, and many barriers in a row neither hang nor race."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import func

import rlx_mlir as rlx
from rlx_mlir.dialects import lir
from rlx_mlir.passes.lir_parallelize import parallelize
from rlx_mlir.runtime import default_threads

RNG = np.random.default_rng(11)


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RLX_CACHE_DIR", str(tmp_path))


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(int(np.prod(shape))).astype(np.float32).reshape(shape)


def big_graph() -> rlx.Graph:
    """Large enough that every kernel is split across threads, with data crossing threads
    between kernels (a matmul reads rows another thread's elementwise wrote)."""
    g = rlx.Graph("big")
    x = g.input("x", (256, 512))
    w = g.param("w", (512, 512))
    h = g.silu(x) * x + 1.0
    for _ in range(6):
        h = g.rms_norm(g.gelu(h @ w) + h, g.param(f"g{_}", (512,)))
    g.output(g.softmax(h), g.reduce_sum(h, -1))
    return g


def test_threads_give_the_same_numbers_as_one_thread():
    g = big_graph()
    params = {"w": rand(512, 512) / np.float32(22.6)} | {f"g{i}": rand(512) for i in range(6)}
    x = rand(256, 512)
    one = rlx.jit(g, params=params, threads=1)
    two = rlx.jit(g, params=params, threads=2)
    assert one.threads == 1
    assert two.threads == 2, "the big graph should use both threads"
    expected = rlx.reference(g, params=params)(x)
    for _ in range(20):  # many calls: a racy barrier shows up as a hang or wrong numbers
        for got, ref, serial in zip(two(x), expected, one(x), strict=True):
            np.testing.assert_allclose(got, serial, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(got, ref, rtol=2e-4, atol=2e-5)


def chain_graph() -> rlx.Graph:
    """Parallel kernels back to back (full barriers between them)."""
    g = rlx.Graph("chain")
    x = g.input("x", (512, 512))
    w = g.param("w", (512, 512))
    h = g.silu(x) * x
    for _ in range(3):
        h = g.exp(-(h @ w) * (h @ w)) + g.tanh(h)
    g.output(h)
    return g


def barrier_kinds(model) -> list[str]:
    """The kinds of the barriers lir-parallelize puts into the model's lir."""
    module = model.stage_module("lir").clone()
    parallelize(next(op for op in module.walk() if isinstance(op, func.FuncOp)))
    return [op.kind.data if op.kind else "full" for op in module.walk()
            if isinstance(op, lir.BarrierOp)]


@pytest.mark.parametrize("threads", [2, 3])
def test_every_barrier_kind_keeps_the_numbers(threads):
    """Full barriers (chain_graph) and one-sided ones (big_graph: gather before its
    serial norms, release after them), with as many and more threads than cores."""
    cases = [(chain_graph(), {"w": rand(512, 512) / np.float32(22.6)}, rand(512, 512),
              {"full", "gather"}),
             (big_graph(), {"w": rand(512, 512) / np.float32(22.6)}
              | {f"g{i}": rand(512) for i in range(6)}, rand(256, 512), {"gather", "release"})]
    for graph, params, x, kinds in cases:
        model = rlx.jit(graph, params=params, threads=threads)
        assert set(barrier_kinds(model)) == kinds
        serial = rlx.jit(graph, params=params, threads=1)(x)
        for _ in range(30):  # a racy barrier shows up as a hang or wrong numbers
            for got, expected in zip(model(x), serial, strict=True):
                np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_more_threads_than_cores_still_finish():
    g = big_graph()
    params = {"w": rand(512, 512) / np.float32(22.6)} | {f"g{i}": rand(512) for i in range(6)}
    x = rand(256, 512)
    five = rlx.jit(g, params=params, threads=5)
    np.testing.assert_allclose(five(x)[0], rlx.jit(g, params=params, threads=1)(x)[0],
                               rtol=1e-5, atol=1e-6)


def test_small_graphs_do_not_pay_for_threads():
    g = rlx.Graph("tiny")
    x = g.input("x", (8,))
    g.output(g.exp(x) + 1.0)
    assert rlx.jit(g, threads=2).threads == 1


def test_thread_count_option_and_environment(monkeypatch):
    with pytest.raises(rlx.RlxError, match="threads: expected an int"):
        rlx.jit(big_graph(), threads=0)
    monkeypatch.setenv("RLX_NUM_THREADS", "1")
    assert default_threads() == 1
    monkeypatch.setenv("RLX_NUM_THREADS", "many")
    with pytest.raises(rlx.RlxError, match="RLX_NUM_THREADS: expected a positive integer"):
        default_threads()


def test_spin_time_option(monkeypatch):
    """RLX_SPIN_US sets how long idle workers spin (calibrated in pause rounds); with 0
    they sleep after every call and a call still wakes them."""
    from rlx_mlir.runtime import spin_rounds

    monkeypatch.setenv("RLX_SPIN_US", "200")
    short = spin_rounds()
    monkeypatch.setenv("RLX_SPIN_US", "2000")
    assert spin_rounds() > 5 * short > 0
    for bad in ("soon", "-1", "inf", "nan"):
        monkeypatch.setenv("RLX_SPIN_US", bad)
        with pytest.raises(rlx.RlxError, match="RLX_SPIN_US: expected"):
            spin_rounds()
    monkeypatch.setenv("RLX_SPIN_US", "0")
    params = {"w": rand(512, 512) / np.float32(22.6)}
    x = rand(512, 512)
    sleepy = rlx.jit(chain_graph(), params=params, threads=2)
    serial = rlx.jit(chain_graph(), params=params, threads=1)(x)
    for _ in range(5):
        np.testing.assert_allclose(sleepy(x)[0], serial[0], rtol=1e-5, atol=1e-6)
