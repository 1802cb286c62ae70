"""Batched decoding (`load_gguf(..., slots=N)`): every sequence of a batched call gets the
logits it gets decoded alone (within 1e-3 of their largest magnitude), `generate_batch`
gives each prompt its `generate` text (greedy and seeded), prefill chunks mixed with
decode steps change nothing, slot 0 serves the one-sequence API, and the serving
engine runs several requests per native call with prompt caching.

Tiny random models (tests/gguf_models.py): llama (q8 activations), qwen3 and gemma3
(sliding windows, exact dequantization), each compiled once alone and once with slots.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from gguf_models import write_tiny_model
from mamba_models import random_mamba, write_mamba_gguf

from rlx_mlir.core.errors import ArgumentError
from rlx_mlir.models import load_gguf
from rlx_mlir.models.batch import BatchItem, BatchRunner
from rlx_mlir.models.errors import BatchingUnsupported
from rlx_mlir.models.sampling import SamplingParams
from rlx_mlir.serving import BatchedEngine, Request, Scheduler, log_softmax

MAX_SEQ, SLOTS = 40, 4
PROMPTS = ["hello the cat", "the mat on the", "world sat", "hello world", "cat",
           "on the mat the cat sat"]
GEMMA3_KEYS = {"gemma3.attention.sliding_window": 5,
               "gemma3.attention.sliding_window_pattern": 2,
               "gemma3.rope.freq_base_swa": 500.0}
ARCHS = {"llama": ({}, False), "qwen3": ({}, True), "gemma3": (GEMMA3_KEYS, True)}


@pytest.fixture(scope="module", params=list(ARCHS))
def models(request, tmp_path_factory):
    """(alone, batched): the same file loaded with one slot and with SLOTS."""
    extra, exact = ARCHS[request.param]
    path = write_tiny_model(tmp_path_factory.mktemp(request.param) / "tiny.gguf",
                            request.param, seed=11, extra=extra)
    alone = load_gguf(path, max_seq=MAX_SEQ, exact_dequant=exact)
    batched = load_gguf(path, max_seq=MAX_SEQ, exact_dequant=exact, slots=SLOTS)
    return alone, batched


def fresh_prefill(lm, ids) -> np.ndarray:
    """The last position's logits of `ids` decoded alone from an empty cache."""
    lm.reset()
    return lm.prefill(ids)


def assert_logits_close(got: np.ndarray, want: np.ndarray) -> None:
    """Within 1e-3 of the largest magnitude (the SPEC's bound for a batched step)."""
    scale = float(np.abs(want).max())
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-3 * scale)


def test_each_row_of_a_batched_call_is_its_sequence_alone(models):
    alone, batched = models
    runner = BatchRunner(batched)
    prompts = [alone.tokenizer.encode(p) for p in PROMPTS[:3]]
    slots = [2, 0, 3]  # not in order: each row names its slot
    # one call prefills three prompts of different lengths (a ragged batch)
    items = [BatchItem(s, np.array(p, np.int32), 0) for s, p in zip(slots, prompts,
                                                                      strict=True)]
    ids, logits = runner.run(items, logits=True)
    for row, prompt in enumerate(prompts):
        assert_logits_close(logits[row], fresh_prefill(alone, prompt))
        assert ids[row] == int(np.argmax(logits[row]))
    # then decode steps of all three together, each against its sequence decoded alone
    histories = [list(p) + [t] for p, t in zip(prompts, ids, strict=True)]
    for _ in range(4):
        items = [BatchItem(s, np.array(h[-1:], np.int32), len(h) - 1)
                 for s, h in zip(slots, histories, strict=True)]
        ids, logits = runner.run(items, logits=True)
        for row, history in enumerate(histories):
            assert_logits_close(logits[row], fresh_prefill(alone, history))
            history.append(ids[row])


def test_a_row_gets_the_same_bits_alone_and_among_others(models):
    """A row's numbers do not depend on the other rows of its call (the q8 matmuls'
    column-lane tiles for every row count, quant_dot.py): a decode step of one sequence alone
    gives the logits it gets in a step of three, bit for bit."""
    _, batched = models
    runner = BatchRunner(batched)
    prompts = [batched.tokenizer.encode(p) for p in PROMPTS[:3]]
    ids, _ = runner.run([BatchItem(s, np.array(p, np.int32), 0) for s, p in enumerate(prompts)])
    steps = [BatchItem(s, np.array([t], np.int32), len(p))
             for s, (p, t) in enumerate(zip(prompts, ids, strict=True))]
    _, together = runner.run(steps, logits=True)
    for row, step in enumerate(steps):
        _, alone = runner.run([step], logits=True)  # rewrites the same cache row
        np.testing.assert_array_equal(alone[0], together[row])


