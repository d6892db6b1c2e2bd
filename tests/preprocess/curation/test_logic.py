"""Curation's plain functions: normalization, shingles, MinHash, LSH probabilities, the keep rule,
the connected-components steps, document numbering and the audit's lines and checks."""

from __future__ import annotations

import itertools
import json
import random

import numpy as np
import pytest

from lmshards.preprocess.curation.components import (
    COMPONENT_ROUNDS,
    large_star,
    small_star,
    star_problem,
)
from lmshards.preprocess.curation.decontaminate import contamination, document_ngrams
from lmshards.preprocess.curation.dedup import (
    Decision,
    bucket_edges,
    exact_verdicts,
    near_verdicts_of,
    signature_bytes,
    takes_part_in_near,
    verdict,
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
    Removal,
    node_key,
    removal_from_line,
)
from lmshards.preprocess.curation.text import exact_form, ngram_hashes, shingles, word_hashes, words
from lmshards.preprocess.stages.read import RangeCount, range_offsets


def test_exact_form_is_nfc_with_whitespace_collapsed():
    composed, decomposed = "caf\u00e9 au lait", "cafe\u0301 au lait"
    assert exact_form(decomposed) == exact_form(composed) == "caf\u00e9 au lait"
    assert exact_form("  a\t\tb \u00a0 c\n") == "a b c"
    assert exact_form("A b") != exact_form("a b")  # case is content for exact duplicates


def test_words_ignore_case_and_punctuation():
    assert words("Hello, WORLD! 42x") == ["hello", "world", "42x"]


def test_ngram_hashes_are_order_sensitive_and_stable():
    h = word_hashes(["a", "b", "c"])
    assert h.tolist() == [3904355907, 1908338681, 112844655]  # CRC-32: the same everywhere
    two = ngram_hashes(h, 2)
    assert len(two) == 2 and two[0] != ngram_hashes(word_hashes(["b", "a"]), 2)[0]
    assert (ngram_hashes(h, 2) < 2**32).all()
    assert len(ngram_hashes(h, 4)) == 0
    assert (ngram_hashes(h, 2, bits=64) >= 2**32).all()  # the full 64 bits for decontamination


def test_short_documents_are_one_shingle_and_wordless_ones_match_only_copies():
    assert len(shingles("just three words", 5)) == 1
    assert shingles("!!!", 5).tolist() == shingles("!!!", 5).tolist()
    assert shingles("!!!", 5).tolist() != shingles("???", 5).tolist()


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


def test_documents_under_the_floor_take_no_part_in_near_dedup():
    four, five = CurationDoc("a", 0, "Sig-ignore: 4 words.", 0), CurationDoc("a", 1, "a b c d e", 1)
    assert [takes_part_in_near(four, n) for n in (0, 4, 5)] == [True, True, False]
    assert [takes_part_in_near(five, n) for n in (0, 5, 6)] == [True, True, False]
    assert not takes_part_in_near(CurationDoc("a", 2, "!!!", 2), 1)  # no word at all
    assert takes_part_in_near(CurationDoc("a", 2, "!!!", 2), 0)


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


def test_the_longest_document_is_kept_then_the_smallest_digest_then_source_and_index():
    long = CurationDoc("b.txt", 7, "a b c d e", 17)
    short = CurationDoc("a.txt", 0, "a b c d", 2)
    assert min(node_key(long), node_key(short)) == node_key(long)
    first = CurationDoc("b.txt", 3, "same  text", 30)
    second = CurationDoc("a.txt", 9, "same text", 90)
    (v,) = exact_verdicts([node_key(first), node_key(second)])
    # Decided on (source, index), joined back on it; the kept one is named by its record.
    assert v == (("b.txt", 3), Decision("exact", ("a.txt", 90)))
    assert verdict(node_key(short), node_key(long), 0.8) == (
        ("a.txt", 0),
        Decision("near", ("b.txt", 17), 0.8),
    )
    # The record never decides: of two exact copies the smaller index is kept, whatever their records.
    a, b = CurationDoc("a.txt", 1, "x", 9), CurationDoc("a.txt", 2, "x", 3)
    assert next(exact_verdicts([node_key(a), node_key(b)])) == (
        ("a.txt", 2),
        Decision("exact", ("a.txt", 9)),
    )


