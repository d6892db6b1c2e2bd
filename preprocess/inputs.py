"""Reading the corpus: input files, splittable byte ranges, and the documents in them.

Inputs are local paths, directories or globs, or gs:// globs (all through fsspec). The format comes
from the file name after stripping `.gz`/`.bz2` (decompressed on the fly): `.jsonl`/`.json` are JSON
Lines, `.parquet` is Parquet, anything else is UTF-8 text with one document per line
(`doc_separator="line"`) or documents separated by blank lines (`"blank_line"`).

A directory given as an input stands for every file below it, recursively, except hidden names
(starting with "." or "_", e.g. `_SUCCESS`, `.part-0.crc`), which writers leave beside their data.

Uncompressed text and JSON Lines files are read in byte ranges, independently (one Dataflow work
item each). As in Beam's TextIO, a document belongs to the range in which its first byte lies: a
range skips the tail of a document begun before it and reads past its end to finish its last one,
so every document is read exactly once whatever the range size. Compressed files are one range;
Parquet ranges are runs of row groups.

Problems in the data never stop a run and are never silent: each is counted in ReadStats and
logged with the file's name.
- Invalid UTF-8: decoded with U+FFFD replacement (documents_invalid_utf8).
- NUL bytes: removed (documents_nul).
- Empty or whitespace-only documents: skipped (documents_empty); empty files (files_empty).
- CRLF line ends and a UTF-8 byte-order mark: normalized away (no '\\r\\n', no BOM in any document;
  a CR that does not end a line is text and stays).
- Documents longer than MAX_DOCUMENT_CHARS: split into consecutive pieces, each ending at
  whitespace where possible (documents_split). Files are streamed in READ_CHUNK_BYTES chunks, so
  even a single 50 MB line never sits in memory whole.
- JSON Lines: a line that is not a JSON object with a string text field is skipped
  (documents_invalid_json); the first few are logged with their byte offset. A JSON line is parsed
  whole, so it is held in memory whole (its text is then split like any long document).
"""

from __future__ import annotations

import bz2
import codecs
import contextlib
import dataclasses
import gzip
import io
import json
import logging
import posixpath
import re
import sys
import zlib
from typing import Any, BinaryIO, Iterable, Iterator, Sequence

from schemas import fs
from schemas.errors import LmshardsError
from schemas.manifest import InputFileInfo

logger = logging.getLogger(__name__)

DEFAULT_RANGE_BYTES = 64 * 1024 * 1024
# Longer documents are split into pieces of at most this many characters, so that no tokenizer
# call ever sees a giant string (a 1M-character piece is a few hundred thousand tokens).
MAX_DOCUMENT_CHARS = 1_000_000
READ_CHUNK_BYTES = 1024 * 1024
# Bytes of one unfinished document kept undecoded before decoding them into its text.
DECODE_BYTES = 1024 * 1024
PARQUET_BATCH_ROWS = 1024
# Per range, the first few bad JSON lines are logged with their location; all are counted.
MAX_LOGGED_BAD_LINES = 3

LINE = "line"
BLANK_LINE = "blank_line"
DOC_SEPARATORS = (LINE, BLANK_LINE)
TEXT, JSONL, PARQUET = "text", "jsonl", "parquet"
FORMATS = (TEXT, JSONL, PARQUET)
_FORMAT_BY_EXTENSION = {".jsonl": JSONL, ".json": JSONL, ".parquet": PARQUET}
# compression suffix -> (name, magic bytes every such file starts with)
_COMPRESSIONS = {".gz": ("gzip", b"\x1f\x8b"), ".bz2": ("bzip2", b"BZh")}
_GLOB_CHARS = "*?["
_HIDDEN_PREFIXES = (".", "_")

_BOM = codecs.BOM_UTF8
# A blank line holds only these bytes (NULs are removed anyway). Deciding it on bytes keeps the
# forward reader and the backward look of a range that starts mid-file in exact agreement.
_LINE_SPACE = b" \t\r\f\v\x00"
_CONTENT_BYTE = re.compile(rb"[^ \t\r\n\f\v\x00]")
_UP_TO_LAST_SPACE = re.compile(r".*\s", re.DOTALL)
_BACKSCAN_BYTES = 64 * 1024
# strict=False: raw control characters (tabs, NULs) inside JSON strings are accepted.
_JSON = json.JSONDecoder(strict=False)


