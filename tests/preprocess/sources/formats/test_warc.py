"""WARC and WET: which records become documents, their URLs, and every bad record counted, never fatal."""

from __future__ import annotations

import gzip
import zlib

import brotli
import pytest
import zstandard

from lmshards.preprocess.sources import (
    InputError,
    ReadOptions,
    ReadStats,
    RecordNumbers,
    iter_documents,
)
from lmshards.preprocess.sources.formats import detect_format, warc
from lmshards.preprocess.sources.reader import plan_ranges, read_range
from lmshards.schemas.manifest import InputFileInfo
from tests.helpers.web import html_response, page, warc_record, write_warc

ALPHA = page("Alpha", "The first paragraph of the alpha page is long enough to be main content.")
ALPHA_TEXT = "Alpha\n\nThe first paragraph of the alpha page is long enough to be main content."
BETA = page("Beta", "The beta page says something else, also at some length.")
BETA_TEXT = "Beta\n\nThe beta page says something else, also at some length."
WET_TEXT = "WET text of a page.\nIts second line."
RECORDS = [
    warc_record("warcinfo", b"software: test\r\n"),
    warc_record("request", b"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n", url="http://a.example/"),
    html_response("http://a.example/", ALPHA),
    html_response("http://b.example/logo.png", b"\x89PNG\r\n\x1a\n", content_type="image/png"),
    html_response("http://c.example/", b"<p>Moved</p>", status="301 Moved Permanently"),
    warc_record("metadata", b"fetchTimeMs: 12\r\n", url="http://a.example/"),
    html_response("http://d.example/", BETA, version=b"WARC/1.1"),
    warc_record(
        "conversion", WET_TEXT.encode(), url="http://e.example/", Content_Type="text/plain"
    ),
]


def _read(path, options=None):
    options = options or ReadOptions()
    stats, numbers = ReadStats(), RecordNumbers()
    [r] = plan_ranges([InputFileInfo(str(path), path.stat().st_size)], options=options)
    documents = list(read_range(r, options, stats, numbers))
    return documents, stats, numbers


@pytest.mark.parametrize("name", ["crawl.warc", "crawl.warc.gz", "CC-MAIN-0001.warc.wet.gz"])
def test_html_responses_and_conversions_become_documents_with_their_urls(tmp_path, name):
    path = write_warc(tmp_path / name, RECORDS)
    documents, stats, numbers = _read(path)
    assert detect_format(str(path)) == "warc"
    assert documents == [ALPHA_TEXT, BETA_TEXT, WET_TEXT]
    # warcinfo, request, image, redirect, metadata: read past, counted, not errors.
    assert stats == ReadStats(documents=3, warc_records_other=5, bytes_read=len(b"".join(RECORDS)))
    assert numbers.take_with_urls(3) == (
        [2, 6, 7],
        ["http://a.example/", "http://d.example/", "http://e.example/"],
    )
    assert numbers.records == len(RECORDS)


def test_a_file_truncated_mid_record_keeps_the_records_before_it(tmp_path, caplog):
    whole = b"".join(RECORDS[:3])
    cut = whole + RECORDS[6][: len(RECORDS[6]) - 40]
    path = tmp_path / "cut.warc"
    path.write_bytes(cut)
    with caplog.at_level("WARNING", logger=warc.__name__):
        documents, stats, _ = _read(path)
    assert documents == [ALPHA_TEXT]
    assert (stats.warc_files_truncated, stats.warc_records_other, stats.bytes_read) == (
        1,
        2,
        len(cut),
    )
    assert (
        f"{path}: record at byte {len(cut)} skipped: the file ends inside a record" in caplog.text
    )
    assert "Re-download or re-create the file" in caplog.text


def test_a_gzip_member_cut_short_is_a_truncated_file_not_an_error(tmp_path):
    members = [gzip.compress(record, mtime=0) for record in RECORDS[:3] + RECORDS[6:7]]
    path = tmp_path / "cut.warc.gz"
    path.write_bytes(b"".join(members)[:-30])
    documents, stats, numbers = _read(path)
    assert documents == [ALPHA_TEXT]
    assert stats.warc_files_truncated == 1 and stats.documents == 1
    assert numbers.records == 4  # the cut record counts: curation numbers every record


def test_malformed_records_are_counted_and_reading_goes_on(tmp_path, caplog):
    no_length = b"WARC/1.0\r\nWARC-Type: response\r\nWARC-Target-URI: http://x.example/\r\n\r\n<p>lost</p>\r\n\r\n"
    garbage = b"this is not a record\r\nnor this\r\n"
    bad_http = warc_record("response", b"NOT HTTP\r\n\r\n<p>x</p>", url="http://y.example/")
    path = write_warc(tmp_path / "bad.warc", [RECORDS[2], no_length, garbage, bad_http, RECORDS[6]])
    with caplog.at_level("WARNING", logger=warc.__name__):
        documents, stats, _ = _read(path)
    assert documents == [ALPHA_TEXT, BETA_TEXT]
    # The record without a length, the stray lines (its payload among them), the response without an HTTP head.
    assert stats.warc_records_malformed == 3 and stats.documents == 2
    assert (
        "(http://x.example/) skipped: malformed WARC record: its header has no valid Content-Length"
        in caplog.text
    )


def test_a_page_over_the_limit_is_read_past_and_counted(tmp_path, caplog):
    big = page("Big", "word " * 2000)
    path = write_warc(
        tmp_path / "big.warc.gz", [html_response("http://big.example/", big), RECORDS[2]]
    )
    with caplog.at_level("WARNING", logger=warc.__name__):
        documents, stats, _ = _read(path, ReadOptions(max_html_bytes=4096))
    assert documents == [ALPHA_TEXT]
    assert stats.documents_html_too_large == 1
    assert (
        f"(http://big.example/) skipped: {len(big):,} bytes of HTML, over --max_html_bytes 4,096"
        in caplog.text
    )


