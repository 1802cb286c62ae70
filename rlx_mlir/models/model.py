"""`load_gguf`: a GGUF language model, compiled, with generation and chat.

```python
lm = rlx.models.load_gguf("smollm2-135m-instruct", max_seq=2048)
print(lm.generate("The capital of France is", max_new_tokens=16))
print(lm.chat([{"role": "user", "content": "Hi!"}]))
lm.logits(ids)                         # [len(ids), n_vocab] from position 0
lm.prefill(ids); lm.step(token_id)     # KV-cached decoding, logits of the last position
```

Loading reads and checks the whole file (architecture, tensor types and shapes, tokenizer)
before compiling anything, so a bad file is a ModelError and never a half-built model.
The model is one graph (`rlx_mlir.models.architectures`) with the KV caches as state,
compiled once for every sequence length up to `max_seq`; its weights are the file's
quantized bytes. Rope tables, sampling and detokenization are numpy/Python around it.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlx_mlir.core.errors import ArgumentError
from rlx_mlir.models import arch_qwen35
from rlx_mlir.models.arch_gemma3 import GEMMA3_CHAT_TEMPLATE
from rlx_mlir.models.architectures import DecoderGraph, build_decoder, check_tensor_types
from rlx_mlir.models.batch import BATCH_SAMPLING, BatchItem, BatchRunner
from rlx_mlir.models.errors import ModelError
from rlx_mlir.models.fetch import KNOWN_MODELS, fetch
from rlx_mlir.models.gguf_file import GGUFFile, ModelConfig, read_gguf
from rlx_mlir.models.sampling import SamplingParams
from rlx_mlir.models.tokenizer import Tokenizer
from rlx_mlir.runnable import Runnable

ENGINES = ("jit", "reference")
IDS_ENTRY = "next_ids"
"""The decoder output that generation reads: the model's second entry returns only it."""
"""How the graph runs: compiled to native code, or by the numpy reference executor."""

CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
"""The template used when a file has none (llama.cpp's default, ChatML)."""


@dataclass
class GenerationStats:
    """Counts and wall-clock seconds of the last `generate`/`generate_ids`/`chat` call."""

    prompt_tokens: int = 0
    prompt_seconds: float = 0.0
    generated_tokens: int = 0
    generated_seconds: float = 0.0
    load_seconds: float = 0.0
    """Reading, checking and compiling the model (once, at load)."""
    finish_reasons: list[str] = field(default_factory=list)
    """`generate_batch`: why each prompt's generation ended ("stop" | "length")."""
    finish_reason: str | None = None
    """Why the last generation ended: "stop" (an end-of-generation token or a stop string)
    or "length" (`max_new_tokens` reached, or the cache's `max_seq`)."""

    @property
    def prompt_tokens_per_second(self) -> float:
        return self.prompt_tokens / self.prompt_seconds if self.prompt_seconds > 0 else 0.0

    @property
    def generated_tokens_per_second(self) -> float:
        return (self.generated_tokens / self.generated_seconds
                if self.generated_seconds > 0 else 0.0)


