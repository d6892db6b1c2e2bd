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

# The n-gram hashing lives with the steps (the repetition filter hashes n-grams too, and steps/ imports
# nothing of curation's); dedup and decontamination take it from here.
from lmshards.preprocess.curation.steps.ngrams import mix64 as mix64
from lmshards.preprocess.curation.steps.ngrams import ngram_finish as ngram_finish
from lmshards.preprocess.curation.steps.ngrams import ngram_hashes as ngram_hashes
from lmshards.preprocess.curation.steps.ngrams import ngram_step as ngram_step

DIGEST_BYTES = 16  # 128 bits: no two different texts of a corpus share one
_WHITESPACE = re.compile(r"\s+")
_WORD = re.compile(r"\w+")


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
