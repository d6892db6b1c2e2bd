"""What reading counts (ReadStats) and how documents are assembled from bytes or text, for every format.

Bytes are decoded as UTF-8 with U+FFFD replacement, NUL characters are removed, empty and
whitespace-only documents are skipped, and documents longer than ReadOptions.max_document_chars are
split into consecutive pieces, each ending at whitespace where possible. Each of these is counted.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from collections.abc import Iterable

from lmshards.preprocess.sources.core.options import ReadOptions

# Bytes of one unfinished document kept undecoded before decoding them into its text.
DECODE_BYTES = 1024 * 1024
_UP_TO_LAST_SPACE = re.compile(r".*\s", re.DOTALL)


@dataclasses.dataclass
class ReadStats:
    """What reading found; add two with `a += b` (or a.merge(b)).

    documents counts the documents handed on (each piece of a split document counts once);
    documents_split counts the source documents that were split. bytes_read is each range's share
    of its file (decompressed bytes for text; UTF-8 bytes of the column values for Parquet), so it
    sums to the input size however the files were divided.

    JSON Lines: documents_invalid_json counts lines that are not JSON or not a JSON object,
    documents_missing_field objects without the text field, documents_non_string_text objects whose
    text field is a number, boolean, array or object, documents_json_too_long lines longer than
    jsonl.MAX_JSON_LINE_BYTES, documents_json_too_deep lines nested deeper than jsonl.MAX_JSON_DEPTH,
    documents_lone_surrogate text fields holding a lone UTF-16 surrogate ("\\ud800": not Unicode
    text). Each such line is skipped. files_utf16 / files_utf32 count text and JSON
    Lines files decoded from UTF-16 / UTF-32 (they start with its byte-order mark).
    documents_tokenizer_error counts documents the tokenizer raised an error on, skipped (set by the
    encode stage); files_skipped_binary binary inputs left out with --skip_binary (set while planning).
    Web inputs (see formats/warc.py, formats/html.py): warc_records_other counts WARC records read past
    (requests, metadata, responses that are not HTML: not errors), warc_records_malformed records whose
    header or HTTP head cannot be parsed, warc_files_truncated files that end inside a record;
    documents_html_too_large pages over ReadOptions.max_html_bytes, documents_undecodable pages whose
    bytes fit no charset, documents_extract_failed pages the extractor failed on. Each is skipped; these
    counters are left out of recorded() while 0 (WEB_COUNTERS), so manifests of other inputs keep their bytes.
    files_skipped_lmshards_output counts input files left out because they lie inside an lmshards
    output (set by whoever discovers the inputs, see files.discover_inputs; reading never sets it), as
    are files_found, files_duplicate (reached twice: read once), entries_skipped_hidden and
    directories_empty.
    """

    documents: int = 0
    documents_empty: int = 0
    documents_invalid_utf8: int = 0
    documents_nul: int = 0
    documents_split: int = 0
    documents_invalid_json: int = 0
    files_empty: int = 0
    bytes_read: int = 0
    documents_missing_field: int = 0
    documents_non_string_text: int = 0
    files_utf16: int = 0
    files_utf32: int = 0
    files_skipped_lmshards_output: int = 0
    # Set by discovery too (files.InputDiscovery.counts): every entry the inputs hold and what became of it.
    files_found: int = 0
    files_duplicate: int = 0
    entries_skipped_hidden: int = 0
    directories_empty: int = 0
    documents_json_too_long: int = 0
    documents_json_too_deep: int = 0
    documents_lone_surrogate: int = 0
    documents_tokenizer_error: int = 0
    files_skipped_binary: int = 0
    warc_records_other: int = 0
    warc_records_malformed: int = 0
    warc_files_truncated: int = 0
    documents_html_too_large: int = 0
    documents_undecodable: int = 0
    documents_extract_failed: int = 0

    def merge(self, other: ReadStats) -> ReadStats:
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))
        return self

    __iadd__ = merge

    def count(self, name: str) -> None:
        """Adds one to the counter called `name` (for code that picks the counter at run time)."""
        setattr(self, name, getattr(self, name) + 1)

    def as_dict(self) -> dict[str, int]:
        """Every counter by name (Beam's Create reads an element's as_dict() as its schema: keep it whole)."""
        return dataclasses.asdict(self)

    def recorded(self) -> dict[str, int]:
        """The counters a manifest records: as_dict() less the WEB_COUNTERS that are 0."""
        return {
            name: value
            for name, value in self.as_dict().items()
            if value or name not in WEB_COUNTERS
        }


# Counters added with the web formats: recorded() leaves them out while 0.
WEB_COUNTERS = frozenset(
    (
        "warc_records_other",
        "warc_records_malformed",
        "warc_files_truncated",
        "documents_html_too_large",
        "documents_undecodable",
        "documents_extract_failed",
    )
)


class RecordNumbers:
    """The raw record (line, row) each document of one range came from, counted from the range's start.

    A format that numbers its records appends, for each document it hands on (each piece of a split
    record too), the number of the record it came from, and counts every record of the range in
    `records`, empty and skipped ones included. A format that knows its records' URLs (WARC, JSON Lines
    with --url_field) gives each record's; take_with_urls hands them out beside the numbers.
    """

    def __init__(self) -> None:
        self.records = 0  # raw records of the range seen so far
        self.of_documents: collections.deque[int] = (
            collections.deque()
        )  # per document not yet taken
        self._urls: collections.deque[str | None] = collections.deque()  # beside of_documents

    def add(self, documents: int, *, last: bool = True, url: str | None = None) -> None:
        """The current record gave `documents` more documents (maybe none); last: it has ended, the
        next record begins (a record read in parts adds each part's documents with last=False);
        url: the record's URL, where its format has one."""
        self.of_documents.extend([self.records] * documents)
        self._urls.extend([url] * documents)
        self.records += last

    def add_lines(self, kept: list[int], records: int) -> None:
        """The next `records` records, of which those numbered `kept` (from 0, ascending) gave one
        document each and the rest none."""
        first = self.records
        self.of_documents.extend(first + i for i in kept)
        self._urls.extend([None] * len(kept))
        self.records += records

    def take(self, documents: int) -> list[int]:
        """The records of the next `documents` documents handed on (they must have been added)."""
        return self.take_with_urls(documents)[0]

    def take_with_urls(self, documents: int) -> tuple[list[int], list[str | None]]:
        """(the records, the URLs: None where the format has none) of the next `documents` documents
        handed on."""
        records = [self.of_documents.popleft() for _ in range(documents)]
        return records, [self._urls.popleft() for _ in range(documents)]


def sum_stats(parts: Iterable[ReadStats]) -> ReadStats:
    """A new ReadStats holding the sum of parts (a CombineGlobally function)."""
    total = ReadStats()
    for part in parts:
        total += part
    return total


class Document:
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
        cut = utf8_boundary(raw, len(raw) - 1)
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
        text, invalid_utf8 = decode_utf8(raw)
        self._invalid_utf8 |= invalid_utf8
        return text

    def _keep(self, pieces: list[str]) -> list[str]:
        kept = [p for p in pieces if p and not p.isspace()]
        self._pieces += len(kept)
        return kept


def text_document(
    text: str, options: ReadOptions, stats: ReadStats, *, invalid_utf8: bool = False
) -> list[str]:
    """The pieces of one document given as text; counts it in stats."""
    if invalid_utf8 or "\x00" in text or len(text) > options.max_document_chars:
        doc = Document(options, stats, invalid_utf8=invalid_utf8)
        return doc.add_text(text) + doc.finish()
    if text and not text.isspace():
        stats.documents += 1
        return [text]
    stats.documents_empty += 1
    return []


def decode_utf8(raw: bytes) -> tuple[str, bool]:
    """(text, whether raw held bytes that are not UTF-8, replaced by U+FFFD)."""
    try:
        return raw.decode("utf-8"), False
    except UnicodeDecodeError:
        return raw.decode("utf-8", errors="replace"), True


def utf8_boundary(data: bytes, pos: int) -> int:
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
