"""UTF-16 and UTF-32 files (with a byte-order mark) decode to what their UTF-8 twin gives, in any ranges."""

from __future__ import annotations

import codecs
import dataclasses
import gzip
import json

import pytest

from lmshards.preprocess.sources import ReadOptions, ReadStats, iter_documents
from lmshards.preprocess.sources.core import documents
from lmshards.preprocess.sources.core import lines as line_reading
from tests.helpers.text_corpus import random_corpus, read_in_ranges, tree_bytes, write

WIDE = [  # (codec, byte-order mark, ReadStats counter)
    ("utf-16-le", codecs.BOM_UTF16_LE, "files_utf16"),
    ("utf-16-be", codecs.BOM_UTF16_BE, "files_utf16"),
    ("utf-32-le", codecs.BOM_UTF32_LE, "files_utf32"),
    ("utf-32-be", codecs.BOM_UTF32_BE, "files_utf32"),
]


def corpus_text(seed: int) -> str:
    """Valid text with CRLFs, blank lines, NULs, lone CRs, 2-, 3- and 4-byte characters (surrogate pairs in UTF-16)."""
    return random_corpus(seed, lines=60, crlf=True, bom=False).decode("utf-8", errors="replace")


def wide_twin(stats: ReadStats, counter: str, size: int) -> ReadStats:
    """The stats of the UTF-8 twin as the wide file must give them: its own size, and counted as decoded."""
    return dataclasses.replace(stats, bytes_read=size, **{counter: 1})


@pytest.mark.parametrize("codec, bom, counter", WIDE)
@pytest.mark.parametrize("separator", ["line", "blank_line"])
def test_wide_text_reads_like_its_utf8_twin_in_any_ranges(
    tmp_path, monkeypatch, codec, bom, counter, separator
):
    # Chunks of 7 bytes cut through code units and surrogate pairs, and make long lines arrive in parts.
    monkeypatch.setattr(line_reading, "READ_CHUNK_BYTES", 7)
    monkeypatch.setattr(documents, "DECODE_BYTES", 5)
    text = corpus_text(len(codec) + len(separator))
    utf8 = write(tmp_path / "utf8.txt", text.encode("utf-8"))
    wide = write(tmp_path / "wide.txt", bom + text.encode(codec))
    before = tree_bytes(tmp_path)
    options = ReadOptions(doc_separator=separator, max_document_chars=12)
    expected, expected_stats = read_in_ranges(utf8, options, utf8.stat().st_size)
    assert len(expected) > 15 and expected_stats.documents_nul and expected_stats.documents_split
    size = wide.stat().st_size
    for range_bytes in (5, 64, size):
        docs, stats = read_in_ranges(wide, options, range_bytes)
        assert docs == expected, range_bytes
        assert stats == wide_twin(expected_stats, counter, size), range_bytes
    assert not any(d.startswith("\ufeff") or "\r\n" in d for d in expected)
    assert tree_bytes(tmp_path) == before


@pytest.mark.parametrize("codec, bom, counter", WIDE)
def test_wide_json_lines_and_compressed_files(tmp_path, codec, bom, counter):
    rows = [
        {"text": "caf\u00e9 \U0001f642"},
        {"text": "\u65e5\u672c\u8a9e\nline two"},
        {"text": 7},
        {"x": "y"},
        {"text": "   "},
        {"text": "last"},
    ]
    data = "\r\n".join(json.dumps(r, ensure_ascii=False) for r in rows).encode(codec)
    jsonl = write(tmp_path / "a.jsonl", bom + data)
    gz = write(tmp_path / "b.txt.gz", gzip.compress(bom + "one\ntwo\n\nthree".encode(codec)))
    before = tree_bytes(tmp_path)
    for range_bytes in (1, 5, 1000):
        docs, stats = read_in_ranges(jsonl, ReadOptions(), range_bytes)
        assert docs == ["caf\u00e9 \U0001f642", "\u65e5\u672c\u8a9e\nline two", "last"]
        assert stats == ReadStats(
            documents=3,
            documents_empty=1,
            documents_non_string_text=1,
            documents_missing_field=1,
            bytes_read=len(bom + data),
            **{counter: 1},
        )
    stats = ReadStats()
    assert list(iter_documents([str(gz)], ReadOptions(), stats)) == ["one", "two", "three"]
    assert stats == ReadStats(
        documents=3, documents_empty=1, bytes_read=len(bom) + 14 * len(bom), **{counter: 1}
    )
    assert tree_bytes(tmp_path) == before


def test_invalid_and_truncated_utf16_is_replaced_and_counted(tmp_path):
    lone_surrogate = "\ud800".encode("utf-16-le", errors="surrogatepass")
    data = (
        codecs.BOM_UTF16_LE
        + "ok\nbad ".encode("utf-16-le")
        + lone_surrogate
        + " here\nend".encode("utf-16-le")
    )
    path = write(tmp_path / "a.txt", data + b"x")  # an odd final byte: half a code unit
    for range_bytes in (1, len(data) + 1):
        docs, stats = read_in_ranges(path, ReadOptions(), range_bytes)
        assert docs == ["ok", "bad \ufffd here", "end\ufffd"]
        assert stats == ReadStats(
            documents=3, documents_invalid_utf8=2, files_utf16=1, bytes_read=len(data) + 1
        )


def test_a_bom_alone_is_an_empty_file_and_utf32_le_wins_over_utf16_le(tmp_path):
    for codec, bom, counter in WIDE:
        stats = ReadStats()
        path = write(tmp_path / f"{codec}.txt", bom)
        assert list(iter_documents([str(path)], ReadOptions(), stats)) == []
        assert stats == ReadStats(files_empty=1, bytes_read=len(bom), **{counter: 1})
    # FF FE 00 00 is the UTF-32 LE mark, though UTF-16 LE's FF FE begins it.
    path = write(tmp_path / "a.txt", codecs.BOM_UTF32_LE + "\u4e2d\n".encode("utf-32-le"))
    stats = ReadStats()
    assert list(iter_documents([str(path)], ReadOptions(), stats)) == ["\u4e2d"]
    assert stats.files_utf32 == 1 and stats.files_utf16 == 0


@pytest.mark.gcs
def test_gcs_wide_file_in_many_ranges(gcs_emulator):
    from lmshards.plumbing import fs

    text = corpus_text(3)
    fs.write_bytes_atomic(f"{gcs_emulator}/utf8.txt", text.encode("utf-8"))
    data = codecs.BOM_UTF16_BE + text.encode("utf-16-be")
    fs.write_bytes_atomic(f"{gcs_emulator}/wide.txt", data)
    expected, expected_stats = read_in_ranges(f"{gcs_emulator}/utf8.txt", ReadOptions(), 1 << 30)
    docs, stats = read_in_ranges(f"{gcs_emulator}/wide.txt", ReadOptions(), len(data) // 7)
    assert docs == expected and stats == wide_twin(expected_stats, "files_utf16", len(data))
    assert fs.read_bytes(f"{gcs_emulator}/wide.txt") == data
