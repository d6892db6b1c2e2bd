"""Text files, one document per line or blank-line separated: bad data, byte ranges and memory on giant lines."""

from __future__ import annotations

import gzip
import hashlib
import tracemalloc

import pytest

from lmshards.preprocess.sources import ReadOptions, ReadStats, iter_documents
from lmshards.preprocess.sources.core import documents
from lmshards.preprocess.sources.core import lines as line_reading
from lmshards.preprocess.sources.core.options import MAX_DOCUMENT_CHARS
from lmshards.preprocess.sources.formats import blank_lines
from tests.helpers.text_corpus import BOM, expected_documents, random_corpus, read_in_ranges, write


def test_line_documents_normalize_and_count_bad_data(tmp_path):
    data = BOM + b"first\r\n\r\n   \nsecond \xff half\nnul\x00led\n\x00\nlast without newline\r"
    path = write(tmp_path / "a.txt", data)
    stats = ReadStats()
    docs = list(iter_documents([str(path)], ReadOptions(), stats))
    assert docs == ["first", "second \ufffd half", "nulled", "last without newline"]
    assert stats == ReadStats(
        documents=4,
        documents_empty=3,
        documents_invalid_utf8=1,
        documents_nul=2,
        bytes_read=len(data),
    )


def test_blank_line_documents_join_lines(tmp_path):
    data = b"\n \r\none\r\n  two\r\n\r\n\t\r\n\nthree\nfour \n\x00\n\nfive"
    path = write(tmp_path / "a.txt", data)
    stats = ReadStats()
    docs = list(iter_documents([str(path)], ReadOptions(doc_separator="blank_line"), stats))
    assert docs == ["one\n  two", "three\nfour ", "five"]
    assert stats == ReadStats(documents=3, bytes_read=len(data))


def test_empty_files_are_counted_not_read(tmp_path):
    paths = [
        write(tmp_path / "a.txt", b""),
        write(tmp_path / "b.txt", BOM),
        write(tmp_path / "c.jsonl", b""),
        write(tmp_path / "d.txt.gz", gzip.compress(b"")),
        write(tmp_path / "e.txt", b"\n"),
    ]
    stats = ReadStats()
    assert list(iter_documents([str(p) for p in paths], ReadOptions(), stats)) == []
    assert stats.files_empty == 4 and stats.documents_empty == 1 and stats.documents == 0


@pytest.mark.parametrize("separator", ["line", "blank_line"])
@pytest.mark.parametrize("crlf, bom", [(False, False), (True, False), (False, True), (True, True)])
def test_ranges_read_each_document_exactly_once(tmp_path, separator, crlf, bom):
    data = random_corpus(len(separator) * 4 + crlf * 2 + bom, lines=200, crlf=crlf, bom=bom)
    path = write(tmp_path / "a.txt", data)
    options = ReadOptions(doc_separator=separator)
    expected = expected_documents(data, separator)
    assert len(expected) > (100 if separator == "line" else 15)
    whole, whole_stats = read_in_ranges(path, options, len(data))
    assert whole == expected
    assert whole_stats.bytes_read == len(data) and whole_stats.documents == len(expected)
    for range_bytes in (37, 1000):
        docs, stats = read_in_ranges(path, options, range_bytes)
        assert docs == expected, range_bytes
        assert stats == whole_stats, range_bytes
        assert not any("\r\n" in d or d.startswith("\ufeff") for d in docs)  # a lone CR is data


@pytest.mark.parametrize("separator", ["line", "blank_line"])
def test_ranges_of_every_size_on_a_small_file(tmp_path, separator):
    """Ranges that start inside the byte-order mark, inside a CRLF and on every other byte."""
    data = random_corpus(11, lines=24, crlf=True, bom=True)
    path = write(tmp_path / "a.txt", data)
    options = ReadOptions(doc_separator=separator)
    whole, whole_stats = read_in_ranges(path, options, len(data))
    assert whole == expected_documents(data, separator) and len(whole) >= 3
    for range_bytes in range(1, 25):
        assert read_in_ranges(path, options, range_bytes) == (whole, whole_stats), range_bytes