def test_prefill_chunk_beside_decode_steps(models):
    alone, batched = models
    runner = BatchRunner(batched)
    first, second = (alone.tokenizer.encode(p) for p in PROMPTS[4:6])
    runner.run([BatchItem(1, np.array(first, np.int32), 0)])
    # slot 1 steps while slot 3's prompt arrives in two chunks
    half = len(second) // 2
    ids, logits = runner.run([BatchItem(1, np.array([7], np.int32), len(first)),
                              BatchItem(3, np.array(second[:half], np.int32), 0)], logits=True)
    assert_logits_close(logits[0], fresh_prefill(alone, first + [7]))
    ids, logits = runner.run([BatchItem(1, np.array([9], np.int32), len(first) + 1),
                              BatchItem(3, np.array(second[half:], np.int32), half)],
                             logits=True)
    assert_logits_close(logits[0], fresh_prefill(alone, first + [7, 9]))
    assert_logits_close(logits[1], fresh_prefill(alone, second))


def test_generate_batch_equals_generate(models):
    alone, batched = models
    expected = [alone.generate(p, max_new_tokens=10) for p in PROMPTS]
    got = batched.generate_batch(PROMPTS, max_new_tokens=10)  # 6 prompts, 4 slots
    assert got == expected
    assert len(batched.stats.finish_reasons) == len(PROMPTS)
    assert set(batched.stats.finish_reasons) <= {"stop", "length"}


def test_seeded_prompts_draw_what_they_draw_alone(models):
    alone, batched = models
    seeds = [3, 4, 5, 6, 7]
    temperatures = [0.9, 1.3, 0.0, 0.7, 1.0]
    expected = [alone.generate(p, max_new_tokens=8, temperature=t, seed=s, top_k=20,
                               top_p=0.9)
                for p, t, s in zip(PROMPTS, temperatures, seeds, strict=False)]
    got = batched.generate_batch(PROMPTS[:5], max_new_tokens=8, temperature=temperatures,
                                 seed=seeds, top_k=20, top_p=0.9)
    assert got == expected


def test_chunked_prefill_changes_nothing(models):
    alone, batched = models
    prompts = [np.array(alone.tokenizer.encode(p), np.int32) for p in PROMPTS]
    greedy = [SamplingParams(0.0, 0, 1.0, 0)] * len(prompts)
    for budget in (1, 3):
        tokens: dict[int, list[int]] = {i: [] for i in range(len(prompts))}
        BatchRunner(batched).decode(prompts, greedy, 6,
                                    lambda i, t, tokens=tokens: tokens[i].append(t),
                                    token_budget=budget)
        for i, prompt in enumerate(prompts):
            assert tokens[i] == alone.generate_ids(prompt, max_new_tokens=6)


def test_slot_zero_serves_the_one_sequence_api(models):
    alone, batched = models
    ids = alone.tokenizer.encode(PROMPTS[5])
    assert_logits_close(batched.logits(ids), alone.logits(ids))
    assert batched.position == len(ids)
    batched.reset()
    assert batched.position == 0
    assert_logits_close(batched.prefill(ids[:4]), fresh_prefill(alone, ids[:4]))
    assert_logits_close(batched.step(ids[4]), alone.step(ids[4]))
    assert batched.generate(PROMPTS[1], max_new_tokens=8) == alone.generate(
        PROMPTS[1], max_new_tokens=8)


def test_max_seq_ends_a_batched_generation_with_length(models):
    _, batched = models
    long = " ".join(["the cat"] * 12)
    n = len(batched.tokenizer.encode(long))
    batched.generate_batch([long, "cat"], max_new_tokens=100)
    reasons = batched.stats.finish_reasons
    assert n < MAX_SEQ and reasons[0] in ("length", "stop")
    assert batched.stats.generated_tokens <= (MAX_SEQ - n + 1) + 100


# --- errors ---------------------------------------------------------------------------------


def test_batched_errors(models):
    alone, batched = models
    with pytest.raises(ArgumentError, match="temperature: expected one value or a list of 2"):
        batched.generate_batch(["a", "b"], temperature=[0.5])
    with pytest.raises(ArgumentError, match="top_k"):
        batched.generate_batch(["a", "b"], top_k=[1, -2])
    with pytest.raises(ArgumentError, match="prompts"):
        batched.generate_batch("hello")
    runner = BatchRunner(batched)
    with pytest.raises(ArgumentError, match="slot"):
        runner.run([BatchItem(SLOTS, np.array([1], np.int32), 0)])
    with pytest.raises(ArgumentError, match="distinct slots"):
        runner.run([BatchItem(1, np.array([1], np.int32), 0)] * 2)
    with pytest.raises(ArgumentError, match="max_seq"):
        runner.run([BatchItem(1, np.array([1, 2], np.int32), MAX_SEQ - 1)])
    with pytest.raises(ArgumentError, match="slots > 1"):
        BatchRunner(alone)


