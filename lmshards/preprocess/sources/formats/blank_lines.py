"""Text with documents separated by blank lines (--doc_separator blank_line), read in byte ranges.

A document is a run of non-blank lines, joined with "\\n"; a blank line holds only whitespace (and
NULs). One CR before each line end is dropped.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from lmshards.preprocess.sources.core.documents import Document, ReadStats, RecordNumbers
from lmshards.preprocess.sources.core.lines import (
    BOM,
    CONTENT_BYTE,
    LINE_SPACE,
    LineRecords,
    read_lines,
)
from lmshards.preprocess.sources.core.options import BLANK_LINE, ReadOptions
from lmshards.preprocess.sources.core.ranges import ReadRange, byte_ranges
from lmshards.preprocess.sources.formats.base import TEXT, Format

_BACKSCAN_BYTES = 64 * 1024


class _BlankLineDocuments(LineRecords):
    def __init__(self, r: ReadRange, options: ReadOptions, stats: ReadStats):
        super().__init__(r, options, stats)
        self._doc: Document | None = None
        # Lines of a document that began in an earlier range are skipped up to the next blank line.
        self._skipping = False
        self._line_blank = True  # no content byte seen yet in the current line
        self._held: list[bytes] = []  # the current line's leading whitespace

    @property
    def open(self) -> bool:  # type: ignore[override]  # the base has a plain attribute; computed here
        return self._doc is not None

    def begin_mid_file(self, f: BinaryIO, first_line: int) -> None:
        self._skipping = not _line_before_is_blank(f, first_line)

    def lines(self, start: int, data: bytes) -> list[str]:
        pieces: list[str] = []
        paragraph: list[bytes] = []  # lines of the current document found in this block
        line_start = start
        lines = data.split(b"\n")
        lines.pop()  # after the final '\n'
        for n, line in enumerate(lines):
            if (
                n
                and not paragraph
                and self._doc is None
                and self._end is not None
                and line_start >= self._end
            ):
                self.stop = line_start
                break
            line_start += len(line) + 1
            if CONTENT_BYTE.search(line):
                if not self._skipping:
                    paragraph.append(line)
            else:
                if paragraph or self._doc is not None:
                    pieces += self._add_lines(paragraph) + self.close()
                    paragraph = []
                self._skipping = False
        if paragraph:  # goes on in the next block
            pieces += self._add_lines(paragraph)
        return pieces

    def _add_lines(self, lines: list[bytes]) -> list[str]:
        if not lines:
            return []
        # One CR before each line end goes: "a\r" + "\n" + "b\r" -> "a\nb".
        raw = b"\n".join(lines).replace(b"\r\n", b"\n").removesuffix(b"\r")
        if self._doc is None:
            self._doc = Document(self._options, self._stats)
            return self._doc.feed(raw)
        return self._doc.feed(b"\n") + self._doc.feed(raw)

    def part(self, start: int, part: bytes, first: bool, last: bool) -> list[str]:
        if first:
            self._line_blank, self._held = True, []
        pieces: list[str] = []
        if self._line_blank:
            if not CONTENT_BYTE.search(part):
                self._held.append(part)
                if last:
                    pieces, self._skipping = self.close(), False
                return pieces
            self._line_blank = False
            if not self._skipping:
                if self._doc is None:
                    self._doc = Document(self._options, self._stats)
                else:
                    pieces += self._doc.feed(b"\n")
                for held in self._held:
                    pieces += self._doc.feed(held)
            self._held = []
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


def _line_before_is_blank(f: BinaryIO, line_start: int) -> bool:
    """Whether the line ending just before line_start (> 0, just after a '\\n') is blank."""
    pos = line_start - 1
    while pos > 0:
        low = max(0, pos - _BACKSCAN_BYTES)
        if low < len(BOM):  # never start a block inside a byte-order mark
            low = 0
        f.seek(low)
        kept = f.read(pos - low).rstrip(LINE_SPACE)
        if kept:
            return kept.endswith(b"\n") or (low == 0 and kept == BOM)
        pos = low
    return True


def _read_range(
    f: BinaryIO,
    r: ReadRange,
    options: ReadOptions,
    stats: ReadStats,
    numbers: RecordNumbers | None = None,
) -> Iterator[str]:
    """numbers: unused (documents are numbered by their place among those read)."""
    return read_lines(f, r, options, stats, _BlankLineDocuments)


FORMAT = Format(
    name=TEXT,
    extensions=(),
    doc_separator=BLANK_LINE,
    plan_ranges=byte_ranges,
    read_range=_read_range,
)
