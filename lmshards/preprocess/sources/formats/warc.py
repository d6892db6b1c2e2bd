"""WARC and WET files (.warc, .wet; compressed, e.g. Common Crawl's .warc.gz with every record its own gzip
member): one document per HTML response or WET conversion record, read record by record, streamed.

A record is a header block (a `WARC/1.0` or `WARC/1.1` line, `Name: value` lines, a blank line), then
Content-Length bytes of payload, then a blank line or two (ISO 28500). Only two kinds of record give a
document: a `response` whose HTTP head says 2xx and an HTML Content-Type (its body decoded by its charset,
its main text extracted, see sources/core/extract.py), and a WET `conversion` record (text already, fed to
the document in blocks). Every other record (warcinfo, request, metadata, images, redirects) is read
past in blocks and counted in warc_records_other. Each document keeps its record's WARC-Target-URI
(documents.RecordNumbers.take_with_urls), and is numbered by its record's place in the file.

Never fatal, always counted and the first few logged with the file, the record's byte offset and URL:
a header that cannot be parsed (warc_records_malformed; reading goes on at the next `WARC/1.` line),
a file that ends inside a record (warc_files_truncated: a truncated gzip member too), a page over
--max_html_bytes (documents_html_too_large, read past, never held), bytes that fit no charset or a
Content-Encoding other than gzip, deflate, br and zstd (documents_undecodable), HTML the extractor fails on
(documents_extract_failed).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import zlib
from collections.abc import Callable, Iterator
from typing import BinaryIO

import brotli
import zstandard

from lmshards.preprocess.sources.core.documents import (
    Document,
    ReadStats,
    RecordNumbers,
    text_document,
)
from lmshards.preprocess.sources.core.extract import PageProblem, page_text, too_large
from lmshards.preprocess.sources.core.options import ReadOptions
from lmshards.preprocess.sources.core.ranges import ReadRange
from lmshards.preprocess.sources.formats.base import Format

logger = logging.getLogger(__name__)

# What a WARC file and each of its records start with (ISO 28500:2017, WARC 1.1; 1.0 is the 2009 edition).
WARC_MAGICS = (b"WARC/1.0", b"WARC/1.1")
# A header block (WARC's or the HTTP head of a response) longer than this is malformed: Common Crawl's
# are under 2 KiB, and no reader should hold an unbounded "header".
MAX_HEAD_BYTES = 64 * 1024
# Payload bytes read at a time when a record is read past or fed to a document.
BLOCK_BYTES = 1024 * 1024
# Per range, the first few bad records are logged with their location; all are counted.
MAX_LOGGED_BAD_RECORDS = 3
HTML_TYPES = ("text/html", "application/xhtml+xml")
_RESPONSE, _CONVERSION = "response", "conversion"


class _Truncated(Exception):
    """The file ended inside a record."""


@dataclasses.dataclass(frozen=True)
class HttpHead:
    """A response's HTTP status and the headers that decide how its body is read (lower-case names)."""

    status: int
    headers: dict[str, str]

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")

    @property
    def is_html(self) -> bool:
        mime = self.content_type.split(";", 1)[0].strip().lower()
        return 200 <= self.status < 300 and mime in HTML_TYPES


def parse_fields(lines: list[bytes]) -> dict[str, str] | None:
    """The `Name: value` lines of a header block as {lower-case name: value} (a line starting with a space
    or tab continues the previous value), or None if a line is neither."""
    fields: dict[str, str] = {}
    name = None
    for raw in lines:
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if line[:1] in (" ", "\t") and name is not None:
            fields[name] += " " + line.strip()
            continue
        key, colon, value = line.partition(":")
        if not colon or not key.strip():
            return None
        name = key.strip().lower()
        fields[name] = value.strip()
    return fields


def parse_http_head(lines: list[bytes]) -> HttpHead | None:
    """An HTTP response head from its lines (status line first, blank line excluded), or None if the
    status line is not `HTTP/x.y NNN ...` or a header line is malformed."""
    if not lines:
        return None
    parts = lines[0].split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        return None
    headers = parse_fields(lines[1:])
    return None if headers is None else HttpHead(int(parts[1]), headers)


def dechunk(body: bytes) -> bytes | None:
    """The data of an HTTP/1.1 `Transfer-Encoding: chunked` body (RFC 9112 7.1), or None if malformed.
    A body cut short (Common Crawl truncates payloads) gives the chunks it holds."""
    out, pos = [], 0
    while pos < len(body):
        end = body.find(b"\r\n", pos)
        if end < 0:
            break
        size_text = body[pos:end].split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            return None
        if size == 0:
            break
        out.append(body[end + 2 : end + 2 + size])
        pos = end + 2 + size + 2
    return b"".join(out)


