"""The corpus reader: input expansion, formats, bad data, byte ranges and memory on giant lines."""

from __future__ import annotations

import bz2
import codecs
import gzip
import hashlib
import json
import os
import random
import tracemalloc
from pathlib import Path

import pytest

from preprocess import inputs
from preprocess.inputs import (
    InputError,
    ReadOptions,
    ReadRange,
    ReadStats,
    detect_format,
    expand_inputs,
    iter_documents,
    plan_ranges,
    read_range,
)

BOM = codecs.BOM_UTF8
WS = b" \t\r\n\f\v\x00"  # bytes of a blank line


def expected_documents(data: bytes, separator: str) -> list[str]:
    """What the reader must yield for a whole text file: a direct, unstreamed statement of the rules."""
    data = data.removeprefix(BOM)
    lines = [line.removesuffix(b"\r") for line in data.split(b"\n")]
    if data.endswith(b"\n"):
        lines.pop()
    if separator == "line":
        raw_docs = lines
    else:
        raw_docs, current = [], []
        for line in lines + [b""]:
            if line.strip(WS):
                current.append(line)
            elif current:
                raw_docs.append(b"\n".join(current))
                current = []
    texts = [d.decode("utf-8", errors="replace").replace("\x00", "") for d in raw_docs]
    return [t for t in texts if t and not t.isspace()]


PIECES = [b"alpha", b"beta gamma", b"", b"   ", b"\t", "h\u00e9llo w\u00f6rld".encode(), "\u65e5\u672c\u8a9e".encode(),
          "\U0001f642 ok".encode(), b"bad \xff\xfe byte", b"cut \xe2\x82", b"nul\x00here", b"\x00", b"mid\rline",
          b"\xef\xbf\xbd literal"]


def random_corpus(seed: int, *, lines: int, crlf: bool, bom: bool, final_newline: bool = True) -> bytes:
    rng = random.Random(seed)
    out = [b" ".join(rng.choice(PIECES) for _ in range(rng.randint(1, 4))) for _ in range(lines)]
    eol = b"\r\n" if crlf else b"\n"
    data = eol.join(out) + (eol if final_newline else b"")
    return (BOM if bom else b"") + data


def read_in_ranges(path: Path, options: ReadOptions, range_bytes: int) -> tuple[list[str], ReadStats]:
    stats = ReadStats()
    files = expand_inputs([str(path)])
    docs = [d for r in plan_ranges(files, options=options, range_bytes=range_bytes) for d in read_range(r, options, stats)]
    return docs, stats


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# --- formats and options ---------------------------------------------------------------------


@pytest.mark.parametrize("name, fmt", [
    ("a.txt", "text"), ("a.txt.gz", "text"), ("a", "text"), ("dir.v1/a", "text"), ("a.JSONL", "jsonl"),
    ("a.json.bz2", "jsonl"), ("gs://b/x/a.jsonl.gz", "jsonl"), ("a.parquet", "parquet"), ("a.gz", "text"),
    (".jsonl", "text"),
])
def test_detect_format(name, fmt):
    assert detect_format(name) == fmt


@pytest.mark.parametrize("kwargs, words", [
    ({"doc_separator": "paragraph"}, ["'paragraph'", "line, blank_line"]),
    ({"text_field": ""}, ["--text_field"]),
    ({"text_column": ""}, ["--text_column"]),
    ({"max_document_chars": 0}, ["max_document_chars"]),
])
def test_read_options_reject_bad_values(kwargs, words):
    with pytest.raises(InputError) as e:
        ReadOptions(**kwargs)
    assert all(w in str(e.value) for w in words)


# --- expanding inputs -------------------------------------------------------------------------


def test_expand_inputs_sorts_dedups_and_sizes(tmp_path):
    for name, data in [("b.txt", b"bb"), ("a.txt", b"a"), ("c.jsonl", b"{}\n")]:
        write(tmp_path / name, data)
    files = expand_inputs([str(tmp_path / "*.txt"), str(tmp_path / "a.txt"), str(tmp_path / "c.jsonl")])
    assert [(Path(f.path).name, f.bytes) for f in files] == [("a.txt", 1), ("b.txt", 2), ("c.jsonl", 3)]
    assert all(os.path.isabs(f.path) for f in files)


