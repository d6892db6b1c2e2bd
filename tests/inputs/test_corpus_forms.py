"""The corpus forms in use, read or refused by their content: zstd, xz, NDJSON, CSV, legacy encodings,
hard links, marker-line separators and lines longer than a read range."""

from __future__ import annotations

import gzip
import io
import json
import lzma
import os
import struct
import tarfile

import pytest
import zstandard

from lmshards.plumbing import fs
from lmshards.preprocess.sources import (
    InputError,
    ReadOptions,
    ReadRange,
    ReadStats,
    discover_inputs,
    expand_inputs,
    iter_documents,
    plan_ranges,
)
from lmshards.preprocess.sources.formats import jsonl
from lmshards.preprocess.stages.read import read_batches
from tests.helpers.text_corpus import expected_documents, random_corpus, read_in_ranges, write

TEXT = random_corpus(11, lines=400, crlf=False, bom=False)
DOCS = expected_documents(TEXT, "line")
RECORDS = [{"text": f"record {i} caf\u00e9", "id": i} for i in range(300)]
JSONL = "".join(json.dumps(r) + "\n" for r in RECORDS).encode()


# A zstd skippable frame (pzstd writes one before each frame): magic 0x184D2A50, size, payload.
SKIPPABLE = struct.pack("<II", 0x184D2A50, 4) + b"size"


