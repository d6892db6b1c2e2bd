"""Stage 1, read: the input files, range by range, into batches of documents.

The ranges (see lmshards.preprocess.sources) are planned, and every file checked, when the transform is
constructed, i.e. while the pipeline is built and before any worker starts.

With numbered=True (curation needs each document's identity) every batch says which file it came from,
the place of its first document among the file's documents and the raw record (line, row) of each of its
documents. Those numbers need every earlier range's counts, so the ranges are read twice: once to count
each range's documents and raw records (range_offsets turns the counts into each range's first numbers,
whatever the range size), then again, each range numbered from its offsets as it is read. A runner then
holds only the ranges' counts while it waits for all of them, never the corpus's text (Dask would keep
it in the workers' memory; Dataflow would write it to its shuffle and read it back).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Iterator, Sequence

from lmshards.plumbing.progress import Pacer, bytes_progress
from lmshards.plumbing.units import megabytes
from lmshards.preprocess.sources import (
    InputError,
    ReadOptions,
    ReadRange,
    ReadStats,
    RecordNumbers,
    expand_inputs,
    is_compressed,
    plan_ranges,
    read_range,
)
from lmshards.preprocess.sources.core.ranges import TO_END, byte_ranges
from lmshards.preprocess.sources.files import FileState, check_unchanged, file_state
from lmshards.preprocess.sources.formats import format_for
from lmshards.preprocess.stages.metrics import counter
from lmshards.schemas.manifest import InputFileInfo

logger = logging.getLogger(__name__)

# Documents per output element: large enough that Beam's per-element cost is small next to
# tokenizing them, small enough that a batch is a few hundred KB.
DEFAULT_DOC_BATCH = 512
# ... and at most about this many characters (plus one document): the tokenizer holds every token of
# a batch at once, about 100 bytes each, so one line of hundreds of MB (read in pieces of
# ReadOptions.max_document_chars) must not arrive as one batch. Ordinary batches stay far below it.
DEFAULT_BATCH_CHARS = 2_000_000
# ReadStats field -> Beam counter name: the field's own name, except where the Dataflow monitoring
# page needs the stage in it.
RENAMED_COUNTERS = {"documents": "documents_read"}
COUNTERS = {f.name: RENAMED_COUNTERS.get(f.name, f.name) for f in dataclasses.fields(ReadStats)}
# The input read, in the units of the input size (file sizes as listed; bytes_read counts text,
# decompressed): this over the launcher's "input: N MB" line is the read progress.
INPUT_BYTES_COUNTER = "input_bytes_read"


@dataclasses.dataclass(frozen=True)
class NumberedBatch:
    """Documents of one range with their place in their file (ReadDocuments(numbered=True)).

    texts[i] is document first + i of file `source` (read from its range number `range_number`), and
    comes from its file's raw record records[i]: the line of a line-document or JSON Lines file (every
    line counted, empty and skipped ones too), the row of a Parquet file; for the other formats the
    document's own place (first + i). urls[i] is its record's URL (WARC, JSON
    Lines with --url_field), for the audit; urls is None where the batch has none, so that batches of
    plain text carry nothing more.
    """

    source: str
    range_number: int  # the range's place among its file's ranges, from 0
    first: int
    texts: list[str]
    records: list[int]
    urls: list[str | None] | None = None


@dataclasses.dataclass(frozen=True)
class RangeCount:
    """How many documents range `range_number` of `source` gave, and how many raw records it holds
    (ReadDocuments(numbered=True); see NumberedBatch.records)."""

    source: str
    range_number: int
    documents: int
    records: int


# What reading one range emits on its single output: its document batches, then its ReadStats (with
# numbering, its first read: only its RangeCount and ReadStats). One output, told apart by type: not
# every Beam runner keeps a ParDo's tagged outputs apart.
RangeOutput = list[str] | RangeCount | ReadStats


# ---------------------------------------------------------------- logic


@dataclasses.dataclass(frozen=True)
class SizedRange:
    """A read range and its share of the input's bytes (file sizes as listed), for progress.

    live: whether ReadStats.bytes_read advances in those bytes while the range is read (a byte range
    of an uncompressed file); otherwise the range's share is counted when it has been read.
    """

    range: ReadRange
    input_bytes: int
    live: bool
    planned: FileState | None = (
        None  # the file when reading was planned: checked after the range is read
    )
    number: int = 0  # the range's place among its file's ranges, from 0


def size_ranges(
    files: Sequence[InputFileInfo], ranges: Sequence[ReadRange], options: ReadOptions
) -> list[SizedRange]:
    """Each range with its share of its file's size: a byte range its own length; the ranges of a
    file read otherwise (compressed, Parquet row groups) equal shares. The shares sum to the input size."""
    sizes = {f.path: f.bytes for f in files}
    states = {f.path: file_state(f.path) for f in files}
    for f in files:
        state = states[f.path]
        if state is not None:  # its size now against its size when it was listed
            check_unchanged(f.path, FileState(f.bytes, state.mtime_ns), when="since it was listed")
    counts: dict[str, int] = {}
    for r in ranges:
        counts[r.path] = counts.get(r.path, 0) + 1
    seen: dict[str, int] = {}
    sized = []
    for r in ranges:
        size = sizes[r.path]
        i, n = seen.get(r.path, 0), counts[r.path]
        seen[r.path] = i + 1
        if not is_compressed(r.path) and format_for(r.path, options).plan_ranges is byte_ranges:
            share = (size if r.end == TO_END else r.end) - r.start
            sized.append(SizedRange(r, share, live=True, planned=states[r.path], number=i))
            continue
        share = size * (i + 1) // n - size * i // n
        sized.append(SizedRange(r, share, live=False, planned=states[r.path], number=i))
    return sized


def known_urls(urls: list[str | None]) -> list[str | None] | None:
    """urls, or None when none of them is known (a format without URLs)."""
    return urls if any(url is not None for url in urls) else None


@dataclasses.dataclass(frozen=True)
class RangePlace:
    """Where a range's documents and raw records start in its file, and how many documents it gave
    when it was first read."""

    first_document: int
    first_record: int
    documents: int


def range_places(counts: Iterable[RangeCount]) -> dict[tuple[str, int], RangePlace]:
    """range_offsets, with each range's document count."""
    counts = list(counts)
    offsets = range_offsets(counts)
    return {
        (c.source, c.range_number): RangePlace(*offsets[c.source, c.range_number], c.documents)
        for c in counts
    }


