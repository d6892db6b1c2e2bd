"""FineWeb's three quality rules (Penedo et al. 2024, "The FineWeb Datasets", section 3.3.3).

Over the non-blank lines of a document: fewer than 12% of them ending in sentence-final punctuation
(any Unicode sentence terminal), more than 67% of them 30 characters or shorter, or more than 1% of
the document's characters (newlines not counted) in lines that repeat an earlier one, removes it.
datatrove's FineWebQualityFilter, whose defaults these are, adds a fourth rule that this step applies
too: more than 0.3 newlines per word (a list rather than prose). A document with no non-blank line
is removed as empty.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from lmshards.preprocess.curation.steps.base import DOCUMENT, Step, StepFlag, never_changes_text
from lmshards.preprocess.curation.steps.gopher_repetition import duplicates
from lmshards.preprocess.curation.steps.rules import RuleStep
from lmshards.preprocess.curation.steps.words import TERMINAL_PUNCTUATION, words_of

# Penedo et al. 2024, section 3.3.3 (the defaults of datatrove's FineWebQualityFilter).
MIN_LINE_PUNCT_RATIO = 0.12
MAX_SHORT_LINE_RATIO = 0.67
SHORT_LINE_LENGTH = 30  # characters
MAX_CHAR_DUP_RATIO = 0.01
MAX_NEWLINE_WORD_RATIO = 0.3  # datatrove's list rule, not in the paper

REASONS = ("empty", "line_punct_ratio", "short_line_ratio", "char_dup_ratio", "list_ratio")


def fineweb_quality_removal(text: str, options: Mapping[str, Any]) -> tuple[str, str] | None:
    """(reason, detail) of the first rule text fails, in datatrove's order, or None if it passes."""
    lines = [line for line in text.split("\n") if line.strip()]
    if not lines:
        return "empty", "non-blank lines 0"
    ratio = sum(line.endswith(TERMINAL_PUNCTUATION) for line in lines) / len(lines)
    if ratio < options["fineweb_min_line_punct_ratio"]:
        return (
            "line_punct_ratio",
            f"line_punct_ratio {ratio:.3f} < {options['fineweb_min_line_punct_ratio']:g}",
        )
    short = options["fineweb_short_line_length"]
    ratio = sum(len(line) <= short for line in lines) / len(lines)
    if ratio > options["fineweb_max_short_line_ratio"]:
        return (
            "short_line_ratio",
            f"short_line_ratio {ratio:.3f} > {options['fineweb_max_short_line_ratio']:g}",
        )
    ratio = duplicates(lines)[1] / (len(text) - text.count("\n"))
    if ratio > options["fineweb_max_char_dup_ratio"]:
        return (
            "char_dup_ratio",
            f"char_dup_ratio {ratio:.3f} > {options['fineweb_max_char_dup_ratio']:g}",
        )
    ratio = text.count("\n") / max(len(words_of(text)), 1)
    if ratio > options["fineweb_max_newline_word_ratio"]:
        return (
            "list_ratio",
            f"newlines_per_word {ratio:.3f} > {options['fineweb_max_newline_word_ratio']:g}",
        )
    return None


def _flag(name: str, kind: type, default: Any, help: str, high: float | None = 1.0) -> StepFlag:
    return StepFlag(name, name, kind, default, help, minimum=0, maximum=high)


STEP = Step(
    name="fineweb_quality",
    kind=DOCUMENT,
    summary="FineWeb's quality rules (Penedo et al. 2024): line punctuation, short lines, repeated "
    "lines, and datatrove's newlines per word",
    reasons=REASONS,
    flags=(
        _flag(
            "fineweb_min_line_punct_ratio",
            float,
            MIN_LINE_PUNCT_RATIO,
            "fineweb_quality: smallest share of non-blank lines ending in punctuation",
        ),
        _flag(
            "fineweb_max_short_line_ratio",
            float,
            MAX_SHORT_LINE_RATIO,
            "fineweb_quality: largest share of short non-blank lines",
        ),
        _flag(
            "fineweb_short_line_length",
            int,
            SHORT_LINE_LENGTH,
            "fineweb_quality: a line this long or shorter is short, in characters",
            high=None,
        ),
        _flag(
            "fineweb_max_char_dup_ratio",
            float,
            MAX_CHAR_DUP_RATIO,
            "fineweb_quality: largest share of characters in repeated lines",
        ),
        _flag(
            "fineweb_max_newline_word_ratio",
            float,
            MAX_NEWLINE_WORD_RATIO,
            "fineweb_quality: most newlines per word",
            high=None,
        ),
    ),
    build=functools.partial(RuleStep, fineweb_quality_removal),
    changes_text=never_changes_text,
)