class InputError(LmshardsError):
    """An input pattern, file or read option that cannot be used."""


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """How files turn into documents.

    doc_separator: text files only: "line" (one document per line) or "blank_line" (documents are
      runs of non-blank lines; their lines are joined with "\\n").
    text_field: the JSON Lines field holding the text.
    text_column: the Parquet column holding the text (string or binary).
    max_document_chars: longer documents are split into pieces of at most this many characters.
    """

    doc_separator: str = LINE
    text_field: str = "text"
    text_column: str = "text"
    max_document_chars: int = MAX_DOCUMENT_CHARS

    def __post_init__(self) -> None:
        if self.doc_separator not in DOC_SEPARATORS:
            raise InputError(
                f"--doc_separator {self.doc_separator!r} is not supported; use one of {', '.join(DOC_SEPARATORS)}."
            )
        if not self.text_field:
            raise InputError("--text_field is empty; give the JSON Lines field holding the text (default 'text').")
        if not self.text_column:
            raise InputError("--text_column is empty; give the Parquet column holding the text (default 'text').")
        if self.max_document_chars < 1:
            raise InputError(f"max_document_chars must be >= 1, got {self.max_document_chars}.")


@dataclasses.dataclass(frozen=True)
class ReadRange:
    """A piece of one file read as a unit: bytes [start, end) of text and JSON Lines, row groups
    [start, end) of Parquet. end=-1 means to the end of the file."""

    path: str
    start: int
    end: int


@dataclasses.dataclass
class ReadStats:
    """What reading found; add two with `a += b` (or a.merge(b)).

    documents counts the documents handed on (each piece of a split document counts once);
    documents_split counts the source documents that were split. bytes_read is each range's share
    of its file (decompressed bytes for text; UTF-8 bytes of the column values for Parquet), so it
    sums to the input size however the files were divided.
    """

    documents: int = 0
    documents_empty: int = 0
    documents_invalid_utf8: int = 0
    documents_nul: int = 0
    documents_split: int = 0
    documents_invalid_json: int = 0
    files_empty: int = 0
    bytes_read: int = 0

    def merge(self, other: ReadStats) -> ReadStats:
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))
        return self

    __iadd__ = merge

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


def sum_stats(parts: Iterable[ReadStats]) -> ReadStats:
    """A new ReadStats holding the sum of parts (a CombineGlobally function)."""
    total = ReadStats()
    for part in parts:
        total += part
    return total


# --------------------------------------------------------------------------------------------
# Finding the input files.


def expand_inputs(patterns: Sequence[str]) -> list[InputFileInfo]:
    """Resolves files, directories and globs (local or gs://) into sorted, de-duplicated files.

    Raises:
      InputError: no pattern, a path that does not exist, a glob or directory that matches no file,
        or a local file that cannot be opened.
    """
    if not patterns:
        raise InputError("No input given. Pass --input FILE, DIRECTORY or GLOB (local or gs://); it can repeat.")
    sizes: dict[str, int] = {}
    for pattern in patterns:
        sizes.update(_expand_pattern(pattern))
    return [InputFileInfo(path=path, bytes=sizes[path]) for path in sorted(sizes)]


def _expand_pattern(pattern: str) -> dict[str, int]:
    if not pattern.strip():
        raise InputError("An --input value is empty; give a file, directory or glob.")
    filesystem, stripped = fs.filesystem(pattern)
    prefix = pattern.split("://", 1)[0] + "://" if fs.is_remote(pattern) else ""
    try:
        if any(c in stripped for c in _GLOB_CHARS):
            entries = filesystem.glob(stripped, detail=True)
            if not entries:
                raise InputError(
                    f"--input {pattern!r} matches no file. Check the directory and the pattern, and quote "
                    "the glob so that your shell does not expand it (e.g. --input 'corpus/*.txt')."
                )
        elif filesystem.exists(stripped):
            entries = {stripped: filesystem.info(stripped)}
        else:
            raise InputError(f"--input {pattern!r} does not exist. Check the path (and the bucket, for gs://).")
        files: dict[str, int] = {}
        for name, info in entries.items():
            if info["type"] == "directory":
                found = _directory_files(filesystem, name)
                if not found:
                    raise InputError(
                        f"--input {pattern!r}: directory {prefix + name!r} holds no files "
                        "(hidden names starting with '.' or '_' are skipped)."
                    )
                files.update(found)
            else:
                files[name] = int(info["size"])
    except OSError as e:
        raise InputError(f"--input {pattern!r} cannot be listed: {e}.") from e
    result = {prefix + name: size for name, size in files.items()}
    if not prefix:
        for path in result:
            _check_readable(path)
    return result


