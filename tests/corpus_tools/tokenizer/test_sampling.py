"""The tokenizer sample (plain functions, no training) and the --max_bytes size parser."""

from __future__ import annotations

import random

import pytest

from lmshards.corpus_tools.tokenizer.cli import MAX_BYTES_TYPE
from lmshards.corpus_tools.tokenizer.sampling import iter_sample, sample_key, sample_limit


def _docs(n: int) -> list[str]:
    return [f"document number {i} " + "x" * (i % 7) for i in range(n)]


def test_sample_keeps_everything_under_the_caps():
    docs = _docs(100)
    limit, stats = sample_limit(docs, seed=1, max_documents=None, max_bytes=10**9)
    assert limit is None
    assert (stats.documents_seen, stats.documents_sampled) == (100, 100)
    assert stats.bytes_sampled == stats.bytes_seen == sum(len(d.encode()) for d in docs)
    assert list(iter_sample(docs, seed=1, limit=limit)) == docs


@pytest.mark.parametrize("max_documents, max_bytes", [(30, 10**9), (None, 700), (25, 700)])
def test_sample_respects_caps_and_is_the_smallest_keys(max_documents, max_bytes):
    docs = _docs(200)
    limit, stats = sample_limit(docs, seed=7, max_documents=max_documents, max_bytes=max_bytes)
    kept = list(iter_sample(docs, seed=7, limit=limit))
    assert len(kept) == stats.documents_sampled
    assert sum(len(d.encode()) for d in kept) == stats.bytes_sampled <= max_bytes
    assert max_documents is None or len(kept) <= max_documents
    # The sample is a prefix of the documents in key order, and as long as the caps allow.
    by_key = sorted(docs, key=lambda d: sample_key(d.encode(), 7))
    assert set(kept) == set(by_key[: len(kept)])
    following = by_key[len(kept)]
    assert (max_documents is not None and len(kept) == max_documents) or (
        stats.bytes_sampled + len(following.encode()) > max_bytes
    )
    # Input order is kept.
    assert kept == [d for d in docs if d in set(kept)]


def test_sample_depends_on_seed_and_content_not_order():
    docs = _docs(300)
    shuffled = random.Random(0).sample(docs, len(docs))

    def sample(seq, seed):
        limit, _ = sample_limit(seq, seed=seed, max_documents=50, max_bytes=10**9)
        return set(iter_sample(seq, seed=seed, limit=limit))

    assert sample(docs, 3) == sample(shuffled, 3)
    assert sample(docs, 3) != sample(docs, 4)
    # Roughly uniform: a 1-in-6 sample takes about a sixth of each half of the input.
    first_half = set(docs[:150])
    assert 12 <= len(sample(docs, 3) & first_half) <= 38


def test_sample_keeps_or_drops_copies_together():
    docs = ["same text"] * 10 + _docs(20)
    copies = []
    for seed in range(10):
        limit, stats = sample_limit(docs, seed=seed, max_documents=15, max_bytes=10**9)
        kept = list(iter_sample(docs, seed=seed, limit=limit))
        assert stats.documents_sampled == len(kept) <= 15
        copies.append(kept.count("same text"))
    assert set(copies) == {0, 10}


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1000", 1000),
        ("100MB", 100 * 10**6),
        ("1.5G", 1_500_000_000),
        ("64 kb", 64_000),
        ("2MiB", 2 * 2**20),
    ],
)
def test_parse_size(text, expected):
    assert MAX_BYTES_TYPE(text) == expected
