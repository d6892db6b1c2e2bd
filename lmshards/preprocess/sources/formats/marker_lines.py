"""Text with documents separated by marker lines (--doc_marker TEXT or --doc_marker_regex REGEX), read
in byte ranges.

A marker line is a line (its CR/LF removed) that ReadOptions.is_marker accepts and that is at most
MAX_MARKER_LINE_BYTES long; the marker lines are dropped, and each run of lines between two of them (or
the file's start or end) is one document, its lines joined with "\\n" (blank lines inside it are kept,
like a fortune's). As everywhere, a document belongs to the range holding its first byte: a range that
starts mid-file reads the document at its first line only if the line before is a marker, which one
read of at most MAX_MARKER_LINE_BYTES + 1 bytes tells.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from lmshards.preprocess.sources.core.documents import Document, ReadStats, RecordNumbers
from lmshards.preprocess.sources.core.lines import BOM, LineRecords, read_lines
from lmshards.preprocess.sources.core.options import MARKER_LINE, MAX_MARKER_LINE_BYTES, ReadOptions
from lmshards.preprocess.sources.core.ranges import ReadRange, byte_ranges
from lmshards.preprocess.sources.formats.base import TEXT, Format


class _MarkerDocuments(LineRecords):
    def __init__(self, r: ReadRange, options: ReadOptions, stats: ReadStats):
        super().__init__(r, options, stats)
        self._doc: Document | None = None
        # Lines of a document that began in an earlier range are skipped up to the next marker.
        self._skipping = False
        self._first_line = True  # the range's first line is its own

    @property
    def open(self) -> bool:  # type: ignore[override]  # the base has a plain attribute; computed here
        return self._doc is not None

    def begin_mid_file(self, f: BinaryIO, first_line: int) -> None:
        self._skipping = not _marker_before(f, first_line, self._options)

    def _next_range_owns(self, line_start: int) -> bool:
        """A document starting at line_start belongs to the next range: stop there."""
        if self._first_line or self._end is None or line_start < self._end:
            return False
        self.stop = line_start
        return True

    def lines(self, start: int, data: bytes) -> list[str]:
        pieces: list[str] = []
        lines = data.split(b"\n")
        lines.pop()  # after the final '\n'
        line_start = start
        for line in lines:
            if self._doc is None and self._next_range_owns(line_start):
                break
            self._first_line = False
            line_start += len(line) + 1
            line = line.removesuffix(b"\r")
            if _is_marker(line, self._options):
                pieces += self.close()
                self._skipping = False
            elif not self._skipping:
                pieces += self._add_line(line)
        return pieces

    def _add_line(self, line: bytes) -> list[str]:
        if self._doc is None:
            self._doc = Document(self._options, self._stats)
            return self._doc.feed(line)
        return self._doc.feed(b"\n") + self._doc.feed(line)

    def part(self, start: int, part: bytes, first: bool, last: bool) -> list[str]:
        # A line long enough to come in parts is never a marker (it is over MAX_MARKER_LINE_BYTES).
        pieces: list[str] = []
        if first:
            if self._doc is None and self._next_range_owns(start):
                return []
            self._first_line = False
            if not self._skipping:
                pieces += self._add_line(b"")
        if self._skipping:
            return pieces
        doc = self._doc
        assert doc is not None, "a line's first part opens its document"
        pieces += doc.feed(part)
        if last:
            doc.strip_cr()
        return pieces

    def close(self) -> list[str]:
        doc, self._doc = self._doc, None
        return doc.finish() if doc else []


def _is_marker(line: bytes, options: ReadOptions) -> bool:
    if len(line) > MAX_MARKER_LINE_BYTES:
        return False
    return options.is_marker(line.decode("utf-8", errors="replace"))


def _marker_before(f: BinaryIO, line_start: int, options: ReadOptions) -> bool:
    """Whether the line ending just before line_start (> 0, just after a '\\n') is a marker line."""
    end = line_start - 1  # its '\n'
    low = max(0, end - MAX_MARKER_LINE_BYTES - 1)
    f.seek(low)
    block = f.read(end - low)
    newline = block.rfind(b"\n")
    if newline < 0 and low > 0:  # longer than any marker line
        return False
    line = block[newline + 1 :]
    if newline < 0 and line.startswith(BOM):
        line = line[len(BOM) :]
    return _is_marker(line.removesuffix(b"\r"), options)


def _read_range(
    f: BinaryIO,
    r: ReadRange,
    options: ReadOptions,
    stats: ReadStats,
    numbers: RecordNumbers | None = None,
) -> Iterator[str]:
    """numbers: unused (documents are numbered by their place among those read)."""
    return read_lines(f, r, options, stats, _MarkerDocuments)


FORMAT = Format(
    name=TEXT,
    extensions=(),
    doc_separator=MARKER_LINE,
    plan_ranges=byte_ranges,
    read_range=_read_range,
)
