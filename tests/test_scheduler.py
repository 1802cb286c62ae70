"""Serving in the library: LanguageModel's lock, finish_reason and slots; the scheduler over
LanguageModelEngine (queue, cancellation, streaming, logprobs, prompt caching).

One tiny random llama (tests/gguf_models.py) compiled once; greedy results are compared
with the model's own single-threaded `generate`/`generate_ids`, logprobs with log_softmax
of `lm.logits`.
"""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest
from gguf_models import write_tiny_model

from rlx_mlir.core.errors import ArgumentError
from rlx_mlir.models import load_gguf
from rlx_mlir.serving import (
    Delta,
    Finished,
    LanguageModelEngine,
    QueueFull,
    Request,
    Scheduler,
    log_softmax,
)

PROMPTS = ["hello the cat", "the mat on the", "world sat"]


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("serve") / "tiny.gguf", "llama", seed=7)


@pytest.fixture(scope="module")
def lm(tiny_path):
    return load_gguf(tiny_path, max_seq=48)


@pytest.fixture(scope="module")
def alone(lm):
    """Each prompt's greedy text and ids, generated alone on one thread."""
    return {p: (lm.generate(p, max_new_tokens=12), lm.generate_ids(lm.tokenizer.encode(p),
                                                                   max_new_tokens=12))
            for p in PROMPTS}


# --- the library -------------------------------------------------------------------------


