"""Batched decoding: one native call advances several sequences of a `load_gguf(...,
slots=N)` model, each in its own slot of the KV caches.

```python
runner = BatchRunner(lm)                       # lm loaded with slots > 1
ids, logits = runner.run([
    BatchItem(slot=0, tokens=prompt, start=0, sampling=p, sample_position=0),   # a prefill
    BatchItem(slot=3, tokens=[last_id], start=57, sampling=q, sample_position=57),  # a step
])
```

A call is a ragged batch: every token is one row of the graph naming its slot and its
position (`architectures` module docstring), so prefill chunks of new sequences and decode
steps of the others go through the weights together. Each item's last row gives its
logits and its drawn id: the draw is the one a one-sequence call at position
`sample_position` makes (`generate` draws the first token at position 0, the prompt's
start, and each later one at the position of the token it feeds), so seeded sequences
draw the same tokens batched or alone.

A recurrent model (Mamba, Qwen3.5) takes rectangles instead, B sequences × S tokens:
`run` makes one call per group of items of one length (`_rectangle_inputs`).

`BatchRunner.decode(...)` runs whole generations on it with continuous batching (the
engine of `LanguageModel.generate_batch`); the serving engine drives `run` itself.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rlx_mlir.core.errors import ArgumentError
from rlx_mlir.models.sampling import SamplingParams

DEFAULT_TOKEN_BUDGET = 256
"""Rows per batched call beyond the decode rows: prompts are prefilled in chunks of at
most this many tokens, so one long prompt does not stall the other sequences' steps."""

BATCH_SAMPLING = ("temperature", "top_k", "top_p", "seed", "sample_positions")
"""The batched graph's per-row sampling inputs."""

GREEDY = SamplingParams(temperature=0.0, top_k=0, top_p=1.0, seed=0)


@dataclass
class BatchItem:
    """Tokens of one sequence in a batched call: they go to `slot` at positions
    [start, start + len(tokens)); the last one's logits draw the item's id."""

    slot: int
    tokens: np.ndarray
    start: int
    sampling: SamplingParams = GREEDY
    sample_position: int = 0
    """The position the draw is counted at (Philox), as a one-sequence call at it."""


