"""Warnings on a finished preprocess output whose corpus looks off: each names the fix.

Judged from the manifest's counters, so the same output always gives the same warnings.
"""

from __future__ import annotations

from lmshards.preprocess.options import PreprocessConfig
from lmshards.preprocess.sources import LINE
from lmshards.schemas.constants import DEFAULT_PER_REPLICA_BATCH, VALIDATION_SPLIT
from lmshards.schemas.manifest import Manifest

MAX_EMPTY_SHARE = 0.10  # above this share of empty documents, the separator probably does not fit
# A hard-wrapped line is at most about 80 characters; a line-per-document corpus of real documents
# (one JSON object, one paragraph, one web page per line) averages far more.
WRAPPED_LINE_BYTES = 100


def corpus_warnings(manifest: Manifest, config: PreprocessConfig) -> list[str]:
    """What looks off in the corpus as read: many empty documents, documents that are wrapped lines,
    a validation split smaller than one default training batch."""
    reading = manifest.reading
    # One document per line: no --doc_separator blank_line and no marker lines.
    by_line = (
        config.doc_separator == LINE
        and config.doc_marker is None
        and config.doc_marker_regex is None
    )
    documents, empty = reading.get("documents", 0), reading.get("documents_empty", 0)
    found = []
    seen = documents + empty
    if seen and empty / seen > MAX_EMPTY_SHARE:
        found.append(
            f"{empty:,} of {seen:,} documents ({empty / seen:.0%}) are empty (skipped)"
            + (
                ": with --doc_separator line every blank line is one; if blank lines separate "
                "paragraphs, pass --doc_separator blank_line."
                if by_line
                else "; check --doc_separator (or --doc_marker) and the input files."
            )
        )
    mean_bytes = reading.get("bytes_read", 0) / documents if documents else 0.0
    if by_line and documents and mean_bytes < WRAPPED_LINE_BYTES:
        found.append(
            f"documents average {mean_bytes:.0f} bytes: most are one short line, as in hard-wrapped "
            "text, so a document is a line fragment; if blank lines separate paragraphs, pass "
            "--doc_separator blank_line."
        )
    if VALIDATION_SPLIT in manifest.splits and config.validation_fraction > 0:
        records = manifest.splits[VALIDATION_SPLIT].totals.records
        if records < DEFAULT_PER_REPLICA_BATCH:
            found.append(
                f"the validation split has {records:,} records, fewer than one training batch of the "
                f"default size ({DEFAULT_PER_REPLICA_BATCH} per replica): evaluation will be noisy or "
                "empty; raise --validation_fraction (now "
                f"{config.validation_fraction:g}) or add input."
            )
    return found
