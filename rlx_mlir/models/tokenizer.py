"""llama.cpp's tokenization of a GGUF file's vocabulary, built on Hugging Face `tokenizers`.

Two vocabulary kinds (`tokenizer.ggml.model`), as llama.cpp (src/llama-vocab.cpp) handles them:

- `gpt2`: byte-level BPE. The text is split by the regexes llama.cpp uses for the file's
  pre-tokenizer (`tokenizer.ggml.pre`: each regex splits the pieces of the previous one,
  keeping matches and gaps), each piece is mapped to GPT-2's byte-to-unicode alphabet, and
  merged by the ranks of `tokenizer.ggml.merges`; `llama-bpe` first takes a piece whole when
  it is in the vocabulary (llama.cpp's `ignore_merges`).
- `llama`: SentencePiece-style BPE with scores. Spaces become "▁", each text fragment gets
  a "▁" prefix (`add_space_prefix`, default on), adjacent symbols are merged highest score
  first, characters outside the vocabulary fall back to <0xXX> byte tokens. The merges are
  derived from the scores (every split of a token into two vocabulary tokens, ranked by
  the token's score), the same conversion Hugging Face uses for SentencePiece BPE models.

Special tokens are matched in the text before anything else, as llama.cpp's
`tokenizer_st_partition`: user-defined tokens always, control (and unknown) tokens only with
`encode(text, special=True)`. Decoding is llama.cpp's `token_to_piece` per token (control
tokens render empty unless `special=True`), concatenated as bytes and read as UTF-8; for
`add_space_prefix` vocabularies the first leading space is removed. llama.cpp's optional
`clean_spaces` post-processing is not applied, so `decode(encode(text)) == text`.

Known approximations (not hit by ordinary text): SentencePiece merges of equal score are
ordered by token id rather than by position; merges whose result is not in the vocabulary
are dropped; llama.cpp's first-found rule for control-looking token texts marks all of them.
"""

from __future__ import annotations

import codecs
import functools
import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tokenizers import AddedToken, Regex, models, normalizers, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

from rlx_mlir.models.errors import ModelError
from rlx_mlir.models.gguf_file import GGUFFile, read_gguf

# llama_token_type values stored in tokenizer.ggml.token_type.
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

