"""Reading the corpus: input files, splittable ranges, and the documents in them.

Inputs are local paths, directories or globs, or gs:// globs (files.py). Files inside an lmshards
output (a directory holding an lmshards manifest.json or .lmshards-tmp) are never read: directories and globs
skip them (discover_inputs counts them), a file named as an input there is refused. A file's format
comes from its name after stripping `.gz`/`.bz2`/`.zst`/`.xz` (compression.py: decompressed on the fly),
and its first bytes must agree (content.py refuses compressed bytes under another name, CSV, and text
that is mostly not UTF-8 unless ReadOptions.encoding says its encoding): `.jsonl`/`.ndjson`/`.json` are JSON Lines, `.parquet` is Parquet, anything else is UTF-8 text with one document
per line (`doc_separator="line"`), documents separated by blank lines (`"blank_line"`) or by marker
lines (`doc_marker`, `doc_marker_regex`); one module
per format in formats/, registered in formats/__init__.py. Text and JSON Lines files that start with
a UTF-16 or UTF-32 byte-order mark are decoded from that encoding (files_utf16, files_utf32).

Uncompressed text and JSON Lines files are read in byte ranges, independently (lines.py: each
document is read by the range holding its first byte); compressed files are one range; Parquet
ranges are runs of row groups (ranges.py, reader.py).

Problems in the data never stop a run and are never silent: each is counted in ReadStats and
logged with the file's name.
- Invalid UTF-8: decoded with U+FFFD replacement (documents_invalid_utf8).
- NUL bytes: removed (documents_nul).
- Empty or whitespace-only documents: skipped (documents_empty); empty files (files_empty).
- CRLF line ends and a UTF-8 byte-order mark: normalized away (no '\\r\\n', no BOM in any document;
  a CR that does not end a line is text and stays).
- Documents longer than ReadOptions.max_document_chars: split into consecutive pieces, each ending
  at whitespace where possible (documents_split).
- JSON Lines: a line that is not a JSON object (documents_invalid_json), has no text field
  (documents_missing_field), a text field that is not a string (documents_non_string_text) or that
  holds a lone surrogate (documents_lone_surrogate), is longer than jsonl.MAX_JSON_LINE_BYTES
  (documents_json_too_long) or nested deeper than jsonl.MAX_JSON_DEPTH (documents_json_too_deep) is
  skipped.
- Compressed data is decompressed in bounded memory whatever its ratio (a decompression bomb too).
- Corrupt or truncated compressed data: InputError naming the file, where it is found.

Inputs that can give nothing are refused: check_not_empty (every file 0 bytes) at planning, and
no_documents_message says why a run read no document at all. Binary files (images, archives,
compressed bytes under a name that does not say so, ...) are refused naming what they are
(BinaryFileError); skip_binary_files leaves them out instead.
"""

from lmshards.preprocess.sources.content import skip_binary_files
from lmshards.preprocess.sources.core.compression import is_compressed
from lmshards.preprocess.sources.core.documents import ReadStats, RecordNumbers, sum_stats
from lmshards.preprocess.sources.core.options import (
    BLANK_LINE,
    DEFAULT_TEXT_COLUMN,
    DEFAULT_TEXT_FIELD,
    DOC_SEPARATORS,
    HTML_EXTRACT_MAIN,
    LINE,
    MARKER_LINE,
    MAX_HTML_BYTES,
    UTF8,
    BinaryFileError,
    InputError,
    ReadOptions,
    add_reading_arguments,
    read_options_from,
)
from lmshards.preprocess.sources.core.ranges import DEFAULT_RANGE_BYTES, ReadRange
from lmshards.preprocess.sources.files import (
    InputDiscovery,
    check_not_empty,
    discover_inputs,
    expand_inputs,
)
from lmshards.preprocess.sources.formats import detect_format
from lmshards.preprocess.sources.reader import (
    iter_documents,
    no_documents_message,
    plan_ranges,
    read_range,
)

__all__ = [
    "BLANK_LINE",
    "DEFAULT_RANGE_BYTES",
    "DEFAULT_TEXT_COLUMN",
    "DEFAULT_TEXT_FIELD",
    "DOC_SEPARATORS",
    "HTML_EXTRACT_MAIN",
    "LINE",
    "MARKER_LINE",
    "MAX_HTML_BYTES",
    "UTF8",
    "BinaryFileError",
    "InputDiscovery",
    "InputError",
    "ReadOptions",
    "ReadRange",
    "ReadStats",
    "RecordNumbers",
    "add_reading_arguments",
    "check_not_empty",
    "detect_format",
    "discover_inputs",
    "expand_inputs",
    "is_compressed",
    "iter_documents",
    "no_documents_message",
    "plan_ranges",
    "read_options_from",
    "read_range",
    "skip_binary_files",
    "sum_stats",
]
