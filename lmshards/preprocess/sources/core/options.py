"""The reading options: how files turn into documents, their flags, and the error for bad input."""

from __future__ import annotations

import argparse
import codecs
import dataclasses
import re
from typing import Any

from lmshards.plumbing.errors import LmshardsError
from lmshards.plumbing.flag_types import Number

LINE = "line"
BLANK_LINE = "blank_line"
DOC_SEPARATORS = (LINE, BLANK_LINE)
# What picks the reader of a text file: one of DOC_SEPARATORS, or this when --doc_marker or
# --doc_marker_regex is given (documents are the runs of lines between marker lines).
MARKER_LINE = "marker_line"
TEXT_READERS = (*DOC_SEPARATORS, MARKER_LINE)
# A marker line is at most this long (bytes, without its line end): a longer line is always text, so
# that a range starting mid-file can tell whether the line before it is a marker with one small read.
MAX_MARKER_LINE_BYTES = 4096
UTF8 = "utf-8"
DEFAULT_TEXT_FIELD = "text"
DEFAULT_TEXT_COLUMN = "text"
# Longer documents are split into pieces of at most this many characters, so that no tokenizer
# call ever sees a giant string (a 1M-character piece is a few hundred thousand tokens).
MAX_DOCUMENT_CHARS = 1_000_000
# Web pages (WARC, HTML, --html_field): main text only (resiliparse's main-content heuristics), or all
# visible text.
HTML_EXTRACT_MAIN = "main"
HTML_EXTRACTS = (HTML_EXTRACT_MAIN, "all")
# A larger page is skipped and counted, never parsed: Common Crawl cuts every payload at 1 MiB
# (WARC-Truncated: length), so 16 MiB of HTML is a dump rather than a page, and would hold the extractor for
# seconds. --max_html_bytes may lower or raise it within these bounds.
MAX_HTML_BYTES = 16 * 2**20
MAX_HTML_BYTES_RANGE = (1024, 1024 * 2**20)


class InputError(LmshardsError):
    """An input pattern, file or read option that cannot be used."""


class BinaryFileError(InputError):
    """An input file that is not text: an image, an archive, compressed bytes its name does not say
    (`lmshards preprocess --skip_binary` leaves such files out instead).

    what: what the file is, e.g. "a PNG image".
    """

    def __init__(self, message: str, what: str = ""):
        super().__init__(message)
        self.what = what


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """How files turn into documents.

    doc_separator: text files only: "line" (one document per line) or "blank_line" (documents are
      runs of non-blank lines; their lines are joined with "\\n").
    text_field: the JSON Lines field holding the text.
    text_column: the Parquet column holding the text (string or binary).
    max_document_chars: longer documents are split into pieces of at most this many characters.
    encoding: text and JSON Lines files without a UTF-16/32 byte-order mark are decoded from this
      encoding (any Python codec name; normalized, e.g. "latin-1" -> "iso8859-1").
    doc_marker: text files only: documents are the runs of lines between lines that are exactly this
      text (surrounding whitespace ignored), e.g. "%" between fortunes; the marker lines are dropped.
    doc_marker_regex: the same, for lines that match this regular expression whole.
    html_field: JSON Lines only: the field holding a web page's HTML, whose extracted text is the
      document (instead of text_field).
    url_field: JSON Lines only: the field holding each document's URL, kept for curation's audit.
    html_extract: web pages (WARC responses, .html files, html_field; WET records are text already):
      "main" keeps the main text only, "all" every visible text.
    html_drop_comments: web pages: leave out comment sections (resiliparse keeps them as main content).
    max_html_bytes: web pages of more bytes are skipped and counted (documents_html_too_large).
    """

    doc_separator: str = LINE
    text_field: str = DEFAULT_TEXT_FIELD
    text_column: str = DEFAULT_TEXT_COLUMN
    max_document_chars: int = MAX_DOCUMENT_CHARS
    encoding: str = UTF8
    doc_marker: str | None = None
    doc_marker_regex: str | None = None
    html_field: str | None = None
    url_field: str | None = None
    html_extract: str = HTML_EXTRACT_MAIN
    html_drop_comments: bool = False
    max_html_bytes: int = MAX_HTML_BYTES

    def __post_init__(self) -> None:
        if self.doc_separator not in DOC_SEPARATORS:
            raise InputError(
                f"--doc_separator {self.doc_separator!r} is not supported; use one of {', '.join(DOC_SEPARATORS)}."
            )
        if not self.text_field:
            raise InputError(
                "--text_field is empty; give the JSON Lines field holding the text (default 'text')."
            )
        if not self.text_column:
            raise InputError(
                "--text_column is empty; give the Parquet column holding the text (default 'text')."
            )
        if self.max_document_chars < 1:
            raise InputError(f"max_document_chars must be >= 1, got {self.max_document_chars}.")
        object.__setattr__(self, "encoding", _codec_name(self.encoding))
        _check_marker(self)
        _check_web(self)

    @property
    def text_reader(self) -> str:
        """Which text reader splits plain-text files: MARKER_LINE, or doc_separator."""
        return (
            MARKER_LINE
            if self.doc_marker is not None or self.doc_marker_regex is not None
            else self.doc_separator
        )

    @property
    def is_utf8(self) -> bool:
        return self.encoding == UTF8

    def is_marker(self, line: str) -> bool:
        """Whether a line (its line end removed) is a document marker line."""
        if self.doc_marker is not None:
            return line.strip() == self.doc_marker.strip()
        assert self.doc_marker_regex is not None, "only the marker reader asks"
        return (
            re.fullmatch(self.doc_marker_regex, line) is not None
        )  # re caches the compiled pattern