@pytest.mark.parametrize("data", [BOM + b" \r\nA\r\nB\n\nC", BOM + b"\nA\n\n\nB", b"\t\n\nA"])
def test_blank_line_ranges_after_a_blank_first_line(tmp_path, data):
    path = write(tmp_path / "a.txt", data)
    options = ReadOptions(doc_separator="blank_line")
    expected = expected_documents(data, "blank_line")
    for range_bytes in range(1, len(data) + 1):
        assert read_in_ranges(path, options, range_bytes)[0] == expected, range_bytes


@pytest.mark.parametrize("chunk_bytes", [7, 64])
def test_ranges_and_tiny_chunks_agree_on_split_documents(tmp_path, monkeypatch, chunk_bytes):
    """Small chunks and decode blocks of 5 bytes cut through lines, multi-byte characters and CRLFs."""
    monkeypatch.setattr(line_reading, "READ_CHUNK_BYTES", chunk_bytes)
    monkeypatch.setattr(documents, "DECODE_BYTES", 5)
    monkeypatch.setattr(blank_lines, "_BACKSCAN_BYTES", 3)
    data = random_corpus(7, lines=200, crlf=True, bom=True, final_newline=False)
    path = write(tmp_path / "a.txt", data)
    for separator in ("line", "blank_line"):
        options = ReadOptions(doc_separator=separator, max_document_chars=9)
        pieces = []
        for doc in expected_documents(data, separator):
            cut, rest = documents._split_long(doc, 9)
            pieces += [p for p in cut + [rest] if p and not p.isspace()]
        whole, whole_stats = read_in_ranges(path, options, len(data))
        assert whole == pieces and all(len(p) <= 9 for p in whole)
        assert whole_stats.documents_split > 10
        for range_bytes in (37, 5):
            docs, stats = read_in_ranges(path, options, range_bytes)
            assert docs == whole and stats == whole_stats


def test_bytes_read_grows_while_a_range_is_read(tmp_path):
    line = b"x" * 99 + b"\n"
    path = write(tmp_path / "a.txt", line * (3 * line_reading.READ_CHUNK_BYTES // len(line)))
    stats = ReadStats()
    docs = iter_documents([str(path)], ReadOptions(), stats)
    for _ in range(2 * line_reading.READ_CHUNK_BYTES // len(line)):
        next(docs)
    assert 0 < stats.bytes_read < path.stat().st_size
    assert sum(1 for _ in docs) and stats.bytes_read == path.stat().st_size


def test_giant_single_line_streams_in_bounded_memory(tmp_path):
    """A 50 MB line (many multi-byte characters, one bad byte) never sits in memory whole."""
    unit = ("lorem ipsum d\u00f6lor \u65e5\u672c " * 4000).encode()
    path = tmp_path / "giant.txt"
    with open(path, "wb") as f:
        f.write(b"small first\n")
        for i in range(50 * 1024 * 1024 // len(unit)):
            f.write(unit if i != 100 else unit[:-1] + b"\xff")
        f.write(b"\nsmall last\n")
    size = path.stat().st_size
    units = 50 * 1024 * 1024 // len(unit)
    expected = hashlib.sha256()
    for i in range(units):  # the bad byte replaced the unit's final space
        expected.update(unit if i != 100 else unit[:-1] + "\ufffd".encode())
    got = hashlib.sha256()
    stats = ReadStats()
    tracemalloc.start()
    try:
        docs = iter_documents([str(path)], ReadOptions(), stats)
        assert next(docs) == "small first"
        for doc in docs:
            assert len(doc) <= MAX_DOCUMENT_CHARS
            if doc != "small last":
                got.update(doc.encode())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32 * 1024 * 1024, f"peak {peak / 2**20:.0f} MiB"
    assert got.hexdigest() == expected.hexdigest()
    assert stats.documents_split == 1 and stats.documents_invalid_utf8 == 1
    assert stats.bytes_read == size
    assert stats.documents == 2 + -(-len(unit.decode()) * units // MAX_DOCUMENT_CHARS)
