"""The funnel read back from a manifest, its checks against the audit, and the staged audit's
writing (lmshards/preprocess/curation/audit.py)."""

from __future__ import annotations

import dataclasses
import random

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from lmshards.preprocess.curation import audit
from lmshards.preprocess.curation.audit import (
    CurationCounts,
    RecordRemovals,
    curation_funnel,
    describe_curation,
    funnel_lines,
    step_problems,
    sum_counts,
)
from lmshards.preprocess.curation.records import Removal
from lmshards.schemas.layouts import TEMP_DIR_NAME
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


def test_the_staged_audit_written_through_parts_has_the_bytes_of_one_sorted_write(
    tmp_path, monkeypatch
):
    """RecordRemovals sends part paths through its GroupByKey, not removals: with parts of 7 lines, split
    across bundles and audit files, every audit file holds the bytes write_audit_file gives the same
    removals, nothing but the parts is left in the temporary directory, and the same pass counts every
    removal and names each kept document once per removal."""
    monkeypatch.setattr(audit, "AUDIT_PART_LINES", 7)
    rng = random.Random(3)
    removals = [
        Removal(source=f"in/{name}.txt", index=index, reason="exact", bytes=index % 50 + 1,
                kept=(f"in/{name}.txt", 0))
        for name in ("a", "b")
        for index in range(1, 60)
    ] + [
        Removal(source="in/a.txt", index=audit.AUDIT_BLOCK + 5, reason="", bytes=9,
                step="gopher_quality", detail="mean_word_length 2.10 < 3"),
        Removal(source="in/a.txt", index=7, reason="", bytes=4, step="pii", detail="second piece"),
    ]  # fmt: skip
    rng.shuffle(removals)
    expected_counts = CurationCounts()
    for removal in removals:
        audit.count_removal(expected_counts, removal)
    staged, direct = tmp_path / "staged", tmp_path / "direct"
    with TestPipeline(
        runner="FnApiRunner", options=PipelineOptions(["--direct_running_mode=in_memory"])
    ) as p:
        recorded = p | beam.Create(removals, reshuffle=True) | RecordRemovals(str(staged))
        assert_that(
            recorded.audit | beam.Map(lambda e: (e["path"], e["lines"])),
            equal_to([("curation/" + k, v) for k, v in _lines_per_file(removals).items()]),
            label="AuditFiles",
        )
        total = recorded.counts | beam.CombineGlobally(sum_counts)
        assert_that(
            total | beam.Map(lambda c: (c.documents_in, c.removed)),
            equal_to([(0, expected_counts.removed)]),
            label="Counts",
        )
        assert_that(
            recorded.kept | beam.Map(lambda k: (k.source, k.index)),
            equal_to([r.kept for r in removals if r.kept is not None]),
            label="Kept",
        )
    by_key: dict = {}
    for removal in removals:
        by_key.setdefault(audit.audit_key(removal), []).append(removal)
    for key, group in by_key.items():
        audit.write_audit_file(str(direct), key, group)
    written = sorted(p.relative_to(staged) for p in (staged / "curation").iterdir())
    assert written == sorted(p.relative_to(direct) for p in (direct / "curation").iterdir())
    assert len(written) == 3
    for relpath in written:
        assert (staged / relpath).read_bytes() == (direct / relpath).read_bytes()
    parts = list((staged / TEMP_DIR_NAME).iterdir())
    assert len(parts) >= len(removals) // 7
    assert all(p.name.startswith(audit.AUDIT_PART_PREFIX) for p in parts)


def _lines_per_file(removals: list[Removal]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for removal in removals:
        name = audit.audit_relpath(audit.audit_key(removal)).split("/", 1)[1]
        counts[name] = counts.get(name, 0) + 1
    return counts


def test_parts_are_merged_a_run_of_overlapping_records_at_a_time(tmp_path, monkeypatch):
    """Parts of disjoint records are read one at a time; overlapping ones (a record in two parts
    included) together; the file has the bytes of one sorted write of every line."""
    key = ("in/a.txt", 0)
    pieces = [
        [(1, "a"), (5, "e")],
        [(9, "i"), (6, "f")],
        [(3, "c"), (4, "d")],
        [(9, "h")],
        [(12, "l")],
    ]
    parts = [audit.write_audit_part(str(tmp_path / "staged"), lines) for lines in pieces]
    assert [(p.first, p.last) for p in parts] == [(1, 5), (6, 9), (3, 4), (9, 9), (12, 12)]
    runs = audit.overlapping_runs(reversed(parts))
    assert [[(p.first, p.last) for p in run] for run in runs] == [
        [(1, 5), (3, 4)],
        [(6, 9), (9, 9)],
        [(12, 12)],
    ]

    held: list[int] = []
    monkeypatch.setattr(
        audit, "overlapping_runs", lambda ps: [held.append(len(r)) or r for r in runs]
    )
    entry = audit.write_audit_from_parts(str(tmp_path / "staged"), key, parts)
    everything = [pair for lines in pieces for pair in lines]
    expected = audit.write_audit_lines(str(tmp_path / "direct"), key, everything)
    assert entry == expected and entry["lines"] == 8 and held == [2, 2, 1]
    assert (tmp_path / "staged" / entry["path"]).read_bytes() == (
        tmp_path / "direct" / entry["path"]
    ).read_bytes()