def test_threads_never_interleave_tokens(lm, alone):
    results: dict[str, list[str]] = {p: [] for p in PROMPTS}

    def work(prompt: str) -> None:
        for _ in range(3):
            results[prompt].append(lm.generate(prompt, max_new_tokens=12))

    threads = [threading.Thread(target=work, args=(p,)) for p in PROMPTS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for prompt in PROMPTS:
        assert results[prompt] == [alone[prompt][0]] * 3


def test_finish_reason_length_stop_and_max_seq(lm, tiny_path, tmp_path):
    prompt = PROMPTS[0]
    lm.generate(prompt, max_new_tokens=5)
    assert lm.stats.finish_reason == "length" and lm.stats.generated_tokens == 5
    text = lm.generate(prompt, max_new_tokens=12)
    stop = text[3:5]
    lm.generate(prompt, max_new_tokens=12, stop=stop)
    assert lm.stats.finish_reason == "stop"
    ids = lm.generate_ids(lm.tokenizer.encode(prompt), max_new_tokens=8)
    eos_model = load_gguf(write_tiny_model(tmp_path / "eos.gguf", seed=7, eos_token_id=ids[2]),
                          max_seq=48)
    assert eos_model.generate_ids(lm.tokenizer.encode(prompt), max_new_tokens=8) == ids[:3]
    assert eos_model.stats.finish_reason == "stop"
    small = load_gguf(tiny_path, max_seq=8, engine="reference")
    small.generate_ids(small.tokenizer.encode(prompt), max_new_tokens=50)
    assert small.stats.finish_reason == "length" and small.stats.generated_tokens < 50


def test_top_k_negative_and_slots_zero_are_errors(lm, tiny_path):
    with pytest.raises(ArgumentError, match="top_k"):
        lm.generate("hello", top_k=-3)
    with pytest.raises(ArgumentError, match="slots"):
        load_gguf(tiny_path, slots=0)


# --- the scheduler ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scheduler(lm):
    scheduler = Scheduler(LanguageModelEngine(lm), max_queue=8).start()
    yield scheduler
    scheduler.close()


def test_requests_get_their_single_sequence_results(lm, scheduler, alone):
    requests = [scheduler.submit(Request(lm.tokenizer.encode(p), 12)) for p in PROMPTS]
    for prompt, request in zip(PROMPTS, requests, strict=True):
        request.result(timeout=60)
        assert request.text == alone[prompt][0]
        assert request.tokens == alone[prompt][1]
        assert request.finish_reason == "length"
        assert request.usage.prompt_tokens == len(lm.tokenizer.encode(prompt))
        assert request.usage.completion_tokens == 12
        assert request.time_to_first_token is not None


def test_events_stream_text_and_end(lm, scheduler, alone):
    seen = []
    request = scheduler.submit(Request(lm.tokenizer.encode(PROMPTS[1]), 12,
                                       on_event=seen.append))
    events = list(request)
    assert events == seen and isinstance(events[-1], Finished)
    deltas = [e for e in events if isinstance(e, Delta)]
    assert "".join(d.text for d in deltas) == alone[PROMPTS[1]][0]
    assert [t for d in deltas for t in d.tokens] == alone[PROMPTS[1]][1]

    async def collect():
        request = scheduler.submit(Request(lm.tokenizer.encode(PROMPTS[2]), 12))
        return [event async for event in request]

    events = asyncio.run(collect())
    assert "".join(e.text for e in events if isinstance(e, Delta)) == alone[PROMPTS[2]][0]


def test_stop_strings_end_with_stop(lm, scheduler, alone):
    text = alone[PROMPTS[0]][0]
    stop = text[4:6]
    request = scheduler.submit(Request(lm.tokenizer.encode(PROMPTS[0]), 12, stop=[stop]))
    request.result(timeout=60)
    assert request.text == text[:text.find(stop)] and request.finish_reason == "stop"


def test_max_seq_ends_with_length(lm, scheduler):
    prompt = (lm.tokenizer.encode(PROMPTS[0]) * 30)[:30]
    request = scheduler.submit(Request(prompt, 40)).result(timeout=60)
    assert request.finish_reason == "length"
    assert len(prompt) + len(request.tokens) - 1 == lm.max_seq


def test_logprobs_are_log_softmax_of_the_logits(lm, scheduler, alone):
    prompt = lm.tokenizer.encode(PROMPTS[0])
    request = scheduler.submit(Request(prompt, 6, logprobs=3)).result(timeout=60)
    assert request.tokens == alone[PROMPTS[0]][1][:6]  # the full entry draws the same ids
    logits = lm.logits(prompt + request.tokens[:-1])[len(prompt) - 1:]
    for row, entry in zip(logits, request.token_logprobs, strict=True):
        expected = log_softmax(row)
        assert entry.logprob == pytest.approx(expected[entry.token], abs=1e-4)
        top = np.argsort(-expected, kind="stable")[:3]
        assert [t for t, _ in entry.top] == top.tolist()
        np.testing.assert_allclose([v for _, v in entry.top], expected[top], atol=1e-4)


def test_prompt_caching_equals_a_fresh_run(lm, scheduler):
    base = lm.tokenizer.encode("hello the cat sat on the mat")
    longer = base + lm.tokenizer.encode(" the world", add_bos=False)
    assert scheduler.engine.rewindable  # every state of the llama is a KV cache
    first = scheduler.submit(Request(base, 4)).result(timeout=60)
    assert first.usage.cached_tokens == 0 or first.usage.cached_tokens < len(base)
    cached = scheduler.submit(Request(longer, 8, logprobs=2)).result(timeout=60)
    assert cached.usage.cached_tokens >= len(base)
    engine_cached = scheduler.engine._active is None  # the slot was freed
    assert engine_cached
    fresh_logits = lm.logits(longer + cached.tokens[:-1])[len(longer) - 1:]
    assert cached.tokens == lm.generate_ids(longer, max_new_tokens=8)
    for row, entry in zip(fresh_logits, cached.token_logprobs, strict=True):
        assert entry.logprob == pytest.approx(log_softmax(row)[entry.token], abs=1e-3)
    again = scheduler.submit(Request(longer, 8)).result(timeout=60)  # lm.logits reset it
    assert again.tokens == cached.tokens


def test_queue_limit_and_cancellation(lm):
    gate = threading.Event()

    class Gated(LanguageModelEngine):
        def step(self):
            gate.wait()
            return super().step()

    scheduler = Scheduler(Gated(lm), max_queue=2).start()
    try:
        prompt = lm.tokenizer.encode(PROMPTS[0])
        running = scheduler.submit(Request(prompt, 30))
        while scheduler.active == 0:  # admitted, waiting at the gate
            threading.Event().wait(0.01)
        queued = [scheduler.submit(Request(prompt, 4)) for _ in range(2)]
        with pytest.raises(QueueFull, match="max_queue = 2"):
            scheduler.submit(Request(prompt, 4))
        queued[0].cancel()
        running.cancel()
        gate.set()
        assert running.result(timeout=60).finish_reason == "cancelled"
        assert len(running.tokens) < 30
        assert queued[0].result(timeout=60).finish_reason == "cancelled"
        assert queued[0].tokens == []
        assert queued[1].result(timeout=60).finish_reason == "length"
        assert scheduler.active == 0 and scheduler.queue_depth == 0
    finally:
        gate.set()
        scheduler.close()


def test_bad_requests(lm, scheduler):
    with pytest.raises(ArgumentError, match="max_tokens"):
        Request([1, 2], 0)
    with pytest.raises(ArgumentError, match="top_k"):
        Request([1, 2], 4, top_k=-1)
    with pytest.raises(ArgumentError, match="prompt"):
        Request([], 4)
    with pytest.raises(ArgumentError, match="prompt"):
        scheduler.submit(Request([10**6], 4))
    with pytest.raises(ArgumentError, match="max_seq"):
        scheduler.submit(Request([1] * 100, 4))
