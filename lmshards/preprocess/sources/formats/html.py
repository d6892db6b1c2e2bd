"""HTML files (.html, .htm): one document per file, the page's main text (see sources/core/extract.py).

The charset is the page's own (a byte-order mark, then `<meta charset>`, then UTF-8 or detection): an
HTML file is never refused for not being UTF-8. A file over --max_html_bytes is read past, never held
(documents_html_too_large); one whose bytes fit no charset (documents_undecodable) or that the extractor
fails on (documents_extract_failed) is skipped. Each is counted and logged with the file's name.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import BinaryIO

from lmshards.preprocess.sources.core.documents import ReadStats, RecordNumbers, text_document
from lmshards.preprocess.sources.core.extract import PageProblem, page_text, too_large
from lmshards.preprocess.sources.core.options import ReadOptions
from lmshards.preprocess.sources.core.ranges import ReadRange
from lmshards.preprocess.sources.formats.base import Format

logger = logging.getLogger(__name__)

# Bytes read at a time past a page over --max_html_bytes.
BLOCK_BYTES = 1024 * 1024


def _page_documents(f: BinaryIO, r: ReadRange, options: ReadOptions, stats: ReadStats) -> list[str]:
    raw = f.read(options.max_html_bytes + 1)
    size = len(raw)
    if size > options.max_html_bytes:
        while block := f.read(BLOCK_BYTES):
            size += len(block)
        raw = b""
    stats.bytes_read += size
    if not size:
        stats.files_empty += 1
        return []
    page = too_large(size, options) if not raw else page_text(raw, options)
    if isinstance(page, PageProblem):
        stats.count(page.counter)
        logger.warning("%s skipped: %s.", r.path, page.problem)
        return []
    text, invalid = page
    return text_document(text, options, stats, invalid_utf8=invalid)


def _read_range(
    f: BinaryIO,
    r: ReadRange,
    options: ReadOptions,
    stats: ReadStats,
    numbers: RecordNumbers | None = None,
) -> Iterator[str]:
    empty_before = stats.files_empty
    documents = _page_documents(f, r, options, stats)
    if numbers is not None and stats.files_empty == empty_before:  # an empty file holds no record
        numbers.add(len(documents))
    yield from documents


FORMAT = Format(name="html", extensions=(".html", ".htm"), read_range=_read_range, raw_records=True)
