"""The seeded document sample a tokenizer trains on, drawn in two streaming passes over the corpus.

Pass 1 draws the sample (a priority sample: every document gets a key hash(seed, text), and the
documents with the smallest keys that fit in max_documents / max_bytes are kept); pass 2 yields the
sampled documents. The sample does not depend on the order or the number of input files, and the
text is never held in memory.
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import json
from collections.abc import Iterable, Iterator

_KEY_BYTES = 8


@dataclasses.dataclass
class SampleStats:
    """What pass 1 saw and kept; bytes are UTF-8 bytes of document text."""

    documents_seen: int = 0
    bytes_seen: int = 0
    documents_sampled: int = 0
    bytes_sampled: int = 0


def sample_key(data: bytes, seed: int) -> int:
    """A document's sampling priority: 64 bits of a keyed hash of its UTF-8 bytes."""
    digest = hashlib.blake2b(
        data, digest_size=_KEY_BYTES, key=seed.to_bytes(8, "little", signed=True)
    )
    return int.from_bytes(digest.digest(), "big")


def sample_limit(
    docs: Iterable[str], *, seed: int, max_documents: int | None, max_bytes: int
) -> tuple[int | None, SampleStats]:
    """Pass 1: the sample's key limit (keep keys below it), or None when every document fits; and counts.

    The sample is the longest run of documents in key order that fits both caps, so it is a uniform
    random sample (without replacement) that depends only on the seed and the documents, not on
    their order. Copies of a document share a key, so they are kept or dropped together. Memory: one
    (key, size) pair per sampled document, never the text.
    """
    stats = SampleStats()
    heap: list[tuple[int, int]] = []  # (-key, size): the largest kept key on top
    limit: int | None = (
        None  # the smallest key dropped so far; only keys below it can still be kept
    )
    for text in docs:
        data = text.encode("utf-8")
        stats.documents_seen += 1
        stats.bytes_seen += len(data)
        key = sample_key(data, seed)
        if limit is not None and key >= limit:
            continue
        heapq.heappush(heap, (-key, len(data)))
        stats.bytes_sampled += len(data)
        while heap and (
            stats.bytes_sampled > max_bytes
            or (max_documents is not None and len(heap) > max_documents)
        ):
            top = heap[0][0]
            while heap and heap[0][0] == top:
                stats.bytes_sampled -= heapq.heappop(heap)[1]
            limit = -top
    stats.documents_sampled = len(heap)
    return limit, stats


def iter_sample(docs: Iterable[str], *, seed: int, limit: int | None) -> Iterator[str]:
    """Pass 2: the documents whose key is below limit (all of them when it is None)."""
    for text in docs:
        if limit is None or sample_key(text.encode("utf-8"), seed) < limit:
            yield text


def write_sample(docs: Iterable[str], path: str) -> None:
    """Writes documents one JSON string per line, so documents holding newlines survive."""
    with open(path, "w", encoding="utf-8") as f:
        for text in docs:
            f.write(json.dumps(text, ensure_ascii=False))
            f.write("\n")


def read_sample(path: str) -> Iterator[str]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)
