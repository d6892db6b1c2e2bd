"""HTML files: one document per page, decoded by the page's own charset, bad pages counted and skipped."""

from __future__ import annotations

import pytest

from lmshards.preprocess.sources import ReadOptions, ReadStats, RecordNumbers, iter_documents
from lmshards.preprocess.sources.formats import detect_format, html
from lmshards.preprocess.sources.reader import plan_ranges, read_range
from lmshards.schemas.manifest import InputFileInfo
from tests.helpers.web import page

LATIN = (
    '<html><head><meta charset="iso-8859-1"></head><body><article><p>Caf\u00e9 cr\u00e8me, na\u00efve '
    "\u00fcber alles: a whole page written in Latin-1, which is no UTF-8 at all.</p></article></body></html>"
).encode("latin-1")


def test_pages_in_their_own_charset_become_one_document_each(tmp_path):
    (tmp_path / "a.html").write_bytes(
        page("Alpha", "The alpha page has a paragraph of main content.")
    )
    (tmp_path / "b.HTM").write_bytes(LATIN)  # not UTF-8: never refused, decoded by its meta charset
    (tmp_path / "empty.html").write_bytes(b"")
    stats = ReadStats()
    documents = list(iter_documents([str(tmp_path)], ReadOptions(), stats))
    assert documents == [
        "Alpha\n\nThe alpha page has a paragraph of main content.",
        "Caf\u00e9 cr\u00e8me, na\u00efve \u00fcber alles: a whole page written in Latin-1, which is no UTF-8 at all.",
    ]
    assert detect_format("b.HTM") == "html"
    assert stats == ReadStats(
        documents=2, files_empty=1, bytes_read=sum(p.stat().st_size for p in tmp_path.iterdir())
    )


@pytest.mark.parametrize(
    ("data", "counter", "problem"),
    [
        (
            b"<p>" + b"x" * 2000,
            "documents_html_too_large",
            "2,003 bytes of HTML, over --max_html_bytes 1,024",
        ),
        (
            b"\x81\x8d" * 100,
            "documents_undecodable",
            "its bytes are not UTF-8 and no encoding was detected",
        ),
    ],
)
def test_bad_pages_are_counted_and_logged_with_the_file(tmp_path, caplog, data, counter, problem):
    path = tmp_path / "bad.html"
    path.write_bytes(data)
    stats, numbers = ReadStats(), RecordNumbers()
    options = ReadOptions(max_html_bytes=1024)
    [r] = plan_ranges([InputFileInfo(str(path), len(data))], options=options)
    with caplog.at_level("WARNING", logger=html.__name__):
        assert list(read_range(r, options, stats, numbers)) == []
    assert getattr(stats, counter) == 1 and stats.bytes_read == len(data) and stats.documents == 0
    assert numbers.records == 1
    assert f"{path} skipped: {problem}" in caplog.text
