"""The audit (curation/*.jsonl: one JSON line per removed document) and the manifest's curation counts.

Audit files are named by their source file and a block of its record numbers (the audit's `index`,
see records.py), each holding the removals of that block sorted by record, so the files and their
bytes are the same on every runner, and no worker sorts more than AUDIT_BLOCK lines.

On the staged pipeline a worker writes the audit lines it makes as part files (at most
AUDIT_PART_LINES lines each) under the output's temporary directory, and only the parts' paths cross
the GroupByKey: a runner that holds a whole shuffle in memory (Dask's task shuffle) then holds paths,
not one line per removed document of the corpus. The same pass counts the removals
(RecordRemovals).
"""

from __future__ import annotations

import dataclasses
import hashlib
import posixpath
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from lmshards.plumbing import bounded, fs
from lmshards.preprocess.curation.judging import StepCounts, StepFunnel
from lmshards.preprocess.curation.records import (
    EXACT,
    NEAR,
    REASONS,
    CurationDoc,
    Removal,
    removal_from_line,
    removed_key,
)
from lmshards.preprocess.curation.steps import CORPUS, DOCUMENT, SelectedStep, step_named
from lmshards.schemas.constants import (
    CURATION_DIR_NAME,
    CURATION_FORMAT_VERSION,
    CURATION_STEPS_VERSION,
)
from lmshards.schemas.layouts import TEMP_DIR_NAME
from lmshards.schemas.manifest import CurationInfo, Manifest

AUDIT_BLOCK = 1_000_000  # record numbers per audit file
AUDIT_PREFIX = "removed-"
AUDIT_SUFFIX = ".jsonl"
AUDIT_PART_LINES = 65_536  # audit lines a staged worker holds before it writes them as a part file
AUDIT_PART_PREFIX = "audit-part-"
_PART_FIELD_SEPARATOR = "\t"  # a part's line: the record, then the audit line (JSON: no raw tab)
_SOURCE_TAG_BYTES = 8

AuditKey = tuple[str, int]  # (source, index // AUDIT_BLOCK)


# ---------------------------------------------------------------- logic


@dataclasses.dataclass
class CurationCounts:
    """What curation saw and removed; add two with `a += b`."""

    documents_in: int = 0
    bytes_in: int = 0
    removed: dict[str, list[int]] = dataclasses.field(
        default_factory=dict
    )  # Removal.key -> [docs, bytes]
    by_eval_file: dict[str, int] = dataclasses.field(default_factory=dict)  # eval file -> removed

    def merge(self, other: CurationCounts) -> CurationCounts:
        self.documents_in += other.documents_in
        self.bytes_in += other.bytes_in
        for reason, (docs, nbytes) in other.removed.items():
            mine = self.removed.setdefault(reason, [0, 0])
            mine[0] += docs
            mine[1] += nbytes
        for path, count in other.by_eval_file.items():
            self.by_eval_file[path] = self.by_eval_file.get(path, 0) + count
        return self

    __iadd__ = merge


def counts_of_document(doc: CurationDoc) -> CurationCounts:
    return CurationCounts(documents_in=1, bytes_in=doc.utf8_bytes())


def count_removal(counts: CurationCounts, removal: Removal) -> None:
    """Adds one removal to counts in place (without a CurationCounts of its own to merge: the
    document steps remove most of a corpus, one at a time)."""
    removed = counts.removed.setdefault(removal.key, [0, 0])
    removed[0] += 1
    removed[1] += removal.bytes
    if removal.eval is not None:
        counts.by_eval_file[removal.eval[0]] = counts.by_eval_file.get(removal.eval[0], 0) + 1


def sum_counts(parts: Iterable[CurationCounts]) -> CurationCounts:
    total = CurationCounts()
    for part in parts:
        total += part
    return total


def audit_key(removal: Removal) -> AuditKey:
    return removal.source, removal.index // AUDIT_BLOCK


def audit_relpath(key: AuditKey) -> str:
    """curation/removed-<source tag>-<block>.jsonl; the tag is a hash of the source's path."""
    source, block = key
    tag = hashlib.blake2b(source.encode("utf-8"), digest_size=_SOURCE_TAG_BYTES).hexdigest()
    return posixpath.join(CURATION_DIR_NAME, f"{AUDIT_PREFIX}{tag}-{block:06d}{AUDIT_SUFFIX}")


