"""Stage 1, read: the input files, range by range, into batches of documents.

The ranges (see preprocess.sources) are planned, and every file checked, when the transform is
constructed, i.e. while the pipeline is built and before any worker starts.
"""

from __future__ import annotations

import logging
import time
from typing import Iterable, Iterator, NamedTuple, Sequence, Union

import apache_beam as beam

from preprocess.sources import (
    DEFAULT_RANGE_BYTES,
    ReadOptions,
    ReadRange,
    ReadStats,
    expand_inputs,
    plan_ranges,
    read_range,
    sum_stats,
)
from preprocess.metrics import counter
from schemas.manifest import InputFileInfo

logger = logging.getLogger(__name__)

# Documents per output element: large enough that Beam's per-element cost is small next to
# tokenizing them, small enough that a batch is a few hundred KB.
DEFAULT_DOC_BATCH = 512
PROGRESS_EVERY_S = 10.0
# ReadStats field -> Beam counter name.
COUNTERS = {
    "documents": "documents_read",
    "documents_empty": "documents_empty",
    "documents_invalid_utf8": "documents_invalid_utf8",
    "documents_nul": "documents_nul",
    "documents_split": "documents_split",
    "documents_invalid_json": "documents_invalid_json",
    "files_empty": "files_empty",
    "bytes_read": "bytes_read",
}

# What reading one range emits on its single output: its document batches, then its ReadStats.
# (One output, told apart by type: not every Beam runner keeps a ParDo's tagged outputs apart.)
RangeOutput = Union[list[str], ReadStats]


# ---------------------------------------------------------------- logic


def read_batches(r: ReadRange, options: ReadOptions, *, batch_size: int,
                 stats: ReadStats) -> Iterator[list[str]]:
    """The documents of range `r` in batches of at most batch_size; counts what it finds in `stats`."""
    batch: list[str] = []
    for document in read_range(r, options, stats):
        batch.append(document)
        if len(batch) == batch_size:
            yield batch
            batch = []
    if batch:
        yield batch


def is_stats(element: RangeOutput) -> bool:
    return isinstance(element, ReadStats)


def is_batch(element: RangeOutput) -> bool:
    return not isinstance(element, ReadStats)


class ReadProgress:
    """Logs one worker's reading rate (documents/s, MB/s) at most every `every_s` seconds."""

    def __init__(self, every_s: float):
        self._every_s = every_s
        self._start = self._last = time.monotonic()
        self._documents = self._bytes = 0  # of the finished ranges

    def report(self, current: ReadStats, *, finished: bool = False) -> None:
        """current: the stats of the range being read (bytes_read grows when a text range ends)."""
        documents = self._documents + current.documents
        nbytes = self._bytes + current.bytes_read
        if finished:
            self._documents, self._bytes = documents, nbytes
        now = time.monotonic()
        if now - self._last >= self._every_s:
            self._last = now
            elapsed = max(now - self._start, 1e-9)
            logger.info(
                "read %d documents, %.1f MB (%.0f documents/s, %.2f MB/s)",
                documents, nbytes / 1e6, documents / elapsed, nbytes / 1e6 / elapsed,
            )


# ---------------------------------------------------------------- Beam


class ReadOutputs(NamedTuple):
    documents: beam.PCollection  # list[str]
    stats: beam.PCollection  # ReadStats: exactly one, the sum over every range


class ReadDocuments(beam.PTransform):
    """Input files -> ReadOutputs: batches of documents (list[str], at most batch_size each, in no fixed
    order), and the ReadStats totals as data, so that the manifest can record them deterministically.

    files: InputFileInfo from expand_inputs, or paths/globs (expanded here).

    Raises:
      InputError: (when constructed) an input that cannot be read as its format.
    """

    def __init__(
        self,
        files: Sequence[InputFileInfo | str],
        options: ReadOptions,
        *,
        range_bytes: int = DEFAULT_RANGE_BYTES,
        batch_size: int = DEFAULT_DOC_BATCH,
    ):
        super().__init__()
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        patterns = [f for f in files if isinstance(f, str)]
        infos = [f for f in files if not isinstance(f, str)] + (expand_inputs(patterns) if patterns else [])
        self._ranges = plan_ranges(infos, options=options, range_bytes=range_bytes)
        self._options = options
        self._batch_size = batch_size

    def expand(self, pbegin: beam.pvalue.PBegin) -> ReadOutputs:
        read = (
            pbegin
            | "ListRanges" >> beam.Create(self._ranges)  # ReadRange
            | "SpreadRanges" >> beam.Reshuffle()  # ReadRange, each on any worker
            | "ReadRanges" >> beam.ParDo(_ReadRangeFn(self._options, self._batch_size))
        )  # RangeOutput: list[str] batches, then the range's ReadStats
        documents = read | "Documents" >> beam.Filter(is_batch)  # list[str]
        stats = (
            read
            | "RangeStats" >> beam.Filter(is_stats)  # ReadStats, one per range
            | "SumStats" >> beam.CombineGlobally(sum_stats)  # ReadStats, one
        )
        return ReadOutputs(documents=documents, stats=stats)


class _ReadRangeFn(beam.DoFn):
    """ReadRange -> its list[str] batches, then its ReadStats; counts in Metrics."""

    def __init__(self, options: ReadOptions, batch_size: int):
        self._options = options
        self._batch_size = batch_size
        self._counters = {field: counter(name) for field, name in COUNTERS.items()}
        self._progress: ReadProgress | None = None

    def setup(self) -> None:
        self._progress = ReadProgress(PROGRESS_EVERY_S)

    def process(self, r: ReadRange) -> Iterable[RangeOutput]:
        stats = ReadStats()
        for batch in read_batches(r, self._options, batch_size=self._batch_size, stats=stats):
            yield batch
            self._progress.report(stats)
        for field, metric in self._counters.items():
            if value := getattr(stats, field):
                metric.inc(value)
        self._progress.report(stats, finished=True)
        yield stats