def record_numbers(sized: SizedRange, options: ReadOptions) -> RecordNumbers | None:
    """A RecordNumbers for reading `sized`, or None for a format whose records are its documents."""
    return RecordNumbers() if format_for(sized.range.path, options).raw_records else None


def numbered_batches(
    sized: SizedRange, place: RangePlace, options: ReadOptions, batch_size: int
) -> Iterator[NumberedBatch]:
    """The batches of a range read again, numbered in its file from `place`.

    Raises:
      InputError: the file changed since it was first read (another count of documents, or another
        size or time), naming it.
    """
    path = sized.range.path
    numbers = record_numbers(sized, options)
    documents = 0
    for batch in read_sized_range(
        sized, options, batch_size=batch_size, stats=ReadStats(), progress=None, numbers=numbers
    ):
        first = place.first_document + documents
        if numbers is not None:
            records, urls = numbers.take_with_urls(len(batch))
            records = [place.first_record + r for r in records]
            yield NumberedBatch(path, sized.number, first, batch, records, known_urls(urls))
        else:
            records = list(range(first, first + len(batch)))
            yield NumberedBatch(path, sized.number, first, batch, records)
        documents += len(batch)
    if documents != place.documents:
        raise InputError(
            f"{path!r} gave {documents} documents when read again and {place.documents} the first "
            f"time (range {sized.number}): it changed during the run. Rerun once nothing writes to it."
        )


def range_offsets(counts: Iterable[RangeCount]) -> dict[tuple[str, int], tuple[int, int]]:
    """(source, range number) -> (the number of the range's first document in its file, the number
    of its first raw record).

    A file's documents and records are numbered in file order across its ranges: each range starts
    where the ranges before it in the file ended, so the numbers do not depend on the range size.
    """
    by_file: dict[str, dict[int, RangeCount]] = {}
    for c in counts:
        by_file.setdefault(c.source, {})[c.range_number] = c
    offsets = {}
    for source, ranges in by_file.items():
        documents = records = 0
        for number in sorted(ranges):
            offsets[source, number] = documents, records
            documents += ranges[number].documents
            records += ranges[number].records
    return offsets