def _directory_files(filesystem: Any, directory: str) -> dict[str, int]:
    found = filesystem.find(directory, detail=True)
    files = {}
    for name, info in found.items():
        relative = posixpath.relpath(name, directory)
        if info["type"] == "file" and not any(p.startswith(_HIDDEN_PREFIXES) for p in relative.split("/")):
            files[name] = int(info["size"])
    return files


def _check_readable(path: str) -> None:
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as e:
        raise InputError(
            f"Input file {path!r} cannot be read ({e.strerror or e}). Fix its permissions or leave it out of --input."
        ) from e


def detect_format(path: str) -> str:
    """"text", "jsonl" or "parquet", from the file name after stripping .gz/.bz2."""
    name = _strip_compression(path.rsplit("/", 1)[-1].lower())
    dot = name.rfind(".")
    return _FORMAT_BY_EXTENSION.get(name[dot:], TEXT) if dot > 0 else TEXT


def is_compressed(path: str) -> bool:
    """True for .gz/.bz2 inputs: not splittable, each is read as one range."""
    return _compression_suffix(path) is not None


def _compression_suffix(path: str) -> str | None:
    lowered = path.lower()
    return next((suffix for suffix in _COMPRESSIONS if lowered.endswith(suffix)), None)


def _strip_compression(name: str) -> str:
    suffix = _compression_suffix(name)
    return name[: -len(suffix)] if suffix else name


# --------------------------------------------------------------------------------------------
# Dividing files into ranges.


def plan_ranges(
    files: Sequence[InputFileInfo], *, options: ReadOptions, range_bytes: int = DEFAULT_RANGE_BYTES
) -> list[ReadRange]:
    """The ranges covering every file, in file order; checks each file can be read as its format.

    Every file yields at least one range (an empty file's range counts it in files_empty).

    Raises:
      InputError: a compressed file without its format's magic bytes, a compressed Parquet file,
        a Parquet file that cannot be opened or has no usable `options.text_column`.
    """
    if range_bytes < 1:
        raise InputError(f"Range size must be at least 1 byte, got {range_bytes}.")
    ranges: list[ReadRange] = []
    for info in files:
        ranges.extend(_file_ranges(info, options, range_bytes))
    return ranges


def _file_ranges(info: InputFileInfo, options: ReadOptions, range_bytes: int) -> list[ReadRange]:
    path, size = info.path, info.bytes
    suffix = _compression_suffix(path)
    if detect_format(path) == PARQUET:
        if suffix:
            raise InputError(
                f"{path!r}: compressed Parquet files are not supported (Parquet compresses its own "
                "pages); decompress it."
            )
        return _parquet_ranges(path, options, range_bytes) if size else [ReadRange(path, 0, -1)]
    if suffix or size <= range_bytes:
        if suffix and size:
            _check_magic(path, suffix)
        return [ReadRange(path, 0, -1)]
    starts = range(0, size, range_bytes)
    return [ReadRange(path, s, s + range_bytes if s + range_bytes < size else -1) for s in starts]


def _check_magic(path: str, suffix: str) -> None:
    name, magic = _COMPRESSIONS[suffix]
    with fs.open_file(path, "rb") as f:
        head = f.read(len(magic))
    if head != magic:
        raise InputError(
            f"{path!r} is not {name} data (its name ends in {suffix}). Rename it, or re-create it with {name}."
        )