def test_generate_batch_on_one_slot_runs_the_prompts_in_turn(models):
    alone, _ = models
    assert alone.generate_batch(PROMPTS[:2], max_new_tokens=5) == [
        alone.generate(p, max_new_tokens=5) for p in PROMPTS[:2]]
    assert len(alone.stats.finish_reasons) == 2


# --- a recurrent model: per-sequence states in slots -----------------------------------------


def recurrent_model(name: str, directory) -> str:
    """A tiny random file of the recurrent architecture `name`: Mamba, or Qwen3.5 (gated
    delta nets and one gated attention layer, partial rope, an MTP layer; built with
    transformers, so skipped without it)."""
    if name == "mamba":
        state, config = random_mamba()
        return write_mamba_gguf(directory / "mamba.gguf", state, config)
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from gguf_qwen35 import tiny_model, write_qwen35

    model, mtp = tiny_model()
    return write_qwen35(directory / "qwen35.gguf", model, mtp)


@pytest.fixture(scope="module", params=["mamba", "qwen35"])
def recurrent_pair(request, tmp_path_factory):
    """(alone, batched) of a recurrent model: B sequences × S tokens per batched call."""
    path = recurrent_model(request.param, tmp_path_factory.mktemp(request.param))
    return load_gguf(path, max_seq=MAX_SEQ), load_gguf(path, max_seq=MAX_SEQ, slots=SLOTS)


def test_recurrent_generate_batch_equals_generate(recurrent_pair):
    """6 prompts over 4 slots: each sequence's conv window and scan state live in its
    slot (a new sequence starts from zeros; Qwen3.5's KV rows at its own positions),
    decode steps of all go in one call."""
    alone, batched = recurrent_pair
    prompts = [p + " " + p for p in PROMPTS]  # a few more tokens: the states matter
    assert batched.generate_batch(prompts, max_new_tokens=8) == [
        alone.generate(p, max_new_tokens=8) for p in prompts]
    seeds, temperatures = [1, 2, 3], [0.8, 1.2, 0.0]
    assert batched.generate_batch(prompts[:3], max_new_tokens=6, temperature=temperatures,
                                  seed=seeds) == [
        alone.generate(p, max_new_tokens=6, temperature=t, seed=s)
        for p, t, s in zip(prompts, temperatures, seeds, strict=False)]


def test_recurrent_batched_logits_and_slot_zero(recurrent_pair):
    alone, batched = recurrent_pair
    runner = BatchRunner(batched)
    prompts = [alone.tokenizer.encode(p) for p in PROMPTS[:3]]
    # prompts of different lengths: one call per length, the slots independent
    ids, logits = runner.run([BatchItem(s, np.array(p, np.int32), 0)
                              for s, p in zip((3, 1, 0), prompts, strict=True)], logits=True)
    for row, prompt in enumerate(prompts):
        assert_logits_close(logits[row], fresh_prefill(alone, prompt))
    histories = [list(p) + [t] for p, t in zip(prompts, ids, strict=True)]
    # one decode call: three sequences at three different positions
    ids, logits = runner.run([BatchItem(s, np.array(h[-1:], np.int32), len(h) - 1)
                              for s, h in zip((3, 1, 0), histories, strict=True)], logits=True)
    for row, history in enumerate(histories):
        assert_logits_close(logits[row], fresh_prefill(alone, history))
    ids_5 = alone.tokenizer.encode(PROMPTS[5])
    batched.reset()
    assert_logits_close(batched.prefill(ids_5), fresh_prefill(alone, ids_5))
    with pytest.raises(ArgumentError, match="slots=1"):
        batched.logits(ids_5)


def test_recurrent_engine_reuses_no_prefix(recurrent_pair):
    alone, batched = recurrent_pair
    engine = BatchedEngine(batched)
    ids = alone.tokenizer.encode(PROMPTS[5])
    first, again = (Request(np.array(ids, np.int32), max_tokens=4) for _ in range(2))
    run_requests(engine, [first])
    run_requests(engine, [again])
    assert again.usage.cached_tokens == 0
    assert first.tokens == again.tokens == alone.generate_ids(ids, max_new_tokens=4)


def test_qwen35_mtp_head_reads_slot_zero(tmp_path):
    """A batched Qwen3.5 keeps each sequence's last hidden state in its slot; the MTP
    head (the one-sequence API) reads slot 0's, as the one-slot model reads its own."""
    path = recurrent_model("qwen35", tmp_path)
    alone, batched = (load_gguf(path, max_seq=16, slots=n) for n in (1, 2))
    ids = alone.tokenizer.encode(PROMPTS[1])
    for lm in (alone, batched):
        lm.reset()
        lm.prefill(ids)
    # another sequence in slot 1 leaves slot 0's hidden state alone
    BatchRunner(batched).run([BatchItem(1, np.array(ids[:2], np.int32), 0)])
    assert_logits_close(batched.mtp_logits(ids[0]), alone.mtp_logits(ids[0]))


