"""Reading the corpus: planning the ranges of the input files and reading each into documents.

Problems in the data never stop a run and are never silent: each is counted in ReadStats and logged
with the file's name (see documents.py and the format modules).
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from collections.abc import Iterator, Sequence

from lmshards.preprocess.sources.content import check_contents
from lmshards.preprocess.sources.core.compression import is_compressed, open_decompressed
from lmshards.preprocess.sources.core.documents import ReadStats, RecordNumbers
from lmshards.preprocess.sources.core.options import InputError, ReadOptions
from lmshards.preprocess.sources.core.ranges import DEFAULT_RANGE_BYTES, TO_END, ReadRange
from lmshards.preprocess.sources.files import InputDiscovery, discover_inputs, shown_paths
from lmshards.preprocess.sources.formats import format_for
from lmshards.schemas.manifest import InputFileInfo

logger = logging.getLogger(__name__)

# (ReadStats field, what it counted), for no_documents_message.
_NO_DOCUMENT_REASONS = (
    ("files_empty", "empty files"),
    ("documents_empty", "empty or whitespace-only documents"),
    ("documents_invalid_json", "lines that are not JSON objects"),
    ("documents_missing_field", "JSON objects without the text field"),
    ("documents_non_string_text", "JSON text fields that are not strings"),
    ("documents_json_too_long", "JSON lines too long to parse"),
    ("documents_json_too_deep", "JSON lines nested too deep"),
    ("documents_lone_surrogate", "JSON text fields holding a lone surrogate"),
    ("files_skipped_lmshards_output", "files skipped inside lmshards outputs"),
    ("files_skipped_binary", "binary files skipped (--skip_binary)"),
    ("warc_records_other", "WARC records that are not HTML responses or WET conversions"),
    ("warc_records_malformed", "malformed WARC records"),
    ("documents_html_too_large", "web pages over --max_html_bytes"),
    ("documents_undecodable", "web pages in no charset that decodes them"),
    ("documents_extract_failed", "web pages the extractor failed on"),
)
# Counters worth a warning when a range finds them (documents_empty only alongside another).
_PROBLEMS = (
    "files_empty",
    "documents_invalid_utf8",
    "documents_nul",
    "documents_split",
    "documents_invalid_json",
    "documents_missing_field",
    "documents_non_string_text",
    "documents_json_too_long",
    "documents_json_too_deep",
    "documents_lone_surrogate",
    "warc_records_malformed",
    "warc_files_truncated",
    "documents_html_too_large",
    "documents_undecodable",
    "documents_extract_failed",
    "documents_empty",
)


def plan_ranges(
    files: Sequence[InputFileInfo], *, options: ReadOptions, range_bytes: int = DEFAULT_RANGE_BYTES
) -> list[ReadRange]:
    """The ranges covering every file, in file order; checks each file can be read as its format.

    Every file yields at least one range (an empty file's range counts it in files_empty).

    Raises:
      InputError: a file that content.check_contents refuses (compressed bytes its name does not
        say, CSV, text that is mostly not UTF-8, ...), a compressed Parquet file, a Parquet file that
        cannot be opened or has no usable `options.text_column`.
    """
    if range_bytes < 1:
        raise InputError(f"Range size must be at least 1 byte, got {range_bytes}.")
    check_contents(files, options)
    ranges: list[ReadRange] = []
    for info in files:
        ranges.extend(format_for(info.path, options).plan_ranges(info, options, range_bytes))
    return ranges


def iter_documents(
    paths_or_patterns: Sequence[str],
    options: ReadOptions,
    stats: ReadStats | None = None,
    *,
    discovery: InputDiscovery | None = None,
) -> Iterator[str]:
    """Every non-empty document of every input, file by file in sorted order, each file start to end.

    Files inside lmshards outputs are left out (counted in stats.files_skipped_lmshards_output).
    discovery: discover_inputs(paths_or_patterns) when the caller has it already (each discovery logs
    what it found; a command reading its inputs twice says so once).

    Raises:
      InputError: as discover_inputs and plan_ranges do, when called (not at the first document).
    """
    discovery = discovery or discover_inputs(paths_or_patterns)
    ranges = plan_ranges(discovery.files, options=options, range_bytes=sys.maxsize)
    if stats is not None:
        stats.files_skipped_lmshards_output += discovery.skipped_files
    return (document for r in ranges for document in read_range(r, options, stats))


def read_range(
    r: ReadRange,
    options: ReadOptions,
    stats: ReadStats | None = None,
    numbers: RecordNumbers | None = None,
) -> Iterator[str]:
    """The documents that begin in range r, in file order; adds what it finds to stats as it goes,
    and, where the format has raw_records, each document's raw record to numbers.

    Raises:
      InputError: compressed data that is corrupt or truncated.
    """
    stats = ReadStats() if stats is None else stats
    before = dataclasses.replace(stats)
    if is_compressed(r.path) and (r.start, r.end) != (0, TO_END):
        raise ValueError(f"compressed file {r.path!r} can only be read whole, not as {r}")
    with open_decompressed(r.path) as f:
        yield from format_for(r.path, options).read_range(f, r, options, stats, numbers)
    _log_problems(r, before, stats)


def no_documents_message(patterns: Sequence[str], stats: ReadStats) -> str:
    """Why reading `patterns` gave no document, from what reading counted, and what to check."""
    found = [
        f"{what}: {getattr(stats, name):,}"
        for name, what in _NO_DOCUMENT_REASONS
        if getattr(stats, name)
    ]
    return (
        f"--input {shown_paths(patterns)} gave no documents ({stats.bytes_read:,} bytes read"
        + "".join(f"; {f}" for f in found)
        + "). Check --input, --doc_separator, and --text_field (JSON Lines) or --text_column (Parquet)."
    )


def _log_problems(r: ReadRange, before: ReadStats, after: ReadStats) -> None:
    found = {name: getattr(after, name) - getattr(before, name) for name in _PROBLEMS}
    if any(found[name] for name in found if name != "documents_empty"):
        details = ", ".join(f"{name}={count}" for name, count in found.items() if count)
        logger.warning("%s [%d, %d): %s", r.path, r.start, r.end, details)
