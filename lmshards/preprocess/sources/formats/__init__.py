"""The input formats, and which one reads a file.

A file's format comes from its name once .gz/.bz2/.zst/.xz is stripped: the format claiming its
extension, else text, read by the text format of --doc_separator (or --doc_marker/--doc_marker_regex).
Whether the bytes agree with the name is checked by content.check_contents.

Adding a format: a module here defining `FORMAT = Format(...)` (see base.Format), and a line in
FORMATS.
"""

from __future__ import annotations

from lmshards.preprocess.sources.core.compression import strip_compression
from lmshards.preprocess.sources.core.options import ReadOptions
from lmshards.preprocess.sources.formats import (
    blank_lines,
    html,
    jsonl,
    marker_lines,
    parquet,
    text_lines,
    warc,
)
from lmshards.preprocess.sources.formats.base import TEXT, Format

FORMATS: tuple[Format, ...] = (
    text_lines.FORMAT,
    blank_lines.FORMAT,
    marker_lines.FORMAT,
    jsonl.FORMAT,
    parquet.FORMAT,
    warc.FORMAT,
    html.FORMAT,
)
_BY_EXTENSION = {extension: fmt for fmt in FORMATS for extension in fmt.extensions}
_TEXT_BY_SEPARATOR = {fmt.doc_separator: fmt for fmt in FORMATS if fmt.doc_separator}


def format_for(path: str, options: ReadOptions) -> Format:
    """The format that reads path: the one claiming its extension, else the text format of
    options.text_reader."""
    return _claimed(path) or _TEXT_BY_SEPARATOR[options.text_reader]


def detect_format(path: str) -> str:
    """ "text", "jsonl", "parquet", "warc" or "html" (a format's name), from the file name after stripping its
    compression ending."""
    claimed = _claimed(path)
    return claimed.name if claimed else TEXT


def _claimed(path: str) -> Format | None:
    name = strip_compression(path.rsplit("/", 1)[-1].lower())
    dot = name.rfind(".")
    return _BY_EXTENSION.get(name[dot:]) if dot > 0 else None
