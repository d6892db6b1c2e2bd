"""The reading options: how files turn into documents, their flags, and the error for bad input."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from plumbing.errors import LmshardsError

LINE = "line"
BLANK_LINE = "blank_line"
DOC_SEPARATORS = (LINE, BLANK_LINE)
DEFAULT_TEXT_FIELD = "text"
DEFAULT_TEXT_COLUMN = "text"
# Longer documents are split into pieces of at most this many characters, so that no tokenizer
# call ever sees a giant string (a 1M-character piece is a few hundred thousand tokens).
MAX_DOCUMENT_CHARS = 1_000_000


class InputError(LmshardsError):
    """An input pattern, file or read option that cannot be used."""


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """How files turn into documents.

    doc_separator: text files only: "line" (one document per line) or "blank_line" (documents are
      runs of non-blank lines; their lines are joined with "\\n").
    text_field: the JSON Lines field holding the text.
    text_column: the Parquet column holding the text (string or binary).
    max_document_chars: longer documents are split into pieces of at most this many characters.
    """

    doc_separator: str = LINE
    text_field: str = DEFAULT_TEXT_FIELD
    text_column: str = DEFAULT_TEXT_COLUMN
    max_document_chars: int = MAX_DOCUMENT_CHARS

    def __post_init__(self) -> None:
        if self.doc_separator not in DOC_SEPARATORS:
            raise InputError(
                f"--doc_separator {self.doc_separator!r} is not supported; use one of {', '.join(DOC_SEPARATORS)}."
            )
        if not self.text_field:
            raise InputError(
                "--text_field is empty; give the JSON Lines field holding the text (default 'text')."
            )
        if not self.text_column:
            raise InputError(
                "--text_column is empty; give the Parquet column holding the text (default 'text')."
            )
        if self.max_document_chars < 1:
            raise InputError(f"max_document_chars must be >= 1, got {self.max_document_chars}.")


def add_reading_arguments(parser: argparse.ArgumentParser) -> None:
    """Declares --doc_separator, --text_field and --text_column, the reading flags of every command.

    Works on any argparse parser, including the one Beam hands to PipelineOptions._add_argparse_args;
    read_options_from turns the parsed values into ReadOptions.
    """
    parser.add_argument(
        "--doc_separator",
        choices=DOC_SEPARATORS,
        default=LINE,
        help="plain-text files: one document per line, or documents separated by blank lines",
    )
    parser.add_argument(
        "--text_field", default=DEFAULT_TEXT_FIELD, help="JSON Lines field holding the text"
    )
    parser.add_argument(
        "--text_column", default=DEFAULT_TEXT_COLUMN, help="Parquet column holding the text"
    )


def read_options_from(values: Any) -> ReadOptions:
    """ReadOptions from anything holding the reading flags as attributes (an argparse namespace, a
    PipelineOptions view, a config dataclass).

    Raises:
      InputError: a value ReadOptions rejects.
    """
    return ReadOptions(
        doc_separator=values.doc_separator,
        text_field=values.text_field,
        text_column=values.text_column,
    )
