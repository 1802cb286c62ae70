"""`model.profile` (issue 13): an instrumented build times every kernel call of the entry.

The profiled build gives the same results as the model's own (which stays
uninstrumented), its table has one row per call site with the kernel, origin and a
throughput, the trace is Chrome trace-event JSON with one track per thread and the
barrier waits as events; dynamic and stateful models profile at the call's sizes and
keep their state; `rlx-run --profile --trace` prints the table and writes the trace.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import rlx_mlir as rlx
from rlx_mlir import RlxError
from rlx_mlir.tools.rlx_run import run as rlx_run

RNG = np.random.default_rng(13)


def _normal(*shape):
    return (RNG.standard_normal(shape) * 0.3).astype(np.float32)


def mlp_graph(rows: int | str = 64) -> rlx.Graph:
    g = rlx.Graph("mlp")
    x = g.input("x", (rows, 256))
    w1, w2 = g.param("w1", (256, 512)), g.param("w2", (512, 64))
    g.output(g.softmax(g.linear(x, w1, activation="gelu") @ w2))
    return g


MLP_PARAMS = {"w1": _normal(256, 512), "w2": _normal(512, 64)}


@pytest.fixture(scope="module")
def parallel_mlp():
    return rlx.jit(mlp_graph(), params=MLP_PARAMS, threads=2)


def test_profile_table_and_identical_results(parallel_mlp):
    x = _normal(64, 256)
    before = parallel_mlp(x=x)
    prof = parallel_mlp.profile(x=x, repeat=5)
    assert np.array_equal(parallel_mlp.recompile(profile=True)(x=x), before)
    assert np.array_equal(parallel_mlp(x=x), before)
    ops = [row.op for row in prof.rows]
    assert ops.count("fused_matmul") == 1 and ops.count("matmul") == 1
    assert "softmax" in ops
    matmul = next(r for r in prof.rows if r.op == "fused_matmul")
    assert matmul.calls == 1 and matmul.total_us > 0 and matmul.rate.endswith("GFLOP/s")
    assert matmul.origin == "linear#0/matmul + linear#0/gelu"  # the builder's locations
    softmax = next(r for r in prof.rows if r.op == "softmax")
    assert softmax.rate.endswith("GB/s")
    assert prof.kernel_us == pytest.approx(sum(r.total_us for r in prof.rows), rel=1e-6)
    assert 0 < prof.best_kernel_us <= prof.kernel_us and prof.best_call_us <= prof.call_us
    assert 0 < prof.kernel_us <= prof.call_us * 1.05
    assert prof.dropped == 0
    table = prof.to_markdown()
    assert table.startswith("| kernel | origin | calls | total µs")
    assert "linear#0/matmul + linear#0/gelu" in table


def test_normal_build_is_not_instrumented(parallel_mlp):
    parallel_mlp.profile(x=_normal(64, 256), repeat=1)
    assert "rlx_profile_record" not in parallel_mlp.mlir("llvm")
    assert "rlx.profile_site" not in parallel_mlp.mlir("llvm")
    assert "rlx_profile_record" in parallel_mlp.recompile(profile=True).mlir("llvm")
    assert parallel_mlp.recompile(profile=True).arena_bytes == parallel_mlp.arena_bytes


def test_trace_has_one_track_per_thread_and_barriers(parallel_mlp, tmp_path):
    prof = parallel_mlp.profile(x=_normal(64, 256), repeat=3)
    path = prof.trace(tmp_path / "trace.json")
    events = json.loads(path.read_text())["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert {e["tid"] for e in complete} == set(range(parallel_mlp.threads))
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in complete)
    assert any(e["name"] == "barrier" for e in complete)
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {f"rlx thread {t}" for t in range(parallel_mlp.threads)}
    assert {e["args"]["call"] for e in complete} == {0, 1, 2}
    per_thread = [sum(e["tid"] == t for e in complete) for t in range(parallel_mlp.threads)]
    assert len(set(per_thread)) == 1  # every thread passes every call site


def test_dynamic_model_profiles_at_the_call_sizes():
    model = rlx.jit(mlp_graph("S"), params=MLP_PARAMS, max_dims={"S": 64})
    for rows in (3, 17):
        x = _normal(rows, 256)
        prof = model.profile(x=x, repeat=2)
        matmul = next(r for r in prof.rows if r.op == "matmul")
        assert matmul.rate.endswith("GFLOP/s")
        np.testing.assert_array_equal(model.recompile(profile=True)(x=x), model(x=x))


def test_stateful_model_keeps_its_state():
    g = rlx.Graph("cache")
    x = g.input("x", ("S", 8))
    w = g.param("w", (8, 8))
    keys = g.cache_append(g.state("k", (16, 8)), x @ w)
    g.output(g.attention(x, keys, keys, num_heads=1, head_dim=8, mask_kind="causal"))
    model = rlx.jit(g, params={"w": _normal(8, 8)})
    model(x=_normal(3, 8))
    state, position = model.state["k"].copy(), model.position
    x = _normal(2, 8)
    prof = model.profile(x=x, repeat=3)
    assert model.position == position
    np.testing.assert_array_equal(model.state["k"], state)
    assert any(r.op == "insert_rows" for r in prof.rows)
    model.recompile(profile=True).copy_state_from(model)  # the same state, the same numbers
    np.testing.assert_array_equal(model.recompile(profile=True)(x=x), model(x=x))


def test_repeat_must_be_positive(parallel_mlp):
    with pytest.raises(RlxError, match="repeat"):
        parallel_mlp.profile(x=_normal(64, 256), repeat=0)


def test_rlx_run_profile_and_trace(tmp_path, capsys):
    source = tmp_path / "mlp.mlir"
    source.write_text(mlp_graph(8).to_mlir())
    trace = tmp_path / "out.json"
    assert rlx_run([str(source), "--random", "--profile", "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    # to_mlir() text carries the builder's locations (`linear#0` outside any scope)
    assert "| kernel | origin |" in out and "linear#0/matmul + linear#0/gelu" in out
    assert any(e["ph"] == "X" for e in json.loads(trace.read_text())["traceEvents"])


def test_one_thread_table_has_no_barrier_rows():
    model = rlx.jit(mlp_graph(), params=MLP_PARAMS, threads=1)
    prof = model.profile(x=_normal(64, 256), repeat=2)
    assert prof.threads == 1 and all(r.op != "barrier" for r in prof.rows)


def test_language_model_profile_groups_by_layer(tmp_path):
    from gguf_models import N_LAYER, write_tiny_model

    lm = rlx.models.load_gguf(write_tiny_model(tmp_path / "tiny.gguf"), max_seq=32)
    ids = [5, 261, 72, 101]
    expected = lm.logits(ids + [int(np.argmax(lm.logits(ids)[-1]))])
    prof = lm.profile(ids, repeat=2)
    assert lm.position == len(ids)  # the cache holds ids, as after lm.prefill(ids)
    np.testing.assert_allclose(lm.step(int(np.argmax(expected[len(ids) - 1]))), expected[-1],
                               rtol=1e-5, atol=1e-5)
    for part in (prof.prefill, prof.decode):
        scopes = [name for name, *_ in part.by_scope()]
        assert [f"layer{i}" for i in range(N_LAYER)] == [s for s in scopes if s.startswith("layer")]
        assert {"embed", "head"} <= set(scopes) and "other" not in scopes
    text = prof.to_markdown()
    assert "### prefill (4 tokens)" in text and "### decode step (1 token)" in text
    assert "| layer0 |" in text


def test_scan_body_kernels_count_every_iteration():
    body = rlx.Graph("body")
    carry, row = body.input("c", (8,)), body.input("xi", (8,))
    body.output(body.tanh(carry + row))
    g = rlx.Graph("loop")
    xs, init = g.input("xs", (50, 8)), g.input("h", (8,))
    g.output(g.scan(init, body, 50, xs=[xs]))
    model = rlx.jit(g)
    args = {"xs": _normal(50, 8), "h": _normal(8)}
    prof = model.profile(repeat=2, **args)
    assert prof.dropped == 0  # the log grew after the warm-up call
    assert {row.calls for row in prof.rows} == {50}
    np.testing.assert_array_equal(model.recompile(profile=True)(**args), model(**args))
