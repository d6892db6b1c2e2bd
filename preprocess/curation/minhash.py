"""MinHash signatures and LSH band keys, with a fixed seeded hash family.

Permutation i maps a 32-bit shingle hash x to (a_i * x + b_i) mod (2^61 - 1), with a_i, b_i < 2^32
drawn once from numpy's PCG64 seeded with MINHASH_SEED: the products stay below 2^64, so uint64
arithmetic is exact and every machine computes the same signature. A signature is the minimum of
each permutation over a document's shingles.

Banding: the signature's bands x rows values are cut into `bands` runs of `rows`; two documents
whose values agree on a whole band share that band's key and become a candidate pair. For two
documents whose shingle sets have Jaccard similarity s, one band agrees with probability s^rows, so
they are caught with probability 1 - (1 - s^rows)^bands (catch_probability).
"""

from __future__ import annotations

import hashlib

import numpy as np

MINHASH_SEED = 1  # the hash family: changing it changes which pairs are caught
MERSENNE_61 = np.uint64((1 << 61) - 1)
DEFAULT_NGRAM = 5
DEFAULT_BANDS = 14
DEFAULT_ROWS = 8
# Shingles hashed per numpy block: bounds the [block, permutations] array (8192 x 112 x 8 B = 7 MB).
SHINGLE_BLOCK = 8192
BAND_KEY_BYTES = 8

BandKey = tuple[int, int]  # (band, hash of the band's values)


def hash_family(permutations: int, seed: int = MINHASH_SEED) -> tuple[np.ndarray, np.ndarray]:
    """(a, b): uint64 [permutations] each, a in [1, 2^32), b in [0, 2^32)."""
    rng = np.random.Generator(np.random.PCG64(seed))
    a = rng.integers(1, 1 << 32, size=permutations, dtype=np.uint64)
    b = rng.integers(0, 1 << 32, size=permutations, dtype=np.uint64)
    return a, b


def signature(shingle_hashes: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """uint64 [len(a)]: per permutation, the minimum over the shingles (each < 2^32, at least one)."""
    result = np.full(len(a), MERSENNE_61, dtype=np.uint64)
    for start in range(0, len(shingle_hashes), SHINGLE_BLOCK):
        x = shingle_hashes[start : start + SHINGLE_BLOCK, None]  # [block, 1]
        values = (x * a + b) % MERSENNE_61  # [block, permutations], exact: x * a + b < 2^64
        np.minimum(result, values.min(axis=0), out=result)
    return result


def band_keys(sig: np.ndarray, *, bands: int, rows: int) -> list[BandKey]:
    """One key per band: (band, first 63 bits of BLAKE2b over the band's values)."""
    keys = []
    for band in range(bands):
        data = sig[band * rows : (band + 1) * rows].astype("<u8").tobytes()
        value = int.from_bytes(hashlib.blake2b(data, digest_size=BAND_KEY_BYTES).digest(), "little")
        keys.append((band, value >> 1))
    return keys


def catch_probability(similarity: float, *, bands: int, rows: int) -> float:
    """The chance that two documents of Jaccard `similarity` share at least one band key."""
    return 1.0 - (1.0 - similarity**rows) ** bands


def threshold(*, bands: int, rows: int) -> float:
    """The similarity where catching becomes likely, (1/bands)^(1/rows) (0.72 for 14 x 8)."""
    return float((1.0 / bands) ** (1.0 / rows))
