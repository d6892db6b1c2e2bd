"""The funnel read back from a manifest, and its checks against the audit
(lmshards/preprocess/curation/audit.py)."""

from __future__ import annotations

import dataclasses

from lmshards.preprocess.curation.audit import (
    curation_funnel,
    describe_curation,
    funnel_lines,
    step_problems,
)
from lmshards.schemas.manifest import CurationInfo, funnel_problems

# A --decontaminate --dedup exact run, as manifests recorded it before the document steps.
LEGACY = CurationInfo(
    dedup="exact",
    options={"decontaminate_ngram": 13},
    documents_in=10,
    bytes_in=1000,
    removed={
        "contaminated": {"documents": 1, "bytes": 100},
        "exact": {"documents": 3, "bytes": 240},
        "near": {"documents": 0, "bytes": 0},
    },
    clusters=2,
    eval_files=({"path": "eval.txt", "documents": 4, "removed": 1},),
    audit=(),
)


def test_a_set_without_a_funnel_gets_its_corpus_steps_rows_from_its_removals():
    decontaminate, dedup = curation_funnel(LEGACY)
    assert (
        decontaminate["name"],
        decontaminate["documents_in"],
        decontaminate["documents_out"],
    ) == (
        "decontaminate",
        10,
        9,
    )
    assert (dedup["bytes_in"], dedup["bytes_out"], dedup["removed"]) == (
        900,
        660,
        {"exact": {"documents": 3, "bytes": 240}},
    )
    assert funnel_lines(LEGACY)[1:3] == [
        "      decontaminate: 10 -> 9 documents, 1,000 -> 900 bytes",
        "        removed contaminated: 1 (100 bytes)",
    ]


def test_the_funnel_is_checked_against_the_audit_and_the_totals():
    steps = curation_funnel(LEGACY)
    curated = dataclasses.replace(LEGACY, steps=steps)
    audit = {"contaminated": [1, 100], "exact": [3, 240], "near": [0, 0]}
    assert step_problems(curated, audit, "out") == []
    assert funnel_problems(curated, written=6) == []
    assert step_problems(curated, {**audit, "exact": [2, 140]}, "out") == [
        "out: the audit holds 2 dedup exact removals (140 bytes), the funnel says 3 (240 bytes)"
    ]
    assert funnel_problems(curated, written=7) == ["step dedup kept 6 documents, the splits hold 7"]
    broken = dataclasses.replace(curated, steps=(steps[0], {**steps[1], "documents_in": 8}))
    assert funnel_problems(broken, written=6)[0].startswith(
        "step dedup: in 8 documents (900 bytes), but step decontaminate gave 9"
    )


def test_inspect_names_the_steps_that_ran_and_leaves_out_the_corpus_steps_that_did_not():
    steps = curation_funnel(LEGACY)
    curated = dataclasses.replace(LEGACY, steps=steps, options={})
    lines = describe_curation(curated)
    assert lines[0] == "  curation (decontaminate -> dedup):"
    assert "    duplicate clusters: 2" in lines and "    near: 0 documents, 0 bytes" not in lines
    assert describe_curation(LEGACY)[0] == "  curation (--dedup exact; decontaminate_ngram 13):"
    assert "    near: 0 documents, 0 bytes" in describe_curation(LEGACY)