def _parquet_ranges(path: str, options: ReadOptions, range_bytes: int) -> list[ReadRange]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with fs.open_file(path, "rb") as f:
            parquet = pq.ParquetFile(f)
            schema, metadata = parquet.schema_arrow, parquet.metadata
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"{path!r} is not a readable Parquet file: {e}") from e
    column = options.text_column
    index = schema.get_field_index(column)
    if index < 0:
        raise InputError(
            f"{path!r} has no column {column!r}; it has {schema.names}. Pass --text_column NAME."
        )
    kind = schema.field(index).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)
            or pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
        raise InputError(f"{path!r}: column {column!r} holds {kind}, not text. Pass --text_column NAME.")
    ranges, first, group_bytes = [], 0, 0
    for i in range(metadata.num_row_groups - 1):
        group_bytes += metadata.row_group(i).total_byte_size
        if group_bytes >= range_bytes:
            ranges.append(ReadRange(path, first, i + 1))
            first, group_bytes = i + 1, 0
    ranges.append(ReadRange(path, first, -1))
    return ranges


# --------------------------------------------------------------------------------------------
# Reading documents.


def iter_documents(
    paths_or_patterns: Sequence[str], options: ReadOptions, stats: ReadStats | None = None
) -> Iterator[str]:
    """Every non-empty document of every input, file by file in sorted order, each file start to end.

    Raises:
      InputError: as expand_inputs and plan_ranges do, when called (not at the first document).
    """
    ranges = plan_ranges(expand_inputs(paths_or_patterns), options=options, range_bytes=sys.maxsize)
    return (document for r in ranges for document in read_range(r, options, stats))


def read_range(r: ReadRange, options: ReadOptions, stats: ReadStats | None = None) -> Iterator[str]:
    """The documents that begin in range r, in file order; adds what it finds to stats as it goes.

    Raises:
      InputError: compressed data that is corrupt or truncated.
    """
    stats = ReadStats() if stats is None else stats
    before = dataclasses.replace(stats)
    if detect_format(r.path) == PARQUET:
        yield from _parquet_documents(r, options, stats)
    else:
        suffix = _compression_suffix(r.path)
        if suffix and (r.start, r.end) != (0, -1):
            raise ValueError(f"compressed file {r.path!r} can only be read whole, not as {r}")
        try:
            with _open_decompressed(r.path, suffix) as f:
                yield from _text_documents(f, r, options, stats)
        except (EOFError, zlib.error, OSError) as e:  # gzip.BadGzipFile and bz2's errors are OSErrors
            if not suffix or isinstance(e, (FileNotFoundError, PermissionError)):
                raise
            raise InputError(
                f"{r.path!r}: corrupt or truncated {_COMPRESSIONS[suffix][0]} data ({e}). "
                "Re-create the file, or leave it out of --input."
            ) from e
    _log_problems(r, before, stats)


@contextlib.contextmanager
def _open_decompressed(path: str, suffix: str | None) -> Iterator[BinaryIO]:
    with fs.open_file(path, "rb") as raw:
        if suffix == ".gz":
            with gzip.GzipFile(fileobj=raw, mode="rb") as f:
                yield f
        elif suffix == ".bz2":
            with bz2.BZ2File(raw, mode="rb") as f:
                yield f
        else:
            yield raw


def _log_problems(r: ReadRange, before: ReadStats, after: ReadStats) -> None:
    found = {
        name: getattr(after, name) - getattr(before, name)
        for name in ("files_empty", "documents_invalid_utf8", "documents_nul", "documents_split",
                     "documents_invalid_json", "documents_empty")
    }
    if any(found[name] for name in found if name != "documents_empty"):
        details = ", ".join(f"{name}={count}" for name, count in found.items() if count)
        logger.warning("%s [%d, %d): %s", r.path, r.start, r.end, details)


def _text_documents(f: BinaryIO, r: ReadRange, options: ReadOptions, stats: ReadStats) -> Iterator[str]:
    """Documents of a text or JSON Lines range (see the module docstring for the ownership rule)."""
    end = None if r.end < 0 else r.end
    bom = 0
    if r.start == 0:
        prev_blank = True
        if f.read(len(_BOM)) == _BOM:
            bom = len(_BOM)
        else:
            f.seek(0)
    else:
        first_line = _next_line_start(f, r.start)
        if first_line is None or (end is not None and first_line >= end):  # no line starts in the range
            stats.bytes_read += _share(r, f.tell() if first_line is None else first_line)
            return
        prev_blank = options.doc_separator == BLANK_LINE and _line_before_is_blank(f, first_line)
        f.seek(first_line)
    if detect_format(r.path) == JSONL:
        records: _Records = _JsonLines(r.path, options, stats, end=end)
    elif options.doc_separator == BLANK_LINE:
        records = _BlankLineDocuments(options, stats, end=end, prev_blank=prev_blank)
    else:
        records = _LineDocuments(options, stats, end=end)
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


