"""Line-oriented formats (text, JSON Lines): reading a byte range of a file line by line.

As in Beam's TextIO, a document belongs to the range in which its first byte lies: a range skips
the tail of a document begun before it and reads past its end to finish its last one, so every
document is read exactly once whatever the range size.

Files are streamed in READ_CHUNK_BYTES chunks, so even a single 50 MB line never sits in memory
whole: a longer line is handed to the format in parts. A UTF-8 byte-order mark at the start of a
file is skipped.

A file that starts with a UTF-16 or UTF-32 byte-order mark (LE or BE) is decoded from that
encoding: every range looks at the file's first 4 bytes, and the range starting at byte 0 reads the
whole file through an incremental decoder that hands UTF-8 on to the same line machinery, while
later ranges yield nothing (a 2- or 4-byte encoding cannot be cut at arbitrary byte offsets).
Sequences that are not valid in that encoding become U+FFFD and are counted like bad UTF-8.
A file read with ReadOptions.encoding other than UTF-8 (and no such mark) is decoded the same way from
that encoding; its ranges are planned whole (ranges.byte_ranges).
"""

from __future__ import annotations

import codecs
import logging
import re
from collections.abc import Callable, Iterator
from typing import BinaryIO, cast

from lmshards.plumbing import fs
from lmshards.preprocess.sources.core.documents import ReadStats, RecordNumbers
from lmshards.preprocess.sources.core.options import ReadOptions
from lmshards.preprocess.sources.core.ranges import TO_END, ReadRange

logger = logging.getLogger(__name__)

READ_CHUNK_BYTES = 1024 * 1024
BOM = codecs.BOM_UTF8
# (byte-order mark, codec, ReadStats counter). UTF-32 LE comes before UTF-16 LE: its mark
# FF FE 00 00 begins with UTF-16 LE's FF FE.
WIDE_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le", "files_utf32"),
    (codecs.BOM_UTF32_BE, "utf-32-be", "files_utf32"),
    (codecs.BOM_UTF16_LE, "utf-16-le", "files_utf16"),
    (codecs.BOM_UTF16_BE, "utf-16-be", "files_utf16"),
)
HEAD_BYTES = 4  # enough to hold any byte-order mark
# A decoding error handler: a sequence that is not valid UTF-16/32 becomes one byte that is not
# UTF-8 (0xFF, through "surrogateescape"), so that the document holding it is decoded with U+FFFD
# and counted in documents_invalid_utf8 like any other bad byte.
_NOT_UTF8 = "lmshards-not-utf8"
codecs.register_error(_NOT_UTF8, lambda error: ("\udcff", error.end))  # type: ignore[attr-defined]
# A blank line holds only these bytes (NULs are removed anyway). Deciding it on bytes keeps the
# forward reader and the backward look of a range that starts mid-file in exact agreement.
LINE_SPACE = b" \t\r\f\v\x00"
CONTENT_BYTE = re.compile(rb"[^ \t\r\n\f\v\x00]")


class LineRecords:
    """Turns the line events of one range into documents; sets `stop` where the range's lines end.

    A format subclasses it with how its lines become documents.
    """

    open = False  # inside a document that began in this range (so reading must go on)
    # Where a format numbers its lines: each document's line, counted from the range's first line.
    numbers: RecordNumbers | None = None

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


def read_lines(
    f: BinaryIO,
    r: ReadRange,
    options: ReadOptions,
    stats: ReadStats,
    records: type[LineRecords],
    numbers: RecordNumbers | None = None,
) -> Iterator[str]:
    """The documents of range r of the (decompressed) file f, as the format's `records` class makes
    them from its lines (one instance per range, given `numbers`)."""

    def made(r: ReadRange) -> LineRecords:
        made = records(r, options, stats)
        made.numbers = numbers
        return made

    head = _file_head(f, r)
    wide = next((w for w in WIDE_BOMS if head.startswith(w[0])), None)
    if wide is None and options.is_utf8:
        bom = len(BOM) if r.start == 0 and head.startswith(BOM) else 0
        yield from _read(f, r, made(r), stats, bom=bom, share=lambda stop: _share(r, stop))
        return
    if r.start > 0:  # the file's first range reads all of it
        return
    if wide is None:  # --encoding: the whole file decoded from it
        mark, codec = b"", options.encoding
    else:
        mark, codec, counter = wide
        logger.info("%s: %s byte-order mark, decoded as %s", r.path, codec.upper(), codec.upper())
        stats.count(counter)
    f.seek(len(mark))
    text = _Utf8Text(f, codec)
    whole = ReadRange(r.path, 0, TO_END)
    yield from _read(
        cast(BinaryIO, text),
        whole,
        made(whole),
        stats,
        bom=0,
        share=lambda _: text.source_bytes,
    )