def load_gguf(path_or_name: str | os.PathLike, max_seq: int = 2048, threads: int | None = None,
              *, engine: str = "jit", exact_dequant: bool = False,
              slots: int = 1) -> LanguageModel:
    """The language model of a GGUF file (a path), or of a known model's name
    (`rlx.models.KNOWN_MODELS`, fetched once into the cache).

    max_seq: rows of the KV caches (the longest prompt + generation).
    threads: threads a call may use (default: all cores, capped by RLX_NUM_THREADS).
    engine: "jit" (native code) or "reference" (the numpy reference executor: slow, for tests).
    exact_dequant: quantized matrices multiply f32 activations (default: activations
    quantized to 8-bit blocks as llama.cpp does, `dequant_matmul(..., activations="q8")`,
    the same numbers on every CPU; docs/semantics.md, dequant_matmul).
    slots: sequences decoded together (batched decoding, `generate_batch` and `rlx-serve`):
    the KV caches hold `slots` sequences of `max_seq` rows each, and one native call
    advances all of them (llama, qwen2, qwen3, gemma3 and mamba files; qwen35 takes
    slots=1). `logits`/`prefill`/`step`/`reset`/`position` act on slot 0.
    """
    _check_int("max_seq", max_seq, 1)
    _check_slots(slots)
    if threads is not None:
        _check_int("threads", threads, 1)
    if engine not in ENGINES:
        raise ArgumentError(f"engine: expected one of {', '.join(ENGINES)}, got {engine!r}")
    start = time.perf_counter()
    file = read_gguf(_resolve(path_or_name))
    try:
        config, n_rot, rope_scale, freq_factors = _check_file(file)
        tokenizer = Tokenizer.from_gguf(file)
        decoder = build_decoder(config, file.tensors, max_seq=max_seq, n_rot=n_rot,
                                activations="f32" if exact_dequant else "q8",
                                slots=slots if slots > 1 else None)
        runner = _compile(decoder, decoder.params(file), engine, threads)
        mtp = None
        if decoder.mtp is not None:  # a qwen35 file's MTP layer: its own small graph
            mtp = arch_qwen35.compile_mtp(decoder, file, lambda d, p: _compile(d, p, engine, threads))
    finally:
        # The compiled model holds what it needs; a view still alive keeps the mapping.
        file.close()
    rope = _rope_tables(config.rope_theta, n_rot, max_seq, rope_scale, freq_factors)
    model = LanguageModel(config, tokenizer, decoder, runner, rope, Path(file.path), mtp=mtp)
    model.stats.load_seconds = time.perf_counter() - start
    return model


def _resolve(path_or_name: str | os.PathLike) -> Path:
    if isinstance(path_or_name, str) and path_or_name in KNOWN_MODELS:
        return fetch(path_or_name)
    if not isinstance(path_or_name, str | os.PathLike):
        raise ArgumentError(f"path_or_name: expected a path or a model name (str), got "
                            f"{type(path_or_name).__name__}")
    path = Path(path_or_name)
    if not path.exists():
        known = ", ".join(sorted(KNOWN_MODELS))
        raise ModelError(f"{path}: no such file, nor a known model name (known: {known})")
    return path


def _check_file(file: GGUFFile) -> tuple[ModelConfig, int, float, np.ndarray | None]:
    """Everything about the file that could fail, before any compilation: the config, its
    tensors and their types, and the rope parameters (n_rot, position scale, freq factors)."""
    config = file.check_model()
    check_tensor_types(config, file.tensors, str(file.path))
    if config.rope_style == "none":  # no attention, no rope (mamba)
        return config, 0, 1.0, None
    arch, meta = config.architecture, file.metadata
    n_rot = int(meta.get(f"{arch}.rope.dimension_count", config.head_dim))
    if n_rot % 2 or not 2 <= n_rot <= config.head_dim:
        raise ModelError(f"{file.path}: {arch}.rope.dimension_count is {n_rot}; expected an "
                         f"even number in [2, head_dim = {config.head_dim}]")
    scaling = str(meta.get(f"{arch}.rope.scaling.type", "none"))
    if scaling not in ("none", "linear"):
        raise ModelError(f"{file.path}: rope scaling {scaling!r} ({arch}.rope.scaling.type) "
                         f"is not supported; supported: none, linear")
    factor = float(meta.get(f"{arch}.rope.scaling.factor", 1.0)) if scaling == "linear" else 1.0
    if not factor > 0:
        raise ModelError(f"{file.path}: {arch}.rope.scaling.factor must be > 0, got {factor}")
    freq_factors = None
    if "rope_freqs.weight" in file.tensors:  # Llama 3.1 style per-frequency divisors
        freq_factors = np.asarray(file.array("rope_freqs.weight"), np.float64).reshape(-1)
        if freq_factors.size != n_rot // 2:
            raise ModelError(f"{file.path}: rope_freqs.weight has {freq_factors.size} values, "
                             f"expected n_rot/2 = {n_rot // 2}")
    return config, n_rot, 1.0 / factor, freq_factors