def _line_before_is_blank(f: BinaryIO, line_start: int) -> bool:
    """Whether the line ending just before line_start (> 0, just after a '\\n') is blank."""
    pos = line_start - 1
    while pos > 0:
        low = max(0, pos - _BACKSCAN_BYTES)
        if low < len(_BOM):  # never start a block inside a byte-order mark
            low = 0
        f.seek(low)
        kept = f.read(pos - low).rstrip(_LINE_SPACE)
        if kept:
            return kept.endswith(b"\n") or (low == 0 and kept == _BOM)
        pos = low
    return True


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


class _Document:
    """One document assembled from raw bytes (or text); hands out pieces of at most max_chars.

    Bytes are decoded in blocks cut where no UTF-8 sequence spans the cut, and long text is cut
    only once more than max_chars are buffered, so the pieces depend on the content alone, not on
    how it arrived.
    """

    def __init__(self, options: ReadOptions, stats: ReadStats, *, invalid_utf8: bool = False):
        self._max_chars = options.max_document_chars
        self._stats = stats
        self._raw: list[bytes] = []
        self._raw_bytes = 0
        self._text = ""
        self._pieces = 0
        self._invalid_utf8 = invalid_utf8
        self._nul = False

    def feed(self, data: bytes) -> list[str]:
        if not data:
            return []
        self._raw.append(data)
        self._raw_bytes += len(data)
        if self._raw_bytes < DECODE_BYTES:
            return []
        raw = b"".join(self._raw)
        # Keep the last byte: it may be the '\r' of a CRLF that strip_cr must still see.
        cut = _utf8_boundary(raw, len(raw) - 1)
        self._raw, self._raw_bytes = [raw[cut:]], len(raw) - cut
        return self.add_text(self.decode(raw[:cut]))

    def strip_cr(self) -> None:
        """Drops a '\\r' ending the bytes fed so far (the CR of a CRLF line end)."""
        if self._raw and self._raw[-1].endswith(b"\r"):
            self._raw[-1] = self._raw[-1][:-1]
            self._raw_bytes -= 1

    def add_text(self, text: str) -> list[str]:
        if "\x00" in text:
            self._nul = True
            text = text.replace("\x00", "")
        self._text += text
        if len(self._text) <= self._max_chars:
            return []
        pieces, self._text = _split_long(self._text, self._max_chars)
        return self._keep(pieces)

    def finish(self) -> list[str]:
        """The last pieces; counts the document in stats."""
        pieces = []
        if self._raw:
            raw = self._raw[0] if len(self._raw) == 1 else b"".join(self._raw)
            self._raw = []
            pieces = self.add_text(self.decode(raw))
        pieces += self._keep([self._text])
        self._text = ""
        stats = self._stats
        if self._pieces:
            stats.documents += self._pieces
            stats.documents_split += self._pieces > 1
        else:
            stats.documents_empty += 1
        stats.documents_invalid_utf8 += self._invalid_utf8
        stats.documents_nul += self._nul
        return pieces

    def decode(self, raw: bytes) -> str:
        text, invalid_utf8 = _decode(raw)
        self._invalid_utf8 |= invalid_utf8
        return text

    def _keep(self, pieces: list[str]) -> list[str]:
        kept = [p for p in pieces if p and not p.isspace()]
        self._pieces += len(kept)
        return kept


def _decode(raw: bytes) -> tuple[str, bool]:
    """(text, whether raw held bytes that are not UTF-8, replaced by U+FFFD)."""
    try:
        return raw.decode("utf-8"), False
    except UnicodeDecodeError:
        return raw.decode("utf-8", errors="replace"), True


