"""MinHash signatures, bands and their estimates (lmshards/preprocess/curation/minhash.py)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from lmshards.preprocess.curation.dedup import (
    Decision,
    near_verdicts_of,
    signature_bytes,
)
from lmshards.preprocess.curation.minhash import (
    band_keys,
    catch_probability,
    estimated_similarity,
    hash_family,
    signature,
    threshold,
)
from lmshards.preprocess.curation.records import (
    CurationDoc,
    node_key,
)
from lmshards.preprocess.curation.text import shingles


def test_signature_agreement_estimates_jaccard():
    rng = random.Random(0)
    offsets = hash_family(256)
    base = [f"w{rng.randrange(10_000)}" for _ in range(400)]
    changed = list(base)
    for i in range(0, 400, 8):  # every 8th word changed: about 0.5 Jaccard over 5-grams
        changed[i] = "x" + changed[i]
    s1, s2 = shingles(" ".join(base), 5), shingles(" ".join(changed), 5)
    true = len(np.intersect1d(s1, s2)) / len(np.union1d(s1, s2))
    estimate = float(np.mean(signature(s1, offsets) == signature(s2, offsets)))
    assert abs(estimate - true) < 0.1


def test_estimated_similarity_is_the_share_of_equal_values_rounded_to_two_digits():
    a = np.arange(112, dtype=np.uint64)
    b = a.copy()
    b[:19] += np.uint64(1000)  # 93 of 112 values equal
    assert estimated_similarity(a, b) == 0.83  # 93 / 112 = 0.8303...
    assert estimated_similarity(a, a) == 1.0
    assert estimated_similarity(a, a + np.uint64(1)) == 0.0
    # The verdict of a near pair carries it; exact copies carry none.
    long, short = (
        CurationDoc("b.txt", 7, "a b c d e f", 17),
        CurationDoc("a.txt", 0, "a b c d e", 2),
    )
    grouped = {"signatures": [signature_bytes(b)], "roots": [(node_key(long), signature_bytes(a))]}
    assert list(near_verdicts_of(node_key(short), grouped)) == [
        (("a.txt", 0), Decision("near", ("b.txt", 17), 0.83))
    ]
    copy = CurationDoc("c.txt", 1, "a  b c d e f", 5)  # the kept text, whitespace aside
    assert list(near_verdicts_of(node_key(copy), grouped)) == [
        (("c.txt", 1), Decision("exact", ("b.txt", 17)))
    ]


def test_hash_family_and_band_keys_are_fixed():
    assert hash_family(4).tolist() == hash_family(4).tolist()
    assert len(set(hash_family(112).tolist())) == 112
    sig = signature(shingles("one two three four five six", 5), hash_family(112))
    keys = band_keys(sig, bands=14, rows=8)
    assert len(keys) == 14 and [k[0] for k in keys] == list(range(14))
    assert keys == band_keys(sig.copy(), bands=14, rows=8)


def test_catch_probabilities_of_the_default_14_by_8():
    assert threshold(bands=14, rows=8) == pytest.approx(0.719, abs=1e-3)
    assert catch_probability(0.8, bands=14, rows=8) == pytest.approx(0.9235, abs=1e-4)
    assert catch_probability(0.9, bands=14, rows=8) == pytest.approx(0.9996, abs=1e-4)
    assert catch_probability(0.5, bands=14, rows=8) == pytest.approx(0.0533, abs=1e-3)


def test_permutations_are_independent_enough_that_pairs_near_0_9_share_a_band():
    """With a linear hash family of small multipliers many permutations order shingles alike, and pairs
    of similarity 0.9 then miss every band far more often than 1 - catch_probability (2e-4)."""
    rng = random.Random(3)
    offsets = hash_family(112)
    missed = 0
    for _ in range(60):
        base = [f"w{rng.randrange(100_000)}" for _ in range(300)]
        copy = [("x" + w if i in (50, 150, 250) else w) for i, w in enumerate(base)]  # J 0.904
        keys = [
            band_keys(signature(shingles(" ".join(d), 5), offsets), bands=14, rows=8)
            for d in (base, copy)
        ]
        missed += not any(a == b for a, b in zip(*keys))
    assert missed == 0