def _zstd_frames(data: bytes, frames: int) -> bytes:
    """data as `frames` zstd frames one after another (what concatenated .zst files hold)."""
    cut = [len(data) * i // frames for i in range(frames + 1)]
    return b"".join(zstandard.ZstdCompressor().compress(data[a:b]) for a, b in zip(cut, cut[1:]))


def _zstd_streamed(data: bytes) -> bytes:
    """data as `zstd` writes it from a pipe: frames without a content size, flushed in blocks."""
    out = io.BytesIO()
    with zstandard.ZstdCompressor().stream_writer(out, closefd=False) as writer:
        for i in range(0, len(data), 1000):
            writer.write(data[i : i + 1000])
            writer.flush(zstandard.FLUSH_BLOCK)
    return out.getvalue()


def _tar_of(data: bytes) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        info = tarfile.TarInfo("a.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _docs(path, options=None, stats=None):
    return list(iter_documents([str(path)], options or ReadOptions(), stats))


@pytest.mark.parametrize(
    "name, make",
    [
        ("one.txt.zst", lambda d: _zstd_frames(d, 1)),
        ("frames.txt.zst", lambda d: _zstd_frames(d, 5)),
        ("streamed.txt.zst", _zstd_streamed),
        (
            "skippable.txt.zst",
            lambda d: SKIPPABLE + _zstd_frames(d, 2) + SKIPPABLE,
        ),  # as pzstd writes
        ("plain.txt.xz", lzma.compress),
        ("streams.txt.xz", lambda d: lzma.compress(d[:500]) + lzma.compress(d[500:])),
    ],
)
def test_zstd_and_xz_text_is_decompressed(tmp_path, name, make):
    path = write(tmp_path / name, make(TEXT))
    stats = ReadStats()
    assert plan_ranges(expand_inputs([str(path)]), options=ReadOptions(), range_bytes=64) == [
        ReadRange(str(path), 0, -1)
    ]
    assert _docs(path, stats=stats) == DOCS
    assert stats.bytes_read == len(TEXT)


@pytest.mark.parametrize(
    "name, make",
    [
        ("a.jsonl.zst", _zstd_streamed),
        ("a.jsonl.xz", lzma.compress),
        ("a.ndjson", lambda d: d),
        ("a.ndjson.gz", gzip.compress),
    ],
)
def test_compressed_json_lines_and_ndjson_are_json_lines(tmp_path, name, make):
    path = write(tmp_path / name, make(JSONL))
    assert _docs(path) == [r["text"] for r in RECORDS]


@pytest.mark.parametrize(
    "name, data, said",
    [
        (
            "zstd.txt",
            _zstd_frames(TEXT, 1),
            r"holds zstd-compressed data.*rename it to zstd.txt.zst",
        ),
        ("xz.jsonl", lzma.compress(JSONL), r"holds xz-compressed data.*rename it to xz.jsonl.xz"),
        ("gzip.txt", gzip.compress(TEXT), r"holds gzip-compressed data.*gzip.txt.gz"),
        (
            "wrong.txt.zst",
            gzip.compress(TEXT),
            r"is gzip data \(its name ends in .zst\).*end in .gz",
        ),
        ("fake.txt.xz", TEXT, r"is not xz data.*re-create it with xz"),
        ("table.csv", b"id,text\n1,hello\n", r"is CSV.*Convert it to JSON Lines"),
        ("table.tsv.zst", _zstd_frames(b"id\ttext\n", 1), r"is TSV"),
        ("data.txt", b"PAR1" + b"\x00" * 64, r"holds Parquet data.*end in .parquet"),
        ("corpus.zip", b"PK\x03\x04" + b"\x00" * 64, r"is a zip archive.*extract its files"),
        ("corpus.tar.gz", gzip.compress(_tar_of(TEXT)), r"is a tar archive.*extract its files"),
    ],
)
def test_content_that_its_name_does_not_say_is_refused_at_planning(tmp_path, name, data, said):
    path = write(tmp_path / name, data)
    with pytest.raises(InputError, match=said) as e:
        plan_ranges(expand_inputs([str(path)]), options=ReadOptions())
    assert str(path) in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(InputError, match=said):
        iter_documents([str(tmp_path)], ReadOptions())  # at the call, before any document


def test_a_truncated_zstd_file_is_an_input_error(tmp_path):
    whole = _zstd_frames(random_corpus(3, lines=5000, crlf=False, bom=False), 3)
    for cut in (len(whole) // 2, len(whole) - 1):
        path = write(tmp_path / f"cut{cut}.txt.zst", whole[:cut])
        with pytest.raises(
            InputError, match=r"corrupt or truncated zstd data.*re-create or remove"
        ):
            _docs(path)


LATIN1 = "Caf\u00e9 cr\u00e8me, na\u00efve fa\u00e7ade \u00e0 la r\u00e9sistance.\n" * 40


def test_text_that_is_mostly_not_utf8_is_refused_and_read_with_its_encoding(tmp_path):
    path = write(tmp_path / "legacy.txt", LATIN1.encode("latin-1"))
    with pytest.raises(InputError, match=r"legacy.txt.*is not UTF-8 text.*--encoding latin-1"):
        iter_documents([str(path)], ReadOptions())
    options = ReadOptions(encoding="latin-1")
    stats = ReadStats()
    assert _docs(path, options, stats) == LATIN1.splitlines()
    assert stats.documents_invalid_utf8 == 0 and stats.bytes_read == len(LATIN1)
    # The same in JSON Lines, compressed: decoded after decompression, in any range size.
    jpath = write(
        tmp_path / "legacy.jsonl.zst",
        _zstd_streamed(json.dumps({"text": LATIN1}, ensure_ascii=False).encode("latin-1") + b"\n"),
    )
    with pytest.raises(InputError, match="is not UTF-8 text"):
        iter_documents([str(jpath)], ReadOptions())
    assert _docs(jpath, options) == [LATIN1]
    assert read_in_ranges(path, options, range_bytes=50)[0] == LATIN1.splitlines()


def test_utf8_with_a_few_bad_bytes_is_read_and_counted_as_before(tmp_path):
    text = ("d\u00e9j\u00e0 vu \u65e5\u672c\n" * 50).encode() + b"bad \xff\xfe\n" * 10
    path = write(tmp_path / "mostly.txt", text)
    stats = ReadStats()
    assert len(_docs(path, stats=stats)) == 60
    assert stats.documents_invalid_utf8 == 10


def test_an_unknown_encoding_is_refused():
    with pytest.raises(InputError, match="--encoding 'latin-9000' is not an encoding"):
        ReadOptions(encoding="latin-9000")
    assert ReadOptions(encoding="UTF8").is_utf8 and ReadOptions(encoding="utf-8-sig").is_utf8


def test_a_hard_link_to_a_file_already_found_is_read_once_and_counted(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    write(corpus / "a.txt", TEXT)
    os.link(corpus / "a.txt", corpus / "b.txt")
    discovery = discover_inputs([str(corpus)])
    assert [f.path for f in discovery.files] == [str(corpus / "a.txt")]
    assert discovery.counts()["files_duplicate"] == 1 and discovery.found == 2
    assert _docs(corpus) == DOCS


FORTUNES = (
    "A fool and his money\nare soon parted.\n%\n"
    "%\n"  # two markers in a row: no document between them
    "Two lines,\n\nand a blank one inside.\n%\r\n"
    "  %  \n"  # surrounding spaces are ignored
    "The last one, no final marker.\n"
)


def test_marker_lines_separate_documents_in_every_range_size(tmp_path):
    path = write(tmp_path / "fortunes", FORTUNES.encode())
    expected = [
        "A fool and his money\nare soon parted.",
        "Two lines,\n\nand a blank one inside.",
        "The last one, no final marker.",
    ]
    options = ReadOptions(doc_marker="%")
    for range_bytes in (1, 2, 3, 7, 16, 1000):
        assert read_in_ranges(path, options, range_bytes)[0] == expected, range_bytes
    regex = ReadOptions(doc_marker_regex=r"\s*%\s*")
    assert read_in_ranges(path, regex, 5)[0] == expected
    # Without the option the same file is one document per line, as before.
    assert _docs(path) == [line for line in FORTUNES.splitlines() if line.strip()]


def test_marker_options_are_checked():
    with pytest.raises(InputError, match="not both"):
        ReadOptions(doc_marker="%", doc_marker_regex="%")
    with pytest.raises(InputError, match="matches an empty line"):
        ReadOptions(doc_marker_regex=".*")
    with pytest.raises(InputError, match="not a regular expression"):
        ReadOptions(doc_marker_regex="(")
    with pytest.raises(InputError, match="replace --doc_separator blank_line"):
        ReadOptions(doc_marker="%", doc_separator="blank_line")


def test_a_json_line_longer_than_the_limit_is_skipped_and_counted(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(jsonl, "MAX_JSON_LINE_BYTES", 3 * 1024 * 1024)
    huge = b'{"text": "' + b"x" * (5 * 1024 * 1024) + b'"}\n'
    path = write(tmp_path / "huge.jsonl", b'{"text": "before"}\n' + huge + b'{"text": "after"}\n')
    stats = ReadStats()
    assert _docs(path, stats=stats) == ["before", "after"]
    assert stats.documents_json_too_long == 1 and stats.documents == 2
    assert stats.bytes_read == path.stat().st_size
    assert "huge.jsonl: line at byte 19 skipped: longer than 3,145,728 bytes" in caplog.text


def test_batches_of_one_giant_line_are_bounded_in_characters(tmp_path):
    """A line with no newline far longer than a read range is read in pieces, and the pieces travel
    in batches bounded in characters, so that the tokenizer never holds the whole line's tokens."""
    path = write(tmp_path / "giant.txt", b"word " * (1_200_000))  # 6 MB, no newline
    options = ReadOptions()
    (r,) = plan_ranges(expand_inputs([str(path)]), options=options, range_bytes=1024 * 1024)[:1]
    batches = list(
        read_batches(r, options, batch_size=512, stats=ReadStats(), batch_chars=2_000_000)
    )
    assert "".join(d for b in batches for d in b) == "word " * 1_200_000
    assert len(batches) > 1
    assert all(sum(map(len, b)) <= 2_000_000 + options.max_document_chars for b in batches)


@pytest.mark.gcs
def test_zstd_json_lines_on_gcs(gcs_emulator):
    path = f"{gcs_emulator}/corpus/a.jsonl.zst"
    fs.write_bytes_atomic(path, _zstd_streamed(JSONL))
    fs.write_bytes_atomic(f"{gcs_emulator}/corpus/b.txt", _zstd_frames(TEXT, 1))
    with pytest.raises(InputError, match="b.txt.*holds zstd-compressed data"):
        iter_documents([f"{gcs_emulator}/corpus/*"], ReadOptions())
    assert list(iter_documents([path], ReadOptions())) == [r["text"] for r in RECORDS]