_GPT2_SPLIT = ("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)")
_LLAMA3_SPLIT = ("(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
                 "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
                 "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
_QWEN2_SPLIT = ("(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
                "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
                "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


@dataclass(frozen=True)
class PreTokenizer:
    """llama.cpp's handling of one `tokenizer.ggml.pre` value."""

    regexes: tuple[str, ...]
    ignore_merges: bool = False
    add_bos: bool = False
    """The default of add_bos_token for this pre-tokenizer (the file's key overrides it)."""


_DEFAULT = PreTokenizer(("[\\p{P}\\$\\+<=>\\^~\\|]+", _GPT2_SPLIT, "\\p{N}+", "[0-9][0-9][0-9]"))
_GPT2 = PreTokenizer((_GPT2_SPLIT,))
_SMOLLM = PreTokenizer(("\\p{N}", _GPT2_SPLIT))
_LLAMA3 = PreTokenizer((_LLAMA3_SPLIT,), ignore_merges=True, add_bos=True)
_QWEN2 = PreTokenizer((_QWEN2_SPLIT,))
_QWEN35 = PreTokenizer((  # llama.cpp's LLAMA_VOCAB_PRE_TYPE_QWEN35 (letters with marks)
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?"
    "[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",))

PRE_TOKENIZERS: dict[str, PreTokenizer] = {
    "default": _DEFAULT,
    "gpt-2": _GPT2, "phi-2": _GPT2, "jina-es": _GPT2, "jina-de": _GPT2, "mpt": _GPT2,
    "olmo": _GPT2,
    "smollm": _SMOLLM, "starcoder": _SMOLLM, "refact": _SMOLLM, "codeshell": _SMOLLM,
    "llama-bpe": _LLAMA3, "llama3": _LLAMA3, "llama-v3": _LLAMA3, "falcon3": _LLAMA3,
    "pixtral": _LLAMA3,
    "qwen2": _QWEN2, "deepseek-r1-qwen": _QWEN2, "stablelm2": _QWEN2,
    "qwen35": _QWEN35,
}
"""The `tokenizer.ggml.pre` values supported, with llama.cpp's regexes for each."""

# Token texts llama.cpp forces to CONTROL (end-of-generation, end-of-turn and FIM markers).
_EOG_TEXTS = frozenset({
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "</s>",
    "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>", "<eos>",
})
_FIM_TEXTS = frozenset({
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "▁<PRE>",
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", "▁<SUF>",
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", "▁<MID>",
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "<|fim_repo|>", "<|repo_name|>",
    "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>",
})


@functools.cache
def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet reversed: the printable stand-in character -> its byte."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    chars = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


class Tokenizer:
    """Text <-> token ids exactly as llama.cpp tokenizes the vocabulary of a GGUF file.

    Build it with `Tokenizer.from_gguf(path)` or `Tokenizer.from_metadata(metadata)`; the
    HF tokenizer it wraps is private (its ids are llama.cpp's only through this class).
    """

    def __init__(self, *, model: str, tokens: Sequence[str], token_types: Sequence[int] | None,
                 scores: Sequence[float] | None = None, merges: Sequence[str] | None = None,
                 pre: str | None = None, bos_id: int | None = None, eos_id: int | None = None,
                 unk_id: int | None = None, eot_id: int | None = None,
                 add_bos: bool | None = None, add_space_prefix: bool | None = None,
                 chat_template: str | None = None):
        if model not in ("gpt2", "llama"):
            raise ModelError(f"unsupported tokenizer model {model!r} (tokenizer.ggml.model); "
                             f"supported: 'gpt2' (byte-level BPE), 'llama' (SentencePiece BPE)")
        self.model = model
        self.chat_template = chat_template
        """The file's jinja2 chat template (`tokenizer.chat_template`), if it has one."""
        self.tokens = [text if text else f"[EMPTY_{i}]" for i, text in enumerate(tokens)]
        self.token_types = _llama_cpp_token_types(self.tokens, token_types)
        if model == "gpt2":
            self._init_byte_level(merges or [], pre or "default", add_bos, bos_id, eos_id)
        else:
            self._init_sentencepiece(scores, add_space_prefix, add_bos, bos_id, eos_id, unk_id)
        self.eog_ids = frozenset(
            [i for i, text in enumerate(self.tokens) if text in _EOG_TEXTS]
            + [i for i in (self.eos_id, eot_id) if i is not None and 0 <= i < len(self.tokens)])
        """Ids that end generation: EOS, EOT and the end-of-turn texts llama.cpp knows."""
        self._add_special_tokens()
        self._pieces: list[bytes | None] = [None] * len(self.tokens)
        self._lock = threading.Lock()

    @classmethod
    def from_metadata(cls, metadata: dict[str, Any]) -> Tokenizer:
        """The tokenizer described by the `tokenizer.ggml.*` keys of a GGUF file's metadata."""
        def get(key: str) -> Any:
            return metadata.get(f"tokenizer.ggml.{key}")

        model, tokens = get("model"), get("tokens")
        if model is None or tokens is None:
            raise ModelError("the file has no tokenizer (tokenizer.ggml.model and "
                             "tokenizer.ggml.tokens are required)")
        types = get("token_type")
        if types is not None and len(types) < len(tokens):
            raise ModelError(f"tokenizer.ggml.token_type has {len(types)} entries for "
                             f"{len(tokens)} tokens")
        scores = get("scores")
        if model == "gpt2" and get("merges") is None:
            raise ModelError("a 'gpt2' tokenizer needs tokenizer.ggml.merges")
        return cls(model=str(model), tokens=list(tokens),
                   token_types=None if types is None else np.asarray(types).tolist(),
                   scores=None if scores is None else np.asarray(scores, np.float32).tolist(),
                   merges=get("merges"), pre=get("pre"), bos_id=get("bos_token_id"),
                   eos_id=get("eos_token_id"), unk_id=get("unknown_token_id"),
                   eot_id=get("eot_token_id"), add_bos=get("add_bos_token"),
                   add_space_prefix=get("add_space_prefix"),
                   chat_template=metadata.get("tokenizer.chat_template"))

    @classmethod
    def from_gguf(cls, source: str | os.PathLike | GGUFFile) -> Tokenizer:
        """The tokenizer of a GGUF file (a path or an open GGUFFile)."""
        if isinstance(source, GGUFFile):
            return cls.from_metadata(source.metadata)
        with read_gguf(source) as file:
            return cls.from_metadata(file.metadata)

    # --- public API ---------------------------------------------------------------------

    @property
    def n_vocab(self) -> int:
        return len(self.tokens)

    def encode(self, text: str, special: bool = False, add_bos: bool | None = None) -> list[int]:
        """Token ids of `text` as llama.cpp's `llama_tokenize` gives them.

        special: match control tokens written in the text (`<|im_start|>`) to their ids
            (llama.cpp's parse_special); otherwise they are tokenized as plain text.
        add_bos: prepend BOS (default: as the file says, `tokenizer.ggml.add_bos_token`).
        """
        with self._lock:  # encode_special_tokens is state of the shared HF tokenizer
            self._hf.encode_special_tokens = not special
            ids = self._hf.encode(text, add_special_tokens=False).ids if text else []
        if self.add_bos if add_bos is None else add_bos:
            ids.insert(0, self.bos_id)
        return ids

    def decode(self, ids: Iterable[int], special: bool = False) -> str:
        """The text of `ids` (invalid UTF-8, e.g. a cut multi-byte character, becomes U+FFFD).

        special: render control tokens (BOS, `<|im_end|>`) as their text; by default they
        render as nothing, as llama.cpp's `token_to_piece` does.
        """
        stream = self.stream(special=special)
        return "".join(stream.push(i) for i in ids) + stream.flush()

    def stream(self, special: bool = False) -> TokenStream:
        """An incremental decoder: `push(id)` returns the text completed so far, holding back
        the bytes of a multi-byte character split between tokens until it is whole."""
        return TokenStream(self, special)

    def piece(self, token_id: int, special: bool = False) -> bytes:
        """The bytes of one token, llama.cpp's `token_to_piece` (no leading-space removal)."""
        if not 0 <= token_id < len(self.tokens):
            raise ModelError(f"token id {token_id} is out of range for a vocabulary of "
                             f"{len(self.tokens)} tokens")
        kind = self.token_types[token_id]
        if kind in (CONTROL, UNKNOWN):
            return self.tokens[token_id].encode() if special else b""
        cached = self._pieces[token_id]
        if cached is None:
            cached = self._pieces[token_id] = self._render(token_id, kind)
        return cached

    # --- construction -------------------------------------------------------------------

    def _init_byte_level(self, merges: Sequence[str], pre: str, add_bos: bool | None,
                         bos_id: int | None, eos_id: int | None) -> None:
        if pre not in PRE_TOKENIZERS:
            raise ModelError(f"unsupported pre-tokenizer {pre!r} (tokenizer.ggml.pre); "
                             f"supported: {', '.join(sorted(PRE_TOKENIZERS))}")
        self.pre = pre
        defaults = PRE_TOKENIZERS[pre]
        # llama.cpp's BPE never prepends a space, whatever tokenizer.ggml.add_space_prefix
        # says, so decoding must not strip one either.
        self.add_space_prefix = False
        self.add_bos = defaults.add_bos if add_bos is None else bool(add_bos)
        self.bos_id = _valid_id(bos_id, 11, len(self.tokens))  # llama.cpp's BPE defaults
        self.eos_id = _valid_id(eos_id, 11, len(self.tokens))
        self._hf = self._build_byte_level(merges, defaults)

    def _init_sentencepiece(self, scores: Sequence[float] | None, add_space_prefix: bool | None,
                            add_bos: bool | None, bos_id: int | None, eos_id: int | None,
                            unk_id: int | None) -> None:
        self.pre = None
        self.add_space_prefix = True if add_space_prefix is None else bool(add_space_prefix)
        self.add_bos = True if add_bos is None else bool(add_bos)
        self.bos_id = _valid_id(bos_id, 1, len(self.tokens))
        self.eos_id = _valid_id(eos_id, 2, len(self.tokens))
        self._hf = self._build_sentencepiece(scores, _valid_id(unk_id, 0, len(self.tokens)))

    def _vocab(self) -> dict[str, int]:
        return {text: i for i, text in enumerate(self.tokens)}

    def _build_byte_level(self, merges: Sequence[str], pre: PreTokenizer) -> HFTokenizer:
        vocab = self._vocab()
        pairs = []
        for merge in merges:
            split = merge.find(" ", 1)
            if split < 0:
                continue
            left, right = merge[:split], merge[split + 1:]
            # tokenizers requires both parts and the result in the vocabulary.
            if left in vocab and right in vocab and left + right in vocab:
                pairs.append((left, right))
        hf = HFTokenizer(models.BPE(vocab=vocab, merges=pairs, ignore_merges=pre.ignore_merges))
        splits = [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in pre.regexes]
        hf.pre_tokenizer = pre_tokenizers.Sequence(
            [*splits, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        return hf

    def _build_sentencepiece(self, scores: Sequence[float] | None, unk_id: int) -> HFTokenizer:
        vocab = self._vocab()
        score = list(scores) if scores is not None else [0.0] * len(self.tokens)
        ranked = []
        for token_id, text in enumerate(self.tokens):
            if vocab.get(text) != token_id:
                continue
            for cut in range(1, len(text)):
                if text[:cut] in vocab and text[cut:] in vocab:
                    ranked.append((-score[token_id], token_id, cut, text))
        ranked.sort()
        pairs = [(text[:cut], text[cut:]) for _, _, cut, text in ranked]
        unk = self.tokens[unk_id] if unk_id is not None else None
        hf = HFTokenizer(models.BPE(vocab=vocab, merges=pairs, unk_token=unk, byte_fallback=True,
                                    fuse_unk=False))
        escape = [normalizers.Replace(" ", "▁")]
        if self.add_space_prefix:
            escape.insert(0, normalizers.Prepend("▁"))
        hf.normalizer = normalizers.Sequence(escape)
        return hf

    def _add_special_tokens(self) -> None:
        controls, user_defined = [], []
        for text, kind in zip(self.tokens, self.token_types, strict=True):
            if kind in (CONTROL, UNKNOWN):
                controls.append(AddedToken(text, special=True, normalized=False))
            elif kind == USER_DEFINED:
                user_defined.append(AddedToken(text, special=False, normalized=False))
        self._hf.add_special_tokens(controls)
        self._hf.add_tokens(user_defined)

    def _render(self, token_id: int, kind: int) -> bytes:
        text = self.tokens[token_id]
        if kind == USER_DEFINED:
            return text.encode()
        if kind == BYTE:
            return bytes([int(text[3:-1], 16)]) if text.startswith("<0x") else text.encode()
        if kind != NORMAL:
            return b""  # unused/undefined tokens render as nothing in llama.cpp
        if self.model == "llama":
            return text.replace("▁", " ").encode()
        table = _byte_decoder()
        return b"".join(bytes([table[c]]) if c in table else c.encode() for c in text)


class TokenStream:
    """Streaming detokenizer of a Tokenizer (see `Tokenizer.stream`)."""

    def __init__(self, tokenizer: Tokenizer, special: bool = False):
        self.tokenizer = tokenizer
        self.special = special
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._strip_space = tokenizer.add_space_prefix

    def push(self, token_id: int) -> str:
        """Add one token; the text that is now complete (possibly empty)."""
        piece = self.tokenizer.piece(int(token_id), self.special)
        if self._strip_space and piece:
            # The "▁" the tokenizer put before the text is not part of it.
            self._strip_space = False
            if piece.startswith(b" "):
                piece = piece[1:]
        return self._utf8.decode(piece)

    def flush(self) -> str:
        """The held-back bytes of an unfinished character (as U+FFFD), and reset."""
        return self._utf8.decode(b"", final=True)


def _valid_id(value: Any, default: int | None, n_tokens: int) -> int | None:
    """llama.cpp's special-id rule: the file's id when in range, else the default when in
    range, else none."""
    for candidate in (value, default):
        if candidate is not None and 0 <= int(candidate) < n_tokens:
            return int(candidate)
    return None


def _llama_cpp_token_types(tokens: Sequence[str], types: Sequence[int] | None) -> list[int]:
    """Token types as llama.cpp uses them: the file's, with end-of-generation and FIM texts
    forced to CONTROL and gpt-oss's channel markers to USER_DEFINED."""
    kinds = [int(t) for t in types[:len(tokens)]] if types is not None else [NORMAL] * len(tokens)
    for i, text in enumerate(tokens):
        if text in _EOG_TEXTS or text in _FIM_TEXTS:
            kinds[i] = CONTROL
        elif text in ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"):
            kinds[i] = USER_DEFINED
    return kinds
