"""Small kernels over `?` rows between two split kernels split by rows too
(lir-parallelize's `row_split_runs`): Gemma 3's per-head q/k norms, half-style ropes and
k's cache insert. Each thread takes the same rows in each kernel of the run, so the run
needs no barrier inside; lir-plan-arena keeps every buffer of the run live to its end so
that no kernel of it writes bytes another thread still reads. A prefill's rows then
split across threads where thread 0 alone ran them, with the same barriers."""

from __future__ import annotations

import numpy as np
import pytest

import rlx_mlir as rlx
from rlx_mlir.dialects import lir
from rlx_mlir.ir import make_context
from rlx_mlir.passes.lir_parallelize import LirParallelizePass, conflict, is_parallel

RNG = np.random.default_rng(5)
K, HEADS, HEAD_DIM, CAPACITY = 512, 4, 128, 48


def _gemma_attention() -> rlx.Graph:
    """q, k, v = x @ w; q and k normed per head and roped (half style); k and v appended
    to the caches; causal attention: Gemma 3's attention with one kv head."""
    g = rlx.Graph("per_head_norm")
    x = g.input("x", ("S", K))
    cos, sin = (g.input(name, ("S", HEAD_DIM // 2)) for name in ("cos", "sin"))
    q, k, v = (g.matmul(x, g.param(name, (K, n * HEAD_DIM))) for name, n in
               (("wq", HEADS), ("wk", 1), ("wv", 1)))

    def normed(t: rlx.Value, heads: int, gamma: str) -> rlx.Value:
        per_head = g.rms_norm(g.reshape(t, (-1, heads, HEAD_DIM)), g.param(gamma, (HEAD_DIM,)))
        return g.rope(g.reshape(per_head, (-1, heads * HEAD_DIM)), cos, sin, HEAD_DIM)

    q, k = normed(q, HEADS, "q_norm"), normed(k, 1, "k_norm")
    keys, values = (g.cache_append(g.state(name, (CAPACITY, HEAD_DIM)), t)
                    for name, t in (("k", k), ("v", v)))
    g.output(g.attention(q, keys, values, num_heads=HEADS, head_dim=HEAD_DIM,
                         num_kv_heads=1, mask_kind="causal"))
    return g


def _params() -> dict[str, np.ndarray]:
    params = {name: (RNG.standard_normal((K, n * HEAD_DIM)) / np.sqrt(K)).astype(np.float32)
              for name, n in (("wq", HEADS), ("wk", 1), ("wv", 1))}
    for name in ("q_norm", "k_norm"):
        params[name] = (1 + 0.1 * RNG.standard_normal(HEAD_DIM)).astype(np.float32)
    return params


def _tables() -> tuple[np.ndarray, np.ndarray]:
    half = HEAD_DIM // 2
    angles = np.arange(CAPACITY)[:, None] / 10000 ** (np.arange(half) / half)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def _parallelized(model: rlx.CompiledGraph) -> list:
    module = model.stage_module("lir").clone()
    LirParallelizePass().apply(make_context(), module)
    return [op for op in module.walk() if isinstance(op, lir.KernelOp | lir.BarrierOp)]


def test_the_run_splits_by_rows_between_two_full_barriers():
    ops = _parallelized(rlx.jit(_gemma_attention(), params=_params(), threads=2))
    names = [op.name for op in ops]
    first = names.index("lir.rms_norm")
    last = max(i for i, name in enumerate(names) if name == "lir.insert_rows")
    run = ops[first:last + 1]
    assert not any(isinstance(op, lir.BarrierOp) for op in run)
    assert all(is_parallel(op) for op in run)
    assert {op.name for op in run} >= {"lir.rms_norm", "lir.rope", "lir.insert_rows"}
    for barrier in (ops[first - 1], ops[last + 1]):  # full barriers around it, as many as
        assert isinstance(barrier, lir.BarrierOp) and barrier.kind is None  # gather+release
    assert is_parallel(ops[first - 2]) and ops[last + 2].name == "lir.attention"
    assert not any(conflict(a, b) for i, a in enumerate(run) for b in run[i + 1:])


@pytest.mark.parametrize("threads", [2, 3])
def test_split_rows_give_the_serial_bits(threads):
    """Prefill chunks of 17 and 5 rows (not multiples of the threads) and decode steps of
    one row: the outputs and caches of the split run are the one-thread build's bits."""
    g, params = _gemma_attention(), _params()
    split = rlx.jit(g, params=params, threads=threads)
    serial = rlx.jit(g, params=params, threads=1)
    reference = rlx.reference(g, params=params)
    cos, sin = _tables()
    for rows in (17, 1, 5, 1, 2):
        at = slice(split.position, split.position + rows)
        inputs = {"x": RNG.standard_normal((rows, K)).astype(np.float32),
                  "cos": cos[at], "sin": sin[at]}
        got, want = split(**inputs), serial(**inputs)
        np.testing.assert_array_equal(got, want, err_msg=f"S={rows}")
        np.testing.assert_allclose(got, reference(**inputs), rtol=1e-4, atol=1e-4)
        for name in ("k", "v"):
            np.testing.assert_array_equal(split.state[name], serial.state[name])
    assert split.position == 26 and not split.state["k"][26:].any()


def test_a_run_after_the_last_split_kernel_stays_serial():
    """With no split kernel after it, splitting the run would add a barrier (a full one
    and the gather at the return, against one gather before a serial run): it stays on
    thread 0."""
    g = rlx.Graph("tail")
    x = g.input("x", ("S", K))
    h = g.matmul(x, g.param("w", (K, HEADS * HEAD_DIM)))
    per_head = g.rms_norm(g.reshape(h, (-1, HEADS, HEAD_DIM)), g.param("gamma", (HEAD_DIM,)))
    g.output(g.reshape(per_head, (-1, HEADS * HEAD_DIM)))
    params = {"w": np.ones((K, HEADS * HEAD_DIM), np.float32),
              "gamma": np.ones(HEAD_DIM, np.float32)}
    ops = _parallelized(rlx.jit(g, params=params, threads=2))
    norm = next(op for op in ops if op.name == "lir.rms_norm")
    assert not is_parallel(norm)


@pytest.mark.parametrize("threads", [1, 3])
def test_a_large_static_insert_splits_its_rows(threads):
    """A cache append big enough to split on its own (static rows): each thread copies its
    share of the rows to the position, the cache is the rows appended in order."""
    g = rlx.Graph("append")
    x = g.input("x", (7, 4096))
    g.output(g.cache_append(g.state("cache", (80, 4096)), g.mul(x, x)))
    model = rlx.jit(g, threads=threads)
    inserts = [op for op in _parallelized(model) if op.name == "lir.insert_rows"]
    assert len(inserts) == 1 and is_parallel(inserts[0])
    chunks = [RNG.standard_normal((7, 4096)).astype(np.float32) for _ in range(3)]
    for i, chunk in enumerate(chunks):
        got = model(x=chunk)
        np.testing.assert_array_equal(got[-7:], chunk * chunk)
        np.testing.assert_array_equal(model.state["cache"][7 * i:7 * i + 7], chunk * chunk)
    assert not model.state["cache"][21:].any()
