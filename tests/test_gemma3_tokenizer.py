"""Gemma 3's SentencePiece vocabulary (262,144 tokens, add_space_prefix off, byte fallback,
user-defined newline/tab/space runs, control tokens like <start_of_turn>) tokenized exactly as
llama.cpp's llama-tokenize does: ids recorded in tests/data/gemma3_tokens.json (how: its
"note", tests/data/record_gemma3_tokens.py), so no llama.cpp binary is needed here. Needs the
fetched file (skipped when it cannot be downloaded)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlx_mlir.models import ModelError, Tokenizer, fetch

RECORDED = json.loads((Path(__file__).parent / "data" / "gemma3_tokens.json").read_text())
CASES = RECORDED["cases"]


@pytest.fixture(scope="module")
def gemma3() -> Tokenizer:
    try:
        return Tokenizer.from_gguf(fetch("gemma3-270m", quiet=True))
    except ModelError as error:
        pytest.skip(f"Gemma 3 270M is not cached and cannot be downloaded: {error}")


def test_vocabulary_as_llama_cpp_reads_it(gemma3):
    assert (gemma3.model, gemma3.n_vocab, gemma3.add_space_prefix) == ("llama", 262144, False)
    assert (gemma3.bos_id, gemma3.eos_id, gemma3.add_bos) == (2, 1, True)
    assert {gemma3.tokens[i] for i in gemma3.eog_ids} >= {"<eos>", "<end_of_turn>"}


@pytest.mark.parametrize("case", CASES, ids=[f"{c['special']}-{c['text'][:24]!r}" for c in CASES])
def test_matches_llama_cpp(gemma3, case):
    assert gemma3.encode(case["text"], special=case["special"]) == case["ids"]


@pytest.mark.parametrize("case", [c for c in CASES if not c["special"]],
                         ids=[repr(c["text"][:24]) for c in CASES if not c["special"]])
def test_decode_inverts_encode(gemma3, case):
    assert gemma3.decode(case["ids"]) == case["text"]