def decode_body(body: bytes, head: HttpHead, max_bytes: int) -> bytes | PageProblem:
    """A response body with its transfer and content codings undone (chunked; gzip, deflate, br, zstd),
    at most max_bytes + 1 of it; a coding none of them undoes, or data that will not decode, is a
    PageProblem."""
    if "chunked" in head.headers.get("transfer-encoding", "").lower():
        dechunked = dechunk(body)
        if dechunked is None:
            return PageProblem("documents_undecodable", "malformed chunked transfer coding")
        body = dechunked
    coding = head.headers.get("content-encoding", "identity").strip().lower()
    if coding in ("", "identity"):
        return body
    decode = _CONTENT_DECODERS.get(coding)
    if decode is None:
        return PageProblem(
            "documents_undecodable",
            f"Content-Encoding {coding!r} is not supported (only {', '.join(CONTENT_CODINGS)})",
        )
    try:
        return decode(body, max_bytes + 1)
    except (zlib.error, brotli.error, zstandard.ZstdError) as e:
        return PageProblem(
            "documents_undecodable", f"Content-Encoding {coding} data is corrupt ({e})"
        )


def _inflate(body: bytes, limit: int, wbits: int) -> bytes:
    return zlib.decompressobj(wbits).decompress(body, limit)


def _unbrotli(body: bytes, limit: int) -> bytes:
    # The output limit bounds what a small body can expand to (a decompression bomb).
    return brotli.Decompressor().process(body, output_buffer_limit=limit)[:limit]


def _unzstd(body: bytes, limit: int) -> bytes:
    # A stream reader decodes as much as is read, so a bomb stops at the limit; a frame that does not
    # say its size (streamed by the server) is read the same way.
    with zstandard.ZstdDecompressor().stream_reader(body) as reader:
        return reader.read(limit)


# HTTP content codings (RFC 9110 8.4.1, RFC 7932, RFC 8878) -> the function undoing one, at most
# `limit` bytes of its output. wbits 16 + MAX_WBITS reads a gzip wrapper, MAX_WBITS a zlib one (what
# servers send as deflate).
_CONTENT_DECODERS: dict[str, Callable[[bytes, int], bytes]] = {
    "gzip": functools.partial(_inflate, wbits=16 + zlib.MAX_WBITS),
    "x-gzip": functools.partial(_inflate, wbits=16 + zlib.MAX_WBITS),
    "deflate": functools.partial(_inflate, wbits=zlib.MAX_WBITS),
    "br": _unbrotli,
    "zstd": _unzstd,
}
CONTENT_CODINGS = tuple(_CONTENT_DECODERS)


class _Reader:
    """The bytes of one WARC file, read forward, counted in stats.bytes_read as they are read."""

    def __init__(self, f: BinaryIO, stats: ReadStats):
        self._f = f
        self._stats = stats
        self.offset = 0  # bytes read so far: where the next read starts

    def read(self, size: int) -> bytes:
        try:
            data = self._f.read(size)
        except EOFError as e:  # a gzip member cut off: the file ends inside a record
            raise _Truncated(str(e)) from None
        self.offset += len(data)
        self._stats.bytes_read += len(data)
        return data

    def readline(self, limit: int) -> bytes:
        try:
            line = self._f.readline(limit)
        except EOFError as e:
            raise _Truncated(str(e)) from None
        self.offset += len(line)
        self._stats.bytes_read += len(line)
        return line

    def exactly(self, size: int) -> bytes:
        """The next `size` bytes; raises _Truncated if the file ends first."""
        parts, left = [], size
        while left:
            part = self.read(min(left, BLOCK_BYTES))
            if not part:
                raise _Truncated(f"{left:,} of the record's bytes missing")
            parts.append(part)
            left -= len(part)
        return b"".join(parts)

    def skip(self, size: int) -> None:
        """Reads past `size` bytes in blocks, never holding them; raises _Truncated if the file ends first."""
        while size:
            part = self.read(min(size, BLOCK_BYTES))
            if not part:
                raise _Truncated(f"{size:,} of the record's bytes missing")
            size -= len(part)

    def head_lines(self, first: bytes | None = None) -> list[bytes] | None:
        """The lines of a header block up to its blank line (excluded), after `first` if given; None if the
        block is over MAX_HEAD_BYTES; raises _Truncated at the end of the file."""
        lines, held = ([first], len(first)) if first else ([], 0)
        while True:
            line = self.readline(MAX_HEAD_BYTES - held + 1)
            if not line:
                raise _Truncated("the file ends inside a header block")
            held += len(line)
            if held > MAX_HEAD_BYTES:
                return None
            if line in (b"\r\n", b"\n"):
                return lines
            lines.append(line)


@dataclasses.dataclass
class _Record:
    offset: int  # where its version line starts
    kind: str  # WARC-Type
    url: str | None  # WARC-Target-URI
    length: int  # Content-Length