def _codec_name(encoding: str) -> str:
    try:
        name = codecs.lookup(encoding).name
    except LookupError:
        raise InputError(
            f"--encoding {encoding!r} is not an encoding Python knows; use a codec name such as "
            "utf-8 (the default), latin-1, cp1252 or shift_jis."
        ) from None
    # rot13, base64, zlib_codec, hex...: codecs.lookup knows them, but they turn bytes into bytes (or
    # str into str), and decoding a file with them fails inside the reader.
    if not getattr(codecs.lookup(encoding), "_is_text_encoding", True):
        raise InputError(
            f"--encoding {encoding!r} is not a text encoding (Python's {name!r} codec does not decode "
            "bytes to text); use a text encoding such as utf-8 (the default), latin-1, cp1252 or shift_jis."
        )
    # A UTF-8 byte-order mark is skipped anyway: utf-8-sig reads as utf-8.
    return UTF8 if name in (UTF8, "utf-8-sig") else name


def _check_marker(options: ReadOptions) -> None:
    marker, regex = options.doc_marker, options.doc_marker_regex
    if marker is not None and regex is not None:
        raise InputError("Pass --doc_marker or --doc_marker_regex, not both.")
    if (marker is not None or regex is not None) and options.doc_separator != LINE:
        raise InputError(
            f"--doc_marker/--doc_marker_regex replace --doc_separator {options.doc_separator}; pass only one of them."
        )
    if marker is not None and (not marker.strip() or "\n" in marker or "\r" in marker):
        raise InputError(
            f"--doc_marker {marker!r} must be one line of visible text, e.g. --doc_marker %."
        )
    if marker is not None and len(marker.encode("utf-8")) > MAX_MARKER_LINE_BYTES:
        raise InputError(
            f"--doc_marker is longer than {MAX_MARKER_LINE_BYTES} bytes; give a short marker line."
        )
    if regex is not None:
        try:
            pattern = re.compile(regex)
        except re.error as e:
            raise InputError(
                f"--doc_marker_regex {regex!r} is not a regular expression ({e})."
            ) from None
        if pattern.fullmatch("") is not None:
            raise InputError(
                f"--doc_marker_regex {regex!r} matches an empty line, so every blank line would end a "
                "document; make it match the marker only (or use --doc_separator blank_line)."
            )


