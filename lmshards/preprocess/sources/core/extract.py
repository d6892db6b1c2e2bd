"""Web pages to text: a page's bytes decoded by its charset, then its main text extracted.

Extraction is resiliparse's `extract_plain_text` (docs/formats.md says why resiliparse over trafilatura,
docs/benchmarks.md the measurements), with the ReadOptions.html_* settings. Decoding follows the web's
order (WHATWG's "encoding sniffing"): a byte-order mark, the HTTP Content-Type charset, a
`<meta charset>` in the first META_SNIFF_BYTES, and only then a guess: UTF-8 if the bytes are UTF-8,
else uchardet's detection. Labels are mapped as browsers map them (`iso-8859-1` reads as cp1252).
A page decoded from its declared charset keeps bytes invalid in it as U+FFFD (flagged, as for UTF-8
text); a page with no usable declaration whose bytes fit neither UTF-8 nor the detected encoding is
undecodable (`PageProblem`), counted and skipped by the caller.
"""

from __future__ import annotations

import codecs
import dataclasses
import re

from lmshards.preprocess.sources.core.options import HTML_EXTRACT_MAIN, ReadOptions

# HTML5 requires a <meta charset> to lie wholly within a page's first 1024 bytes (HTML Living
# Standard, "Specifying the document's character encoding").
META_SNIFF_BYTES = 1024
_META_CHARSET = re.compile(rb"<meta\b[^>]*?charset\s*=\s*[\"']?\s*([-\w.:]+)", re.IGNORECASE)
_HEADER_CHARSET = re.compile(r"charset\s*=\s*[\"']?\s*([-\w.:]+)", re.IGNORECASE)
_BOMS = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


@dataclasses.dataclass(frozen=True)
class PageProblem:
    """Why a page gave no text: the ReadStats counter that counts it and what to log."""

    counter: str
    problem: str


@dataclasses.dataclass(frozen=True)
class DecodedPage:
    """A page's text, and whether bytes invalid in its charset were replaced by U+FFFD."""

    html: str
    invalid: bool = False


def header_charset(content_type: str | None) -> str | None:
    """The charset parameter of an HTTP Content-Type value (`text/html; charset=UTF-8` -> "UTF-8")."""
    match = _HEADER_CHARSET.search(content_type or "")
    return match.group(1) if match else None


def meta_charset(raw: bytes) -> str | None:
    """The charset a page's `<meta charset=...>` or `<meta http-equiv content="...; charset=...">`
    declares within its first META_SNIFF_BYTES bytes."""
    match = _META_CHARSET.search(raw[:META_SNIFF_BYTES])
    return match.group(1).decode("ascii", errors="replace") if match else None


def web_codec(label: str | None) -> str | None:
    """The Python codec a browser decodes the charset `label` with (WHATWG's label table, so that
    `latin1` and `us-ascii` read as cp1252, which they are in practice), or None for an unknown label."""
    if not label:
        return None
    from resiliparse.parse.encoding import map_encoding_to_html5

    codec = map_encoding_to_html5(label, fallback_utf8=False)
    return codec if codec and _python_knows(codec) else None


def decode_page(raw: bytes, content_type: str | None = None) -> DecodedPage | PageProblem:
    """A page's HTML from its bytes and HTTP Content-Type (None for a file): see the module doc."""
    for bom, codec in _BOMS:
        if raw.startswith(bom):
            return _decode_declared(raw[len(bom) :], codec)
    labels = [header_charset(content_type), meta_charset(raw)]
    for label in labels:
        declared = web_codec(label)
        if declared is not None:
            return _decode_declared(raw, declared)
    try:
        return DecodedPage(raw.decode("utf-8"))
    except UnicodeDecodeError:
        pass
    from resiliparse.parse.encoding import detect_encoding

    detected = detect_encoding(raw) or "utf-8"  # None only without WHATWG's mapping, which is on
    try:
        return DecodedPage(raw.decode(detected))
    except (UnicodeDecodeError, LookupError):
        # A declared label reaching here is one no codec decodes: name it.
        declared = " and ".join(repr(label) for label in labels if label)
        guess = (
            "and no encoding was detected"
            if web_codec(detected) == "utf-8"
            else f"nor {detected} (detected)"
        )
        return PageProblem(
            "documents_undecodable",
            f"its bytes are not UTF-8 {guess}; "
            + (
                f"its declared charset {declared} is unknown" if declared else "no charset declared"
            ),
        )


def extract_text(html: str, options: ReadOptions) -> str | PageProblem:
    """The text of a page's HTML as options.html_extract / html_drop_comments say (resiliparse's
    extract_plain_text: block structure kept as line breaks, list bullets, no link targets)."""
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.html import HTMLParserException

    try:
        return extract_plain_text(
            html,
            main_content=options.html_extract == HTML_EXTRACT_MAIN,
            comments=not options.html_drop_comments,
            alt_texts=False,  # "logo", "icon": a page's alt texts are rarely prose
        )
    except (HTMLParserException, ValueError) as e:
        return PageProblem("documents_extract_failed", f"the HTML could not be parsed ({e})")


def page_text(
    raw: bytes, options: ReadOptions, content_type: str | None = None
) -> tuple[str, bool] | PageProblem:
    """(the page's extracted text, whether bytes invalid in its charset were replaced), or why it gave
    none: over options.max_html_bytes, undecodable, or the extractor failed."""
    if len(raw) > options.max_html_bytes:
        return too_large(len(raw), options)
    page = decode_page(raw, content_type)
    if isinstance(page, PageProblem):
        return page
    text = extract_text(page.html, options)
    return text if isinstance(text, PageProblem) else (text, page.invalid)


def too_large(size: int, options: ReadOptions) -> PageProblem:
    """The problem of a page of `size` bytes over options.max_html_bytes."""
    return PageProblem(
        "documents_html_too_large",
        f"{size:,} bytes of HTML, over --max_html_bytes {options.max_html_bytes:,} "
        "(raise it to keep such pages)",
    )


def _decode_declared(raw: bytes, codec: str) -> DecodedPage:
    try:
        return DecodedPage(raw.decode(codec))
    except UnicodeDecodeError:
        return DecodedPage(raw.decode(codec, errors="replace"), invalid=True)


def _python_knows(codec: str) -> bool:
    try:
        codecs.lookup(codec)
    except LookupError:
        return False
    return True
