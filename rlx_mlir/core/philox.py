"""Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11;
Random123), the counter-based generator of `mir.sample`: the numpy definition the
reference executor uses (the kernel's is passes/lir_to_llvm/sampling.py).

A draw is a pure function of a 128-bit counter and a 64-bit key, so the numbers of a row do
not depend on which thread draws them or in which order. `mir.sample` keys the generator
with the seed and counts with (row, position): `sample_uniform`.
"""

from __future__ import annotations

import numpy as np

M0, M1 = 0xD2511F53, 0xCD9E8D57
"""The round multipliers."""
W0, W1 = 0x9E3779B9, 0xBB67AE85
"""The Weyl key increments (golden ratio, sqrt(3) - 1)."""
ROUNDS = 10
MASK32 = 0xFFFFFFFF


def philox4x32(counter: np.ndarray, key: np.ndarray, rounds: int = ROUNDS) -> np.ndarray:
    """Philox4x32-`rounds` of `counter` uint32 [..., 4] under `key` uint32 [..., 2]
    (broadcast against each other): uint32 [..., 4]."""
    counter = np.asarray(counter, np.uint64)
    key = np.asarray(key, np.uint64)
    c0, c1, c2, c3 = (counter[..., i] for i in range(4))
    k0, k1 = key[..., 0], key[..., 1]
    for r in range(rounds):
        if r:  # the key schedule: bumped before every round but the first
            k0, k1 = (k0 + W0) & MASK32, (k1 + W1) & MASK32
        p0, p1 = np.uint64(M0) * c0, np.uint64(M1) * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0, p1 & MASK32, (p0 >> 32) ^ c3 ^ k1, p0 & MASK32)
    return np.stack([c0, c1, c2, c3], axis=-1).astype(np.uint32)


def sample_counter(row: np.ndarray | int, position: int) -> np.ndarray:
    """The counter of row `row` at model position `position`: (row, position low 32 bits,
    position high 32 bits, 0), uint32 [..., 4]."""
    row = np.asarray(row, np.uint64)
    words = [row & MASK32, np.full_like(row, position & MASK32),
             np.full_like(row, (position >> 32) & MASK32), np.zeros_like(row)]
    return np.stack(words, axis=-1)


def seed_key(seed: int) -> np.ndarray:
    """The key of `seed` (an int in [0, 2^64)): its low and high 32 bits."""
    return np.array([seed & MASK32, (seed >> 32) & MASK32], np.uint64)


def sample_uniform(rows: int, seed: int, position: int) -> np.ndarray:
    """One float32 in [0, 1) per row: the top 24 bits of the first Philox word, times 2^-24
    (exact in float32)."""
    words = philox4x32(sample_counter(np.arange(rows), position), seed_key(seed))
    return ((words[..., 0] >> 8).astype(np.float32) * np.float32(2.0**-24)).astype(np.float32)


def row_uniform(seeds: np.ndarray, rows: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """`sample_uniform` with every row's own key and counter: row i draws with counter
    (rows[i], positions[i] low 32 bits, high 32 bits, 0) under the key of seeds[i] (int64
    arrays broadcast together; the 64 bits are used as they are, a negative value as its
    two's complement, as the kernel does)."""
    seeds, rows, positions = (np.ascontiguousarray(a).view(np.uint64) for a in np.broadcast_arrays(
        *(np.asarray(a, np.int64) for a in (seeds, rows, positions))))
    mask = np.uint64(MASK32)
    counter = np.stack([rows & mask, positions & mask, positions >> np.uint64(32),
                        np.zeros_like(rows)], axis=-1)
    key = np.stack([seeds & mask, seeds >> np.uint64(32)], axis=-1)
    words = philox4x32(counter, key)
    return ((words[..., 0] >> 8).astype(np.float32) * np.float32(2.0**-24)).astype(np.float32)


__all__ = ["M0", "M1", "ROUNDS", "W0", "W1", "philox4x32", "row_uniform", "sample_counter",
           "sample_uniform", "seed_key"]
