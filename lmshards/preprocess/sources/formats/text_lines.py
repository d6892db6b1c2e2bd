"""Text with one document per line (--doc_separator line), read in byte ranges.

CRLF line ends and a byte-order mark are normalized away; a CR that does not end a line is text and
stays.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import BinaryIO

from lmshards.preprocess.sources.core.documents import (
    Document,
    ReadStats,
    RecordNumbers,
    decode_utf8,
    text_document,
)
from lmshards.preprocess.sources.core.lines import LineRecords, read_lines
from lmshards.preprocess.sources.core.options import LINE, ReadOptions
from lmshards.preprocess.sources.core.ranges import ReadRange, byte_ranges
from lmshards.preprocess.sources.formats.base import TEXT, Format

# The lone surrogates that "surrogateescape" decoding makes of bytes that are not UTF-8.
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")


class _LineDocuments(LineRecords):
    def __init__(self, r: ReadRange, options: ReadOptions, stats: ReadStats):
        super().__init__(r, options, stats)
        self._doc: Document | None = None

    def lines(self, start: int, data: bytes) -> list[str]:
        return _line_documents(self._owned(start, data), self._options, self._stats, self.numbers)

    def part(self, start: int, part: bytes, first: bool, last: bool) -> list[str]:
        if first:
            self._doc = Document(self._options, self._stats)
        doc = self._doc
        assert doc is not None, "a long line's parts start with first=True"
        pieces = doc.feed(part)
        if last:
            doc.strip_cr()
            pieces += doc.finish()
        if self.numbers is not None:
            self.numbers.add(len(pieces), last=last)
        return pieces


def _line_documents(
    data: bytes, options: ReadOptions, stats: ReadStats, numbers: RecordNumbers | None = None
) -> list[str]:
    """One document per line of data (complete lines, each ending in '\\n'); the fast path.

    Gives exactly what Document gives line by line: the block is decoded at once, and lines are
    looked at one by one only in blocks with bad bytes, NULs or very long lines.
    """
    try:
        text, bad_bytes = data.decode("utf-8"), False
    except UnicodeDecodeError:
        text, bad_bytes = data.decode("utf-8", errors="surrogateescape"), True
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    lines = text.split("\n")
    lines.pop()  # after the final '\n'
    special = bad_bytes or "\x00" in text
    if not special and (
        len(text) <= options.max_document_chars
        or max(map(len, lines)) <= options.max_document_chars
    ):
        if numbers is None:
            documents = [line for line in lines if line and not line.isspace()]
        else:
            kept = [i for i, line in enumerate(lines) if line and not line.isspace()]
            numbers.add_lines(kept, len(lines))
            documents = [lines[i] for i in kept]
        stats.documents += len(documents)
        stats.documents_empty += len(lines) - len(documents)
        return documents
    documents = []
    for line in lines:
        invalid_utf8 = False
        if bad_bytes and _ESCAPED_BYTE.search(line):
            line, invalid_utf8 = decode_utf8(line.encode("utf-8", errors="surrogateescape"))
        pieces = text_document(line, options, stats, invalid_utf8=invalid_utf8)
        if numbers is not None:
            numbers.add(len(pieces))
        documents += pieces
    return documents


def _read_range(
    f: BinaryIO,
    r: ReadRange,
    options: ReadOptions,
    stats: ReadStats,
    numbers: RecordNumbers | None = None,
) -> Iterator[str]:
    return read_lines(f, r, options, stats, _LineDocuments, numbers)


FORMAT = Format(
    name=TEXT,
    extensions=(),
    doc_separator=LINE,
    plan_ranges=byte_ranges,
    read_range=_read_range,
    raw_records=True,
)