def _check_web(options: ReadOptions) -> None:
    for flag, field in (("--html_field", options.html_field), ("--url_field", options.url_field)):
        if field is not None and not field:
            raise InputError(
                f"{flag} is empty; give the JSON Lines field's name, or leave {flag} out."
            )
    if options.html_field is not None and options.html_field == options.url_field:
        raise InputError(
            f"--html_field and --url_field are both {options.html_field!r}; the URL is another field."
        )
    if options.html_extract not in HTML_EXTRACTS:
        raise InputError(
            f"--html_extract {options.html_extract!r} is not supported; use one of {', '.join(HTML_EXTRACTS)}."
        )
    low, high = MAX_HTML_BYTES_RANGE
    if not low <= options.max_html_bytes <= high:
        raise InputError(
            f"--max_html_bytes {options.max_html_bytes} is out of range; give {low:,} to {high:,} "
            f"(default {MAX_HTML_BYTES:,})."
        )


def add_reading_arguments(parser: argparse.ArgumentParser) -> None:
    """Declares --doc_separator, --doc_marker, --doc_marker_regex, --text_field, --text_column and
    --encoding, the reading flags of every command.

    Works on any argparse parser, including the one Beam hands to PipelineOptions._add_argparse_args;
    read_options_from turns the parsed values into ReadOptions.
    """
    parser.add_argument(
        "--doc_separator",
        choices=DOC_SEPARATORS,
        default=LINE,
        help="plain-text files: one document per line, or documents separated by blank lines",
    )
    parser.add_argument(
        "--text_field", default=DEFAULT_TEXT_FIELD, help="JSON Lines field holding the text"
    )
    parser.add_argument(
        "--doc_marker",
        default=None,
        help="plain-text files: documents are separated by lines that are exactly this text "
        "(e.g. %% between fortunes); the marker lines are dropped",
    )
    parser.add_argument(
        "--doc_marker_regex",
        default=None,
        help="plain-text files: documents are separated by lines that match this regular "
        "expression whole (e.g. '-{3,}'); the marker lines are dropped",
    )
    parser.add_argument(
        "--text_column", default=DEFAULT_TEXT_COLUMN, help="Parquet column holding the text"
    )
    parser.add_argument(
        "--encoding",
        default=UTF8,
        help="encoding of text and JSON Lines files (default utf-8; e.g. latin-1 or cp1252 for "
        "legacy text); a file that starts with a UTF-16/32 byte-order mark is decoded as its mark says",
    )
    parser.add_argument(
        "--html_field",
        default=None,
        help="JSON Lines: the field holding a web page's HTML; its extracted main text is the document",
    )
    parser.add_argument(
        "--url_field",
        default=None,
        help="JSON Lines: the field holding each document's URL, named by curation's audit",
    )
    parser.add_argument(
        "--html_extract",
        choices=HTML_EXTRACTS,
        default=HTML_EXTRACT_MAIN,
        help="web pages (.warc, .html, --html_field): keep the main text only (default), or all visible text",
    )
    parser.add_argument(
        "--html_drop_comments",
        action="store_true",
        help="web pages: leave out comment sections (kept as main content by default)",
    )
    parser.add_argument(
        "--max_html_bytes",
        type=Number(integral=True, low=MAX_HTML_BYTES_RANGE[0], high=MAX_HTML_BYTES_RANGE[1]),
        default=MAX_HTML_BYTES,
        help=f"web pages of more bytes are skipped and counted (default {MAX_HTML_BYTES:,})",
    )


def read_options_from(values: Any) -> ReadOptions:
    """ReadOptions from anything holding the reading flags as attributes (an argparse namespace, a
    PipelineOptions view, a config dataclass).

    Raises:
      InputError: a value ReadOptions rejects.
    """
    return ReadOptions(**{name: getattr(values, name) for name in READING_FLAGS})


# The ReadOptions fields that the reading flags set, as attribute names of what carries them.
READING_FLAGS = (
    "doc_separator",
    "text_field",
    "text_column",
    "encoding",
    "doc_marker",
    "doc_marker_regex",
    "html_field",
    "url_field",
    "html_extract",
    "html_drop_comments",
    "max_html_bytes",
)
