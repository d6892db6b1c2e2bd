"""The format registry: which format reads which file."""

from __future__ import annotations

import doctest

import pytest

from lmshards.preprocess.sources import ReadOptions, detect_format
from lmshards.preprocess.sources.core.options import TEXT_READERS
from lmshards.preprocess.sources.formats import (
    FORMATS,
    base,
    blank_lines,
    format_for,
    jsonl,
    parquet,
    text_lines,
)


@pytest.mark.parametrize(
    "name, fmt",
    [
        ("a.txt", "text"),
        ("a.txt.gz", "text"),
        ("a", "text"),
        ("dir.v1/a", "text"),
        ("a.JSONL", "jsonl"),
        ("a.json.bz2", "jsonl"),
        ("gs://b/x/a.jsonl.gz", "jsonl"),
        ("a.parquet", "parquet"),
        ("a.gz", "text"),
        (".jsonl", "text"),
    ],
)
def test_detect_format(name, fmt):
    assert detect_format(name) == fmt


@pytest.mark.parametrize(
    "name, separator, module",
    [
        ("a.txt", "line", text_lines),
        ("a.txt.bz2", "blank_line", blank_lines),
        ("a.md", "blank_line", blank_lines),
        ("a.json.gz", "blank_line", jsonl),
        ("A.Parquet", "line", parquet),
    ],
)
def test_format_for_picks_by_extension_then_doc_separator(name, separator, module):
    assert format_for(name, ReadOptions(doc_separator=separator)) is module.FORMAT


def test_registry_claims_each_extension_once_and_each_separator_once():
    extensions = [e for fmt in FORMATS for e in fmt.extensions]
    assert len(extensions) == len(set(extensions))
    assert all(e == e.lower() and e.startswith(".") and e.count(".") == 1 for e in extensions)
    assert sorted(fmt.doc_separator for fmt in FORMATS if fmt.doc_separator) == sorted(TEXT_READERS)
    assert all(not fmt.extensions for fmt in FORMATS if fmt.doc_separator)


def test_the_format_interface_example_runs_as_written():
    """base.Format's docstring example is what a contributor starts from: every line of it runs."""
    results = doctest.testmod(base, optionflags=doctest.ELLIPSIS)
    assert (
        results.attempted >= 10
    )  # the example is there (a docstring without one passes vacuously)
    assert results.failed == 0
