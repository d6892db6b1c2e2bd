"""JSON Lines (.jsonl, .ndjson, .json): one JSON object per line, its ReadOptions.text_field the document.

Lines that give no document are skipped and counted by kind, never fatal: not JSON or not a JSON
object (documents_invalid_json), an object without the text field (documents_missing_field), a text
field that is a number, boolean, array or object (documents_non_string_text), nested more than
MAX_JSON_DEPTH deep (documents_json_too_deep), a text field holding a lone UTF-16 surrogate such as
"\\ud800", which is not Unicode text and no tokenizer takes (documents_lone_surrogate). A null text
field is an empty document. The first few skipped lines of a range are logged with the file and the
line's byte offset (for a UTF-16/32 file: its offset in the file's UTF-8 text). A JSON line is parsed
whole, so it is held in memory whole (its text is then split like any long document); a line longer
than MAX_JSON_LINE_BYTES is skipped and counted (documents_json_too_long): what was held of it is
dropped at that size and the rest of it is read past, never held.

With ReadOptions.html_field (--html_field) the document is that field's HTML, its main text extracted
(sources/core/extract.py; the page problems are counted as for WARC records: documents_html_too_large,
documents_extract_failed); with ReadOptions.url_field (--url_field) each document keeps that field's
string as its URL (documents.RecordNumbers.take_with_urls; a missing or non-string URL is None).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Iterator
from typing import Any, BinaryIO

from lmshards.plumbing.bounded import json_depth
from lmshards.preprocess.sources.core.documents import (
    ReadStats,
    RecordNumbers,
    decode_utf8,
    text_document,
)
from lmshards.preprocess.sources.core.extract import PageProblem, extract_text, too_large
from lmshards.preprocess.sources.core.lines import CONTENT_BYTE, LineRecords, read_lines
from lmshards.preprocess.sources.core.options import ReadOptions
from lmshards.preprocess.sources.core.ranges import DEFAULT_RANGE_BYTES, ReadRange, byte_ranges
from lmshards.preprocess.sources.formats.base import Format

logger = logging.getLogger(__name__)

# Per range, the first few skipped lines are logged with their location; all are counted.
MAX_LOGGED_BAD_LINES = 3
# A JSON line is held whole to be parsed: a longer one is skipped rather than held.
MAX_JSON_LINE_BYTES = DEFAULT_RANGE_BYTES
# Python's JSON parser recurses once per level of nesting, and fails where the interpreter's
# recursion limit (1000, less the caller's own stack) runs out: a line nested deeper than this is
# skipped before it is parsed, so that what is read never depends on the depth of the caller's stack.
MAX_JSON_DEPTH = 500
# Surrogate pairs are joined by the parser: a surrogate left in its result stands alone.
_SURROGATE = re.compile("[\ud800-\udfff]")
# strict=False: raw control characters (tabs, NULs) inside JSON strings are accepted.
_JSON = json.JSONDecoder(strict=False)


@dataclasses.dataclass(frozen=True)
class _Skipped:
    counter: str  # the ReadStats field that counts it
    problem: str


def _json_type(value: Any) -> str:
    if isinstance(value, bool):  # before int: bool is an int
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    names: dict[type, str] = {dict: "object", list: "array", str: "string"}
    return names.get(type(value), type(value).__name__)


def nested_deeper_than(line: str, limit: int) -> bool:
    """Whether the JSON text `line` nests arrays and objects more than `limit` deep (brackets inside
    strings do not count); cheap unless the line holds more than `limit` opening brackets."""
    return line.count("[") + line.count("{") > limit and json_depth(line) > limit


def _text_field(
    line: str, field: str, url_field: str | None = None
) -> tuple[str, str | None] | _Skipped:
    """(the text of one JSON line's `field` ("" for null), its `url_field` string or None), or why the
    line gives no document."""
    too_deep = _Skipped("documents_json_too_deep", f"JSON nested more than {MAX_JSON_DEPTH} deep")
    if nested_deeper_than(line, MAX_JSON_DEPTH):
        return too_deep
    try:
        value = _JSON.decode(line)
    except RecursionError:  # only when the caller's own stack is deep: counted the same
        return too_deep
    except ValueError as e:
        return _Skipped("documents_invalid_json", f"not valid JSON: {e}")
    if not isinstance(value, dict):
        return _Skipped("documents_invalid_json", f"a JSON {_json_type(value)}, not an object")
    if field not in value:
        return _Skipped("documents_missing_field", f"no {field!r} field (pass --text_field NAME)")
    text = value[field]
    if text is not None and not isinstance(text, str):
        return _Skipped(
            "documents_non_string_text",
            f"field {field!r} is a JSON {_json_type(text)}, not a string",
        )
    if text and "\\u" in line and (lone := _SURROGATE.search(text)):
        return _Skipped(
            "documents_lone_surrogate",
            f"field {field!r} holds a lone surrogate \\u{ord(lone[0]):04x}, which is not Unicode text",
        )
    url = value.get(url_field) if url_field is not None else None
    return text or "", url if isinstance(url, str) else None


def _html_text(html: str, options: ReadOptions) -> str | _Skipped:
    """The extracted text of a page's HTML held in a JSON field, or why it gives none."""
    size = len(html.encode("utf-8", errors="surrogatepass"))
    page = (
        too_large(size, options) if size > options.max_html_bytes else extract_text(html, options)
    )
    return _Skipped(page.counter, page.problem) if isinstance(page, PageProblem) else page


class _JsonLines(LineRecords):
    def __init__(self, r: ReadRange, options: ReadOptions, stats: ReadStats):
        super().__init__(r, options, stats)
        self._raw: list[bytes] = []
        self._start = self._held = 0
        self._logged = 0

    def lines(self, start: int, data: bytes) -> list[str]:
        documents = []
        for line in self._owned(start, data).split(b"\n")[:-1]:
            documents += self._record(line, start)
            start += len(line) + 1
        return documents

    def part(self, start: int, part: bytes, first: bool, last: bool) -> list[str]:
        if first:
            self._raw, self._start, self._held = [], start, 0
        self._held += len(part)
        # Past the limit the line is skipped: what is held of it goes, and the rest is never kept.
        if self._held <= MAX_JSON_LINE_BYTES:
            self._raw.append(part)
        else:
            self._raw = []
        if not last:
            return []
        raw, self._raw = b"".join(self._raw), []
        if self._held > MAX_JSON_LINE_BYTES:
            too_long = (
                f"longer than {MAX_JSON_LINE_BYTES:,} bytes ({self._held:,}), too long to parse"
            )
            return self._record(_Skipped("documents_json_too_long", too_long), self._start)
        return self._record(raw, self._start)

    def _record(self, raw: bytes | _Skipped, line_start: int) -> list[str]:
        documents, url = self._documents(raw, line_start) if isinstance(raw, bytes) else ([], None)
        if isinstance(raw, _Skipped):
            self._skip(raw, line_start)
        if self.numbers is not None:
            self.numbers.add(len(documents), url=url)
        return documents

    def _documents(self, raw: bytes, line_start: int) -> tuple[list[str], str | None]:
        raw = raw.removesuffix(b"\r")
        if not CONTENT_BYTE.search(raw):
            self._stats.documents_empty += 1
            return [], None
        line, invalid_utf8 = decode_utf8(raw)
        options = self._options
        found = _text_field(line, options.html_field or options.text_field, options.url_field)
        if isinstance(found, _Skipped):
            self._skip(found, line_start)
            return [], None
        text, url = found
        if options.html_field is not None and text:
            extracted = _html_text(text, options)
            if isinstance(extracted, _Skipped):
                self._skip(extracted, line_start)
                return [], url
            text = extracted
        return text_document(text, options, self._stats, invalid_utf8=invalid_utf8), url

    def _skip(self, skipped: _Skipped, line_start: int) -> None:
        """Counts a skipped line; logs the first few of the range."""
        self._stats.count(skipped.counter)
        if self._logged < MAX_LOGGED_BAD_LINES:
            self._logged += 1
            logger.warning(
                "%s: line at byte %d skipped: %s.", self._path, line_start, skipped.problem
            )


def _read_range(
    f: BinaryIO,
    r: ReadRange,
    options: ReadOptions,
    stats: ReadStats,
    numbers: RecordNumbers | None = None,
) -> Iterator[str]:
    return read_lines(f, r, options, stats, _JsonLines, numbers)


FORMAT = Format(
    name="jsonl",
    extensions=(".jsonl", ".ndjson", ".json"),
    plan_ranges=byte_ranges,
    read_range=_read_range,
    raw_records=True,
)
