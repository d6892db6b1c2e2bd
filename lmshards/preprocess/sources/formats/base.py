"""What an input format is: the files it claims, how it divides one into ranges, how it reads one."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import BinaryIO

from lmshards.preprocess.sources.core.documents import ReadStats, RecordNumbers
from lmshards.preprocess.sources.core.options import ReadOptions
from lmshards.preprocess.sources.core.ranges import ReadRange, whole_file
from lmshards.schemas.manifest import InputFileInfo

TEXT = "text"  # the name of the formats that read every file no other format claims

# (file, options, range_bytes) -> the file's ranges, in order.
PlanRanges = Callable[[InputFileInfo, ReadOptions, int], list[ReadRange]]
# (file object, range, options, stats, numbers) -> the range's documents; adds what it finds to
# stats, and (a format with raw_records, when numbers is given) each document's record to numbers.
RangeReader = Callable[
    [BinaryIO, ReadRange, ReadOptions, ReadStats, RecordNumbers | None], Iterator[str]
]


@dataclasses.dataclass(frozen=True)
class Format:
    """An input format, as the registry in lmshards.preprocess.sources.formats knows it.

    name: what detect_format reports for its files.
    extensions: the file name endings it claims (the last ".suffix", lower case, once .gz/.bz2 is
      stripped); text formats claim none.
    read_range: the documents of one range. The file comes opened, and decompressed if its name
      ends in .gz/.bz2; the format counts what it finds (bad data, empty files, bytes_read).
    plan_ranges: the ranges of one file. The default, ranges.whole_file, makes the format not
      splittable; ranges.byte_ranges splits uncompressed files into byte ranges.
    doc_separator: for a text format, the --doc_separator value that picks it.
    raw_records: read_range numbers each document by the raw record (line, row) it came from, every
      record of the range counted, empty and skipped ones too (see documents.RecordNumbers); a
      format without it numbers its documents by their place among the documents read.

    A format for tab-separated files whose first column is the text (its module would define this
    as FORMAT, and formats.FORMATS would list it):

    >>> import io
    >>> from lmshards.preprocess.sources.core.documents import ReadStats
    >>> from lmshards.preprocess.sources.core.options import ReadOptions
    >>> def read_tsv(f, r, options, stats, numbers=None):
    ...     data = f.read()
    ...     stats.bytes_read += len(data)
    ...     for line in data.decode("utf-8").splitlines():
    ...         text = line.split("\\t", 1)[0]
    ...         if text.strip():
    ...             stats.documents += 1
    ...             yield text
    ...         else:
    ...             stats.documents_empty += 1
    >>> TSV = Format(name="tsv", extensions=(".tsv",), read_range=read_tsv)
    >>> [whole] = TSV.plan_ranges(InputFileInfo("a.tsv", 15), ReadOptions(), 1 << 20)
    >>> whole
    ReadRange(path='a.tsv', start=0, end=-1)
    >>> stats = ReadStats()
    >>> data = io.BytesIO(b"one\\t1\\n\\t2\\ntwo\\t3\\n")
    >>> list(TSV.read_range(data, whole, ReadOptions(), stats, None))
    ['one', 'two']
    >>> stats.documents, stats.documents_empty, stats.bytes_read
    (2, 1, 15)
    """

    name: str
    extensions: tuple[str, ...]
    read_range: RangeReader
    plan_ranges: PlanRanges = whole_file
    doc_separator: str | None = None
    raw_records: bool = False
