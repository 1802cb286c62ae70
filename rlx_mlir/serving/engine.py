"""The engine a `Scheduler` drives: it advances the active sequences by one token per step.

```python
engine = LanguageModelEngine(lm)          # slots = 1: one sequence per native call
engine.add(EngineSequence(id=1, prompt=ids, sampling=params))
outputs = engine.step()                   # {sequence id: StepOutput(token, logprob, top)}
engine.remove(1)
```

`Engine` is the whole interface the scheduler and the server see. Today's implementation,
`LanguageModelEngine`, runs one sequence on a `LanguageModel` (one KV cache: slots = 1).
A batched engine (several slots advanced by one native call, issue 20 item 1) implements
the same four members and replaces it without a change to the scheduler or the server.

Prompt caching: the KV cache keeps the rows of the last sequence after it ends; a new
sequence whose prompt starts with some of those tokens rewinds the cache to the end of the
shared prefix (`runner.reset(position)`) and prefills only the rest.
"""

from __future__ import annotations

import weakref
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

from rlx_mlir.core.errors import ArgumentError
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


__all__ = ["Engine", "EngineSequence", "LanguageModelEngine", "MAX_TOP_LOGPROBS",
           "StepOutput", "log_softmax", "logprob_output"]
