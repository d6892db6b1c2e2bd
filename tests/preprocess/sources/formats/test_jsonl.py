"""JSON Lines: bad lines skipped, counted and located; the text field; ranges agree."""

from __future__ import annotations

import json

from lmshards.preprocess.sources import ReadOptions, ReadStats, RecordNumbers, iter_documents
from lmshards.preprocess.sources.core import lines as line_reading
from lmshards.preprocess.sources.formats import jsonl
from lmshards.preprocess.sources.reader import plan_ranges, read_range
from lmshards.schemas.manifest import InputFileInfo
from tests.helpers.text_corpus import BOM, read_in_ranges, write


def test_jsonl_skips_and_counts_bad_lines(tmp_path, caplog, monkeypatch):
    lines = [
        b'{"text": "first", "id": 1}',
        b"{not json",
        b'{"body": "no text field"}',
        b'{"text": 42}',
        b"[1, 2]",
        b'{"text": null}',
        b'{"text": "  "}',
        b"",
        b'{"text": "nul\\u0000inside", "x": "\\u00e9"}',
        b'{"text": "caf\xe9 raw"}',
        b'{"text": "last"}',
    ]
    data = BOM + b"\r\n".join(lines)
    path = write(tmp_path / "a.jsonl", data)
    stats = ReadStats()
    with caplog.at_level("WARNING", logger=jsonl.__name__):
        docs = list(iter_documents([str(path)], ReadOptions(), stats))
    assert docs == ["first", "nulinside", "caf\ufffd raw", "last"]
    assert stats == ReadStats(
        documents=4,
        documents_empty=3,
        documents_invalid_utf8=1,
        documents_nul=1,
        documents_invalid_json=2,
        documents_missing_field=1,
        documents_non_string_text=1,
        bytes_read=len(data),
    )
    located = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(located) == jsonl.MAX_LOGGED_BAD_LINES and all(
        "a.jsonl: line at byte" in m for m in located
    )
    for range_bytes in (1, 37):
        assert read_in_ranges(path, ReadOptions(), range_bytes) == (docs, stats)
    monkeypatch.setattr(line_reading, "READ_CHUNK_BYTES", 8)  # most lines now come in parts
    for range_bytes in (3, len(data)):
        assert read_in_ranges(path, ReadOptions(), range_bytes) == (docs, stats)


def test_jsonl_custom_field(tmp_path):
    path = write(tmp_path / "a.json", b'{"content": "x"}\n{"text": "y"}\n')
    stats = ReadStats()
    assert list(iter_documents([str(path)], ReadOptions(text_field="content"), stats)) == ["x"]
    assert stats == ReadStats(documents=1, documents_missing_field=1, bytes_read=31)


def test_non_string_text_fields_are_counted_under_their_own_name(tmp_path, caplog):
    lines = [
        b'{"text": 42}',
        b'{"text": 1.5e3}',
        b'{"text": [1, "a"]}',
        b'{"text": {"a": "b"}}',
        b'{"text": true}',
        b'{"text": "kept"}',
        b'{"other": "x"}',
        b'"just a string"',
        b"12",
        b"{broken",
        b'{"text": null}',
    ]
    data = b"\n".join(lines) + b"\n"
    path = write(tmp_path / "a.jsonl", data)
    stats = ReadStats()
    with caplog.at_level("WARNING", logger=jsonl.__name__):
        assert list(iter_documents([str(path)], ReadOptions(), stats)) == ["kept"]
    assert stats == ReadStats(
        documents=1,
        documents_empty=1,
        documents_non_string_text=5,
        documents_missing_field=1,
        documents_invalid_json=3,
        bytes_read=len(data),
    )
    assert [r.getMessage() for r in caplog.records if r.name == jsonl.__name__] == [
        f"{path}: line at byte 0 skipped: field 'text' is a JSON number, not a string.",
        f"{path}: line at byte 13 skipped: field 'text' is a JSON number, not a string.",
        f"{path}: line at byte 29 skipped: field 'text' is a JSON array, not a string.",
    ]
    for range_bytes in (1, 10):
        assert read_in_ranges(path, ReadOptions(), range_bytes) == (["kept"], stats)
    assert path.read_bytes() == data


def test_html_field_is_extracted_and_url_field_kept_per_document(tmp_path, caplog):
    page = "<nav>Home</nav><article><p>The main text of the page, long enough to be kept.</p></article>"
    lines = [
        {"html": page, "url": "http://a.example/", "text": "ignored"},
        {"html": "<p>" + "x" * 2000 + "</p>", "url": "http://big.example/"},
        {"html": "<p>Second page, no URL.</p>", "url": 7},
        {"text": "no html field"},
    ]
    data = "\n".join(json.dumps(line) for line in lines).encode() + b"\n"
    path = write(tmp_path / "pages.jsonl", data)
    options = ReadOptions(html_field="html", url_field="url", max_html_bytes=1024)
    stats, numbers = ReadStats(), RecordNumbers()
    [r] = plan_ranges([InputFileInfo(str(path), len(data))], options=options)
    with caplog.at_level("WARNING", logger=jsonl.__name__):
        documents = list(read_range(r, options, stats, numbers))
    assert documents == [
        "The main text of the page, long enough to be kept.",
        "Second page, no URL.",
    ]
    assert numbers.take_with_urls(2) == ([0, 2], ["http://a.example/", None])
    assert (stats.documents_html_too_large, stats.documents_missing_field, stats.documents) == (
        1,
        1,
        2,
    )
    assert "over --max_html_bytes 1,024" in caplog.text
