"""JSON Lines (.jsonl, .ndjson, .json): one JSON object per line, its ReadOptions.text_field the document.

Lines that give no document are skipped and counted by kind: not JSON or not a JSON object
(documents_invalid_json), an object without the text field (documents_missing_field), a text field
that is a number, boolean, array or object (documents_non_string_text). A null text field is an
empty document. The first few skipped lines of a range are logged with the file and the line's byte
offset (for a UTF-16/32 file: its offset in the file's UTF-8 text). A JSON line is parsed whole, so
it is held in memory whole (its text is then split like any long document); a line longer than
MAX_JSON_LINE_BYTES is refused, naming the file and the line's offset, once that many bytes are held.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator
from typing import Any, BinaryIO

from lmshards.preprocess.sources.core.documents import (
    ReadStats,
    RecordNumbers,
    decode_utf8,
    text_document,
)
from lmshards.preprocess.sources.core.lines import CONTENT_BYTE, LineRecords, read_lines
from lmshards.preprocess.sources.core.options import InputError, ReadOptions
from lmshards.preprocess.sources.core.ranges import DEFAULT_RANGE_BYTES, ReadRange, byte_ranges
from lmshards.preprocess.sources.formats.base import Format

logger = logging.getLogger(__name__)

# Per range, the first few skipped lines are logged with their location; all are counted.
MAX_LOGGED_BAD_LINES = 3
# A JSON line is held whole to be parsed: a longer one is refused rather than held.
MAX_JSON_LINE_BYTES = DEFAULT_RANGE_BYTES
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


def _text_field(line: str, field: str) -> str | _Skipped:
    """The text of one JSON line's `field` ("" for null), or why the line gives no document."""
    try:
        value = _JSON.decode(line)
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
    return text or ""


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
        self._raw.append(part)
        self._held += len(part)
        if self._held > MAX_JSON_LINE_BYTES:
            raise InputError(
                f"{self._path!r}: the JSON line at byte {self._start:,} is longer than "
                f"{MAX_JSON_LINE_BYTES:,} bytes, too long to parse as one record. Split that record, "
                "or pass its text as a plain-text file."
            )
        if not last:
            return []
        raw, self._raw = b"".join(self._raw), []
        return self._record(raw, self._start)

    def _record(self, raw: bytes, line_start: int) -> list[str]:
        documents = self._documents(raw, line_start)
        if self.numbers is not None:
            self.numbers.add(len(documents))
        return documents

    def _documents(self, raw: bytes, line_start: int) -> list[str]:
        raw = raw.removesuffix(b"\r")
        if not CONTENT_BYTE.search(raw):
            self._stats.documents_empty += 1
            return []
        line, invalid_utf8 = decode_utf8(raw)
        text = _text_field(line, self._options.text_field)
        if isinstance(text, _Skipped):
            self._stats.count(text.counter)
            if self._logged < MAX_LOGGED_BAD_LINES:
                self._logged += 1
                logger.warning(
                    "%s: line at byte %d skipped: %s.", self._path, line_start, text.problem
                )
            return []
        return text_document(text, self._options, self._stats, invalid_utf8=invalid_utf8)


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