def _utf8_boundary(data: bytes, pos: int) -> int:
    """The largest cut <= pos such that no UTF-8 sequence (valid or not) spans it.

    Decoding data[:cut] and data[cut:] separately, with replacement, then equals decoding data.
    A sequence is a lead byte and at most 3 continuation bytes, so cutting before a
    non-continuation byte is always safe.
    """
    for q in range(pos - 1, max(pos - 4, -1), -1):
        byte = data[q]
        if byte & 0xC0 != 0x80:  # not a continuation byte
            return q if byte >= 0xC0 else pos
    return pos


def _split_long(text: str, max_chars: int) -> tuple[list[str], str]:
    """Cuts pieces of at most max_chars off the front of text while more than max_chars remain.

    Each piece ends just after the last whitespace in its second half, or at max_chars if there is
    none; "".join(pieces) + rest == text.
    """
    pieces, begin = [], 0
    while len(text) - begin > max_chars:
        limit = begin + max_chars
        match = _UP_TO_LAST_SPACE.match(text, begin + max_chars // 2, limit)
        cut = match.end() if match else limit
        pieces.append(text[begin:cut])
        begin = cut
    return pieces, text[begin:]


class _Records:
    """Turns the line events of one range into documents; sets `stop` where the range's lines end."""

    open = False  # inside a document that began in this range (so reading must go on)

    def __init__(self, options: ReadOptions, stats: ReadStats, *, end: int | None):
        self._options, self._stats, self._end = options, stats, end
        self.stop: int | None = None

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


class _LineDocuments(_Records):
    def __init__(self, options: ReadOptions, stats: ReadStats, *, end: int | None):
        super().__init__(options, stats, end=end)
        self._doc: _Document | None = None

    def lines(self, start: int, data: bytes) -> list[str]:
        return _line_documents(self._owned(start, data), self._options, self._stats)

    def part(self, start: int, part: bytes, first: bool, last: bool) -> list[str]:
        if first:
            self._doc = _Document(self._options, self._stats)
        pieces = self._doc.feed(part)
        if last:
            self._doc.strip_cr()
            pieces += self._doc.finish()
        return pieces


# The lone surrogates that "surrogateescape" decoding makes of bytes that are not UTF-8.
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")


def _line_documents(data: bytes, options: ReadOptions, stats: ReadStats) -> list[str]:
    """One document per line of data (complete lines, each ending in '\\n'); the fast path.

    Gives exactly what _Document gives line by line: the block is decoded at once, and lines are
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
    if not special and (len(text) <= options.max_document_chars or max(map(len, lines)) <= options.max_document_chars):
        documents = [line for line in lines if line and not line.isspace()]
        stats.documents += len(documents)
        stats.documents_empty += len(lines) - len(documents)
        return documents
    documents = []
    for line in lines:
        invalid_utf8 = False
        if bad_bytes and _ESCAPED_BYTE.search(line):
            line, invalid_utf8 = _decode(line.encode("utf-8", errors="surrogateescape"))
        documents += _text_document(line, options, stats, invalid_utf8=invalid_utf8)
    return documents


def _text_document(text: str, options: ReadOptions, stats: ReadStats, *, invalid_utf8: bool = False) -> list[str]:
    """The pieces of one document given as text; counts it in stats."""
    if invalid_utf8 or "\x00" in text or len(text) > options.max_document_chars:
        doc = _Document(options, stats, invalid_utf8=invalid_utf8)
        return doc.add_text(text) + doc.finish()
    if text and not text.isspace():
        stats.documents += 1
        return [text]
    stats.documents_empty += 1
    return []


class _BlankLineDocuments(_Records):
    def __init__(self, options: ReadOptions, stats: ReadStats, *, end: int | None, prev_blank: bool):
        super().__init__(options, stats, end=end)
        self._doc: _Document | None = None
        # Lines of a document that began in an earlier range are skipped up to the next blank line.
        self._skipping = not prev_blank
        self._line_blank = True  # no content byte seen yet in the current line
        self._held: list[bytes] = []  # the current line's leading whitespace

    @property
    def open(self) -> bool:
        return self._doc is not None

    def lines(self, start: int, data: bytes) -> list[str]:
        pieces: list[str] = []
        paragraph: list[bytes] = []  # lines of the current document found in this block
        line_start = start
        lines = data.split(b"\n")
        lines.pop()  # after the final '\n'
        for n, line in enumerate(lines):
            if n and not paragraph and self._doc is None and self._end is not None and line_start >= self._end:
                self.stop = line_start
                break
            line_start += len(line) + 1
            if _CONTENT_BYTE.search(line):
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
            self._doc = _Document(self._options, self._stats)
            return self._doc.feed(raw)
        return self._doc.feed(b"\n") + self._doc.feed(raw)

    def part(self, start: int, part: bytes, first: bool, last: bool) -> list[str]:
        if first:
            self._line_blank, self._held = True, []
        pieces: list[str] = []
        if self._line_blank:
            if not _CONTENT_BYTE.search(part):
                self._held.append(part)
                if last:
                    pieces, self._skipping = self.close(), False
                return pieces
            self._line_blank = False
            if not self._skipping:
                if self._doc is None:
                    self._doc = _Document(self._options, self._stats)
                else:
                    pieces += self._doc.feed(b"\n")
                for held in self._held:
                    pieces += self._doc.feed(held)
            self._held = []
        if self._skipping:
            return pieces
        pieces += self._doc.feed(part)
        if last:
            self._doc.strip_cr()
        return pieces

    def close(self) -> list[str]:
        doc, self._doc = self._doc, None
        return doc.finish() if doc else []


class _JsonLines(_Records):
    def __init__(self, path: str, options: ReadOptions, stats: ReadStats, *, end: int | None):
        super().__init__(options, stats, end=end)
        self._path = path
        self._raw: list[bytes] = []
        self._logged = 0

    def lines(self, start: int, data: bytes) -> list[str]:
        documents = []
        for line in self._owned(start, data).split(b"\n")[:-1]:
            documents += self._record(line, start)
            start += len(line) + 1
        return documents

    def part(self, start: int, part: bytes, first: bool, last: bool) -> list[str]:
        if first:
            self._raw, self._start = [], start
        self._raw.append(part)
        if not last:
            return []
        raw, self._raw = b"".join(self._raw), []
        return self._record(raw, self._start)

    def _record(self, raw: bytes, line_start: int) -> list[str]:
        raw = raw.removesuffix(b"\r")
        if not _CONTENT_BYTE.search(raw):
            self._stats.documents_empty += 1
            return []
        line, invalid_utf8 = _decode(raw)
        field = self._options.text_field
        try:
            value = _JSON.decode(line)
            problem = None if isinstance(value, dict) else f"a JSON {type(value).__name__}, not an object"
            if problem is None:
                value = value.get(field, ...)
                problem = f"no {field!r} field" if value is ... else None
            if problem is None and value is not None and not isinstance(value, str):
                problem = f"field {field!r} is a {type(value).__name__}, not a string"
        except ValueError as e:
            problem = f"not valid JSON: {e}"
        if problem:
            self._stats.documents_invalid_json += 1
            if self._logged < MAX_LOGGED_BAD_LINES:
                self._logged += 1
                logger.warning("%s: line at byte %d skipped: %s.", self._path, line_start, problem)
            return []
        return _text_document(value or "", self._options, self._stats, invalid_utf8=invalid_utf8)


def _parquet_documents(r: ReadRange, options: ReadOptions, stats: ReadStats) -> Iterator[str]:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    with fs.open_file(r.path, "rb") as f:
        if f.seek(0, io.SEEK_END) == 0:
            stats.files_empty += 1
            return
        f.seek(0)
        parquet = pq.ParquetFile(f)
        if r.start == 0 and parquet.metadata.num_rows == 0:
            stats.files_empty += 1
        groups = list(range(r.start, parquet.num_row_groups if r.end < 0 else r.end))
        if not groups:
            return
        for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS, row_groups=groups,
                                          columns=[options.text_column]):
            column = batch.column(0)
            stats.bytes_read += pc.sum(pc.binary_length(column)).as_py() or 0
            is_binary = pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)
            for value in column.to_pylist():
                text, invalid_utf8 = _decode(value) if is_binary and value is not None else (value or "", False)
                yield from _text_document(text, options, stats, invalid_utf8=invalid_utf8)