def write_audit_file(output: str, key: AuditKey, removals: Iterable[Removal]) -> dict[str, Any]:
    """Writes one audit file atomically; returns its manifest entry {"path", "lines"}."""
    return write_audit_lines(output, key, [(r.index, r.audit_line()) for r in removals])


def write_audit_lines(output: str, key: AuditKey, lines: list[tuple[int, str]]) -> dict[str, Any]:
    """write_audit_file from (record, audit line) pairs, already made (not parsed again): the lines
    sorted by record (the pieces of one record by their lines)."""
    relpath = audit_relpath(key)
    fs.write_text_atomic(fs.join(output, relpath), _audit_text(lines))
    return {"path": relpath, "lines": len(lines)}


def _audit_text(lines: Iterable[tuple[int, str]]) -> str:
    """Audit lines sorted by record (the pieces of one record by their lines), one a line."""
    return "".join(line + "\n" for _, line in sorted(lines))


class PartFile(NamedTuple):
    """A part file of audit lines (write_audit_part) and the lowest and highest record it holds."""

    path: str
    first: int
    last: int


def write_audit_part(output: str, lines: Sequence[tuple[int, str]]) -> PartFile:
    """Writes (record, audit line) pairs of one audit file, sorted, as a part under output's temporary
    directory (a new name each time: a retried bundle's parts are never read)."""
    path = fs.join(output, TEMP_DIR_NAME, f"{AUDIT_PART_PREFIX}{uuid.uuid4().hex}{AUDIT_SUFFIX}")
    ordered = sorted(lines)
    text = "".join(f"{record}{_PART_FIELD_SEPARATOR}{line}\n" for record, line in ordered)
    fs.write_text_atomic(path, text)
    return PartFile(path=path, first=ordered[0][0], last=ordered[-1][0])


def read_audit_part(path: str) -> list[tuple[int, str]]:
    """The (record, audit line) pairs write_audit_part wrote."""
    pairs = []
    for row in fs.read_text(path).splitlines():
        record, line = row.split(_PART_FIELD_SEPARATOR, 1)
        pairs.append((int(record), line))
    return pairs


def overlapping_runs(parts: Iterable[PartFile]) -> list[list[PartFile]]:
    """The parts in runs by record: each run's records all below the next run's, the parts of a run
    overlapping. Parts of distinct read ranges do not overlap, so a run is mostly one part."""
    runs: list[list[PartFile]] = []
    highest = -1
    for part in sorted(parts, key=lambda p: (p.first, p.last, p.path)):
        if runs and part.first <= highest:
            runs[-1].append(part)
        else:
            runs.append([part])
        highest = max(highest, part.last)
    return runs


def write_audit_from_parts(output: str, key: AuditKey, parts: Iterable[PartFile]) -> dict[str, Any]:
    """One audit file from its parts, whichever order they come in, with the bytes of write_audit_lines
    (lines sorted by record): written a run of overlapping parts at a time, so that what is held is one
    run's lines, not the file's."""
    relpath = audit_relpath(key)
    lines = 0
    with fs.open_atomic(fs.join(output, relpath)) as f:
        for run in overlapping_runs(parts):
            pairs = [pair for part in run for pair in read_audit_part(part.path)]
            f.write(_audit_text(pairs).encode("utf-8"))
            lines += len(pairs)
    return {"path": relpath, "lines": lines}


def removed_keys(steps: Sequence[SelectedStep]) -> list[str]:
    """The keys of curation.removed: the corpus steps' reasons (always, as before the document steps),
    then each selected document step's, in step order."""
    keys = list(REASONS)
    for chosen in steps:
        if chosen.kind == DOCUMENT:
            step = step_named(chosen.name)
            keys.extend(removed_key(step.name, reason) for reason in step.reasons)
    return keys


def funnel_rows(
    steps: Sequence[SelectedStep], funnel: StepFunnel, counts: CurationCounts
) -> tuple[dict[str, Any], ...]:
    """The manifest's curation.steps: the document steps' rows as judged, the corpus steps' from the
    step before's out less their removals (they change no text). () without a document step, so the
    manifest of a --dedup / --decontaminate run stays as it was."""
    if not any(chosen.kind == DOCUMENT for chosen in steps):
        return ()
    return step_rows(steps, funnel, counts)


