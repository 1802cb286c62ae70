"""`CompiledGraph.entry(*results)`: a second entry of a model that returns only some of
its results and shares the model's state, position, params and arena (issue 22 item 5:
generation runs an entry that returns ids, not the vocabulary's logits)."""

from __future__ import annotations

import numpy as np
import pytest
from gguf_models import write_tiny_model

import rlx_mlir as rlx


def running_model(threads: int = 1):
    """A stateful graph with two results: a running sum (state) and its argmax."""
    g = rlx.Graph("running")
    x = g.input("x", ("S", 11))
    total = g.state("total", (11,))
    new = g.add(total, g.reduce_sum(x, 0))
    g.assign(total, new)
    g.output(scaled=g.mul(x, 2.0), best=g.argmax(new))
    return rlx.jit(g, threads=threads)


@pytest.mark.parametrize("threads", [1, 2])
def test_an_entry_returns_the_named_results_and_continues_the_same_state(threads):
    model = running_model(threads)
    best_only = model.entry("best")
    assert best_only.output_names == ("best",)
    assert model.entry("best") is best_only  # built once, then kept
    assert model.entry("scaled", "best") is model
    rng = np.random.default_rng(0)
    chunks = [rng.standard_normal((s, 11)).astype(np.float32) for s in (3, 1, 5, 2)]
    running = np.zeros(11, np.float32)
    for i, chunk in enumerate(chunks):
        running += chunk.sum(0)
        if i % 2:
            scaled, best = model(x=chunk)
            np.testing.assert_allclose(scaled, 2 * chunk, rtol=1e-6)
        else:
            best = best_only(x=chunk)
        assert int(best) == int(np.argmax(running))
        np.testing.assert_allclose(best_only.state["total"], running, rtol=1e-5, atol=1e-5)
    assert model.position == best_only.position
    best_only.reset()
    assert not model.state["total"].any()


def test_an_unknown_or_repeated_result_is_an_error_naming_the_results():
    model = running_model()
    with pytest.raises(rlx.RlxError, match="among scaled, best, got nope"):
        model.entry("nope")
    with pytest.raises(rlx.RlxError, match="distinct"):
        model.entry("best", "best")


def test_generation_runs_the_ids_entry_and_matches_greedy_logits(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_tiny_model(path)
    lm = rlx.models.load_gguf(path, max_seq=32, threads=1)
    assert lm.ids_runner.output_names == ("next_ids",)
    assert lm.ids_runner is lm.runner.entry("next_ids")
    prompt = [1, 5, 9, 2]
    got = lm.generate_ids(prompt, max_new_tokens=6)
    ids = list(prompt)
    for _ in range(len(got)):  # greedy from the full logits, position 0 each time
        ids.append(int(np.argmax(lm.logits(ids)[-1])))
    assert got == ids[len(prompt):]
