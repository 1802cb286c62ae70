"""The engine a `Scheduler` drives: it advances the active sequences by one token per step.

```python
engine = LanguageModelEngine(lm)          # slots = 1: one sequence per native call
engine.add(EngineSequence(id=1, prompt=ids, sampling=params))
outputs = engine.step()                   # {sequence id: StepOutput(token, logprob, top)}
engine.remove(1)
```

`Engine` is the whole interface the scheduler and the server see. `LanguageModelEngine`
runs one sequence on a `LanguageModel` (one KV cache: slots = 1); `BatchedEngine` runs up
to `slots` of them on a model loaded with slots > 1, every step one native call for all
(`engine_for(lm)` picks).

Prompt caching: a KV cache (a slot) keeps the rows of the last sequence after it ends; a
new sequence whose prompt starts with some of those tokens reuses them up to the end of
the shared prefix and prefills only the rest.
"""

from __future__ import annotations

import weakref
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

from rlx_mlir.core.errors import ArgumentError
from rlx_mlir.models.batch import DEFAULT_TOKEN_BUDGET, BatchRunner, SlotSequence, schedule
from rlx_mlir.models.model import LanguageModel
from rlx_mlir.models.sampling import SamplingParams
from rlx_mlir.models.tokenizer import Tokenizer

MAX_TOP_LOGPROBS = 20
"""The most alternatives a step reports per token (OpenAI's limit)."""


@dataclass
class EngineSequence:
    """One sequence as the engine sees it: its prompt, how to sample, what it has drawn."""

    id: int
    prompt: np.ndarray
    """Checked int32 token ids, non-empty."""
    sampling: SamplingParams
    """Checked and seeded (`SamplingParams.check().seeded()`)."""
    top_logprobs: int | None = None
    """None: ids only (the fast path); k >= 0: each step also reports the chosen token's
    log-probability and the k most likely alternatives (log_softmax of the raw logits)."""
    generated: list[int] = field(default_factory=list)
    """The tokens drawn so far (appended by the engine)."""
    cached_tokens: int = 0
    """Prompt tokens whose KV rows were reused from the cache (prompt caching)."""


@dataclass
class StepOutput:
    """What one step drew for one sequence."""

    token: int
    logprob: float | None = None
    top: list[tuple[int, float]] | None = None
    """(token id, log-probability) of the most likely tokens, most likely first."""


class Engine(ABC):
    """Advances up to `slots` sequences together, one token per `step`."""

    slots: int
    """How many sequences it can hold at once."""
    max_seq: int
    """KV rows per sequence: a sequence's prompt + generated tokens - 1 must fit."""
    tokenizer: Tokenizer

    @abstractmethod
    def add(self, sequence: EngineSequence) -> None:
        """Give `sequence` a slot (there must be a free one); its next step prefills its
        prompt (the first step of a sequence draws its first token)."""

    @abstractmethod
    def step(self) -> dict[int, StepOutput]:
        """Advance every added sequence by one token: {sequence id: what it drew}."""

    @abstractmethod
    def remove(self, sequence_id: int) -> None:
        """Free the sequence's slot (finished or cancelled); at once, between steps."""

    @property
    @abstractmethod
    def free_slots(self) -> int:
        """Slots that `add` may fill now."""


KV_CACHE_SUFFIXES = ("_k_cache", "_v_cache")
"""How the decoders name their KV cache states (`architectures.build_decoder`)."""

_CACHE_WRITER: weakref.WeakKeyDictionary[LanguageModel, LanguageModelEngine] = \
    weakref.WeakKeyDictionary()
"""The engine that last wrote each model's KV cache: another engine's rows are not reused."""


