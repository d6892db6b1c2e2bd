"""MinHash signatures and LSH band keys, with a fixed seeded hash family.

Permutation i maps a shingle hash x to splitmix64's finalizer of x + s_i (arithmetic modulo 2^64),
with the 64-bit offsets s_i drawn once from numpy's PCG64 seeded with MINHASH_SEED, so every machine
computes the same signature. The finalizer makes each permutation behave like an independent random
function; a linear family (a_i * x + b_i) mod p with small a_i would order the shingles nearly alike
for many i, so that documents of high similarity agree on all bands or on none. A signature is the
minimum of each permutation over a document's shingles.

Banding: the signature's bands x rows values are cut into `bands` runs of `rows`; two documents
whose values agree on a whole band share that band's key and become a candidate pair. For two
documents whose shingle sets have Jaccard similarity s, one band agrees with probability s^rows, so
they are caught with probability 1 - (1 - s^rows)^bands (catch_probability).

The share of equal values of two signatures is an unbiased estimate of the Jaccard similarity of
their shingle sets (estimated_similarity): the audit gives it for every near removal.
"""

from __future__ import annotations

import hashlib

import numpy as np

from lmshards.preprocess.curation.text import mix64

MINHASH_SEED = 1  # the hash family: changing it changes which pairs are caught
_MAX = np.uint64(np.iinfo(np.uint64).max)
DEFAULT_NGRAM = 5
DEFAULT_BANDS = 14
DEFAULT_ROWS = 8
# Documents of fewer words take no part in near dedup (only exact): a one-word change is a large
# share of a handful of shingles, so near dedup removes short distinct texts (datatrove's sentence
# dedup skips documents under 50 words). 0 by default: on the benchmark corpus every floor let more true
# copies through than it kept distinct texts (bench/bench_near_dedup_floor.py, docs/preprocess.md).
DEFAULT_MIN_WORDS = 0
SIMILARITY_DIGITS = 2  # a signature of 112 values resolves the similarity to about 0.01
# Shingles hashed per numpy block: bounds the [block, permutations] array (8192 x 112 x 8 B = 7 MB).
SHINGLE_BLOCK = 8192
# signature() holds three such arrays at once (x + offsets and two of mix64's steps; measured with
# tracemalloc: 3.0 x SHINGLE_BLOCK x permutations x 8 bytes).
HASHING_ARRAYS = 3
# The most memory one signature() may need (decimal bytes): 5,086 permutations (14 x 8 needs 22 MB).
MAX_HASHING_BYTES = 10**9
BAND_KEY_BYTES = 8

BandKey = tuple[int, int]  # (band, hash of the band's values)


def hash_family(permutations: int, seed: int = MINHASH_SEED) -> np.ndarray:
    """The offsets s_i: uint64 [permutations]."""
    rng = np.random.Generator(np.random.PCG64(seed))
    return rng.integers(0, _MAX, size=permutations, dtype=np.uint64, endpoint=True)


def signature(shingle_hashes: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """uint64 [len(offsets)]: per permutation, the minimum over the shingles (at least one)."""
    result = np.full(len(offsets), _MAX, dtype=np.uint64)
    with np.errstate(over="ignore"):  # modulo 2^64 on purpose
        for start in range(0, len(shingle_hashes), SHINGLE_BLOCK):
            x = shingle_hashes[start : start + SHINGLE_BLOCK, None]  # [block, 1]
            values = mix64(x + offsets)  # [block, permutations]
            np.minimum(result, values.min(axis=0), out=result)
    return result


def hashing_bytes(permutations: int) -> int:
    """Peak bytes signature() allocates for a family of `permutations` (bands x rows) offsets."""
    return HASHING_ARRAYS * SHINGLE_BLOCK * permutations * 8


def max_permutations() -> int:
    """The largest bands x rows whose hashing_bytes stays within MAX_HASHING_BYTES."""
    return MAX_HASHING_BYTES // hashing_bytes(1)


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


def estimated_similarity(a: np.ndarray, b: np.ndarray) -> float:
    """The share of equal values of two signatures of one hash family, rounded to SIMILARITY_DIGITS:
    an estimate of the Jaccard similarity of the two documents' shingle sets."""
    return round(float(np.count_nonzero(a == b)) / len(a), SIMILARITY_DIGITS)
