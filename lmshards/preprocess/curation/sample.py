"""`preprocess --curate_sample N`: what each document step would remove from a sample, before a full run.

The sample is the first documents of every input file (files in sorted order, N over the files each),
so it is the same on every machine and draws on every file. Nothing is written and nothing is
tokenized; the corpus steps (decontaminate, dedup) compare documents across the whole corpus, so a
sample says nothing about them and they are left out.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence

from lmshards.plumbing.progress import PROGRESS_EVERY_S
from lmshards.preprocess.curation.documents import Numbering
from lmshards.preprocess.curation.judging import JudgedBatch, build_document_steps, judge_documents
from lmshards.preprocess.curation.records import CurationDoc, Removal
from lmshards.preprocess.curation.steps import CORPUS, SelectedStep
from lmshards.preprocess.sources import ReadOptions, ReadStats
from lmshards.preprocess.stages.read import ReadProgress, plan_sized_ranges
from lmshards.schemas.manifest import InputFileInfo

EXAMPLES = 3  # removed documents shown per step and reason
EXAMPLE_CHARS = 100  # of each example's text
_BATCH = 512


def sample_documents(
    files: Sequence[InputFileInfo], options: ReadOptions, size: int
) -> list[CurationDoc]:
    """The first ceil(size / files) documents of each file, in file order, at most size in all."""
    per_file = math.ceil(size / max(len(files), 1))
    _, ranges = plan_sized_ranges(list(files), options, range_bytes=sys.maxsize)  # a range a file
    numbering = Numbering()
    progress = ReadProgress(sum(f.bytes for f in files), PROGRESS_EVERY_S)
    sample: list[CurationDoc] = []
    for sized in ranges:
        taken: list[CurationDoc] = []
        batches = numbering.batches(
            sized, options, batch_size=_BATCH, stats=ReadStats(), progress=progress
        )
        for batch in batches:
            taken.extend(batch[: per_file - len(taken)])
            if len(taken) >= per_file:
                break
        batches.close()  # the rest of the file is not read
        sample.extend(taken[: size - len(sample)])
        if len(sample) >= size:
            break
    return sample


def example_line(removal: Removal, text: str) -> str:
    """'      a.jsonl:12: mean_word_length 2.10 < 3: "the text..."'"""
    shown = text if len(text) <= EXAMPLE_CHARS else text[:EXAMPLE_CHARS] + "..."
    return f"      {removal.source}:{removal.index}: {removal.detail}: {shown!r}"


def sample_lines(
    steps: Sequence[SelectedStep], docs: Sequence[CurationDoc], judged: JudgedBatch
) -> list[str]:
    """What judging the sample found, per step: documents in and removed, each reason's share with
    examples (the document's file and record, the measured value, its text), what it counted."""
    texts = {doc.record_ref: doc.text for doc in docs}
    files = len({doc.source for doc in docs})
    lines = [f"curation sample: {len(docs):,} documents, the first of each of {files} input files"]
    for chosen in steps:
        if chosen.kind == CORPUS:
            lines.append(f"  {chosen.name}: not sampled (it compares documents across the corpus)")
            continue
        row = judged.funnel.steps.get(chosen.name)
        if row is None or not row.documents_in:
            lines.append(f"  {chosen.name}: no document reached it")
            continue
        gone = row.documents_in - row.documents_out
        lines.append(
            f"  {chosen.name}: {row.documents_in:,} in, would remove {gone:,} "
            f"({gone / row.documents_in:.1%}; {sum(b for _, b in row.removed.values()):,} bytes)"
        )
        for reason, (count, nbytes) in sorted(row.removed.items()):
            lines.append(
                f"    {reason}: {count:,} ({count / row.documents_in:.1%}, {nbytes:,} bytes)"
            )
            removals = [r for r in judged.removals if r.step == chosen.name and r.reason == reason]
            lines += [example_line(r, texts[r.source, r.index]) for r in removals[:EXAMPLES]]
        if row.counts:
            lines.append(
                "    counted: " + ", ".join(f"{k} {n:,}" for k, n in sorted(row.counts.items()))
            )
    return lines


def curate_sample(
    steps: Sequence[SelectedStep],
    files: Sequence[InputFileInfo],
    options: ReadOptions,
    size: int,
) -> list[str]:
    """Reads the sample, builds and runs the document steps on it; the lines to print."""
    docs = sample_documents(files, options, size)
    judged = judge_documents(build_document_steps(steps), docs)
    return sample_lines(steps, docs, judged)
