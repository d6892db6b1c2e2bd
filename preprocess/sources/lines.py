"""Line-oriented formats (text, JSON Lines): reading a byte range of a file line by line.

As in Beam's TextIO, a document belongs to the range in which its first byte lies: a range skips
the tail of a document begun before it and reads past its end to finish its last one, so every
document is read exactly once whatever the range size.

Files are streamed in READ_CHUNK_BYTES chunks, so even a single 50 MB line never sits in memory
whole: a longer line is handed to the format in parts. A UTF-8 byte-order mark at the start of a
file is skipped.
"""

from __future__ import annotations

import codecs
import re
from typing import BinaryIO, Iterator

from preprocess.sources.documents import ReadStats
from preprocess.sources.options import ReadOptions
from preprocess.sources.ranges import ReadRange

READ_CHUNK_BYTES = 1024 * 1024
BOM = codecs.BOM_UTF8
# A blank line holds only these bytes (NULs are removed anyway). Deciding it on bytes keeps the
# forward reader and the backward look of a range that starts mid-file in exact agreement.
LINE_SPACE = b" \t\r\f\v\x00"
CONTENT_BYTE = re.compile(rb"[^ \t\r\n\f\v\x00]")


class LineRecords:
    """Turns the line events of one range into documents; sets `stop` where the range's lines end.

    A format subclasses it with how its lines become documents.
    """

    open = False  # inside a document that began in this range (so reading must go on)

    def __init__(self, r: ReadRange, options: ReadOptions, stats: ReadStats):
        self._path, self._options, self._stats = r.path, options, stats
        self._end = None if r.end < 0 else r.end
        self.stop: int | None = None

    def begin_mid_file(self, f: BinaryIO, first_line: int) -> None:
        """Called before the lines of a range that starts at first_line > 0 (f's position is then reset)."""

    def lines(self, start: int, data: bytes) -> list[str]:
        """Whole lines (data ends with '\\n'); the first one is known to be the range's."""
        raise NotImplementedError

    def part(self, start: int, part: bytes, first: bool, last: bool) -> list[str]:
        """A part of a long line."""
        raise NotImplementedError

    def close(self) -> list[str]:
        return []

    def _owned(self, start: int, data: bytes) -> bytes:
        """The lines of data that start before the range's end (the first always does)."""
        if self._end is None or start + len(data) <= self._end:
            return data
        cut = data.find(b"\n", max(0, self._end - 1 - start)) + 1
        self.stop = start + cut
        return data[:cut]


def read_lines(f: BinaryIO, r: ReadRange, records: LineRecords, stats: ReadStats) -> Iterator[str]:
    """The documents of range r of the (decompressed) file f, as records makes them from its lines."""
    end = None if r.end < 0 else r.end
    bom = 0
    if r.start == 0:
        if f.read(len(BOM)) == BOM:
            bom = len(BOM)
        else:
            f.seek(0)
    else:
        first_line = _next_line_start(f, r.start)
        if first_line is None or (end is not None and first_line >= end):  # no line starts in the range
            stats.bytes_read += _share(r, f.tell() if first_line is None else first_line)
            return
        records.begin_mid_file(f, first_line)
        f.seek(first_line)
    counted = 0  # bytes_read so far, kept current for progress reports
    for n, (whole, start, data, first, last) in enumerate(_line_events(f)):
        # The range's first line is its own; any later line (or long line's first part) that
        # starts at or after the range's end is the next range's, unless it continues a document.
        if n and first and end is not None and start >= end and not records.open:
            records.stop = start
            break
        yield from records.lines(start, data) if whole else records.part(start, data, first, last)
        if records.stop is not None:
            break
        share = _share(r, start + len(data))
        stats.bytes_read += share - counted
        counted = share
    yield from records.close()
    stop = f.tell() if records.stop is None else records.stop
    stats.bytes_read += _share(r, stop) - counted
    if r.start == 0 and stop == bom:
        stats.files_empty += 1


def _share(r: ReadRange, stop: int) -> int:
    """Bytes of [r.start, r.end) that the file has, given that reading stopped at byte `stop`."""
    return max(0, (stop if r.end < 0 else min(stop, r.end)) - r.start)


def _next_line_start(f: BinaryIO, start: int) -> int | None:
    """Offset of the first line that starts at or after `start` (> 0), or None if none does."""
    pos = start - 1
    f.seek(pos)
    while chunk := f.read(READ_CHUNK_BYTES):
        newline = chunk.find(b"\n")
        if newline >= 0:
            return pos + newline + 1
        pos += len(chunk)
    return None


def _line_events(f: BinaryIO) -> Iterator[tuple[bool, int, bytes, bool, bool]]:
    """(whole, start, data, first, last) events covering the bytes from f's position on.

    whole=True: data is one or more complete lines, each ending in '\\n' (a last line without one
    gets one). whole=False: data is a part of a line longer than READ_CHUNK_BYTES, without its
    '\\n'; first and last mark the line's first and last parts. start is the offset of data[0].
    """
    pos = f.tell()
    carry = b""  # the start of a line that goes on in the next chunk
    line_start = pos
    streaming = False  # inside a long line, handed on in parts
    while chunk := f.read(READ_CHUNK_BYTES):
        base, pos = pos, pos + len(chunk)
        if streaming:
            newline = chunk.find(b"\n")
            if newline < 0:
                yield False, line_start, chunk, False, False
                continue
            yield False, line_start, chunk[:newline], False, True
            streaming, chunk, base = False, chunk[newline + 1:], base + newline + 1
            line_start = base
        last_newline = chunk.rfind(b"\n")
        if last_newline < 0:
            carry += chunk
            if len(carry) >= READ_CHUNK_BYTES:
                yield False, line_start, carry, True, False
                carry, streaming = b"", True
            continue
        yield True, line_start, carry + chunk[: last_newline + 1], True, True
        carry, line_start = chunk[last_newline + 1:], base + last_newline + 1
    if streaming:
        yield False, line_start, b"", False, True
    elif carry:
        yield True, line_start, carry + b"\n", True, True