def test_a_bucket_is_a_star_on_its_smallest_node():
    assert list(bucket_edges([5, 3, 9, 3])) == [(5, 3), (9, 3)]
    assert list(bucket_edges([4])) == []


def _components(edges: list[tuple[int, int]], rounds: int) -> dict[int, int]:
    """The Beam steps, run in plain Python: node -> root."""

    def step(edges, fn, key):
        grouped: dict[int, list[int]] = {}
        for u, v in edges:
            for a, b in key((u, v)):
                grouped.setdefault(a, []).append(b)
        return [e for node, around in sorted(grouped.items()) for e in fn(node, around)]

    both = lambda e: [e, e[::-1]]  # noqa: E731
    larger = lambda e: [e if e[0] > e[1] else e[::-1]]  # noqa: E731
    for _ in range(rounds):
        edges = step(step(edges, large_star, both), small_star, larger)
    edges = step(edges, large_star, both)
    roles: dict[int, list] = {}
    for child, parent in edges:
        roles.setdefault(child, []).append(("child", parent))
        roles.setdefault(parent, []).append(("parent", child))
    assert all(star_problem(n, r) is None for n, r in roles.items())
    return dict(edges)


def test_large_and_small_star_settle_a_long_shuffled_chain_and_keep_components_apart():
    rng = random.Random(1)
    labels = list(range(2000))
    rng.shuffle(labels)
    chain = [(labels[i], labels[i + 1]) for i in range(999)]  # one component of 1000 nodes
    other = [(labels[i], labels[i + 1]) for i in range(1000, 1999)]
    roots = _components(chain + other, rounds=COMPONENT_ROUNDS)
    assert set(roots) == set(labels) - {min(labels[:1000]), min(labels[1000:])}
    for node, root in roots.items():
        assert root == (min(labels[:1000]) if node in labels[:1000] else min(labels[1000:]))


def test_star_problem_names_a_node_with_two_roots():
    assert "2 roots" in star_problem(5, [("child", 1), ("child", 2)])
    assert "both" in star_problem(5, [("child", 1), ("parent", 7)])


def test_documents_and_records_are_numbered_in_file_order_across_ranges():
    counts = [RangeCount("b", 1, 4, 6), RangeCount("a", 0, 3, 3), RangeCount("b", 0, 2, 5)]
    assert range_offsets(counts) == {("a", 0): (0, 0), ("b", 0): (0, 0), ("b", 1): (2, 5)}


def test_contamination_names_the_smallest_eval_record():
    eval_text = "the quick brown fox jumps over the lazy dog"
    index: dict[int, tuple[str, int]] = {}
    for ref in (("e2", 0), ("e1", 5)):
        for v in document_ngrams(eval_text, 4).tolist():
            index[v] = min(index.get(v, ref), ref)
    doc = CurationDoc("t", 0, "Yes: THE QUICK brown fox! ran", 0)
    assert contamination(doc, index, 4) == ("e1", 5)
    assert contamination(CurationDoc("t", 1, "quick brown fox ran", 1), index, 4) is None


def test_audit_lines_round_trip_with_sorted_keys():
    removal = Removal("a.txt", 4, "near", 12, kept=("a.txt", 1))
    line = removal.audit_line()
    assert line == (
        '{"bytes": 12, "index": 4, "kept": {"index": 1, "source": "a.txt"}, '
        '"reason": "near", "source": "a.txt"}'
    )
    assert removal_from_line(line) == removal
    with pytest.raises(ValueError):
        removal_from_line(json.dumps({"source": "a", "index": 0, "reason": "odd", "bytes": 1}))


def test_every_pair_of_exact_copies_has_equal_keys():
    texts = ["x  y", "x y", " x\ny "]
    keys = [node_key(CurationDoc("f", i, t, i))[1] for i, t in enumerate(texts)]
    assert all(a == b for a, b in itertools.combinations(keys, 2))


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
