"""Beam wrappers of lmshards.preprocess.stages.read: reading sized ranges of the inputs (ReadDocuments)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import apache_beam as beam

from lmshards.plumbing.progress import PROGRESS_EVERY_S
from lmshards.preprocess.sources import (
    DEFAULT_RANGE_BYTES,
    ReadOptions,
    ReadStats,
    sum_stats,
)
from lmshards.preprocess.stages.read import (
    DEFAULT_DOC_BATCH,
    NumberedBatch,
    RangeCount,
    RangeOutput,
    RangePlace,
    ReadProgress,
    SizedRange,
    count_read,
    is_batch,
    is_count,
    is_stats,
    numbered_batches,
    plan_sized_ranges,
    range_places,
    read_sized_range,
    record_numbers,
)
from lmshards.schemas.manifest import InputFileInfo


class ReadOutputs(NamedTuple):
    documents: beam.PCollection  # list[str]
    stats: beam.PCollection  # ReadStats: exactly one, the sum over every range


class NumberedReadOutputs(NamedTuple):
    documents: beam.PCollection  # NumberedBatch, numbered in their files
    stats: beam.PCollection  # ReadStats: exactly one, the sum over every range


class ReadDocuments(beam.PTransform):
    """Input files -> ReadOutputs (NumberedReadOutputs when numbered): batches of documents (list[str], at most batch_size each, in no fixed
    order), and the ReadStats totals as data, so that the manifest can record them deterministically.

    files: InputFileInfo from expand_inputs, or paths/globs (expanded here).
    numbered: batches are NumberedBatch (each document's place in its file and its raw record),
      instead of list[str], from a second read of each range (see the module's docstring).

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
        numbered: bool = False,
    ):
        super().__init__()
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        infos, self._ranges = plan_sized_ranges(files, options, range_bytes=range_bytes)
        self._total_bytes = sum(f.bytes for f in infos)
        self._options = options
        self._batch_size = batch_size
        self._numbered = numbered

    def expand(self, pbegin: beam.pvalue.PBegin) -> ReadOutputs | NumberedReadOutputs:
        ranges = (
            pbegin
            | "ListRanges" >> beam.Create(self._ranges)  # SizedRange
            | "SpreadRanges" >> beam.Reshuffle()  # SizedRange, each on any worker
        )
        read = ranges | "ReadRanges" >> beam.ParDo(
            _ReadRangeFn(
                self._options, self._batch_size, self._total_bytes, counting=self._numbered
            )
        )  # RangeOutput: list[str] batches (numbered: the RangeCount), then the range's ReadStats
        stats = (
            read
            | "RangeStats" >> beam.Filter(is_stats)  # ReadStats, one per range
            | "SumStats" >> beam.CombineGlobally(sum_stats)  # ReadStats, one
        )
        if not self._numbered:
            documents = read | "Documents" >> beam.Filter(is_batch)  # list[str]
            return ReadOutputs(documents=documents, stats=stats)
        counts = read | "RangeCounts" >> beam.Filter(is_count)  # RangeCount, one per range
        offsets = (
            counts
            | "AllRangeCounts" >> beam.combiners.ToList()  # [RangeCount]
            | "RangeOffsets" >> beam.Map(range_places)  # {(source, range number): RangePlace}
        )
        numbered = ranges | "ReadNumbered" >> beam.ParDo(
            _ReadNumberedFn(self._options, self._batch_size), beam.pvalue.AsSingleton(offsets)
        )  # NumberedBatch
        return NumberedReadOutputs(documents=numbered, stats=stats)


class _ReadRangeFn(beam.DoFn):
    """SizedRange -> its list[str] batches, then its ReadStats; counts in Metrics, logs progress.

    total_bytes: the whole input's size, which progress lines measure against.
    """

    def __init__(
        self, options: ReadOptions, batch_size: int, total_bytes: int, *, counting: bool = False
    ):
        self._options = options
        self._counting = counting
        self._batch_size = batch_size
        self._total_bytes = total_bytes
        self._progress: ReadProgress | None = None

    def setup(self) -> None:
        self._progress = ReadProgress(self._total_bytes, PROGRESS_EVERY_S)

    def process(self, sized: SizedRange) -> Iterable[RangeOutput]:
        progress = self._progress
        assert progress is not None, "made in setup()"
        stats = ReadStats()
        documents = 0
        numbers = record_numbers(sized, self._options) if self._counting else None
        for batch in read_sized_range(
            sized,
            self._options,
            batch_size=self._batch_size,
            stats=stats,
            progress=progress,
            numbers=numbers,
        ):
            if numbers is not None:
                # Only counted (the second read numbers them): taken so that the queue stays a batch long.
                numbers.take_with_urls(len(batch))
            if not self._counting:
                yield batch
            documents += len(batch)
        count_read(stats, sized.input_bytes)
        if self._counting:
            raw_records = numbers.records if numbers is not None else documents
            yield RangeCount(sized.range.path, sized.number, documents, raw_records)
        yield stats


class _ReadNumberedFn(beam.DoFn):
    """SizedRange -> its NumberedBatch batches, numbered in their file from the range's RangePlace
    (the second read of a numbered ReadDocuments; the first one counted and reported)."""

    def __init__(self, options: ReadOptions, batch_size: int):
        self._options = options
        self._batch_size = batch_size

    def process(
        self, sized: SizedRange, places: dict[tuple[str, int], RangePlace]
    ) -> Iterable[NumberedBatch]:
        yield from numbered_batches(
            sized, places[sized.range.path, sized.number], self._options, self._batch_size
        )
