"""Choosing the next token from a row of logits: greedy, temperature, top-k, top-p, seed.

```python
sampler = Sampler(temperature=0.8, top_k=40, top_p=0.95, seed=1)
token = sampler(logits)               # logits: [n_vocab] float array
```

The filters run in llama.cpp's default order: top-k, then top-p over the softmax of the
remaining logits, then the temperature, then one draw from the result. Temperature 0 is
greedy: the argmax (the lowest id among equal maxima), no randomness at all.

`LanguageModel` no longer uses `Sampler`: its graph draws the next token itself
(`g.sample`, Philox4x32-10 keyed by the seed and the position, docs/modules.md "Sampling
ops"), with `SamplingParams` checked here. `Sampler` stays for code that samples logits
it got from `lm.logits`/`prefill`/`step` (numpy's generator: other draws than the graph's
for the same seed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rlx_mlir.core.errors import ArgumentError


@dataclass(frozen=True)
class SamplingParams:
    """How to pick tokens; `check()` validates the values (ArgumentError naming the bad one)."""

    temperature: float = 0.0
    """0 is greedy; higher flattens the distribution."""
    top_k: int = 40
    """Keep the k most likely tokens (0: keep all; negative is an error)."""
    top_p: float = 0.95
    """Keep the smallest set of most likely tokens whose probability reaches p (1: keep all)."""
    seed: int | None = None
    """Seed of the draws, an int in [0, 2^63) (None: fresh entropy, not reproducible)."""

    def check(self) -> SamplingParams:
        if isinstance(self.temperature, bool) or not isinstance(self.temperature, int | float) \
                or not math.isfinite(self.temperature) or self.temperature < 0:
            raise ArgumentError(f"temperature: expected a finite number >= 0, got "
                                f"{self.temperature!r}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int | np.integer) \
                or self.top_k < 0:
            raise ArgumentError(f"top_k: expected an int >= 0 (0 keeps every token), got "
                                f"{self.top_k!r}")
        if isinstance(self.top_p, bool) or not isinstance(self.top_p, int | float) \
                or not 0 < self.top_p <= 1:
            raise ArgumentError(f"top_p: expected a number in (0, 1], got {self.top_p!r}")
        if self.seed is not None and (isinstance(self.seed, bool)
                                      or not isinstance(self.seed, int | np.integer)
                                      or not 0 <= self.seed < 2**63):
            raise ArgumentError(f"seed: expected None or an int in [0, 2^63), got {self.seed!r}")
        return self

    def seeded(self) -> SamplingParams:
        """These parameters with a seed: a fresh random one when `seed` is None."""
        if self.seed is not None:
            return self
        fresh = int(np.random.SeedSequence().generate_state(1, np.uint64)[0]) >> 1
        return SamplingParams(self.temperature, self.top_k, self.top_p, fresh)


class Sampler:
    """Picks one token id from a logits row at a time (stateful: its random generator)."""

    def __init__(self, temperature: float = 0.0, top_k: int = 40, top_p: float = 0.95,
                 seed: int | None = None):
        self.params = SamplingParams(temperature, top_k, top_p, seed).check()
        self._rng = np.random.default_rng(seed)

    @property
    def greedy(self) -> bool:
        return self.params.temperature == 0

    def __call__(self, logits: np.ndarray) -> int:
        row = np.asarray(logits, dtype=np.float32)
        if row.ndim != 1 or row.size == 0:
            raise ArgumentError(f"logits: expected one non-empty row [n_vocab], got shape "
                                f"{row.shape}")
        if self.greedy:
            return int(np.argmax(row))
        candidates, probs = self.distribution(row)
        return int(candidates[self._rng.choice(len(candidates), p=probs)])

    def distribution(self, row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(token ids, their probabilities) that a non-greedy draw chooses among."""
        p = self.params
        ids = _top_k(row, p.top_k)
        ids = _top_p(row, ids, p.top_p)
        scaled = row[ids].astype(np.float64) / p.temperature
        weights = np.exp(scaled - scaled.max())
        return ids, weights / weights.sum()


def _top_k(row: np.ndarray, k: int) -> np.ndarray:
    """Ids of the k largest logits, most likely first (ties: lower id first)."""
    order = np.argsort(-row, kind="stable")
    return order if k <= 0 or k >= row.size else order[:k]


def _top_p(row: np.ndarray, ids: np.ndarray, p: float) -> np.ndarray:
    """The shortest prefix of `ids` (sorted most likely first) whose softmax mass is >= p."""
    if p >= 1:
        return ids
    logits = row[ids].astype(np.float64)
    probs = np.exp(logits - logits.max())
    cumulative = np.cumsum(probs / probs.sum())
    keep = int(np.searchsorted(cumulative, p)) + 1
    return ids[:min(keep, ids.size)]


__all__ = ["Sampler", "SamplingParams"]