class LanguageModelEngine(Engine):
    """One sequence at a time on a `LanguageModel` (slots = 1): a step is one native call
    (the whole prompt for a new sequence, one token after). Requests asking for logprobs
    run the model's full entry (logits and the drawn id); the others its ids-only entry.

    The engine expects to own the model's KV cache while it serves: every step holds the
    model's lock, and a cache touched by anyone else since is not reused."""

    slots = 1

    def __init__(self, model: LanguageModel):
        self.model = model
        self.max_seq = model.max_seq
        self.tokenizer = model.tokenizer
        self._active: EngineSequence | None = None
        self._prefilled = False
        self._cache: list[int] = []
        """The tokens whose KV rows the cache holds, in order (for prompt caching)."""

    @property
    def free_slots(self) -> int:
        return 0 if self._active is not None else 1

    def add(self, sequence: EngineSequence) -> None:
        if self._active is not None:
            raise ArgumentError(f"add: no free slot (sequence {self._active.id} holds the "
                                f"only one)")
        if not 0 < sequence.prompt.size <= self.max_seq:
            raise ArgumentError(f"prompt: {sequence.prompt.size} tokens; expected 1 to "
                                f"max_seq = {self.max_seq}")
        self._active, self._prefilled = sequence, False

    def remove(self, sequence_id: int) -> None:
        if self._active is not None and self._active.id == sequence_id:
            self._active = None

    def step(self) -> dict[int, StepOutput]:
        sequence = self._active
        if sequence is None:
            return {}
        with self.model.lock:
            if self._prefilled:
                tokens = np.array(sequence.generated[-1:], np.int32)
            else:
                tokens = sequence.prompt[self._rewind(sequence.prompt):]
                sequence.cached_tokens = sequence.prompt.size - tokens.size
            output = self._run(tokens, sequence)
            self._cache += tokens.tolist()
        self._prefilled = True
        sequence.generated.append(output.token)
        return {sequence.id: output}

    def _rewind(self, prompt: np.ndarray) -> int:
        """Rewind the cache to the longest prefix of `prompt` it holds, short of the whole
        prompt (its last token is run again: its logits draw the first new token)."""
        model = self.model
        if _CACHE_WRITER.get(model) is not self or model.position != len(self._cache) \
                or not self.rewindable:
            self._cache = []  # someone else used the model: its rows are not ours
        _CACHE_WRITER[model] = self
        keep = 0
        limit = min(len(self._cache), prompt.size - 1)
        while keep < limit and self._cache[keep] == prompt[keep]:
            keep += 1
        if keep:
            model.runner.reset(keep)  # later rows are overwritten by the next call
        else:
            model.reset()
        del self._cache[keep:]
        return keep

    @property
    def rewindable(self) -> bool:
        """Whether prompt caching may rewind the model: only if all its state is KV caches
        (rows per position). A recurrent state or a conv window holds no earlier
        positions, so such a model reuses nothing (each sequence starts from a reset)."""
        return all(name.endswith(KV_CACHE_SUFFIXES) for name in self.model.runner.state)

    def _run(self, tokens: np.ndarray, sequence: EngineSequence) -> StepOutput:
        """Append `tokens` to the cache; what the last one's logits draw. One native call:
        the ids-only entry (`next_ids`) unless the sequence asks for logprobs."""
        model = self.model
        start = len(self._cache)  # the model's position (checked by _rewind)
        if start + tokens.size > self.max_seq:
            raise ArgumentError(f"cache full: {tokens.size} tokens at position {start} need "
                                f"{start + tokens.size} rows but max_seq is {self.max_seq}")
        rows = np.array([tokens.size - 1], np.int32)
        inputs = model.runner_inputs(tokens, start, rows, sequence.sampling)
        if sequence.top_logprobs is None:
            return StepOutput(model.draw_next_id(inputs))
        logits, ids = model.runner(**inputs)
        return logprob_output(int(ids[0]), logits[0], sequence.top_logprobs)


