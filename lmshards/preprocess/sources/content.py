"""Checking each input file's first bytes before anything is read: content decides, not the name alone.

Refused, naming the file and the fix, while the run is planned:
- compressed bytes under another name (gzip, bzip2, zstd or xz magic in a `.txt`), or a name that
  says one codec over another codec's bytes or none (compression.check_magic);
- Parquet bytes under a name that is not `.parquet`;
- WARC files by content: a `.warc`/`.wet` file (compressed or not) must start with a `WARC/1.0` or
  `WARC/1.1` record; WARC records under another name (a `.txt`, a Common Crawl `.wat` of metadata)
  are refused with the rename or the file to pass instead;
- binary files, told by their first bytes (decompressed) whatever their name, each named for what it
  is: archives (zip, tar, `.tar.gz` included, 7z, RAR), images (PNG, JPEG, GIF, WebP, TIFF), PDF,
  executables, SQLite databases, a Sphinx inventory (`objects.inv`: zlib-compressed after its header
  lines) and zlib streams (BinaryFileError; skip_binary_files leaves them and compressed bytes under
  another name out instead, for `preprocess --skip_binary`);
- CSV and TSV files (`.csv`, `.tsv`, compressed or not): read as text, their header and delimiters
  would become training text;
- text or JSON Lines that is mostly not UTF-8, read with the default `--encoding utf-8`: of the
  non-ASCII bytes in its first SNIFF_BYTES (decompressed), more than half are not part of a UTF-8
  sequence, as in Latin-1 or cp1252 text (a few stray bad bytes in UTF-8 text are not refused: they
  are decoded with U+FFFD and counted in documents_invalid_utf8). A file that starts with a UTF-16 or
  UTF-32 byte-order mark is decoded from it and not looked at here. WARC and HTML files are not
  looked at for UTF-8: each page is decoded by its own charset (sources/core/extract.py).
"""

from __future__ import annotations

import concurrent.futures
import logging
import re
import zlib
from collections.abc import Callable, Sequence

from lmshards.plumbing import fs
from lmshards.preprocess.sources.core.compression import (
    check_magic,
    is_compressed,
    open_decompressed,
    strip_compression,
)
from lmshards.preprocess.sources.core.documents import utf8_boundary
from lmshards.preprocess.sources.core.lines import WIDE_BOMS
from lmshards.preprocess.sources.core.options import BinaryFileError, InputError, ReadOptions
from lmshards.preprocess.sources.formats import format_for, html, parquet, warc
from lmshards.preprocess.sources.formats.base import Format
from lmshards.schemas.manifest import InputFileInfo

logger = logging.getLogger(__name__)

# How much of each file (decompressed) is looked at.
SNIFF_BYTES = 64 * 1024
# Text is refused as not UTF-8 once at least this many bytes of its head are not UTF-8 ...
MIN_INVALID_BYTES = 16
# ... and they are more than this share of its non-ASCII bytes.
MAX_INVALID_SHARE = 0.5
# Files looked at in parallel (each one small read; on gs:// a round trip each).
SNIFF_THREADS = 16
# --skip_binary logs this many of the files it leaves out, then their count.
MAX_LOGGED_SKIPPED = 3
DELIMITED_SUFFIXES = (".csv", ".tsv")
PARQUET_MAGIC = b"PAR1"
_EXTRACT = "extract its files and pass those"
_LEAVE_OUT = "leave it out of --input"
# (first bytes, what a file starting with them is, the fix): never text, whatever the file's name.
BINARY_MAGIC = (
    (b"PK\x03\x04", "a zip archive", _EXTRACT),
    (b"PK\x05\x06", "a zip archive", _EXTRACT),  # an empty one
    (b"7z\xbc\xaf\x27\x1c", "a 7z archive", _EXTRACT),
    (b"Rar!\x1a\x07", "a RAR archive", _EXTRACT),
    (b"\x89PNG\r\n\x1a\n", "a PNG image", _LEAVE_OUT),
    (b"\xff\xd8\xff", "a JPEG image", _LEAVE_OUT),
    (b"GIF87a", "a GIF image", _LEAVE_OUT),
    (b"GIF89a", "a GIF image", _LEAVE_OUT),
    (b"II*\x00", "a TIFF image", _LEAVE_OUT),
    (b"MM\x00*", "a TIFF image", _LEAVE_OUT),
    (b"%PDF-", "a PDF document", "extract its text (e.g. with pdftotext) and pass that"),
    (b"\x7fELF", "an ELF executable", _LEAVE_OUT),
    (b"SQLite format 3\x00", "an SQLite database", _LEAVE_OUT),
    # Sphinx writes objects.inv as four '#' lines, then the zlib-compressed inventory.
    (
        b"# Sphinx inventory version 2\n",
        "a Sphinx inventory (objects.inv), zlib-compressed after its header lines",
        _LEAVE_OUT,
    ),
)
# A tar archive (as in .tar.gz) says so at this offset of its first header; a WebP image is a RIFF
# file whose form type, at this offset, says so.
_TAR_MAGIC, _TAR_MAGIC_AT = b"ustar", 257
_WEBP_MAGIC, _WEBP_MAGIC_AT = b"WEBP", 8
# A zlib stream (RFC 1950) is told by its 2-byte header and by inflating: this much of its start
# must inflate without error, and end the stream or give at least ZLIB_MIN_INFLATED bytes (text
# that happens to start with a valid header, such as "x^2", fails that within a few bytes).
ZLIB_PROBE_BYTES = 4096
ZLIB_MIN_INFLATED = 1024
_NON_ASCII = re.compile(rb"[\x80-\xff]")
_NOT_UTF8 = re.compile("[\udc80-\udcff]")


