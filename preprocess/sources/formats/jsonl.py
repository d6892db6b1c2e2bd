"""JSON Lines (.jsonl, .json): one JSON object per line, its ReadOptions.text_field the document.

A line that is not a JSON object with a string text field is skipped (documents_invalid_json); the
first few of a range are logged with their byte offset. A JSON line is parsed whole, so it is held
in memory whole (its text is then split like any long document).
"""

from __future__ import annotations

import json
import logging
from typing import BinaryIO, Iterator

from preprocess.sources.documents import ReadStats, decode_utf8, text_document
from preprocess.sources.formats.base import Format
from preprocess.sources.lines import CONTENT_BYTE, LineRecords, read_lines
from preprocess.sources.options import ReadOptions
from preprocess.sources.ranges import ReadRange, byte_ranges

logger = logging.getLogger(__name__)

# Per range, the first few bad JSON lines are logged with their location; all are counted.
MAX_LOGGED_BAD_LINES = 3
# strict=False: raw control characters (tabs, NULs) inside JSON strings are accepted.
_JSON = json.JSONDecoder(strict=False)


class _JsonLines(LineRecords):
    def __init__(self, r: ReadRange, options: ReadOptions, stats: ReadStats):
        super().__init__(r, options, stats)
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
        if not CONTENT_BYTE.search(raw):
            self._stats.documents_empty += 1
            return []
        line, invalid_utf8 = decode_utf8(raw)
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
        return text_document(value or "", self._options, self._stats, invalid_utf8=invalid_utf8)


def _read_range(f: BinaryIO, r: ReadRange, options: ReadOptions, stats: ReadStats) -> Iterator[str]:
    return read_lines(f, r, _JsonLines(r, options, stats), stats)


FORMAT = Format(name="jsonl", extensions=(".jsonl", ".json"), plan_ranges=byte_ranges, read_range=_read_range)
