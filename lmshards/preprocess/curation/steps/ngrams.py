"""Word n-gram hashing: one 64-bit polynomial per window of word hashes, mixed (splitmix64's finalizer).

Shared by the repetition filter (gopher_repetition) and, through lmshards.preprocess.curation.text, by
MinHash shingles and decontamination n-grams; the hashes are the same on every machine and worker.
"""

from __future__ import annotations

import numpy as np

_MASK32 = np.uint64(0xFFFFFFFF)
# Odd 64-bit multipliers of the n-gram combiner and its final mix (splitmix64's constants).
_COMBINE = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: every input bit reaches every output bit."""
    x = x ^ (x >> np.uint64(30))
    x = x * _MIX1
    x = x ^ (x >> np.uint64(27))
    x = x * _MIX2
    return x ^ (x >> np.uint64(31))


def ngram_hashes(hashes: np.ndarray, n: int, *, bits: int = 32) -> np.ndarray:
    """uint64 [max(len - n + 1, 0)], each < 2^bits (32 or 64): one hash per window of n consecutive
    word hashes.

    Order-sensitive (a polynomial in the word hashes, then mixed), so "a b" and "b a" differ.
    """
    count = len(hashes) - n + 1
    if count <= 0:
        return np.empty(0, dtype=np.uint64)
    acc = np.zeros(count, dtype=np.uint64)
    for j in range(n):
        acc = ngram_step(acc, hashes[j : j + count])
    return ngram_finish(acc, bits=bits)


def ngram_step(acc: np.ndarray, hashes: np.ndarray) -> np.ndarray:
    """One more word of each window: acc * C + hash + 1, modulo 2^64 (uint64 arrays)."""
    with np.errstate(over="ignore"):  # the arithmetic is modulo 2^64 on purpose
        return acc * _COMBINE + hashes + np.uint64(1)


def ngram_finish(acc: np.ndarray, *, bits: int = 32) -> np.ndarray:
    """The windows' hashes from their polynomials: mixed, and cut to `bits` (32 or 64)."""
    with np.errstate(over="ignore"):
        mixed = mix64(acc)
    return mixed & _MASK32 if bits == 32 else mixed
