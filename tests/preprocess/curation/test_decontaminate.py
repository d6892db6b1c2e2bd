"""Eval-set contamination (lmshards/preprocess/curation/decontaminate.py)."""

from __future__ import annotations

from lmshards.preprocess.curation.decontaminate import contamination, document_ngrams
from lmshards.preprocess.curation.records import (
    CurationDoc,
)


def test_contamination_names_the_smallest_eval_record():
    eval_text = "the quick brown fox jumps over the lazy dog"
    index: dict[int, tuple[str, int]] = {}
    for ref in (("e2", 0), ("e1", 5)):
        for v in document_ngrams(eval_text, 4).tolist():
            index[v] = min(index.get(v, ref), ref)
    doc = CurationDoc("t", 0, "Yes: THE QUICK brown fox! ran", 0)
    assert contamination(doc, index, 4) == ("e1", 5)
    assert contamination(CurationDoc("t", 1, "quick brown fox ran", 1), index, 4) is None
