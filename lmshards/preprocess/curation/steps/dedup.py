"""Dedup: remove exact or near duplicates, keeping one document of each cluster.

A corpus step: it compares every document with every other. Its logic and Beam stage are
lmshards.preprocess.curation.dedup; its flags (--dedup, --minhash_*) are PreprocessConfig's, and
--dedup exact or near turns it on.
"""

from __future__ import annotations

from lmshards.preprocess.curation.steps.base import CORPUS, Step

EXACT = "exact"  # the audit's reasons: an exact copy, a near copy
NEAR = "near"
# --dedup's values
DEDUP_NONE = "none"
DEDUP_EXACT = EXACT
DEDUP_NEAR = NEAR
DEDUP_CHOICES = (DEDUP_NONE, DEDUP_EXACT, DEDUP_NEAR)

STEP = Step(
    name="dedup",
    kind=CORPUS,
    summary="remove exact (--dedup exact) or near (--dedup near: MinHash LSH) duplicate documents",
    reasons=(EXACT, NEAR),
    switch="dedup",
)