def _file_head(f: BinaryIO, r: ReadRange) -> bytes:
    """The file's first HEAD_BYTES bytes (fewer if it is shorter)."""
    if r.start == 0:
        head = f.read(HEAD_BYTES)
        f.seek(0)
        return head
    # Only uncompressed files have ranges past byte 0. A separate small read: moving f back to
    # byte 0 would make a remote file fetch a whole read-ahead block there.
    filesystem, path = fs.filesystem(r.path)
    return filesystem.cat_file(path, start=0, end=HEAD_BYTES)


def _read(
    f: BinaryIO,
    r: ReadRange,
    records: LineRecords,
    stats: ReadStats,
    *,
    bom: int,
    share: Callable[[int], int],
) -> Iterator[str]:
    """The documents of range r of f, skipping `bom` bytes at byte 0; share(stop) is the range's
    bytes_read once reading stopped at byte `stop` of f."""
    end = None if r.end < 0 else r.end
    if r.start == 0:
        f.seek(bom)
    else:
        first_line = _next_line_start(f, r.start)
        if first_line is None or (
            end is not None and first_line >= end
        ):  # no line starts in the range
            stats.bytes_read += share(f.tell() if first_line is None else first_line)
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
        now = share(start + len(data))
        stats.bytes_read += now - counted
        counted = now
    yield from records.close()
    stop = f.tell() if records.stop is None else records.stop
    stats.bytes_read += share(stop) - counted
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
            streaming, chunk, base = False, chunk[newline + 1 :], base + newline + 1
            line_start = base
        last_newline = chunk.rfind(b"\n")
        if last_newline < 0:
            carry += chunk
            if len(carry) >= READ_CHUNK_BYTES:
                yield False, line_start, carry, True, False
                carry, streaming = b"", True
            continue
        yield True, line_start, carry + chunk[: last_newline + 1], True, True
        carry, line_start = chunk[last_newline + 1 :], base + last_newline + 1
    if streaming:
        yield False, line_start, b"", False, True
    elif carry:
        yield True, line_start, carry + b"\n", True, True


class _Utf8Text:
    """A forward-only reader of the UTF-8 encoding of a UTF-16/32 stream's text (what _read needs:
    read and tell; seek only to where it already is).

    source_bytes: how many bytes of the source have been consumed, counting what preceded it.
    """

    def __init__(self, source: BinaryIO, codec: str):
        self._source = source
        self._decoder = codecs.getincrementaldecoder(codec)(errors=_NOT_UTF8)
        self._buffer = b""
        self._position = 0
        self._done = False
        self.source_bytes = source.tell()

    def read(self, size: int = -1) -> bytes:
        while not self._done and (size < 0 or len(self._buffer) < size):
            chunk = self._source.read(READ_CHUNK_BYTES)
            self.source_bytes += len(chunk)
            self._done = not chunk
            text = self._decoder.decode(chunk, final=self._done)
            self._buffer += text.encode("utf-8", errors="surrogateescape")
        size = len(self._buffer) if size < 0 else size
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        self._position += len(data)
        return data

    def tell(self) -> int:
        return self._position

    def seek(self, position: int) -> int:
        if position != self._position:
            raise ValueError(
                f"the UTF-8 text of a UTF-16/32 file is read forward only: at {self._position}, "
                f"not {position}"
            )
        return position