def _compile(decoder: DecoderGraph, params: Mapping[str, np.ndarray], engine: str,
             threads: int | None) -> Runnable:
    if engine == "reference":
        from rlx_mlir.reference import reference

        return reference(decoder.graph, params=params)
    from rlx_mlir.compiler import jit

    # a batched call holds a prefill chunk of up to max_seq rows and the others' steps
    rows = decoder.max_seq + (decoder.slots or 0)
    bounds = {name: rows for name in ("S", "R") if name in decoder.graph.symbols}
    if "B" in decoder.graph.symbols:  # sequences of a recurrent model's batched call
        bounds["B"] = decoder.slots or 1

    samples = IDS_ENTRY in decoder.graph.output_names  # a decoder; not an MTP head

    def compile_model():
        model = jit(decoder.graph, params=params, threads=threads, max_dims=bounds)
        if samples:
            model.entry(IDS_ENTRY)  # built now, so that the child's disk cache holds it too
        return model

    _compile_in_child(compile_model)
    model = compile_model()  # from the disk cache the child filled (or compiled here)
    for build in (model, model.entry(IDS_ENTRY)) if samples else (model,):
        build.release_stages()  # a 30-layer module's IR is tens of MB; mlir() rebuilds it
    return model


def _compile_in_child(compile_model: Any) -> None:
    """Compile in a forked child that fills the disk cache, so this process then loads
    machine code only: compiling a 30-layer model allocates a few hundred MB of IR that
    the allocator would otherwise keep. Without a disk cache (RLX_CACHE_DIR=off) or
    fork, or if the child fails, the caller compiles itself."""
    from rlx_mlir.backend import cache_dir

    if cache_dir() is None or not hasattr(os, "fork"):
        return
    pid = os.fork()
    if pid == 0:  # the child: compile, store, leave without running the parent's cleanup
        status = 1
        try:
            compile_model()
            status = 0
        finally:
            os._exit(status)
    os.waitpid(pid, 0)