class _WarcFile:
    """Reads the records of one file in order, yielding each document; counts and logs what it skips."""

    def __init__(
        self,
        f: BinaryIO,
        r: ReadRange,
        options: ReadOptions,
        stats: ReadStats,
        numbers: RecordNumbers | None,
    ):
        self._in = _Reader(f, stats)
        self._path = r.path
        self._options = options
        self._stats = stats
        self._numbers = numbers
        self._logged = 0

    def documents(self) -> Iterator[str]:
        try:
            while (record := self._next_record()) is not None:
                yield from self._documents(record)
        except _Truncated as e:
            self._stats.warc_files_truncated += 1
            self._log(
                self._in.offset,
                None,
                f"the file ends inside a record ({e}); the records before it were read. Re-download or "
                "re-create the file for the rest",
            )
            if self._numbers is not None:
                self._numbers.add(0)
        if self._in.offset == 0:
            self._stats.files_empty += 1

    def _next_record(self) -> _Record | None:
        """The next record's header (its payload next in the stream), or None at the end of the file.
        Skips blank lines (what ends the previous record); a malformed header is counted, and reading goes
        on at the next line that starts a record."""
        malformed_at = None
        while True:
            start = self._in.offset
            line = self._in.readline(MAX_HEAD_BYTES)
            if not line:
                if malformed_at is not None:
                    self._malformed(malformed_at, None, "no record after it")
                return None
            if line in (b"\r\n", b"\n"):
                continue
            if not line.startswith(WARC_MAGICS):
                malformed_at = start if malformed_at is None else malformed_at
                continue
            if malformed_at is not None:
                self._malformed(
                    malformed_at, None, f"not a WARC record; reading went on at byte {start:,}"
                )
                malformed_at = None
            lines = self._in.head_lines()
            fields = parse_fields(lines) if lines is not None else None
            length = (fields or {}).get("content-length", "")
            if fields is None or not length.isdigit():
                why = (
                    "no valid Content-Length"
                    if fields is not None
                    else "a header line that is not 'Name: value'"
                )
                self._malformed(
                    start, (fields or {}).get("warc-target-uri"), f"its header has {why}"
                )
                continue
            return _Record(
                start,
                fields.get("warc-type", "").lower(),
                fields.get("warc-target-uri"),
                int(length),
            )

    def _documents(self, record: _Record) -> list[str]:
        if record.kind == _CONVERSION:
            documents = self._conversion(record)
        elif record.kind == _RESPONSE:
            documents = self._response(record)
        else:
            self._in.skip(record.length)
            self._stats.warc_records_other += 1
            documents = []
        if self._numbers is not None:
            self._numbers.add(len(documents), url=record.url)
        return documents

    def _conversion(self, record: _Record) -> list[str]:
        document = Document(self._options, self._stats)
        pieces, left = [], record.length
        while left:
            block = self._in.read(min(left, BLOCK_BYTES))
            if not block:
                raise _Truncated(f"{left:,} of the record's bytes missing")
            pieces += document.feed(block)
            left -= len(block)
        return pieces + document.finish()

    def _response(self, record: _Record) -> list[str]:
        start = self._in.offset
        lines = self._in.head_lines()
        used = self._in.offset - start
        if used > record.length:  # the blank line ending the HTTP head lies past the payload
            raise _Truncated("a response's HTTP head runs past its Content-Length")
        head = parse_http_head(lines) if lines is not None else None
        if head is None:
            self._in.skip(record.length - used)
            self._malformed(record.offset, record.url, "its HTTP response head cannot be parsed")
            return []
        if not head.is_html:
            self._in.skip(record.length - used)
            self._stats.warc_records_other += 1
            return []
        body_bytes = record.length - used
        if body_bytes > self._options.max_html_bytes:
            self._in.skip(body_bytes)
            return self._skip(record, too_large(body_bytes, self._options))
        body = decode_body(self._in.exactly(body_bytes), head, self._options.max_html_bytes)
        if isinstance(body, PageProblem):
            return self._skip(record, body)
        page = page_text(body, self._options, head.content_type)
        if isinstance(page, PageProblem):
            return self._skip(record, page)
        text, invalid = page
        return text_document(text, self._options, self._stats, invalid_utf8=invalid)

    def _skip(self, record: _Record, problem: PageProblem) -> list[str]:
        self._stats.count(problem.counter)
        self._log(record.offset, record.url, problem.problem)
        return []

    def _malformed(self, offset: int, url: str | None, why: str) -> None:
        self._stats.warc_records_malformed += 1
        self._log(offset, url, f"malformed WARC record: {why}")

    def _log(self, offset: int, url: str | None, problem: str) -> None:
        if self._logged < MAX_LOGGED_BAD_RECORDS:
            self._logged += 1
            where = f" ({url})" if url else ""
            logger.warning(
                "%s: record at byte %d%s skipped: %s.", self._path, offset, where, problem
            )


def _read_range(
    f: BinaryIO,
    r: ReadRange,
    options: ReadOptions,
    stats: ReadStats,
    numbers: RecordNumbers | None = None,
) -> Iterator[str]:
    return _WarcFile(f, r, options, stats, numbers).documents()


FORMAT = Format(name="warc", extensions=(".warc", ".wet"), read_range=_read_range, raw_records=True)
