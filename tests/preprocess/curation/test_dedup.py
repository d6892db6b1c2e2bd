"""Which document of a cluster is kept and which take part in near dedup (lmshards/preprocess/curation/dedup.py)."""

from __future__ import annotations

from lmshards.preprocess.curation.dedup import (
    Decision,
    exact_verdicts,
    takes_part_in_near,
    verdict,
)
from lmshards.preprocess.curation.records import (
    CurationDoc,
    node_key,
)


def test_documents_under_the_floor_take_no_part_in_near_dedup():
    four, five = CurationDoc("a", 0, "Sig-ignore: 4 words.", 0), CurationDoc("a", 1, "a b c d e", 1)
    assert [takes_part_in_near(four, n) for n in (0, 4, 5)] == [True, True, False]
    assert [takes_part_in_near(five, n) for n in (0, 5, 6)] == [True, True, False]
    assert not takes_part_in_near(CurationDoc("a", 2, "!!!", 2), 1)  # no word at all
    assert takes_part_in_near(CurationDoc("a", 2, "!!!", 2), 0)


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