class BatchRunner:
    """Runs batched calls on a model loaded with `slots > 1` (`load_gguf(..., slots=N)`)."""

    def __init__(self, model: Any):
        if model.slots < 2:
            raise ArgumentError(f"batched decoding needs a model loaded with slots > 1 "
                                f"(load_gguf(..., slots=N)); this one has slots={model.slots}")
        self.model = model
        self.slots: int = model.slots
        self.max_seq: int = model.max_seq

    def run(self, items: Sequence[BatchItem], logits: bool = False
            ) -> tuple[list[int], np.ndarray | None]:
        """One native call over `items` (distinct slots): the id drawn for each item and,
        with `logits`, their logits [len(items), n_vocab] (else None: the ids-only entry
        runs, no vocabulary-sized output)."""
        if self.model.ragged:
            return self._call(self.inputs(items), len(items), logits)
        # a recurrent model: one call per group of items of one length (a rectangle each)
        ids, rows = [0] * len(items), [np.empty(0)] * len(items)
        groups: dict[int, list[int]] = {}
        for index, item in enumerate(items):
            groups.setdefault(len(item.tokens), []).append(index)
        for indices in groups.values():
            drawn, group_logits = self._call(self.inputs([items[i] for i in indices]),
                                             len(indices), logits)
            for j, index in enumerate(indices):
                ids[index] = drawn[j]
                if group_logits is not None:
                    rows[index] = group_logits[j]
        return ids, (np.stack(rows) if logits else None)

    def _call(self, inputs: dict[str, np.ndarray], count: int, logits: bool
              ) -> tuple[list[int], np.ndarray | None]:
        model = self.model
        if logits or model.ids_runner is None:
            all_logits, ids = model.runner(**inputs)
            return [int(i) for i in ids], (np.asarray(all_logits) if logits else None)
        out = np.empty(count, np.int32)
        model.ids_runner.run(**inputs, out=out)
        return [int(i) for i in out], None

    def inputs(self, items: Sequence[BatchItem]) -> dict[str, np.ndarray]:
        """The batched graph's arguments for `items` (checked)."""
        if not items:
            raise ArgumentError("run: expected at least one item, got none")
        seen: set[int] = set()
        for item in items:
            self._check(item, seen)
        if not self.model.ragged:
            return self._rectangle_inputs(items)
        tokens = np.concatenate([np.asarray(item.tokens, np.int32) for item in items])
        counts = [len(item.tokens) for item in items]
        positions = np.concatenate([np.arange(item.start, item.start + n, dtype=np.int32)
                                    for item, n in zip(items, counts, strict=True)])
        slots = np.repeat(np.array([item.slot for item in items], np.int32), counts)
        rows = (np.cumsum(counts) - 1).astype(np.int32)
        inputs = {
            "ids": tokens, "row_slots": slots, "row_positions": positions, "rows": rows,
            **self._sampling(items),
            "sample_positions": np.array([item.sample_position for item in items], np.int64),
        }
        return inputs | self.model.rope_inputs(positions)

    def _rectangle_inputs(self, items: Sequence[BatchItem]) -> dict[str, np.ndarray]:
        """A recurrent model's batched inputs: the items' tokens as [B, S] (one length);
        a sequence at position 0 starts from zero states. A model without attention
        (Mamba) counts the draws at position 0, as its one-sequence graph (which has no
        position) does; one with attention layers too (Qwen3.5) gets each token's slot,
        position and rope rows [B, S], and counts the draws as the ragged graph does."""
        lengths = {len(item.tokens) for item in items}
        if len(lengths) != 1:
            raise ArgumentError(f"a recurrent model's batched call takes sequences of one "
                                f"length, got lengths {sorted(lengths)}")
        count, length = len(items), lengths.pop()
        slots = np.array([item.slot for item in items], np.int32)
        inputs = {
            "ids": np.stack([np.asarray(item.tokens, np.int32) for item in items]),
            "row_slots": slots,
            "row_keep": np.array([item.start > 0 for item in items], np.float32),
            "row_positions": np.zeros(count, np.int32),
            "last_token": np.array([length - 1], np.int32),
            "rows": np.arange(count, dtype=np.int32),
            **self._sampling(items), "sample_positions": np.zeros(count, np.int64),
        }
        if "token_positions" not in self.model.graph.inputs:
            return inputs
        positions = np.array([item.start for item in items], np.int32)[:, None] \
            + np.arange(length, dtype=np.int32)
        inputs |= {"token_slots": np.repeat(slots[:, None], length, axis=1),
                   "token_positions": positions,
                   "sample_positions": np.array([item.sample_position for item in items],
                                                np.int64)}
        return inputs | self.model.rope_inputs(positions)

    @staticmethod
    def _sampling(items: Sequence[BatchItem]) -> dict[str, np.ndarray]:
        samplings = [item.sampling for item in items]
        return {
            "temperature": np.array([p.temperature for p in samplings], np.float32),
            "top_k": np.array([min(p.top_k, 2**31 - 1) for p in samplings], np.int32),
            "top_p": np.array([p.top_p for p in samplings], np.float32),
            "seed": np.array([p.seed or 0 for p in samplings], np.int64),
        }

    def _check(self, item: BatchItem, seen: set[int]) -> None:
        if not 0 <= item.slot < self.slots or item.slot in seen:
            raise ArgumentError(f"slot: expected distinct slots in [0, {self.slots}), got "
                                f"{item.slot}")
        seen.add(item.slot)
        end = item.start + len(item.tokens)
        if not len(item.tokens) or item.start < 0 or end > self.max_seq:
            raise ArgumentError(f"slot {item.slot}: {len(item.tokens)} tokens at position "
                                f"{item.start} need rows up to {end}; expected 1 or more "
                                f"tokens within max_seq = {self.max_seq}")

    # --- whole generations ---------------------------------------------------------------

    def decode(self, prompts: Sequence[np.ndarray], samplings: Sequence[SamplingParams],
               max_new_tokens: int, on_token: Callable[[int, int], bool | None],
               token_budget: int = DEFAULT_TOKEN_BUDGET) -> list[str]:
        """Generate for every prompt (checked int32 ids) with continuous batching: up to
        `slots` sequences at once, a new one joining as soon as one ends; prompts are
        prefilled in chunks under `token_budget` rows per call, mixed with the others'
        decode steps. `on_token(index, id)` gets each prompt's tokens (a true result
        stops that prompt). Returns each prompt's finish reason ("stop" | "length")."""
        token_budget = max(1, min(token_budget, self.max_seq))
        waiting = deque(range(len(prompts)))
        free = list(range(self.slots))[::-1]
        active: dict[int, SlotSequence] = {}
        reasons = ["length"] * len(prompts)
        eog = self.model.tokenizer.eog_ids
        while waiting or active:
            while waiting and free:
                index = waiting.popleft()
                active[index] = SlotSequence(index, free.pop(), prompts[index], samplings[index])
            items, owners = schedule(list(active.values()), token_budget)
            ids, _ = self.run(items)
            for sequence, token in zip(owners, ids, strict=True):
                if not sequence.take(token):
                    continue
                reason = None
                if on_token(sequence.id, token) or token in eog:
                    reason = "stop"
                elif len(sequence.generated) >= max_new_tokens or sequence.full(self.max_seq):
                    reason = "length"
                if reason is not None:
                    reasons[sequence.id] = reason
                    free.append(sequence.slot)
                    del active[sequence.id]
        return reasons


