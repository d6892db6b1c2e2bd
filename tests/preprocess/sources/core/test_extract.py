"""Web pages to text: the charset order (BOM, HTTP, meta, UTF-8, detection), extraction settings, limits."""

from __future__ import annotations

import codecs

import pytest

from lmshards.preprocess.sources import InputError, ReadOptions
from lmshards.preprocess.sources.core.extract import (
    DecodedPage,
    PageProblem,
    decode_page,
    extract_text,
    header_charset,
    meta_charset,
    page_text,
    web_codec,
)
from tests.helpers.web import page

CAFE = "caf\u00e9 na\u00efve \u00fcber"


def test_charsets_are_read_from_the_http_header_and_the_meta_tag():
    assert header_charset("text/html; charset=ISO-8859-1") == "ISO-8859-1"
    assert header_charset('text/html; charset="utf-8"') == "utf-8"
    assert header_charset("text/html") is None and header_charset(None) is None
    assert meta_charset(b'<head><meta charset="windows-1251">') == "windows-1251"
    http_equiv = b'<meta http-equiv="Content-Type" content="text/html; charset=Shift_JIS">'
    assert meta_charset(http_equiv) == "Shift_JIS"
    # Only the first 1024 bytes count (HTML requires the declaration there).
    assert meta_charset(b" " * 1024 + b'<meta charset="koi8-r">') is None


def test_labels_map_as_browsers_map_them():
    assert web_codec("ISO-8859-1") == "cp1252"  # what latin-1 pages are in practice
    assert web_codec("us-ascii") == "cp1252"
    assert web_codec("UTF8") == "utf-8"
    assert web_codec("x-klingon") is None and web_codec(None) is None


def test_declared_charsets_win_in_order_bom_header_meta():
    latin = f'<meta charset="iso-8859-1"><p>{CAFE}</p>'.encode("cp1252")
    assert decode_page(latin) == DecodedPage(latin.decode("cp1252"))
    # The HTTP header comes before the meta tag.
    koi8 = "<meta charset='utf-8'><p>\u043f\u0440\u0438\u0432\u0435\u0442</p>".encode("koi8-r")
    assert decode_page(koi8, "text/html; charset=koi8-r").html == koi8.decode("koi8-r")
    # A byte-order mark comes before both.
    utf16 = codecs.BOM_UTF16_LE + f"<p>{CAFE}</p>".encode("utf-16-le")
    assert decode_page(utf16, "text/html; charset=iso-8859-1") == DecodedPage(f"<p>{CAFE}</p>")


def test_bytes_invalid_in_the_declared_charset_are_replaced_and_flagged():
    assert decode_page(b"<p>ok \xff</p>", "text/html; charset=utf-8") == DecodedPage(
        "<p>ok \ufffd</p>", invalid=True
    )


def test_an_undeclared_or_unknown_charset_falls_back_to_utf8_then_detection():
    assert decode_page(f"<p>{CAFE}</p>".encode(), "text/html; charset=x-klingon") == DecodedPage(
        f"<p>{CAFE}</p>"
    )
    sjis = "<p>\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002</p>".encode(
        "shift_jis"
    )
    assert decode_page(sjis) == DecodedPage(sjis.decode("shift_jis"))


def test_bytes_that_fit_no_charset_are_a_problem_naming_the_unknown_label():
    problem = decode_page(b"\x81\x8d" * 100, "text/html; charset=x-klingon")
    assert problem == PageProblem(
        "documents_undecodable",
        "its bytes are not UTF-8 and no encoding was detected; its declared charset 'x-klingon' is unknown",
    )


NEWS = page("Title", "The first paragraph of the article body is long enough.", "Second one.")


def test_main_text_drops_navigation_and_footer_and_all_keeps_them():
    html = NEWS.decode()
    main = extract_text(html, ReadOptions())
    assert main == "Title\n\nThe first paragraph of the article body is long enough.\n\nSecond one."
    everything = extract_text(html, ReadOptions(html_extract="all"))
    assert everything.startswith("Home | About | Contact") and everything.endswith("Copyright 2024")
    assert main in everything


def test_comment_sections_are_kept_unless_dropped():
    html = (
        "<html><body><article><p>The article text itself, long enough to be main content.</p></article>"
        '<div class="comments"><p>A reader comment that says something.</p></div></body></html>'
    )
    assert "reader comment" in extract_text(html, ReadOptions())
    assert "reader comment" not in extract_text(html, ReadOptions(html_drop_comments=True))


def test_pages_over_the_limit_are_a_problem_before_any_parsing():
    options = ReadOptions(max_html_bytes=1024)
    assert page_text(b"<p>" + b"x" * 1021, options) == ("x" * 1021, False)
    assert page_text(b"<p>" + b"x" * 1022, options) == PageProblem(
        "documents_html_too_large",
        "1,025 bytes of HTML, over --max_html_bytes 1,024 (raise it to keep such pages)",
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"html_field": ""}, "--html_field is empty"),
        ({"url_field": ""}, "--url_field is empty"),
        ({"html_field": "x", "url_field": "x"}, "both 'x'"),
        (
            {"html_extract": "boilerplate"},
            "--html_extract 'boilerplate' is not supported; use one of main, all",
        ),
        (
            {"max_html_bytes": 1023},
            "--max_html_bytes 1023 is out of range; give 1,024 to 1,073,741,824",
        ),
    ],
)
def test_bad_web_options_are_refused_naming_the_value(options, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace("|", r"\|")):
        ReadOptions(**options)