def test_pages_are_decoded_by_their_charset_and_undecodable_ones_counted(tmp_path):
    latin = "<p>Caf\u00e9 cr\u00e8me, na\u00efve \u00fcber alles, a page in Latin-1.</p>".encode(
        "latin-1"
    )
    records = [
        html_response("http://l.example/", latin, content_type="text/html; charset=ISO-8859-1"),
        html_response(
            "http://k.example/", b"\x81\x8d" * 100, content_type="text/html; charset=x-klingon"
        ),
    ]
    documents, stats, numbers = _read(write_warc(tmp_path / "charsets.warc", records))
    assert documents == ["Caf\u00e9 cr\u00e8me, na\u00efve \u00fcber alles, a page in Latin-1."]
    assert stats.documents_undecodable == 1 and stats.documents_invalid_utf8 == 0
    assert numbers.take_with_urls(1) == ([0], ["http://l.example/"])


def test_chunked_and_gzip_bodies_are_undone():
    body = page("Zipped", "A page sent gzip-compressed in chunks, as a crawler stored it.")
    zipped = gzip.compress(body, mtime=0)
    chunked = b"".join(
        b"%x\r\n%s\r\n" % (len(zipped[i : i + 50]), zipped[i : i + 50])
        for i in range(0, len(zipped), 50)
    )
    head = warc.HttpHead(
        200,
        {"transfer-encoding": "chunked", "content-encoding": "gzip", "content-type": "text/html"},
    )
    assert warc.decode_body(chunked + b"0\r\n\r\n", head, 1 << 20) == body
    deflated = warc.HttpHead(200, {"content-encoding": "deflate"})
    assert warc.decode_body(zlib.compress(body), deflated, 1 << 20) == body
    for coding, data in (("br", brotli.compress(body)), ("zstd", zstandard.compress(body))):
        assert (
            warc.decode_body(data, warc.HttpHead(200, {"content-encoding": coding}), 1 << 20)
            == body
        )
    # A zstd frame streamed by a server does not say its size.
    streamed = zstandard.ZstdCompressor(write_content_size=False).compress(body)
    assert (
        warc.decode_body(streamed, warc.HttpHead(200, {"content-encoding": "zstd"}), 1 << 20)
        == body
    )


@pytest.mark.parametrize("coding", ["gzip", "deflate", "br", "zstd"])
def test_a_small_body_that_expands_past_the_limit_gives_one_byte_over_it(coding):
    """A decompression bomb stops at max_bytes + 1: the caller counts the page as too large."""
    bomb = {
        "gzip": lambda b: gzip.compress(b, mtime=0),
        "deflate": zlib.compress,
        "br": brotli.compress,
        "zstd": zstandard.compress,
    }[coding](bytes(50 << 20))
    assert len(bomb) < 1 << 20
    decoded = warc.decode_body(bomb, warc.HttpHead(200, {"content-encoding": coding}), 1 << 20)
    assert decoded == bytes((1 << 20) + 1)


@pytest.mark.parametrize(
    ("coding", "data", "problem"),
    [
        (
            "compress",
            b"...",
            "Content-Encoding 'compress' is not supported (only gzip, x-gzip, deflate, br, zstd)",
        ),
        ("br", b"not brotli at all", "Content-Encoding br data is corrupt"),
        ("zstd", b"not zstd at all", "Content-Encoding zstd data is corrupt"),
        ("gzip", b"not gzip at all", "Content-Encoding gzip data is corrupt"),
    ],
)
def test_a_coding_that_cannot_be_undone_is_a_counted_problem(coding, data, problem):
    got = warc.decode_body(data, warc.HttpHead(200, {"content-encoding": coding}), 1 << 20)
    assert isinstance(got, warc.PageProblem) and got.counter == "documents_undecodable"
    assert got.problem.startswith(problem)


def test_header_parsing():
    assert warc.parse_fields([b"WARC-Type: response\r\n", b"X-Long: a\r\n", b"  b\r\n"]) == {
        "warc-type": "response",
        "x-long": "a b",
    }
    assert warc.parse_fields([b"no colon here\r\n"]) is None
    head = warc.parse_http_head(
        [b"HTTP/1.1 200 OK\r\n", b"Content-Type: text/html; charset=utf-8\r\n"]
    )
    assert head is not None and head.is_html and head.content_type == "text/html; charset=utf-8"
    assert not warc.HttpHead(404, {"content-type": "text/html"}).is_html
    assert warc.parse_http_head([b"GET / HTTP/1.1\r\n"]) is None
    assert warc.dechunk(b"4\r\nWiki\r\n5\r\npedia\r\n0\r\n\r\n") == b"Wikipedia"
    assert warc.dechunk(b"zz\r\nx") is None


def test_files_that_are_not_warc_by_content_are_refused_by_name(tmp_path):
    not_warc = tmp_path / "fake.warc.gz"
    not_warc.write_bytes(gzip.compress(b"<html>just a page</html>"))
    with pytest.raises(InputError, match="does not start with a WARC/1.0 or WARC/1.1 record"):
        list(iter_documents([str(not_warc)], ReadOptions()))
    hidden = write_warc(tmp_path / "crawl.txt", RECORDS[:3])
    with pytest.raises(InputError, match=r"holds WARC records; rename it to end in \.warc"):
        list(iter_documents([str(hidden)], ReadOptions()))
    wat = write_warc(tmp_path / "CC-MAIN-0001.warc.wat.gz", RECORDS[5:6])
    with pytest.raises(InputError, match="a WAT file holds metadata records, not page text"):
        list(iter_documents([str(wat)], ReadOptions()))