class BatchedEngine(Engine):
    """Up to `slots` sequences on a model loaded with `slots > 1`: a step is ONE native
    call that feeds every decoding sequence its last token and prefill chunks of new ones
    (at most `token_budget` prompt rows a step, oldest request first), so the weights are
    read once for all of them (`rlx_mlir.models.batch`).

    Prompt caching: each slot keeps the KV rows of the last sequence it held; a new
    sequence takes the free slot whose rows share the longest prefix with its prompt and
    prefills only the rest (at least its last token, whose logits draw the first new one).
    Draws are counted as `generate` counts them, so a seeded request gets the tokens it
    would get alone, cached prefix or not."""

    def __init__(self, model: LanguageModel, token_budget: int = DEFAULT_TOKEN_BUDGET):
        self.model = model
        self.runner = BatchRunner(model)
        self.slots = model.slots
        self.max_seq = model.max_seq
        self.tokenizer = model.tokenizer
        self.token_budget = max(1, min(token_budget, self.max_seq))
        self._active: dict[int, tuple[EngineSequence, SlotSequence]] = {}
        self._held: list[list[int]] = [[] for _ in range(self.slots)]
        """Per slot, the tokens whose KV rows it holds, in order (for prompt caching)."""
        self._slot0_writes = model.slot0_writes

    @property
    def free_slots(self) -> int:
        return self.slots - len(self._active)

    def add(self, sequence: EngineSequence) -> None:
        if not self.free_slots:
            raise ArgumentError(f"add: no free slot (all {self.slots} are held)")
        if not 0 < sequence.prompt.size <= self.max_seq:
            raise ArgumentError(f"prompt: {sequence.prompt.size} tokens; expected 1 to "
                                f"max_seq = {self.max_seq}")
        if self.model.slot0_writes != self._slot0_writes:  # slot 0 was used directly
            self._held[0], self._slot0_writes = [], self.model.slot0_writes
        used = {slot.slot for _, slot in self._active.values()}
        prompt = sequence.prompt
        # a recurrent state holds no earlier positions: such a model reuses nothing
        shared = {s: _shared_prefix(self._held[s], prompt) if self.model.ragged else 0
                  for s in range(self.slots) if s not in used}
        slot = max(shared, key=lambda s: (shared[s], -s))
        keep = shared[slot]
        del self._held[slot][keep:]
        sequence.cached_tokens = keep
        self._active[sequence.id] = (sequence, SlotSequence(
            sequence.id, slot, prompt, sequence.sampling, prefilled=keep))

    def remove(self, sequence_id: int) -> None:
        self._active.pop(sequence_id, None)

    def step(self) -> dict[int, StepOutput]:
        if not self._active:
            return {}
        order = sorted(self._active.values(), key=lambda pair: pair[0].id)  # oldest first
        items, owners = schedule([slot for _, slot in order], self.token_budget)
        by_slot = {slot.slot: sequence for sequence, slot in order}
        want_logits = any(by_slot[s.slot].top_logprobs is not None for s in owners)
        with self.model.lock:
            ids, logits = self.runner.run(items, logits=want_logits)
        outputs = {}
        for row, (item, owner, token) in enumerate(zip(items, owners, ids, strict=True)):
            self._held[owner.slot] += item.tokens.tolist()
            if not owner.take(token):
                continue
            sequence = by_slot[owner.slot]
            sequence.generated.append(token)
            if sequence.top_logprobs is None or logits is None:
                outputs[sequence.id] = StepOutput(token)
            else:
                outputs[sequence.id] = logprob_output(token, logits[row], sequence.top_logprobs)
        return outputs


def _shared_prefix(held: list[int], prompt: np.ndarray) -> int:
    """How many leading tokens of `prompt` the rows `held` hold, short of the whole prompt
    (its last token is fed again: its logits draw the first new one)."""
    limit = min(len(held), prompt.size - 1)
    keep = 0
    while keep < limit and held[keep] == prompt[keep]:
        keep += 1
    return keep


def engine_for(model: LanguageModel) -> Engine:
    """The engine serving `model`: batched when it was loaded with slots > 1."""
    return BatchedEngine(model) if model.slots > 1 else LanguageModelEngine(model)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """log_softmax of one row of raw logits, in float64."""
    row = np.asarray(logits, np.float64)
    shifted = row - row.max()
    return shifted - np.log(np.exp(shifted).sum())


def logprob_output(token: int, logits: np.ndarray, k: int) -> StepOutput:
    """The StepOutput of `token` drawn from the raw `logits` row, with its log-probability
    and the `k` most likely alternatives (ties: lower id first)."""
    logprobs = log_softmax(logits)
    top = np.argsort(-logprobs, kind="stable")[:min(k, MAX_TOP_LOGPROBS)]
    return StepOutput(token, float(logprobs[token]),
                      [(int(i), float(logprobs[i])) for i in top])


__all__ = ["BatchedEngine", "Engine", "EngineSequence", "LanguageModelEngine", "engine_for", "MAX_TOP_LOGPROBS",
           "StepOutput", "log_softmax", "logprob_output"]
