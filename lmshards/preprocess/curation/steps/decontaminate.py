"""Decontaminate: remove training documents that share a word n-gram with an eval set.

A corpus step: it needs every eval document first. Its logic and Beam stage are
lmshards.preprocess.curation.decontaminate; its flags (--decontaminate, --decontaminate_ngram,
--decontaminate_text_field) are PreprocessConfig's, and --decontaminate turns it on.
"""

from __future__ import annotations

from lmshards.preprocess.curation.steps.base import CORPUS, Step

CONTAMINATED = "contaminated"  # the audit's reason

# --decontaminate_ngram's default: words in a shared n-gram that marks a document contaminated
DEFAULT_DECONTAMINATE_NGRAM = 13

STEP = Step(
    name="decontaminate",
    kind=CORPUS,
    summary="remove documents sharing a --decontaminate_ngram word n-gram with an eval set",
    reasons=(CONTAMINATED,),
    switch="decontaminate",
)