def step_rows(
    steps: Sequence[SelectedStep], funnel: StepFunnel, counts: CurationCounts
) -> tuple[dict[str, Any], ...]:
    """Every step's funnel row (see funnel_rows), in order."""
    rows = []
    documents, nbytes = counts.documents_in, counts.bytes_in
    for chosen in steps:
        if chosen.kind == CORPUS:
            step = step_named(chosen.name)
            row = StepCounts(documents_in=documents, bytes_in=nbytes)
            for reason in step.reasons:
                docs, gone = counts.removed.get(reason, [0, 0])
                if docs:
                    row.removed[reason] = [docs, gone]
            row.documents_out = documents - sum(d for d, _ in row.removed.values())
            row.bytes_out = nbytes - sum(b for _, b in row.removed.values())
        else:
            row = funnel.steps.get(chosen.name) or StepCounts(
                documents_in=documents, bytes_in=nbytes
            )
            if not row.documents_in:  # no document reached it: in and out are the step before's out
                row = StepCounts(documents, nbytes, documents, nbytes)
        rows.append(row.as_dict(chosen.name, chosen.options))
        documents, nbytes = row.documents_out, row.bytes_out
    return tuple(rows)


def curation_info(
    *,
    dedup: str,
    options: dict[str, Any],
    counts: CurationCounts,
    clusters: int,
    eval_files: Sequence[str],
    eval_documents: dict[str, int],
    audit: Iterable[dict[str, Any]],
    steps: Sequence[SelectedStep] = (),
    funnel: StepFunnel | None = None,
) -> CurationInfo:
    """The manifest's curation section from what the run counted."""
    rows = funnel_rows(steps, funnel or StepFunnel(), counts)
    return CurationInfo(
        dedup=dedup,
        options=options,
        documents_in=counts.documents_in,
        bytes_in=counts.bytes_in,
        removed={
            key: {
                "documents": counts.removed.get(key, [0, 0])[0],
                "bytes": counts.removed.get(key, [0, 0])[1],
            }
            for key in removed_keys(steps)
        },
        clusters=clusters,
        eval_files=tuple(
            {
                "path": path,
                "documents": eval_documents.get(path, 0),
                "removed": counts.by_eval_file.get(path, 0),
            }
            for path in eval_files
        ),
        audit=tuple(sorted(audit, key=lambda entry: entry["path"])),
        steps=rows,
        version=CURATION_STEPS_VERSION if rows else CURATION_FORMAT_VERSION,
    )


def curation_funnel(curation: CurationInfo) -> tuple[dict[str, Any], ...]:
    """The funnel of a curation section: its steps, or for a set made before the document steps (or
    with only --dedup / --decontaminate), the corpus steps' rows drawn from its removed counts."""
    if curation.steps:
        return curation.steps
    ran = []
    if curation.eval_files:
        ran.append(SelectedStep("decontaminate", CORPUS, {}))
    if curation.dedup in (EXACT, NEAR):  # --dedup's choices are named as its reasons
        ran.append(SelectedStep("dedup", CORPUS, {}))
    counts = CurationCounts(
        documents_in=curation.documents_in,
        bytes_in=curation.bytes_in,
        removed={key: [r["documents"], r["bytes"]] for key, r in curation.removed.items()},
    )
    return step_rows(ran, StepFunnel(), counts)


def funnel_lines(curation: CurationInfo) -> list[str]:
    """The funnel, a line per step (documents and bytes in and out) and one per reason and count."""
    lines = ["    funnel (documents, UTF-8 bytes):"]
    for row in curation_funnel(curation):
        lines.append(
            f"      {row['name']}: {row['documents_in']:,} -> {row['documents_out']:,} documents, "
            f"{row['bytes_in']:,} -> {row['bytes_out']:,} bytes"
        )
        for reason, r in row["removed"].items():
            lines.append(f"        removed {reason}: {r['documents']:,} ({r['bytes']:,} bytes)")
        if row["counts"]:
            counted = ", ".join(f"{label} {n:,}" for label, n in row["counts"].items())
            lines.append(f"        counted: {counted}")
    return lines