def test_an_architecture_without_a_batched_graph_refuses_slots(monkeypatch, tmp_path):
    """An architecture module that declares no batched graph: `BatchingUnsupported`
    naming it and slots=1 (today every architecture has one)."""
    from rlx_mlir.models.gguf_file import ARCHITECTURE_MODULES

    path = recurrent_model("mamba", tmp_path)
    monkeypatch.setitem(ARCHITECTURE_MODULES, "mamba",
                        dataclasses.replace(ARCHITECTURE_MODULES["mamba"], batched=False))
    with pytest.raises(BatchingUnsupported, match="mamba.*slots=1"):
        load_gguf(path, max_seq=8, slots=2)


# --- the serving engine ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def llama_pair(tmp_path_factory):
    path = write_tiny_model(tmp_path_factory.mktemp("engine") / "tiny.gguf", "llama", seed=5)
    return load_gguf(path, max_seq=MAX_SEQ), load_gguf(path, max_seq=MAX_SEQ, slots=SLOTS)


def run_requests(engine, requests):
    scheduler = Scheduler(engine, max_queue=16).start()
    try:
        for request in requests:
            scheduler.submit(request)
        for request in requests:
            assert request.result(timeout=120).finish_reason in ("stop", "length")
    finally:
        scheduler.close()


def test_engine_runs_requests_together_with_their_alone_results(llama_pair):
    alone, batched = llama_pair
    engine = BatchedEngine(batched, token_budget=4)
    calls = []
    run = engine.runner.run
    engine.runner.run = lambda items, logits=False: (calls.append(len(items)),
                                                     run(items, logits))[1]
    requests = [Request(np.array(alone.tokenizer.encode(p), np.int32), max_tokens=8)
                for p in PROMPTS]
    run_requests(engine, requests)
    for prompt, request in zip(PROMPTS, requests, strict=True):
        assert request.text == alone.generate(prompt, max_new_tokens=8)
    assert max(calls) == SLOTS  # several sequences per native call


def test_engine_prompt_caching_and_logprobs(llama_pair):
    alone, batched = llama_pair
    engine = BatchedEngine(batched)
    ids = alone.tokenizer.encode(PROMPTS[5])
    first = Request(np.array(ids, np.int32), max_tokens=4)
    run_requests(engine, [first])
    again = Request(np.array(ids + [7], np.int32), max_tokens=4, logprobs=2)
    run_requests(engine, [again])
    assert again.usage.cached_tokens == len(ids)
    assert again.tokens == alone.generate_ids(ids + [7], max_new_tokens=4)
    logits = alone.logits(ids + [7] + again.tokens[:-1])
    want = [log_softmax(row)[t] for row, t in zip(logits[len(ids):], again.tokens,
                                                  strict=True)]
    np.testing.assert_allclose([lp.logprob for lp in again.token_logprobs], want, atol=1e-3)
    # slot 0 used through the one-sequence API is not reused by the engine afterwards
    batched.generate(PROMPTS[0], max_new_tokens=3)
    third = Request(np.array(ids, np.int32), max_tokens=4)
    run_requests(engine, [third])
    assert third.tokens == alone.generate_ids(ids, max_new_tokens=4)


def test_smollm2_batched_step_logits_equal_alone():
    """The real model (q8 activations): a batched call of three prompts, then three decode
    steps, each row within 1e-3 of its sequence decoded alone (the SPEC's bound)."""
    from rlx_mlir.models import ModelError, fetch

    try:
        path = fetch("smollm2-135m-instruct", quiet=True)
    except ModelError as error:
        pytest.skip(f"SmolLM2 is not cached and cannot be downloaded: {error}")
    alone = load_gguf(path, max_seq=256)
    runner = BatchRunner(load_gguf(path, max_seq=256, slots=4))
    prompts = [alone.tokenizer.encode(p) for p in (
        "The capital of France is", "Once upon a time, there was a", "def add(a, b):")]
    ids, logits = runner.run([BatchItem(s, np.array(p, np.int32), 0)
                              for s, p in enumerate(prompts)], logits=True)
    histories = [list(p) for p in prompts]
    for _ in range(3):
        for row, history in enumerate(histories):
            assert_logits_close(logits[row], fresh_prefill(alone, history))
            history.append(ids[row])
        ids, logits = runner.run([BatchItem(s, np.array(h[-1:], np.int32), len(h) - 1)
                                  for s, h in enumerate(histories)], logits=True)