def read_batches(
    r: ReadRange,
    options: ReadOptions,
    *,
    batch_size: int,
    stats: ReadStats,
    batch_chars: int = DEFAULT_BATCH_CHARS,
    numbers: RecordNumbers | None = None,
) -> Iterator[list[str]]:
    """The documents of range `r` in batches of at most batch_size documents, each batch ended once it
    holds batch_chars characters or more; counts what it finds in `stats` (and, where the format
    numbers raw records, their records in `numbers`)."""
    batch: list[str] = []
    chars = 0
    for document in read_range(r, options, stats, numbers):
        batch.append(document)
        chars += len(document)
        if len(batch) == batch_size or chars >= batch_chars:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


def read_sized_range(
    sized: SizedRange,
    options: ReadOptions,
    *,
    batch_size: int,
    stats: ReadStats,
    progress: ReadProgress | None,
    numbers: RecordNumbers | None = None,
) -> Iterator[list[str]]:
    """The batches of one planned range (see read_batches), its progress reported as they come (None:
    not reported); checks afterwards that the file did not change while it was read.

    Raises:
      InputError: the file changed while it was read, or its data is corrupt.
    """
    for batch in read_batches(
        sized.range, options, batch_size=batch_size, stats=stats, numbers=numbers
    ):
        yield batch
        if progress is not None:
            progress.report(sized, stats)
    check_unchanged(sized.range.path, sized.planned, when="while it was read")
    if progress is not None:
        progress.report(sized, stats, finished=True)


def plan_sized_ranges(
    files: Sequence[InputFileInfo | str], options: ReadOptions, *, range_bytes: int
) -> tuple[list[InputFileInfo], list[SizedRange]]:
    """The input files (paths/globs expanded) and their read ranges with their shares of the input.

    Raises:
      InputError: an input that cannot be read as its format.
    """
    patterns = [f for f in files if isinstance(f, str)]
    infos = [f for f in files if not isinstance(f, str)] + (
        expand_inputs(patterns) if patterns else []
    )
    ranges = plan_ranges(infos, options=options, range_bytes=range_bytes)
    logger.info(
        "input: %.1f MB in %d files, %d read ranges",
        megabytes(sum(f.bytes for f in infos)),
        len(infos),
        len(ranges),
    )
    return infos, size_ranges(infos, ranges, options)


def is_stats(element: RangeOutput) -> bool:
    return isinstance(element, ReadStats)


def is_batch(element: RangeOutput) -> bool:
    return not isinstance(element, (ReadStats, RangeCount))


def is_count(element: RangeOutput) -> bool:
    return isinstance(element, RangeCount)


def progress_line(*, read_bytes: int, total_bytes: int, documents: int, seconds: float) -> str:
    """ "read 30.0 of 134.2 MB (22%), 3.10 MB/s, ETA 34 s, 51,200 documents"; the ETA is at this rate."""
    progress = bytes_progress(done=read_bytes, total=total_bytes, seconds=seconds)
    return f"read {progress}, {documents:,} documents"


class ReadProgress:
    """One reader's progress against the whole input, logged at most every `every_s` seconds.

    Each reader (a DoFn instance: one per worker thread) counts only what it read itself. On the
    default runner there is one, so its line is the job's progress; with several workers each line
    is that worker's share, the percentages add up over the workers, and the ETA is what this worker
    alone would need for the rest (an upper bound). The job's totals are in the Beam counters
    (bytes_read, documents_read) and in the launcher's closing line.
    """

    def __init__(self, total_bytes: int, every_s: float):
        self._total_bytes = total_bytes
        self._pacer = Pacer(every_s)
        self._documents = self._bytes = 0  # of the finished ranges

    def report(self, sized: SizedRange, current: ReadStats, *, finished: bool = False) -> None:
        """current: the stats of range `sized` so far; finished: it has been read to its end."""
        done = (
            sized.input_bytes
            if finished
            else min(current.bytes_read, sized.input_bytes)
            if sized.live
            else 0
        )
        documents, nbytes = self._documents + current.documents, self._bytes + done
        if finished:
            self._documents, self._bytes = documents, nbytes
        if self._pacer.due():
            logger.info(
                "%s",
                progress_line(
                    read_bytes=nbytes,
                    total_bytes=self._total_bytes,
                    documents=documents,
                    seconds=self._pacer.elapsed(),
                ),
            )


def count_read(stats: ReadStats, input_bytes: int) -> None:
    """Adds what reading found to the Beam counters (call it from a DoFn's own thread)."""
    for field, name in COUNTERS.items():
        if value := getattr(stats, field):
            counter(name).inc(value)
    counter(INPUT_BYTES_COUNTER).inc(input_bytes)
