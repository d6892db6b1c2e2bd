"""ReadOptions validation and the reading flags every command declares through one helper."""

from __future__ import annotations

import argparse

import pytest

from lmshards.plumbing.cli import CommandParser
from lmshards.preprocess.sources import (
    InputError,
    ReadOptions,
    add_reading_arguments,
    read_options_from,
)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"doc_separator": "paragraph"}, ["'paragraph'", "line, blank_line"]),
        ({"text_field": ""}, ["--text_field"]),
        ({"text_column": ""}, ["--text_column"]),
        ({"max_document_chars": 0}, ["max_document_chars"]),
    ],
)
def test_read_options_reject_bad_values(kwargs, words):
    with pytest.raises(InputError) as e:
        ReadOptions(**kwargs)
    assert all(w in str(e.value) for w in words)


@pytest.mark.parametrize("parser_type", [argparse.ArgumentParser, CommandParser])
def test_reading_flags_default_to_read_options_defaults(parser_type):
    parser = parser_type()
    add_reading_arguments(parser)
    assert read_options_from(parser.parse_args([])) == ReadOptions()
    args = parser.parse_args(
        ["--doc_separator", "blank_line", "--text_field", "body", "--text_column", "c"]
    )
    assert read_options_from(args) == ReadOptions(
        doc_separator="blank_line", text_field="body", text_column="c"
    )


def test_reading_flags_reject_bad_values(capsys):
    parser = CommandParser("preprocess")
    add_reading_arguments(parser)
    with pytest.raises(SystemExit) as e:
        parser.parse_args(["--doc_separator", "paragraph"])
    assert e.value.code == 2
    assert "invalid choice: 'paragraph'" in capsys.readouterr().err
    with pytest.raises(InputError, match="--text_field is empty"):
        read_options_from(parser.parse_args(["--text_field", ""]))


def test_reading_flags_help_shows_defaults():
    parser = CommandParser("preprocess")
    add_reading_arguments(parser)
    text = " ".join(parser.format_help().split())
    assert "--doc_separator {line,blank_line}" in text
    assert "(default: line)" in text and text.count("(default: text)") == 2