def _rope_tables(theta: float, n_rot: int, max_seq: int, position_scale: float,
                 freq_factors: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin [max_seq, n_rot/2] of every position (computed in f64, stored f32)."""
    inv_freq = theta ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)
    if freq_factors is not None:
        inv_freq = inv_freq / freq_factors
    angles = np.outer(np.arange(max_seq, dtype=np.float64) * position_scale, inv_freq)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def _locked(method: Callable) -> Callable:
    """`method` run holding the model's lock (`LanguageModel.lock`)."""

    @functools.wraps(method)
    def locked(self: LanguageModel, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            return method(self, *args, **kwargs)

    return locked


class LanguageModel:
    """A compiled GGUF language model with its tokenizer (see `load_gguf`)."""

    def __init__(self, config: ModelConfig, tokenizer: Tokenizer, decoder: DecoderGraph,
                 runner: Runnable, rope: tuple[np.ndarray, np.ndarray], path: Path,
                 mtp: Any = None):
        self.config = config
        self.tokenizer = tokenizer
        self.path = path
        self.max_seq = decoder.max_seq
        self.graph = decoder.graph
        """The model's Graph (inputs ids, cos, sin, rows; KV caches as state)."""
        self.slots = decoder.slots or 1
        """Sequences the model decodes together (`load_gguf(..., slots=N)`)."""
        self.ragged = decoder.ragged
        """With slots: whether a batched call takes a ragged batch of token rows
        (transformers) or B sequences of S tokens each (recurrent models)."""
        self.slot0_writes = 0
        """Calls of the one-sequence API on slot 0 of a batched model (a serving engine
        reuses that slot's rows only if nobody else wrote them)."""
        self.runner = runner
        """The compiled model (or reference executor) the calls go to."""
        self._rope = "cos" in decoder.graph.inputs
        self._kv_cache = decoder.kv_cache and decoder.slots is None
        """Whether the runner keeps the position (a one-sequence model with KV caches)."""
        self._counted = 0
        """Tokens seen since the last reset, when the runner keeps no position: a model
        without KV cache, or slot 0 of a batched model (whose rows name their positions)."""
        self.stats = GenerationStats()
        self._cos, self._sin = rope
        run_ids = getattr(runner, "entry", None)  # the reference executor has one entry
        self.ids_runner = run_ids(IDS_ENTRY) if run_ids is not None else None
        """The model's entry that returns the drawn ids only (`CompiledGraph.entry`): no
        vocabulary-sized output; it shares the runner's state and position."""
        self._next_ids = np.empty(1, np.int32)
        """Where a generation step's call writes the drawn id: allocated once."""
        self.lock = threading.RLock()
        """Held by every public call (re-entrant): calls from several threads run one after
        another, never interleaving their tokens. Hold it to make several calls one."""
        self.mtp = mtp
        """The compiled multi-token-prediction head (qwen35 files with one), else None."""
        self._takes_last = "last" in self.graph.inputs
        """The graph keeps the last row's hidden state for the MTP head (input `last`)."""
        self._extra_rope = {name: _rope_tables(theta, decoder.n_rot, self.max_seq, scale, None)
                            for name, (theta, scale) in decoder.extra_rope.items()}

    def __repr__(self) -> str:
        c = self.config
        return (f"<LanguageModel {self.path.name}: {c.architecture}, {c.n_layer} layers, "
                f"d {c.n_embd}, vocab {c.n_vocab}, max_seq {self.max_seq}>")

    # --- forward passes ----------------------------------------------------------------

    @property
    def position(self) -> int:
        """How many tokens the KV cache holds (the position of the next one)."""
        return int(self.runner.position) if self._kv_cache else self._counted

    @_locked
    def reset(self) -> None:
        """Empty the KV cache (a recurrent model: zero its states; a batched model: slot 0)."""
        if self.slots == 1:  # a batched model's caches keep other slots' rows
            self.runner.reset()
        self._counted = 0

    def _advance(self, tokens: int) -> None:
        """After a successful call of `tokens` tokens (the runner counts them itself when
        the model has KV caches)."""
        if not self._kv_cache:
            self._counted += tokens

    @_locked
    def logits(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """Logits [len(ids), n_vocab] of every position of `ids`, from position 0 (the cache
        is reset first and holds `ids` after)."""
        tokens = self._tokens(ids)
        self.reset()
        return self._forward(tokens, np.arange(tokens.size, dtype=np.int32))[0]

    @_locked
    def prefill(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """Append `ids` to the KV cache; the logits [n_vocab] of the last one."""
        tokens = self._tokens(ids)
        return self._forward(tokens, np.array([tokens.size - 1], np.int32))[0][0]

    @_locked
    def step(self, token_id: int) -> np.ndarray:
        """One decode step: append `token_id`; its logits [n_vocab]."""
        if isinstance(token_id, bool) or not isinstance(token_id, int | np.integer):
            raise ArgumentError(f"token_id: expected an int, got {token_id!r}")
        return self.prefill([int(token_id)])

    def _tokens(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        array = np.asarray(ids)
        if array.ndim != 1 or array.size == 0:
            raise ArgumentError(f"ids: expected a non-empty 1-D sequence of token ids, got "
                                f"shape {array.shape}")
        if not np.issubdtype(array.dtype, np.integer):
            raise ArgumentError(f"ids: expected integer token ids, got dtype {array.dtype}")
        bad = (array < 0) | (array >= self.config.n_vocab)
        if bad.any():
            raise ArgumentError(f"ids: token id {int(array[bad][0])} at index "
                                f"{int(np.argmax(bad))} is out of range for a vocabulary of "
                                f"{self.config.n_vocab} tokens")
        return array.astype(np.int32)

    def _next_id(self, ids: np.ndarray, sampling: SamplingParams) -> int:
        """Append `ids` (checked int32) to the KV cache; the next token drawn in the
        graph (`g.sample` of the last row's logits): one id out of the native call, not
        the vocabulary's logits: the call runs the model's ids-only entry."""
        return self.draw_next_id(self._inputs(ids, np.array([ids.size - 1], np.int32), sampling))

    def draw_next_id(self, inputs: Mapping[str, np.ndarray]) -> int:
        """One call on `runner_inputs(...)` of a single row: the id drawn in the graph,
        through the ids-only entry (the full one on the reference executor)."""
        if self.ids_runner is None:
            return int(self.runner(**inputs)[1][0])
        self.ids_runner.run(**inputs, out=self._next_ids)
        return int(self._next_ids[0])

    def _forward(self, tokens: np.ndarray, rows: np.ndarray,
                 sampling: SamplingParams | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(logits [R, n_vocab], next ids [R]) of `rows` after appending `tokens`."""
        out = self.runner(**self._inputs(tokens, rows, sampling))
        self._advance(tokens.size)
        return out

    def _inputs(self, tokens: np.ndarray, rows: np.ndarray,
                sampling: SamplingParams | None) -> dict[str, np.ndarray]:
        """`runner_inputs` at the current position, once the cache is known to hold them."""
        start = self.position
        end = start + tokens.size
        if end > self.max_seq:
            raise ArgumentError(f"cache full: {tokens.size} tokens at position {start} need "
                                f"{end} rows but max_seq is {self.max_seq} (load_gguf(..., "
                                f"max_seq=...) or reset())")
        return self.runner_inputs(tokens, start, rows, sampling)

    def runner_inputs(self, tokens: np.ndarray, start: int, rows: np.ndarray,
                      sampling: SamplingParams | None = None) -> dict[str, np.ndarray]:
        """The runner's arguments for `tokens` (checked int32 ids) placed at position
        `start`, returning the logits of `rows` (indices into `tokens`) and the ids drawn
        from them with `sampling` (default greedy)."""
        end = start + tokens.size
        p = sampling or SamplingParams(temperature=0.0, top_k=0, top_p=1.0, seed=0)
        if self.slots > 1:  # slot 0 of the batched graph, drawing as the one-sequence one
            self.slot0_writes += 1
            inputs = BatchRunner(self).inputs([BatchItem(0, tokens, start, p, start)])
            if rows.size != 1 or rows[0] != tokens.size - 1:  # logits of other rows
                if not self.ragged:
                    raise ArgumentError(
                        f"logits of every position: this {self.config.architecture} model "
                        f"was loaded with slots={self.slots}, whose graph gives the last "
                        f"position's logits only; load it with slots=1")
                inputs |= {"rows": rows.astype(np.int32), **{
                    name: np.repeat(inputs[name], rows.size) for name in BATCH_SAMPLING}}
            return inputs
        inputs = {"ids": tokens, "rows": rows, "temperature": np.float32(p.temperature),
                  "top_k": np.int32(min(p.top_k, 2**31 - 1)), "top_p": np.float32(p.top_p),
                  "seed": np.int64(p.seed or 0)}
        inputs |= self.rope_inputs(slice(start, end))
        if self._takes_last:
            inputs["last"] = np.array([tokens.size - 1], np.int32)
        return inputs

    def rope_inputs(self, positions: slice | np.ndarray) -> dict[str, np.ndarray]:
        """The graph's rope inputs (cos, sin and the extra tables') for the rows at
        `positions` (a slice of positions, or one position per row)."""
        if not self._rope:
            return {}
        inputs = {"cos": self._cos[positions], "sin": self._sin[positions]}
        for name, tables in self._extra_rope.items():  # e.g. gemma3's local layers' rope
            inputs |= {f"{part}_{name}": table[positions]
                       for part, table in zip(("cos", "sin"), tables, strict=True)}
        return inputs

    def rope_rows(self, start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """The rope tables' rows (cos, sin) of positions [start, end)."""
        return self._cos[start:end], self._sin[start:end]

    @_locked
    def mtp_logits(self, next_id: int) -> np.ndarray:
        """The multi-token-prediction head's logits [n_vocab] for the token after
        `next_id`, from the last position's hidden state (before the output norm) after
        `prefill`/`step`, and `next_id`'s embedding (SPEC "More model families");
        ModelError when the file has no MTP layer."""
        if self.mtp is None:
            raise ModelError(f"{self.path.name}: this {self.config.architecture} model has no "
                             f"multi-token-prediction layer (no nextn tensors), so no "
                             f"mtp_logits")
        if isinstance(next_id, bool) or not isinstance(next_id, int | np.integer) \
                or not 0 <= next_id < self.config.n_vocab:
            raise ArgumentError(f"next_id: expected a token id in [0, {self.config.n_vocab}), "
                                f"got {next_id!r}")
        return self.mtp.logits(self, int(next_id))

    @_locked
    def profile(self, ids: Sequence[int] | np.ndarray, repeat: int = 5) -> Any:
        """Per-kernel profiles of a prefill of `ids` (from an empty cache) and of one
        decode step after it, grouped by layer and by phase (`.to_markdown()`,
        `.by_phase()`, `.prefill`, `.decode`: see `rlx_mlir.profiling`). The cache holds
        `ids` afterwards."""
        from rlx_mlir.profiling import profile_language_model

        return profile_language_model(self, self._tokens(ids), repeat)

    # --- generation ----------------------------------------------------------------------

    @_locked
    def generate(self, prompt: str, max_new_tokens: int = 64, temperature: float = 0.0,
                 top_k: int = 40, top_p: float = 0.95, seed: int | None = None,
                 stop: str | Sequence[str] | None = None,
                 stream: Callable[[str], Any] | None = None) -> str:
        """The continuation of `prompt` (tokenized with BOS as the file says): greedy at
        temperature 0; ends at an end-of-generation token, a stop string (not included in
        the text) or after `max_new_tokens`. `stream(piece)` gets every new piece of text as
        it is produced; the pieces concatenate to the returned text."""
        if not isinstance(prompt, str):
            raise ArgumentError(f"prompt: expected a str, got {type(prompt).__name__}")
        ids = self.tokenizer.encode(prompt)
        if not ids:
            raise ArgumentError("prompt: the empty prompt has no tokens (this model's "
                                "tokenizer adds no BOS); give some text")
        return self._generate_text(ids, max_new_tokens, temperature, top_k, top_p, seed, stop,
                                   stream)

    @_locked
    def generate_ids(self, ids: Sequence[int] | np.ndarray, max_new_tokens: int = 64,
                     temperature: float = 0.0, top_k: int = 40, top_p: float = 0.95,
                     seed: int | None = None) -> list[int]:
        """The new token ids after the prompt `ids` (from position 0), ending at an
        end-of-generation token (included) or after `max_new_tokens`."""
        sampling = SamplingParams(temperature, top_k, top_p, seed).check().seeded()
        new: list[int] = []
        self._decode(self._tokens(ids), max_new_tokens, sampling, lambda t: new.append(t))
        return new

    @_locked
    def generate_batch(self, prompts: Sequence[str], max_new_tokens: int = 64,
                       temperature: float | Sequence[float] = 0.0,
                       top_k: int | Sequence[int] = 40, top_p: float | Sequence[float] = 0.95,
                       seed: int | None | Sequence[int | None] = None,
                       stop: str | Sequence[str] | None = None) -> list[str]:
        """The continuation of every prompt (as `generate` gives it alone), decoded
        together: up to `slots` sequences advance in each native call, a waiting prompt
        joins when one ends, and prompts are prefilled in chunks mixed with the others'
        steps. Each sampling argument is one value for all prompts or a list of one per
        prompt (a seeded prompt gets the text `generate(prompt, seed=...)` gives). Needs
        a model loaded with slots > 1. `stats.finish_reasons` has one reason per prompt."""
        if isinstance(prompts, str) or not isinstance(prompts, Sequence) \
                or not all(isinstance(p, str) for p in prompts):
            raise ArgumentError(f"prompts: expected a list of str, got {prompts!r:.80}")
        _check_int("max_new_tokens", max_new_tokens, 0)
        n = len(prompts)
        options = {name: _per_prompt(name, value, n) for name, value in (
            ("temperature", temperature), ("top_k", top_k), ("top_p", top_p), ("seed", seed))}
        samplings = [SamplingParams(*(options[k][i] for k in ("temperature", "top_k", "top_p",
                                                              "seed"))).check().seeded()
                     for i in range(n)]
        stops = check_stop(stop)
        ids = []
        for i, prompt in enumerate(prompts):
            tokens = self.tokenizer.encode(prompt)
            if not tokens or len(tokens) > self.max_seq:
                raise ArgumentError(f"prompts[{i}]: {len(tokens)} tokens; expected 1 to "
                                    f"max_seq = {self.max_seq}")
            ids.append(self._tokens(tokens))
        if self.slots == 1:  # one sequence at a time
            texts, reasons = [], []
            for tokens, sampling in zip(ids, samplings, strict=True):
                text = StopText(self.tokenizer, stops, None)
                self._decode(tokens, max_new_tokens, sampling, text.push)
                texts.append(text.finish())
                reasons.append(self.stats.finish_reason or "length")
            self.stats.finish_reasons = reasons
            return texts
        texts = [StopText(self.tokenizer, stops, None) for _ in range(n)]
        counts = [0] * n

        def on_token(index: int, token: int) -> bool:
            counts[index] += 1
            return texts[index].push(token)

        start = time.perf_counter()
        reasons = ["length"] * n
        if max_new_tokens and n:
            reasons = BatchRunner(self).decode(ids, samplings, max_new_tokens, on_token)
        stats = self.stats
        stats.prompt_tokens = sum(int(p.size) for p in ids)
        stats.generated_tokens = sum(counts)
        stats.prompt_seconds, stats.generated_seconds = 0.0, time.perf_counter() - start
        stats.finish_reasons = reasons
        stats.finish_reason = reasons[-1] if reasons else None
        return [t.finish() for t in texts]

    @_locked
    def chat(self, messages: Sequence[Mapping[str, str]], max_new_tokens: int = 256,
             temperature: float = 0.0, top_k: int = 40, top_p: float = 0.95,
             seed: int | None = None, stop: str | Sequence[str] | None = None,
             stream: Callable[[str], Any] | None = None) -> str:
        """The assistant's reply to `messages` ([{"role": ..., "content": ...}, ...]) formatted
        with the file's chat template (when it has none: gemma3's turns for a gemma3
        file, else ChatML), then `generate`d."""
        text = self.chat_prompt(messages)
        tok = self.tokenizer
        # A template that writes BOS itself must not get a second one from the tokenizer.
        writes_bos = tok.bos_id is not None and text.startswith(tok.tokens[tok.bos_id])
        ids = tok.encode(text, special=True, add_bos=False if writes_bos else None)
        return self._generate_text(ids, max_new_tokens, temperature, top_k, top_p, seed,
                                   stop, stream)

    def chat_prompt(self, messages: Sequence[Mapping[str, str]]) -> str:
        """The text the chat template makes of `messages`, ending with the assistant's cue."""
        messages = _check_messages(messages)
        tok = self.tokenizer
        template = _compile_template(tok.chat_template or _default_template(self.config))
        bos = tok.tokens[tok.bos_id] if tok.bos_id is not None else ""
        eos = tok.tokens[tok.eos_id] if tok.eos_id is not None else ""
        try:
            text = template.render(messages=messages, add_generation_prompt=True,
                                   bos_token=bos, eos_token=eos)
        except Exception as error:  # jinja2 errors and the template's raise_exception
            raise ModelError(f"the chat template failed on these messages: {error}") from error
        return text

    def _generate_text(self, ids: list[int], max_new_tokens: int, temperature: float,
                       top_k: int, top_p: float, seed: int | None,
                       stop: str | Sequence[str] | None,
                       stream: Callable[[str], Any] | None) -> str:
        sampling = SamplingParams(temperature, top_k, top_p, seed).check().seeded()
        text = StopText(self.tokenizer, check_stop(stop), stream)
        self._decode(self._tokens(ids), max_new_tokens, sampling, text.push)
        return text.finish()

    def _decode(self, prompt: np.ndarray, max_new_tokens: int, sampling: SamplingParams,
                on_token: Callable[[int], bool | None]) -> None:
        """Prefill `prompt` from position 0, then sample up to `max_new_tokens` tokens,
        calling `on_token(id)` for each (a true result stops); stops after an
        end-of-generation token or when the cache is full. Every call returns the next
        id drawn in the graph (`next_ids`), never the logits."""
        _check_int("max_new_tokens", max_new_tokens, 0)
        if prompt.size > self.max_seq:
            raise ArgumentError(f"the prompt has {prompt.size} tokens but max_seq is "
                                f"{self.max_seq}")
        stats = self.stats
        stats.prompt_tokens, stats.generated_tokens = int(prompt.size), 0
        self.reset()
        start = time.perf_counter()
        token = self._next_id(prompt, sampling)
        self._advance(prompt.size)
        stats.prompt_seconds = time.perf_counter() - start
        start = time.perf_counter()
        eog = self.tokenizer.eog_ids
        stats.finish_reason = "length"
        for count in range(max_new_tokens):
            stats.generated_tokens += 1
            if on_token(token) or token in eog:
                stats.finish_reason = "stop"
                break
            if count + 1 == max_new_tokens or self.position >= self.max_seq:
                break
            token = self._next_id(np.array([token], np.int32), sampling)
            self._advance(1)
        stats.generated_seconds = time.perf_counter() - start


class StopText:
    """The generated text, streamed piece by piece, cut before the first stop string.

    Text that might be the start of a stop string is held back until it is known not to
    be, so a streamed stop string never reaches the callback.
    """

    def __init__(self, tokenizer: Tokenizer, stop: list[str],
                 stream: Callable[[str], Any] | None):
        self._decoder = tokenizer.stream()
        self._eog = tokenizer.eog_ids
        self._stop = stop
        self._stream = stream
        self._text = ""
        self._emitted = 0
        self._stopped = False

    def push(self, token: int) -> bool:
        """Add a token; True once a stop string has been reached."""
        if token not in self._eog:
            self._text += self._decoder.push(token)
        return self._advance(final=False)

    def finish(self) -> str:
        if not self._stopped:
            self._text += self._decoder.flush()
            self._advance(final=True)
        return self._text[:self._emitted]

    def _advance(self, final: bool) -> bool:
        cut = min((found for found in (self._text.find(s) for s in self._stop) if found >= 0),
                  default=-1)
        if cut >= 0:
            self._text, self._stopped = self._text[:cut], True
            end = cut
        elif final:
            end = len(self._text)
        else:
            end = len(self._text) - self._held_back()
        if end > self._emitted:
            piece = self._text[self._emitted:end]
            self._emitted = end
            if self._stream is not None:
                self._stream(piece)
        return self._stopped

    def _held_back(self) -> int:
        """Length of the longest end of the text that begins some stop string."""
        longest = 0
        for s in self._stop:
            for n in range(min(len(s) - 1, len(self._text)), longest, -1):
                if self._text.endswith(s[:n]):
                    longest = n
                    break
        return longest


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ArgumentError(f"{name}: expected an int >= {minimum}, got {value!r}")


def _check_slots(slots: Any) -> None:
    _check_int("slots", slots, 1)


def _per_prompt(name: str, value: Any, n: int) -> list[Any]:
    """A sampling argument of `generate_batch` as one value per prompt."""
    if isinstance(value, list | tuple | np.ndarray):
        if len(value) != n:
            raise ArgumentError(f"{name}: expected one value or a list of {n} (one per "
                                f"prompt), got a list of {len(value)}")
        return list(value)
    return [value] * n


def check_stop(stop: str | Sequence[str] | None) -> list[str]:
    if stop is None:
        return []
    items = [stop] if isinstance(stop, str) else stop
    if not isinstance(items, Iterable) or not all(isinstance(s, str) and s for s in items):
        raise ArgumentError(f"stop: expected a non-empty string or a list of them, got {stop!r}")
    return list(items)


def _check_messages(messages: Any) -> list[dict[str, str]]:
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence) or not messages:
        raise ArgumentError(f"messages: expected a non-empty list of dicts with str 'role' "
                            f"and 'content', got {messages!r:.80}")
    checked = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str) \
                or not isinstance(message.get("content"), str):
            raise ArgumentError(f"messages[{i}]: expected a dict with str 'role' and "
                                f"'content', got {message!r:.80}")
        checked.append(dict(message))
    return checked


_TEMPLATES: dict[str, Any] = {}


def _default_template(config: ModelConfig) -> str:
    """The chat template of a file that has none: the architecture's own turn format where
    it has one (gemma3), else ChatML."""
    if config.architecture == "gemma3":
        return GEMMA3_CHAT_TEMPLATE
    return CHATML_TEMPLATE


def _compile_template(source: str) -> Any:
    """The jinja2 template of a chat template source, in a sandbox (as Hugging Face renders
    them: trim_blocks, lstrip_blocks, `raise_exception`)."""
    template = _TEMPLATES.get(source)
    if template is None:
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise ModelError(f"chat template: {message}")

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=["jinja2.ext.loopcontrols"])
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: time.strftime(fmt)
        try:
            template = _TEMPLATES[source] = env.from_string(source)
        except TemplateError as error:
            raise ModelError(f"the file's chat template does not parse: {error}") from error
    return template


__all__ = ["CHATML_TEMPLATE", "ENGINES", "GenerationStats", "LanguageModel", "StopText",
           "check_stop", "load_gguf"]
