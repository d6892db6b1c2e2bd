"""What curation compares: normalized text, its digest, its words and word n-gram hashes.

Two normalizations, each for one purpose:
- exact_form: Unicode NFC and every run of whitespace made one space (trimmed). Documents with the
  same exact_form are exact duplicates; its length and digest also order a cluster (the keep rule).
- words: lower-cased NFC, split into runs of letters and digits (punctuation and case ignored), the
  units of MinHash shingles and of decontamination n-grams.

Word n-grams are hashed to 32 bits in numpy from one stable hash per word (CRC-32), so the hashes are
the same on every machine, Python and worker (Python's own hash() is salted per process).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
import zlib

import numpy as np

DIGEST_BYTES = 16  # 128 bits: no two different texts of a corpus share one
_WHITESPACE = re.compile(r"\s+")
_WORD = re.compile(r"\w+")
_MASK32 = np.uint64(0xFFFFFFFF)
# Odd 64-bit multipliers of the n-gram combiner and its final mix (splitmix64's constants).
_COMBINE = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def exact_form(text: str) -> str:
    """NFC with whitespace runs collapsed to one space and the ends trimmed."""
    return _WHITESPACE.sub(" ", unicodedata.normalize("NFC", text)).strip()


def digest(form: str) -> bytes:
    """A stable 128-bit digest (BLAKE2b) of a normalized text."""
    return hashlib.blake2b(form.encode("utf-8", "surrogatepass"), digest_size=DIGEST_BYTES).digest()


def words(text: str) -> list[str]:
    """The lower-cased NFC runs of letters and digits of text, in order."""
    return _WORD.findall(unicodedata.normalize("NFC", text).lower())


def word_hashes(tokens: list[str]) -> np.ndarray:
    """uint64 [len(tokens)]: the CRC-32 of each word's UTF-8 bytes."""
    return np.fromiter(
        (zlib.crc32(w.encode("utf-8", "surrogatepass")) for w in tokens),
        dtype=np.uint64,
        count=len(tokens),
    )


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


def shingles(text: str, n: int) -> np.ndarray:
    """The distinct word n-gram hashes of text (uint64, each < 2^32), sorted.

    A document of fewer than n words is one shingle of all its words; one with no word at all is one
    shingle from its exact_form digest, so that only its exact copies match it.
    """
    tokens = words(text)
    hashes = word_hashes(tokens)
    if len(tokens) >= n:
        return np.unique(ngram_hashes(hashes, n))
    if tokens:
        return ngram_hashes(hashes, len(tokens))
    value = int.from_bytes(digest(exact_form(text))[:4], "little")
    return np.array([value], dtype=np.uint64)