def audit_problems(manifest: Manifest, output: str) -> list[str]:
    """Where the audit files and the manifest's curation section disagree (none without curation).

    Checks each listed file is there with its line count, every line parses, names a listed input
    file, and the lines per reason (documents and bytes) and per eval file add up to the manifest's.
    """
    curation = manifest.curation
    if curation is None:
        return []
    problems: list[str] = []
    inputs = {info.path for info in manifest.inputs}
    removed: dict[str, list[int]] = {key: [0, 0] for key in curation.removed}
    ran = {row["name"] for row in curation.steps}
    by_eval: dict[str, int] = {}
    for entry in curation.audit:
        path = fs.join(output, entry["path"])
        try:
            lines = bounded.read_text(
                path, what="audit file", max_bytes=bounded.MAX_JSONL_BYTES
            ).splitlines()
        except FileNotFoundError:
            problems.append(f"{path}: audit file named by the manifest is missing")
            continue
        except bounded.ReadLimitError as e:
            problems.append(str(e))
            continue
        if len(lines) != entry["lines"]:
            problems.append(f"{path}: {len(lines)} audit lines, the manifest says {entry['lines']}")
        for number, line in enumerate(lines, 1):
            try:
                removal = removal_from_line(line)
            except (ValueError, KeyError, TypeError) as e:
                problems.append(f"{path}:{number}: not an audit line ({e})")
                continue
            if removal.source not in inputs:
                problems.append(
                    f"{path}:{number}: source {removal.source!r} is not an input of this shard set"
                )
            if removal.key not in removed:
                problems.append(
                    f"{path}:{number}: step {removal.step!r} reason {removal.reason!r} is not one the "
                    "manifest counts"
                )
                continue
            if removal.step and removal.step not in ran:
                problems.append(f"{path}:{number}: step {removal.step!r} did not run")
            removed[removal.key][0] += 1
            removed[removal.key][1] += removal.bytes
            if removal.eval is not None:
                by_eval[removal.eval[0]] = by_eval.get(removal.eval[0], 0) + 1
    for key, expected in curation.removed.items():
        found = removed[key]
        if [expected["documents"], expected["bytes"]] != found:
            problems.append(
                f"{output}: the audit holds {found[0]:,} {key} removals ({found[1]:,} bytes), the "
                f"manifest says {expected['documents']:,} ({expected['bytes']:,} bytes)"
            )
    for entry in curation.eval_files:
        if by_eval.get(entry["path"], 0) != entry["removed"]:
            problems.append(
                f"{output}: the audit names eval file {entry['path']!r} {by_eval.get(entry['path'], 0):,} "
                f"times, the manifest says {entry['removed']:,}"
            )
    return problems + step_problems(curation, removed, output)


def step_problems(curation: CurationInfo, removed: dict[str, list[int]], output: str) -> list[str]:
    """Where the funnel's removals per step and reason disagree with the audit's (removed: what the
    audit holds per Removal.key)."""
    problems = []
    for row in curation_funnel(curation):
        for reason, r in row["removed"].items():
            key = removed_key(row["name"], reason)
            found = removed.get(key if key in removed else reason, [0, 0])
            if found != [r["documents"], r["bytes"]]:
                problems.append(
                    f"{output}: the audit holds {found[0]:,} {row['name']} {reason} removals "
                    f"({found[1]:,} bytes), the funnel says {r['documents']:,} ({r['bytes']:,} bytes)"
                )
    return problems


def describe_curation(curation: CurationInfo) -> list[str]:
    """Readable lines for `lmshards inspect`: the funnel and the options."""
    kept = curation.documents_in - curation.documents_removed
    options = ", ".join(f"{k} {v}" for k, v in sorted(curation.options.items()))
    ran = [row["name"] for row in curation.steps]
    header = (
        f"  curation ({' -> '.join(ran)}{'; ' + options if options else ''}):"
        if ran  # with document steps: their options are the manifest's curation.steps
        else f"  curation (--dedup {curation.dedup}; {options}):"
    )
    lines = [
        header,
        f"    documents in {curation.documents_in:,} ({curation.bytes_in:,} bytes), kept {kept:,}, "
        f"removed {curation.documents_removed:,} ({curation.bytes_removed:,} bytes)",
    ]
    if not ran:  # a set without the funnel: the corpus steps' counts, as it always printed them
        for reason in REASONS:
            r = curation.removed.get(reason, {"documents": 0, "bytes": 0})
            lines.append(f"    {reason}: {r['documents']:,} documents, {r['bytes']:,} bytes")
    if not ran or "dedup" in ran:
        lines.append(f"    duplicate clusters: {curation.clusters:,}")
    for entry in curation.eval_files:
        lines.append(
            f"    eval {entry['path']}: {entry['documents']:,} documents, "
            f"{entry['removed']:,} training documents removed"
        )
    lines.append(
        f"    audit: {len(curation.audit)} files in {CURATION_DIR_NAME}/, "
        f"{sum(a['lines'] for a in curation.audit):,} lines"
    )
    return lines + funnel_lines(curation)


