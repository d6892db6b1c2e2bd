"""Reading the corpus: input files, splittable ranges, and the documents in them.

Inputs are local paths, directories or globs, or gs:// globs (files.py). A file's format comes from
its name after stripping `.gz`/`.bz2` (compression.py: decompressed on the fly): `.jsonl`/`.json` are
JSON Lines, `.parquet` is Parquet, anything else is UTF-8 text with one document per line
(`doc_separator="line"`) or documents separated by blank lines (`"blank_line"`); one module per
format in formats/, registered in formats/__init__.py.

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
- JSON Lines: a line that is not a JSON object with a string text field is skipped
  (documents_invalid_json).
"""

from preprocess.sources.compression import is_compressed
from preprocess.sources.documents import ReadStats, sum_stats
from preprocess.sources.files import expand_inputs
from preprocess.sources.formats import detect_format
from preprocess.sources.options import (
    BLANK_LINE,
    DEFAULT_TEXT_COLUMN,
    DEFAULT_TEXT_FIELD,
    DOC_SEPARATORS,
    LINE,
    InputError,
    ReadOptions,
    add_reading_arguments,
    read_options_from,
)
from preprocess.sources.ranges import DEFAULT_RANGE_BYTES, ReadRange
from preprocess.sources.reader import iter_documents, plan_ranges, read_range

__all__ = [
    "BLANK_LINE",
    "DEFAULT_RANGE_BYTES",
    "DEFAULT_TEXT_COLUMN",
    "DEFAULT_TEXT_FIELD",
    "DOC_SEPARATORS",
    "LINE",
    "InputError",
    "ReadOptions",
    "ReadRange",
    "ReadStats",
    "add_reading_arguments",
    "detect_format",
    "expand_inputs",
    "is_compressed",
    "iter_documents",
    "plan_ranges",
    "read_options_from",
    "read_range",
    "sum_stats",
]