def check_contents(files: Sequence[InputFileInfo], options: ReadOptions) -> None:
    """Checks every non-empty file's first bytes (see the module doc); the first refusal, in file order, is raised.

    Raises:
      InputError: a file refused, naming it and the fix.
    """
    _each_file(lambda f: check_content(f.path, options), [f for f in files if f.bytes])


def _each_file(
    check: Callable[[InputFileInfo], str | None], files: Sequence[InputFileInfo]
) -> dict[str, str | None]:
    """check(f) for every file, SNIFF_THREADS at a time, by path; the first error in file order is raised."""
    if len(files) <= 1:
        return {f.path: check(f) for f in files}
    with concurrent.futures.ThreadPoolExecutor(min(SNIFF_THREADS, len(files))) as pool:
        return dict(zip((f.path for f in files), pool.map(check, files)))


def skip_binary_files(
    files: Sequence[InputFileInfo], options: ReadOptions
) -> tuple[list[InputFileInfo], int]:
    """(the files that are not binary, how many were left out): those check_content refuses with
    BinaryFileError are left out, the first few logged with what they are.

    Raises:
      InputError: a file refused for another reason (CSV, text that is mostly not UTF-8, ...).
    """

    def binary(f: InputFileInfo) -> str | None:
        try:
            check_content(f.path, options)
        except BinaryFileError as e:
            return e.what
        return None

    found = _each_file(binary, [f for f in files if f.bytes])
    refused = {path: why for path, why in found.items() if why is not None}
    for path, what in list(refused.items())[:MAX_LOGGED_SKIPPED]:
        logger.warning("--skip_binary: skipped %r, %s", path, what)
    if len(refused) > MAX_LOGGED_SKIPPED:
        logger.warning("--skip_binary: skipped %d binary files in all", len(refused))
    return [f for f in files if f.path not in refused], len(refused)


def check_content(path: str, options: ReadOptions) -> None:
    """Checks that one file can be read as its name and options say.

    Raises:
      BinaryFileError: a file that is not text (see binary_kind), or compressed bytes under a name
        without their codec's ending.
      InputError: see the module doc.
    """
    with fs.open_file(path, "rb") as f:
        head = f.read(SNIFF_BYTES)
    check_magic(path, head)
    fmt = format_for(path, options)
    _check_not_delimited(path, fmt)
    if fmt is parquet.FORMAT:  # binary; its reader checks what it needs
        return
    if is_compressed(path):
        # Of a WARC only its first record's start is looked at: one truncated further on is read up to
        # its cut, and counted (warc_files_truncated), not refused here.
        sniff = len(warc.WARC_MAGICS[0]) if fmt is warc.FORMAT else SNIFF_BYTES
        with open_decompressed(path) as f:
            head = f.read(sniff)
    if head.startswith(PARQUET_MAGIC):
        raise InputError(f"{path!r} holds Parquet data, not text; rename it to end in .parquet.")
    _check_warc(path, head, fmt)
    if fmt is warc.FORMAT:  # records of any content type: each is looked at as it is read
        return
    kind = binary_kind(head)
    if kind is not None:
        what, fix = kind
        raise BinaryFileError(f"{path!r} is {what}, not text; {fix}.", what)
    if fmt is html.FORMAT:  # decoded by its own charset
        return
    if options.is_utf8 and not any(head.startswith(bom) for bom, _, _ in WIDE_BOMS):
        _check_mostly_utf8(path, head)