# ---------------------------------------------------------------- Beam


class AuditPart(NamedTuple):
    """A part file of one audit file's lines (write_audit_part)."""

    key: AuditKey
    part: PartFile


@dataclasses.dataclass(frozen=True)
class KeptDoc:
    """The document a duplicate was removed in favour of: one a removal, counted once a cluster."""

    source: str
    index: int  # as the audit names it (Removal.kept)


class RecordedRemovals(NamedTuple):
    audit: beam.PCollection  # {"path", "lines"} of each audit file written under output
    counts: beam.PCollection  # CurationCounts of the removals, one a bundle
    kept: beam.PCollection  # KeptDoc, one a removal that names a kept document


class RecordRemovals(beam.PTransform):
    """Removal -> RecordedRemovals: the audit written, the removals counted and their kept documents
    named, all in one pass (_RecordRemovalsFn), so that no runner keeps a bundle's removals for a
    second or third reader (Dask keeps a task's output until its last reader has run)."""

    def __init__(self, output: str):
        super().__init__()
        self._output = output

    def expand(self, removals) -> RecordedRemovals:
        recorded = removals | "Record" >> beam.ParDo(
            _RecordRemovalsFn(self._output)
        )  # AuditPart | CurationCounts | KeptDoc
        audit = (
            recorded
            | "AuditParts" >> beam.Filter(_is_audit_part)  # AuditPart
            | "Group" >> beam.GroupByKey()  # (AuditKey, [PartFile])
            | "Write" >> beam.ParDo(_WriteAuditFn(self._output))
        )  # {"path", "lines"}
        counts = recorded | "Counts" >> beam.Filter(_is_counts)  # CurationCounts
        kept = recorded | "Kept" >> beam.Filter(_is_kept_doc)  # KeptDoc
        return RecordedRemovals(audit=audit, counts=counts, kept=kept)


def _is_audit_part(element: object) -> bool:
    return isinstance(element, AuditPart)


def _is_counts(element: object) -> bool:
    return isinstance(element, CurationCounts)


def _is_kept_doc(element: object) -> bool:
    return isinstance(element, KeptDoc)


class _RecordRemovalsFn(beam.DoFn):
    """Removal -> KeptDoc per removal naming one; AuditPart per part file written (whenever
    AUDIT_PART_LINES lines are held, and at the bundle's end); the bundle's CurationCounts at its end."""

    def __init__(self, output: str):
        self._output = output
        self._held: dict[AuditKey, list[tuple[int, str]]] = {}
        self._held_lines = 0
        self._counts = CurationCounts()

    def start_bundle(self) -> None:
        self._held, self._held_lines, self._counts = {}, 0, CurationCounts()

    def process(self, removal: Removal) -> Iterator[AuditPart | KeptDoc]:
        count_removal(self._counts, removal)
        if removal.kept is not None:
            yield KeptDoc(*removal.kept)
        self._held.setdefault(audit_key(removal), []).append((removal.index, removal.audit_line()))
        self._held_lines += 1
        if self._held_lines >= AUDIT_PART_LINES:
            yield from self._write_parts()

    def finish_bundle(self):
        for element in (*self._write_parts(), self._counts):
            yield GlobalWindows.windowed_value(element)

    def _write_parts(self) -> list[AuditPart]:
        written = [
            AuditPart(key, write_audit_part(self._output, lines))
            for key, lines in self._held.items()
        ]
        self._held, self._held_lines = {}, 0
        return written


class _WriteAuditFn(beam.DoFn):
    """(AuditKey, [PartFile]) -> the audit file's {"path", "lines"}, once it is written."""

    def __init__(self, output: str):
        self._output = output

    def process(self, item: tuple[AuditKey, Iterable[PartFile]]) -> Iterable[dict[str, Any]]:
        key, parts = item
        yield write_audit_from_parts(self._output, key, parts)