def schedule(sequences: Sequence[SlotSequence], budget: int
             ) -> tuple[list[BatchItem], list[SlotSequence]]:
    """One call's items: every decoding sequence's next token, then prefill chunks (in
    the given order) while `budget` rows last (at least one chunk, so prompts progress)."""
    items, owners = [], []
    prefilling = []
    for sequence in sequences:
        if sequence.prefilled < sequence.prompt.size:
            prefilling.append(sequence)
            continue
        items.append(sequence.decode_item())
        owners.append(sequence)
    room = budget
    for sequence in prefilling:
        if room <= 0 and items:
            break
        items.append(sequence.prefill_item(max(room, 1)))
        owners.append(sequence)
        room -= len(items[-1].tokens)
    return items, owners


@dataclass
class SlotSequence:
    """A sequence in a slot: its prompt (prefilled up to `prefilled`) and its tokens."""

    id: int
    slot: int
    prompt: np.ndarray
    sampling: SamplingParams
    prefilled: int = 0
    """Prompt tokens whose KV rows the slot holds (a reused prefix counts)."""
    generated: list[int] = field(default_factory=list)
    pending: bool = False
    """Whether the last call fed the prompt's last chunk or a token (its draw counts)."""

    def prefill_item(self, room: int) -> BatchItem:
        """The next chunk of the prompt (at most `room` tokens); the prompt's draw is
        counted at position 0, as `generate` prefills it in one call from 0."""
        chunk = self.prompt[self.prefilled:self.prefilled + room]
        item = BatchItem(self.slot, chunk, self.prefilled, self.sampling, 0)
        self.prefilled += chunk.size
        self.pending = self.prefilled == self.prompt.size
        return item

    def decode_item(self) -> BatchItem:
        """The last drawn token, fed at its position (its draw counted there)."""
        position = self.prompt.size + len(self.generated) - 1
        self.pending = True
        return BatchItem(self.slot, np.array(self.generated[-1:], np.int32), position,
                         self.sampling, position)

    def take(self, token: int) -> bool:
        """Record the id the call drew, if it counts (not mid-prompt): whether it did."""
        if self.pending:
            self.generated.append(token)
        return self.pending

    def full(self, max_seq: int) -> bool:
        """Whether the cache has no row left for the last drawn token."""
        return self.prompt.size + len(self.generated) > max_seq


__all__ = ["BATCH_SAMPLING", "DEFAULT_TOKEN_BUDGET", "BatchItem", "BatchRunner", "SlotSequence",
           "schedule"]
