"""Checking each input file's first bytes before anything is read: content decides, not the name alone.

Refused, naming the file and the fix, while the run is planned:
- compressed bytes under another name (gzip, bzip2, zstd or xz magic in a `.txt`), or a name that
  says one codec over another codec's bytes or none (compression.check_magic);
- Parquet bytes under a name that is not `.parquet`, a zip or tar archive (`.tar.gz` included);
- CSV and TSV files (`.csv`, `.tsv`, compressed or not): read as text, their header and delimiters
  would become training text;
- text or JSON Lines that is mostly not UTF-8, read with the default `--encoding utf-8`: of the
  non-ASCII bytes in its first SNIFF_BYTES (decompressed), more than half are not part of a UTF-8
  sequence, as in Latin-1 or cp1252 text (a few stray bad bytes in UTF-8 text are not refused: they
  are decoded with U+FFFD and counted in documents_invalid_utf8). A file that starts with a UTF-16 or
  UTF-32 byte-order mark is decoded from it and not looked at here.
"""

from __future__ import annotations

import concurrent.futures
import re
from collections.abc import Sequence

from lmshards.plumbing import fs
from lmshards.preprocess.sources.core.compression import (
    check_magic,
    is_compressed,
    open_decompressed,
    strip_compression,
)
from lmshards.preprocess.sources.core.documents import utf8_boundary
from lmshards.preprocess.sources.core.lines import WIDE_BOMS
from lmshards.preprocess.sources.core.options import InputError, ReadOptions
from lmshards.preprocess.sources.formats import format_for, parquet
from lmshards.preprocess.sources.formats.base import Format
from lmshards.schemas.manifest import InputFileInfo

# How much of each file (decompressed) is looked at.
SNIFF_BYTES = 64 * 1024
# Text is refused as not UTF-8 once at least this many bytes of its head are not UTF-8 ...
MIN_INVALID_BYTES = 16
# ... and they are more than this share of its non-ASCII bytes.
MAX_INVALID_SHARE = 0.5
# Files looked at in parallel (each one small read; on gs:// a round trip each).
SNIFF_THREADS = 16
DELIMITED_SUFFIXES = (".csv", ".tsv")
_BINARY_KINDS = ((b"PAR1", "Parquet data", ".parquet"), (b"PK\x03\x04", "a zip archive", None))
# A tar archive (as in .tar.gz) says so at this offset of its first header.
_TAR_MAGIC, _TAR_MAGIC_AT = b"ustar", 257
_NON_ASCII = re.compile(rb"[\x80-\xff]")
_NOT_UTF8 = re.compile("[\udc80-\udcff]")


def check_contents(files: Sequence[InputFileInfo], options: ReadOptions) -> None:
    """Checks every non-empty file's first bytes (see the module doc); the first refusal, in file order, is raised.

    Raises:
      InputError: a file refused, naming it and the fix.
    """
    to_check = [f for f in files if f.bytes]
    if len(to_check) <= 1:
        for f in to_check:
            check_content(f.path, options)
        return
    with concurrent.futures.ThreadPoolExecutor(min(SNIFF_THREADS, len(to_check))) as pool:
        for _ in pool.map(lambda f: check_content(f.path, options), to_check):
            pass


def check_content(path: str, options: ReadOptions) -> None:
    """Checks that one file can be read as its name and options say.

    Raises:
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
        with open_decompressed(path) as f:
            head = f.read(SNIFF_BYTES)
    for magic, what, suffix in _BINARY_KINDS:
        if head.startswith(magic):
            fix = f"rename it to end in {suffix}" if suffix else "extract its files and pass those"
            raise InputError(f"{path!r} holds {what}, not text; {fix}.")
    if head[_TAR_MAGIC_AT : _TAR_MAGIC_AT + len(_TAR_MAGIC)] == _TAR_MAGIC:
        raise InputError(
            f"{path!r} holds a tar archive, not text; extract its files and pass those."
        )
    if options.is_utf8 and not any(head.startswith(bom) for bom, _, _ in WIDE_BOMS):
        _check_mostly_utf8(path, head)


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
