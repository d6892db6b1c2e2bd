"""The document steps on the default runner: each batch judged as it is read, in one pass.

Language, quality filters and PII need no other document, so the in-process path judges each batch
between reading and tokenizing (judge_documents, the loop the Beam stage runs too), and nothing waits
for the whole corpus. The removals go to spill files, one per audit file (a source's block of records),
as they come; finish() writes each audit file sorted by record, as WriteAudit does, so the audit and
the manifest's curation section are the staged pipeline's.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterable, Iterator, Sequence

from lmshards.preprocess.curation.audit import (
    AuditKey,
    CurationCounts,
    audit_key,
    count_removal,
    curation_info,
    write_audit_lines,
)
from lmshards.preprocess.curation.judging import (
    StepFunnel,
    build_document_steps,
    judge_documents,
)
from lmshards.preprocess.curation.local import FileNumbering, curation_docs
from lmshards.preprocess.curation.records import CurationDoc, utf8_bytes
from lmshards.preprocess.curation.steps import SelectedStep
from lmshards.preprocess.curation.steps.dedup import DEDUP_NONE
from lmshards.preprocess.sources import ReadOptions, ReadStats
from lmshards.preprocess.stages.read import ReadProgress, SizedRange, read_sized_range
from lmshards.schemas.manifest import CurationInfo


def spill_lines(lines: Iterable[str]) -> Iterator[tuple[int, str]]:
    """(record, audit line) of each "record<TAB>line" spill line (an audit line is one JSON line: it
    holds no line break, and a tab in it is escaped)."""
    for line in lines:
        record, _, text = line.rstrip("\n").partition("\t")
        yield int(record), text


class Numbering:
    """Numbers the documents of read ranges as the staged reader does (local.FileNumbering: each
    document's index among its file's documents and its raw record, across a file's ranges read in
    their order), as CurationDocs."""

    def __init__(self) -> None:
        self._files: FileNumbering | None = (
            None  # made by the first batches() call, with its options
        )

    def batches(
        self,
        sized: SizedRange,
        options: ReadOptions,
        *,
        batch_size: int,
        stats: ReadStats,
        progress: ReadProgress,
    ) -> Generator[list[CurationDoc], None, None]:
        """read_sized_range's batches, numbered. A file's ranges must come in their order
        (plan_sized_ranges lists them so)."""
        if self._files is None:
            self._files = FileNumbering(options)
        numbers = self._files.start(sized)
        for batch in read_sized_range(
            sized, options, batch_size=batch_size, stats=stats, progress=progress, numbers=numbers
        ):
            yield curation_docs(self._files.number(batch))


class DocumentCuration:
    """Judges numbered documents through the selected document steps as they are read; finish() writes
    the audit under output and returns the manifest's curation section. Spill files live under
    `directory` (the caller's spill directory, removed by the caller)."""

    def __init__(self, steps: Sequence[SelectedStep], *, output: str, directory: str):
        self._selected = tuple(steps)
        self._built = build_document_steps(self._selected)
        self._output = output
        self._directory = os.path.join(directory, "judged")
        os.makedirs(self._directory, exist_ok=True)
        self._counts = CurationCounts()
        self._funnel = StepFunnel()
        self._spills: dict[AuditKey, str] = {}
        self._numbering = Numbering()

    def read_range(
        self,
        sized: SizedRange,
        options: ReadOptions,
        *,
        batch_size: int,
        stats: ReadStats,
        progress: ReadProgress,
    ) -> Iterator[list[str]]:
        """read_sized_range's batches, numbered and judged: the kept texts of each."""
        for docs in self._numbering.batches(
            sized, options, batch_size=batch_size, stats=stats, progress=progress
        ):
            kept = self.judge(docs)
            if kept:
                yield kept

    def judge(self, docs: Sequence[CurationDoc]) -> list[str]:
        """The texts of docs that go on to be tokenized (as the steps left them), in order."""
        self._counts.documents_in += len(docs)
        self._counts.bytes_in += sum(utf8_bytes(doc.text) for doc in docs)
        judged = judge_documents(self._built, docs)
        self._funnel += judged.funnel
        lines: dict[AuditKey, list[str]] = {}
        for removal in judged.removals:
            count_removal(self._counts, removal)
            # The record before the line: finish() sorts by it without parsing the line again.
            lines.setdefault(audit_key(removal), []).append(
                f"{removal.index}\t{removal.audit_line()}\n"
            )
        for key, text in lines.items():  # (source, block) -> its lines of this batch
            path = self._spills.setdefault(
                key, os.path.join(self._directory, f"audit-{len(self._spills):06d}")
            )
            with open(path, "a", encoding="utf-8") as f:
                f.writelines(text)
        return [doc.text for doc in judged.kept]

    def finish(self) -> CurationInfo:
        """Writes every audit file; the manifest's curation section (after the last judge())."""
        audit = []
        for key, path in self._spills.items():
            with open(path, encoding="utf-8") as f:
                lines = list(spill_lines(f))
            audit.append(write_audit_lines(self._output, key, lines))
            os.remove(path)
        return curation_info(
            dedup=DEDUP_NONE,
            options={},
            counts=self._counts,
            clusters=0,
            eval_files=(),
            eval_documents={},
            audit=audit,
            steps=self._selected,
            funnel=self._funnel,
        )