def test_expand_inputs_directory_is_its_files_without_hidden_ones(tmp_path):
    for rel in ["part-0.txt", "sub/part-1.txt", "_SUCCESS", ".part-0.txt.crc", "_tmp/x.txt", ".git/config"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        write(tmp_path / rel, b"x\n")
    files = expand_inputs([str(tmp_path)])
    assert [os.path.relpath(f.path, tmp_path) for f in files] == ["part-0.txt", os.path.join("sub", "part-1.txt")]


@pytest.mark.parametrize("pattern, words", [
    ("nothing-*.txt", ["nothing-*.txt", "matches no file", "quote"]),
    ("missing.txt", ["missing.txt", "does not exist"]),
    ("emptydir", ["emptydir", "holds no files"]),
    ("  ", ["empty"]),
])
def test_expand_inputs_errors_name_the_pattern(tmp_path, pattern, words):
    (tmp_path / "emptydir").mkdir()
    (tmp_path / "emptydir" / "_SUCCESS").write_bytes(b"")
    target = pattern if pattern.isspace() else str(tmp_path / pattern)
    with pytest.raises(InputError) as e:
        expand_inputs([target])
    assert all(w in str(e.value) for w in words), str(e.value)


def test_expand_inputs_rejects_no_input_and_unreadable_file(tmp_path):
    with pytest.raises(InputError, match="No input"):
        expand_inputs([])
    os.symlink(tmp_path / "gone.txt", tmp_path / "dangling.txt")
    with pytest.raises(InputError, match="dangling.txt"):
        expand_inputs([str(tmp_path / "*.txt")])


# --- decoding and bad data --------------------------------------------------------------------


def test_line_documents_normalize_and_count_bad_data(tmp_path):
    data = BOM + b"first\r\n\r\n   \nsecond \xff half\nnul\x00led\n\x00\nlast without newline\r"
    path = write(tmp_path / "a.txt", data)
    stats = ReadStats()
    docs = list(iter_documents([str(path)], ReadOptions(), stats))
    assert docs == ["first", "second \ufffd half", "nulled", "last without newline"]
    assert stats == ReadStats(documents=4, documents_empty=3, documents_invalid_utf8=1, documents_nul=2,
                              bytes_read=len(data))


def test_blank_line_documents_join_lines(tmp_path):
    data = b"\n \r\none\r\n  two\r\n\r\n\t\r\n\nthree\nfour \n\x00\n\nfive"
    path = write(tmp_path / "a.txt", data)
    stats = ReadStats()
    docs = list(iter_documents([str(path)], ReadOptions(doc_separator="blank_line"), stats))
    assert docs == ["one\n  two", "three\nfour ", "five"]
    assert stats == ReadStats(documents=3, bytes_read=len(data))


def test_empty_files_are_counted_not_read(tmp_path):
    paths = [write(tmp_path / "a.txt", b""), write(tmp_path / "b.txt", BOM), write(tmp_path / "c.jsonl", b""),
             write(tmp_path / "d.txt.gz", gzip.compress(b"")), write(tmp_path / "e.txt", b"\n")]
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
    monkeypatch.setattr(inputs, "READ_CHUNK_BYTES", chunk_bytes)
    monkeypatch.setattr(inputs, "DECODE_BYTES", 5)
    monkeypatch.setattr(inputs, "_BACKSCAN_BYTES", 3)
    data = random_corpus(7, lines=200, crlf=True, bom=True, final_newline=False)
    path = write(tmp_path / "a.txt", data)
    for separator in ("line", "blank_line"):
        options = ReadOptions(doc_separator=separator, max_document_chars=9)
        pieces = []
        for doc in expected_documents(data, separator):
            cut, rest = inputs._split_long(doc, 9)
            pieces += [p for p in cut + [rest] if p and not p.isspace()]
        whole, whole_stats = read_in_ranges(path, options, len(data))
        assert whole == pieces and all(len(p) <= 9 for p in whole)
        assert whole_stats.documents_split > 10
        for range_bytes in (37, 5):
            docs, stats = read_in_ranges(path, options, range_bytes)
            assert docs == whole and stats == whole_stats


def test_utf8_boundary_keeps_decoding_identical():
    rng = random.Random(0)
    alphabet = [b"a", b"\n", "\u00e9".encode(), "\u20ac".encode(), "\U0001f642".encode(), b"\x80", b"\xbf",
                b"\xc3", b"\xe2\x82", b"\xf0\x9f", b"\xff", b"\xed\xa0\x80"]
    for _ in range(300):
        data = b"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))
        whole = data.decode("utf-8", errors="replace")
        for pos in range(len(data) + 1):
            cut = inputs._utf8_boundary(data, pos)
            assert pos - 3 <= cut <= pos
            assert data[:cut].decode("utf-8", "replace") + data[cut:].decode("utf-8", "replace") == whole


def test_split_long_prefers_whitespace_and_loses_nothing():
    text = "word " * 30 + "x" * 50
    pieces, rest = inputs._split_long(text, 16)
    assert "".join(pieces) + rest == text
    assert all(len(p) <= 16 for p in pieces + [rest])
    assert pieces[0] == "word word word "
    assert "x" * 16 in pieces  # no whitespace: a hard cut at the limit


def test_bytes_read_grows_while_a_range_is_read(tmp_path):
    line = b"x" * 99 + b"\n"
    path = write(tmp_path / "a.txt", line * (3 * inputs.READ_CHUNK_BYTES // len(line)))
    stats = ReadStats()
    docs = iter_documents([str(path)], ReadOptions(), stats)
    for _ in range(2 * inputs.READ_CHUNK_BYTES // len(line)):
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
            assert len(doc) <= inputs.MAX_DOCUMENT_CHARS
            if doc != "small last":
                got.update(doc.encode())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32 * 1024 * 1024, f"peak {peak / 2**20:.0f} MiB"
    assert got.hexdigest() == expected.hexdigest()
    assert stats.documents_split == 1 and stats.documents_invalid_utf8 == 1
    assert stats.bytes_read == size
    assert stats.documents == 2 + -(-len(unit.decode()) * units // inputs.MAX_DOCUMENT_CHARS)


# --- compressed, JSON Lines, Parquet ------------------------------------------------------------


def test_compressed_files_read_like_plain_ones(tmp_path):
    data = random_corpus(3, lines=200, crlf=False, bom=True)
    plain = write(tmp_path / "a.txt", data)
    gz = write(tmp_path / "b.txt.gz", gzip.compress(data))
    bz = write(tmp_path / "c.txt.bz2", bz2.compress(data))
    options = ReadOptions()
    files = expand_inputs([str(plain), str(gz), str(bz)])
    ranges = plan_ranges(files, options=options, range_bytes=64)
    assert [r for r in ranges if r.path != str(plain)] == [ReadRange(str(gz), 0, -1), ReadRange(str(bz), 0, -1)]
    expected = expected_documents(data, "line")
    for path in (gz, bz):
        stats = ReadStats()
        assert list(iter_documents([str(path)], options, stats)) == expected
        assert stats.bytes_read == len(data)


def test_corrupt_compressed_files_are_named(tmp_path):
    fake = write(tmp_path / "fake.txt.gz", b"plain text\n")
    with pytest.raises(InputError, match="fake.txt.gz.*not gzip"):
        plan_ranges(expand_inputs([str(fake)]), options=ReadOptions())
    with pytest.raises(InputError, match="fake.txt.gz.*not gzip"):
        iter_documents([str(fake)], ReadOptions())  # at the call, before any document is asked for
    truncated = write(tmp_path / "cut.txt.gz", gzip.compress(random_corpus(1, lines=2000, crlf=False, bom=False))[:2000])
    with pytest.raises(InputError, match="cut.txt.gz.*corrupt or truncated gzip"):
        list(iter_documents([str(truncated)], ReadOptions()))
    bad_bz2 = write(tmp_path / "bad.txt.bz2", b"BZh9" + b"\x00" * 100)
    with pytest.raises(InputError, match="bad.txt.bz2.*corrupt or truncated bzip2"):
        list(iter_documents([str(bad_bz2)], ReadOptions()))


def test_jsonl_skips_and_counts_bad_lines(tmp_path, caplog, monkeypatch):
    lines = [
        b'{"text": "first", "id": 1}', b"{not json", b'{"body": "no text field"}', b'{"text": 42}', b"[1, 2]",
        b'{"text": null}', b'{"text": "  "}', b"", b'{"text": "nul\\u0000inside", "x": "\\u00e9"}',
        b'{"text": "caf\xe9 raw"}', b'{"text": "last"}',
    ]
    data = BOM + b"\r\n".join(lines)
    path = write(tmp_path / "a.jsonl", data)
    stats = ReadStats()
    with caplog.at_level("WARNING", logger="preprocess.inputs"):
        docs = list(iter_documents([str(path)], ReadOptions(), stats))
    assert docs == ["first", "nulinside", "caf\ufffd raw", "last"]
    assert stats == ReadStats(documents=4, documents_empty=3, documents_invalid_utf8=1, documents_nul=1,
                              documents_invalid_json=4, bytes_read=len(data))
    located = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(located) == inputs.MAX_LOGGED_BAD_LINES and all("a.jsonl: line at byte" in m for m in located)
    for range_bytes in (1, 37):
        assert read_in_ranges(path, ReadOptions(), range_bytes) == (docs, stats)
    monkeypatch.setattr(inputs, "READ_CHUNK_BYTES", 8)  # most lines now come in parts
    for range_bytes in (3, len(data)):
        assert read_in_ranges(path, ReadOptions(), range_bytes) == (docs, stats)


def test_jsonl_custom_field(tmp_path):
    path = write(tmp_path / "a.json", b'{"content": "x"}\n{"text": "y"}\n')
    stats = ReadStats()
    assert list(iter_documents([str(path)], ReadOptions(text_field="content"), stats)) == ["x"]
    assert stats.documents_invalid_json == 1


def write_parquet(path: Path, columns: dict, row_group_size: int) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table(columns), str(path), row_group_size=row_group_size)
    return path


def test_parquet_ranges_are_row_groups(tmp_path):
    texts = [f"document {i} \u00e9" for i in range(7)] + [None, "", "nul\x00"]
    path = write_parquet(tmp_path / "a.parquet", {"body": texts, "n": list(range(10))}, row_group_size=4)
    options = ReadOptions(text_column="body")
    files = expand_inputs([str(path)])
    assert plan_ranges(files, options=options, range_bytes=1) == [
        ReadRange(str(path), 0, 1), ReadRange(str(path), 1, 2), ReadRange(str(path), 2, -1)]
    assert plan_ranges(files, options=options) == [ReadRange(str(path), 0, -1)]
    expected = texts[:7] + ["nul"]
    for range_bytes in (1, 10**9):
        docs, stats = read_in_ranges(path, options, range_bytes)
        assert docs == expected
        assert stats == ReadStats(documents=8, documents_empty=2, documents_nul=1,
                                  bytes_read=sum(len(t.encode()) for t in texts if t))


def test_parquet_binary_column_and_bad_columns(tmp_path):
    path = write_parquet(tmp_path / "b.parquet", {"text": [b"ok", b"bad \xff"], "n": [1, 2]}, row_group_size=10)
    stats = ReadStats()
    assert list(iter_documents([str(path)], ReadOptions(), stats)) == ["ok", "bad \ufffd"]
    assert stats.documents_invalid_utf8 == 1
    files = expand_inputs([str(path)])
    with pytest.raises(InputError, match=r"no column 'body'.*\['text', 'n'\]"):
        plan_ranges(files, options=ReadOptions(text_column="body"))
    with pytest.raises(InputError, match="column 'n' holds int64"):
        plan_ranges(files, options=ReadOptions(text_column="n"))
    broken = write(tmp_path / "c.parquet", b"not parquet at all")
    with pytest.raises(InputError, match="c.parquet.*not a readable Parquet"):
        plan_ranges(expand_inputs([str(broken)]), options=ReadOptions())


# --- gs:// ------------------------------------------------------------------------------------


@pytest.mark.gcs
def test_gcs_glob_and_gzip(gcs_emulator):
    from schemas import fs

    data = b"one\r\ntwo\n\nthree\n"
    fs.write_bytes_atomic(f"{gcs_emulator}/corpus/b.txt.gz", gzip.compress(data))
    fs.write_bytes_atomic(f"{gcs_emulator}/corpus/a.txt", b"zero\n")
    fs.write_bytes_atomic(f"{gcs_emulator}/corpus/c.bin", b"no")
    files = expand_inputs([f"{gcs_emulator}/corpus/*.t*"])
    assert [(f.path, f.bytes) for f in files] == [
        (f"{gcs_emulator}/corpus/a.txt", 5), (f"{gcs_emulator}/corpus/b.txt.gz", len(gzip.compress(data)))]
    stats = ReadStats()
    assert list(iter_documents([f"{gcs_emulator}/corpus/*.t*"], ReadOptions(), stats)) == ["zero", "one", "two", "three"]
    assert stats.bytes_read == 5 + len(data) and stats.documents_empty == 1
    assert [f.path for f in expand_inputs([f"{gcs_emulator}/corpus"])] == [
        f"{gcs_emulator}/corpus/a.txt", f"{gcs_emulator}/corpus/b.txt.gz", f"{gcs_emulator}/corpus/c.bin"]
    with pytest.raises(InputError, match="matches no file"):
        expand_inputs([f"{gcs_emulator}/corpus/*.parquet"])
    with pytest.raises(InputError, match="does not exist"):
        expand_inputs([f"{gcs_emulator}/corpus/missing.txt"])