def _check_warc(path: str, head: bytes, fmt: Format) -> None:
    """WARC content and a WARC name go together (see the module doc)."""
    is_warc = head.startswith(warc.WARC_MAGICS)
    if fmt is warc.FORMAT and not is_warc:
        raise InputError(
            f"{path!r} does not start with a WARC/1.0 or WARC/1.1 record, so it is not a WARC file; "
            "rename it to what it holds, or leave it out of --input."
        )
    if is_warc and fmt is not warc.FORMAT:
        name = strip_compression(path.rsplit("/", 1)[-1].lower())
        fix = (
            "a WAT file holds metadata records, not page text: pass the matching .warc.gz or .wet.gz instead"
            if name.endswith(".wat")
            else "rename it to end in .warc (.warc.gz if gzip-compressed)"
        )
        raise InputError(f"{path!r} holds WARC records; {fix}.")


def binary_kind(head: bytes) -> tuple[str, str] | None:
    """(what the file is, the fix) for a file whose first bytes (decompressed) are `head` and are
    not text, e.g. ("a PNG image", "leave it out of --input"); None for anything else."""
    for magic, what, fix in BINARY_MAGIC:
        if head.startswith(magic):
            return what, fix
    if head[_TAR_MAGIC_AT : _TAR_MAGIC_AT + len(_TAR_MAGIC)] == _TAR_MAGIC:
        return "a tar archive", _EXTRACT
    if head.startswith(b"RIFF") and head[_WEBP_MAGIC_AT:].startswith(_WEBP_MAGIC):
        return "a WebP image", _LEAVE_OUT
    if is_zlib_stream(head):
        return "a zlib-compressed stream (Sphinx objects.inv?)", _LEAVE_OUT
    return None


def is_zlib_stream(head: bytes) -> bool:
    """Whether head starts a zlib stream: a deflate header with valid check bits and no preset
    dictionary, whose first ZLIB_PROBE_BYTES inflate without error (see ZLIB_MIN_INFLATED)."""
    if len(head) < 2 or head[0] & 0x0F != zlib.DEFLATED or (head[0] << 8 | head[1]) % 31:
        return False
    if head[1] & 0x20:  # a preset dictionary: not what a file holds
        return False
    inflate = zlib.decompressobj()
    try:
        out = inflate.decompress(head[:ZLIB_PROBE_BYTES], ZLIB_MIN_INFLATED)
    except zlib.error:
        return False
    return inflate.eof or len(out) >= ZLIB_MIN_INFLATED


def _check_not_delimited(path: str, fmt: Format) -> None:
    name = strip_compression(path.rsplit("/", 1)[-1].lower())
    if fmt.extensions or not name.endswith(DELIMITED_SUFFIXES):
        return
    raise InputError(
        f"{path!r} is {name.rsplit('.', 1)[-1].upper()}, which would be read as text (its header and "
        'delimiters tokenized). Convert it to JSON Lines (one {"text": ...} object per line, '
        "--text_field names the field) or Parquet (--text_column names the column)."
    )


def invalid_utf8_bytes(head: bytes) -> tuple[int, int]:
    """(bytes that are not part of a valid UTF-8 sequence, non-ASCII bytes) in head; a sequence cut
    off at its end is not counted."""
    head = head[: utf8_boundary(head, len(head))]
    text = head.decode("utf-8", errors="surrogateescape")
    return len(_NOT_UTF8.findall(text)), len(_NON_ASCII.findall(head))


def _check_mostly_utf8(path: str, head: bytes) -> None:
    invalid, non_ascii = invalid_utf8_bytes(head)
    if invalid >= MIN_INVALID_BYTES and invalid > MAX_INVALID_SHARE * non_ascii:
        raise InputError(
            f"{path!r} is not UTF-8 text: {invalid:,} of the {non_ascii:,} non-ASCII bytes in its first "
            f"{len(head):,} bytes are not UTF-8. Pass its encoding, e.g. --encoding latin-1 (or cp1252) "
            "for legacy Western European text, or convert it to UTF-8."
        )
