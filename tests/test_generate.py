"""Generation on top of rlx.models.load_gguf: sampling, generate/generate_ids/chat, streaming,
stop strings, EOS, stats, rlx-generate; and SmolLM2 itself (fetched once into the cache).

The tiny model is tests/gguf_models.py's random llama; greedy decoding is checked against the
argmax of the full forward, seeded sampling for reproducibility, and the text against the
tokenizer's decoding of the ids.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gguf_models import CHATML, write_tiny_model

from rlx_mlir.core.errors import ArgumentError
from rlx_mlir.models import LanguageModel, ModelError, Sampler, fetch, load_gguf

PROMPT = "hello the cat"
ENGINE = "jit"


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("gen") / "tiny.gguf", "llama", seed=7)


@pytest.fixture(scope="module")
def lm(tiny_path) -> LanguageModel:
    return load_gguf(tiny_path, max_seq=64, engine=ENGINE)


# --- sampling -----------------------------------------------------------------------------


def test_greedy_is_argmax_with_lowest_id_on_ties():
    assert Sampler()(np.array([0.0, 3.0, 1.0, 3.0])) == 1
    assert Sampler(temperature=0.0, seed=1)(np.array([-5.0, -1.0])) == 1


def test_top_k_and_top_p_limit_the_candidates():
    logits = np.log(np.array([0.5, 0.2, 0.15, 0.1, 0.05]))
    ids, probs = Sampler(temperature=1.0, top_k=3, top_p=1.0).distribution(logits)
    assert ids.tolist() == [0, 1, 2]
    np.testing.assert_allclose(probs, np.array([0.5, 0.2, 0.15]) / 0.85)
    ids, _ = Sampler(temperature=1.0, top_k=0, top_p=0.7).distribution(logits)
    assert ids.tolist() == [0, 1]  # 0.5 < 0.7 <= 0.5 + 0.2
    ids, probs = Sampler(temperature=0.5, top_k=0, top_p=1.0).distribution(logits)
    assert len(ids) == 5 and probs[0] == pytest.approx(0.25 / np.sum(np.array(
        [0.5, 0.2, 0.15, 0.1, 0.05]) ** 2))
    assert Sampler(temperature=2.0, top_k=1, seed=0)(logits[::-1]) == 4


def test_seeded_sampling_is_reproducible():
    logits = np.random.default_rng(0).standard_normal(100)
    draws = [[Sampler(1.0, 0, 1.0, seed=s)(logits) for _ in range(1)] for s in range(40)]
    first = Sampler(1.0, 0, 1.0, seed=5)
    again = Sampler(1.0, 0, 1.0, seed=5)
    assert [first(logits) for _ in range(20)] == [again(logits) for _ in range(20)]
    assert len({d[0] for d in draws}) > 5  # the seeds give different draws


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(temperature=-1.0), "temperature"), (dict(temperature=float("nan")), "temperature"),
    (dict(top_k=2.5), "top_k"), (dict(top_k=-3), "top_k"), (dict(top_p=0.0), "top_p"), (dict(top_p=1.5), "top_p"),
    (dict(seed=-3), "seed"), (dict(seed="x"), "seed"),
])
def test_bad_sampling_parameters(kwargs, fragment):
    with pytest.raises(ArgumentError, match=fragment):
        Sampler(**kwargs)


# --- generation ---------------------------------------------------------------------------


def test_greedy_generation_is_the_argmax_of_the_full_forward(lm):
    prompt = lm.tokenizer.encode(PROMPT)
    new = lm.generate_ids(prompt, max_new_tokens=12)
    assert 1 <= len(new) <= 12
    full = lm.logits(prompt + new)
    for i, token in enumerate(new):
        assert token == int(np.argmax(full[len(prompt) - 1 + i]))
    assert lm.generate_ids(prompt, max_new_tokens=12) == new  # deterministic
    assert lm.generate_ids(prompt, max_new_tokens=0) == []


def test_generate_text_is_the_decoded_ids_and_streams(lm):
    new = lm.generate_ids(lm.tokenizer.encode(PROMPT), max_new_tokens=10)
    pieces: list[str] = []
    text = lm.generate(PROMPT, max_new_tokens=10, stream=pieces.append)
    eog = lm.tokenizer.eog_ids
    assert text == lm.tokenizer.decode([t for t in new if t not in eog])
    assert "".join(pieces) == text
    stats = lm.stats
    assert stats.prompt_tokens == len(lm.tokenizer.encode(PROMPT))
    assert stats.generated_tokens == len(new)
    assert stats.prompt_seconds > 0 and stats.generated_tokens_per_second > 0
    assert stats.load_seconds > 0


def test_seeded_generation_is_reproducible(lm):
    runs = [lm.generate(PROMPT, max_new_tokens=12, temperature=1.5, top_k=0, top_p=1.0, seed=s)
            for s in (11, 11, 12, 13)]
    assert runs[0] == runs[1]
    assert len(set(runs[1:])) > 1


def test_sampled_generation_draws_in_the_graph(lm, tiny_path):
    """Decoding reads the id the graph's `sample` drew (Philox keyed by seed and
    position): the reference executor, running the same graph, draws the same text."""
    ref = load_gguf(tiny_path, max_seq=64, engine="reference")
    for kwargs in (dict(temperature=0.9, top_k=5, top_p=0.9, seed=4),
                   dict(temperature=1.3, top_k=0, top_p=1.0, seed=8), dict(temperature=0.0)):
        assert lm.generate(PROMPT, max_new_tokens=6, **kwargs) == \
            ref.generate(PROMPT, max_new_tokens=6, **kwargs), kwargs
    with pytest.raises(ArgumentError, match="top_k"):
        lm.generate(PROMPT, top_k=-3)


def test_stop_strings_cut_the_text_and_are_never_streamed(lm):
    full = lm.generate(PROMPT, max_new_tokens=16)
    assert len(full) >= 6, full
    stop = full[3:6]
    cut = full[: full.find(stop)]
    pieces: list[str] = []
    assert lm.generate(PROMPT, max_new_tokens=16, stop=[stop, "\x00never"],
                       stream=pieces.append) == cut
    assert "".join(pieces) == cut
    assert lm.generate(PROMPT, max_new_tokens=16, stop=stop) == cut


def test_generation_ends_at_eos(tmp_path, lm):
    """A file whose EOS is the 3rd greedy token (same weights: same seed) stops there."""
    prompt = lm.tokenizer.encode(PROMPT)
    new = lm.generate_ids(prompt, max_new_tokens=8)
    eos = new[2]
    path = write_tiny_model(tmp_path / "eos.gguf", "llama", seed=7, eos_token_id=eos)
    with_eos = load_gguf(path, max_seq=64, engine=ENGINE)
    assert with_eos.generate_ids(prompt, max_new_tokens=8) == new[: new.index(eos) + 1]
    text = with_eos.generate(PROMPT, max_new_tokens=8)
    assert text == with_eos.tokenizer.decode(new[: new.index(eos)])


def test_generation_stops_when_the_cache_is_full(tiny_path):
    small = load_gguf(tiny_path, max_seq=8, engine="reference")  # the loop, not the kernels
    prompt = small.tokenizer.encode(PROMPT)
    new = small.generate_ids(prompt, max_new_tokens=50)
    assert len(prompt) + len(new) <= 9  # the last token is sampled, never stepped
    with pytest.raises(ArgumentError, match="max_seq"):
        small.generate("x" * 20)


def test_chat_uses_the_files_template(lm):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}]
    text = lm.chat_prompt(messages)
    assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhello"
                    "<|im_end|>\n<|im_start|>assistant\n")
    ids = lm.tokenizer.encode(text, special=True)
    assert ids[0] == lm.tokenizer.bos_id and ids.count(lm.tokenizer.bos_id) == 3
    reply = lm.chat(messages, max_new_tokens=6)
    new = lm.generate_ids(ids, max_new_tokens=6)
    assert reply == lm.tokenizer.decode([t for t in new if t not in lm.tokenizer.eog_ids])


def test_chat_without_template_uses_chatml(tmp_path):
    path = write_tiny_model(tmp_path / "plain.gguf", seed=7, chat_template=None)
    plain = load_gguf(path, max_seq=64, engine="reference")
    assert plain.tokenizer.chat_template is None
    messages = [{"role": "user", "content": "hi"}]
    assert plain.chat_prompt(messages) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert CHATML  # the tiny files' template renders the same thing


def test_bad_template_and_messages(tmp_path, lm):
    with pytest.raises(ArgumentError, match="messages"):
        lm.chat("hello")
    with pytest.raises(ArgumentError, match=r"messages\[1\]"):
        lm.chat([{"role": "user", "content": "a"}, {"role": "user"}])
    failing = "{{ raise_exception('only user and assistant roles') }}"
    path = write_tiny_model(tmp_path / "strict.gguf", chat_template=failing)
    strict = load_gguf(path, max_seq=16, engine="reference")
    with pytest.raises(ModelError, match="only user and assistant roles"):
        strict.chat([{"role": "user", "content": "a"}])


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(max_new_tokens=-1), "max_new_tokens"), (dict(stop=[""]), "stop"),
    (dict(stop=3), "stop"), (dict(temperature=-1), "temperature"),
])
def test_bad_generate_arguments(lm, kwargs, fragment):
    with pytest.raises(ArgumentError, match=fragment):
        lm.generate(PROMPT, **kwargs)
    with pytest.raises(ArgumentError, match="prompt"):
        lm.generate(b"bytes")
    with pytest.raises(ArgumentError, match="empty prompt"):
        lm.generate("")


# --- rlx-generate ---------------------------------------------------------------------------


def rlx_generate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlx_mlir.tools.rlx_generate", *args],
                          capture_output=True, text=True, timeout=600)


def test_rlx_generate_streams_text_and_reports_speed(tiny_path, lm):
    result = rlx_generate(str(tiny_path), "-p", PROMPT, "-n", "8", "--max-seq", "64")
    assert result.returncode == 0, result.stderr
    assert result.stdout == PROMPT + lm.generate(PROMPT, max_new_tokens=8) + "\n"
    lines = result.stderr.strip().splitlines()
    assert lines[-2].startswith(f"prompt: {len(lm.tokenizer.encode(PROMPT))} tokens, ") and lines[-2].endswith(" tok/s")
    assert lines[-1].startswith("generation: ") and lines[-1].endswith(" tok/s")


def test_rlx_generate_chat_and_sampling_options(tiny_path, lm):
    result = rlx_generate(str(tiny_path), "-p", "hello", "--chat", "-n", "5", "--temp", "0.8",
                          "--top-k", "5", "--top-p", "0.9", "--seed", "3", "--threads", "1")
    assert result.returncode == 0, result.stderr
    want = lm.chat([{"role": "user", "content": "hello"}], max_new_tokens=5, temperature=0.8,
                   top_k=5, top_p=0.9, seed=3)
    assert result.stdout == want + "\n"


@pytest.mark.parametrize("args, fragment", [
    (["missing.gguf", "-p", "x"], "no such file"),
    (["{tiny}", "-p", "x", "-n", "-2"], "-n/--max-new-tokens"),
    (["{tiny}", "-p", "x", "--top-p", "2"], "--top-p"),
    (["{tiny}"], "-p/--prompt"),
    (["{tiny}", "-p", "x", "--max-seq", "0"], "--max-seq"),
])
def test_rlx_generate_bad_input_is_one_line_exit_2(tiny_path, args, fragment):
    result = rlx_generate(*[a.replace("{tiny}", str(tiny_path)) for a in args])
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("rlx-generate: error: ") and fragment in result.stderr


# --- SmolLM2 ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2() -> LanguageModel:
    try:
        path = fetch("smollm2-135m-instruct", quiet=True)
    except ModelError as error:
        pytest.skip(f"SmolLM2 is not cached and cannot be downloaded: {error}")
    return load_gguf(path, max_seq=256)


def test_smollm2_knows_the_capital_of_france(smollm2):
    text = smollm2.generate("The capital of France is", max_new_tokens=8)
    assert text.startswith(" Paris"), text
    assert smollm2.stats.prompt_tokens == 5


def test_smollm2_cached_decoding_equals_the_full_forward(smollm2):
    ids = smollm2.tokenizer.encode("The capital of France is")
    new = smollm2.generate_ids(ids, max_new_tokens=8)
    full = smollm2.logits(ids + new)
    assert [int(np.argmax(row)) for row in full[len(ids) - 1:-1]] == new[: len(full) - len(ids)]
    smollm2.reset()
    last = smollm2.prefill(ids)
    np.testing.assert_allclose(last, full[len(ids) - 1], atol=2e-3 * np.abs(full).max())
    for i, token in enumerate(new[:-1]):
        np.testing.assert_allclose(smollm2.step(token), full[len(ids) + i],
                                   atol=2e-3 * np.abs(full).max())


def test_smollm2_chat(smollm2):
    reply = smollm2.chat([{"role": "user", "content": "What is 2 + 2?"}], max_new_tokens=24)
    assert "4" in reply, reply
    assert smollm2.stats.generated_tokens < 24  # ended by <|im_end|>
