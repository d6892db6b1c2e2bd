"""Gopher's quality rules (Rae et al. 2021, "Scaling Language Models", appendix A.1.1).

A document is removed when it has fewer than 50 or more than 100,000 words, a mean word length outside
3 to 10 characters, more than 0.1 '#' or ellipses per word, more than 90% of its lines starting with a
bullet or more than 30% ending with an ellipsis, fewer than 80% of its words with a letter, or fewer
than two of the stop words "the be to of and that have with". The rules and defaults are datatrove's
GopherQualityFilter: word counts and mean length leave out symbol words (words.is_symbol), the other
ratios are per word symbols included; bullets are '•' and '-'; stop words match case-sensitively.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Mapping
from typing import Any

from lmshards.preprocess.curation.steps.base import DOCUMENT, Step, StepFlag, never_changes_text
from lmshards.preprocess.curation.steps.rules import RuleStep
from lmshards.preprocess.curation.steps.words import (
    count_content_words,
    has_letter,
    is_symbol,
    words_of,
)

# Rae et al. 2021, A.1.1 (the defaults of datatrove's GopherQualityFilter).
MIN_WORDS = 50
MAX_WORDS = 100_000
MIN_MEAN_WORD_LENGTH = 3.0
MAX_MEAN_WORD_LENGTH = 10.0
MAX_SYMBOL_WORD_RATIO = 0.1  # '#' per word, and '...' or '…' per word
MAX_BULLET_LINES_RATIO = 0.9
MAX_ELLIPSIS_LINES_RATIO = 0.3
MIN_ALPHA_WORDS_RATIO = 0.8
MIN_STOP_WORDS = 2
STOP_WORDS = frozenset(("the", "be", "to", "of", "and", "that", "have", "with"))
BULLETS = ("•", "-")
ELLIPSES = ("...", "…")

REASONS = (
    "min_words",
    "max_words",
    "min_mean_word_length",
    "max_mean_word_length",
    "max_hash_ratio",
    "max_ellipsis_ratio",
    "max_bullet_lines_ratio",
    "max_ellipsis_lines_ratio",
    "min_alpha_words_ratio",
    "min_stop_words",
)


def gopher_quality_removal(text: str, options: Mapping[str, Any]) -> tuple[str, str] | None:
    """(reason, detail) of the first rule text fails, in the paper's order, or None if it passes."""
    words = words_of(text)
    if (
        len(words) < options["gopher_min_words"]
    ):  # too short whatever its symbols: skip the counting
        n_content = count_content_words(words)
        return "min_words", f"words {n_content} < {options['gopher_min_words']}"
    n_words = len(words) or 1  # the per-word ratios of an empty text: it is removed as too short
    counts = Counter(words)  # the rules below look at each distinct word once
    content = [(w, n) for w, n in counts.items() if not is_symbol(w)]
    n_content = sum(n for _, n in content)
    if n_content < options["gopher_min_words"]:
        return "min_words", f"words {n_content} < {options['gopher_min_words']}"
    if n_content > options["gopher_max_words"]:
        return "max_words", f"words {n_content} > {options['gopher_max_words']}"
    mean = sum(len(w) * n for w, n in content) / max(n_content, 1)
    if mean < options["gopher_min_mean_word_length"]:
        return (
            "min_mean_word_length",
            f"mean_word_length {mean:.2f} < {options['gopher_min_mean_word_length']:g}",
        )
    if mean > options["gopher_max_mean_word_length"]:
        return (
            "max_mean_word_length",
            f"mean_word_length {mean:.2f} > {options['gopher_max_mean_word_length']:g}",
        )
    symbol_max = options["gopher_max_symbol_word_ratio"]
    ratio = text.count("#") / n_words
    if ratio > symbol_max:
        return "max_hash_ratio", f"hash_ratio {ratio:.3f} > {symbol_max:g}"
    ratio = (text.count("...") + text.count("…")) / n_words
    if ratio > symbol_max:
        return "max_ellipsis_ratio", f"ellipsis_ratio {ratio:.3f} > {symbol_max:g}"
    lines = text.splitlines() or [""]
    ratio = sum(line.lstrip().startswith(BULLETS) for line in lines) / len(lines)
    if ratio > options["gopher_max_bullet_lines_ratio"]:
        return (
            "max_bullet_lines_ratio",
            f"bullet_lines {ratio:.3f} > {options['gopher_max_bullet_lines_ratio']:g}",
        )
    ratio = sum(line.rstrip().endswith(ELLIPSES) for line in lines) / len(lines)
    if ratio > options["gopher_max_ellipsis_lines_ratio"]:
        return (
            "max_ellipsis_lines_ratio",
            f"ellipsis_lines {ratio:.3f} > {options['gopher_max_ellipsis_lines_ratio']:g}",
        )
    ratio = sum(n for w, n in content if has_letter(w)) / n_words
    if ratio < options["gopher_min_alpha_words_ratio"]:
        return (
            "min_alpha_words_ratio",
            f"alpha_words {ratio:.3f} < {options['gopher_min_alpha_words_ratio']:g}",
        )
    stop = len(STOP_WORDS.intersection(counts))
    if stop < options["gopher_min_stop_words"]:
        return "min_stop_words", f"stop_words {stop} < {options['gopher_min_stop_words']}"
    return None


def _flag(
    name: str, kind: type, default: Any, help: str, low: float, high: float | None
) -> StepFlag:
    return StepFlag(name, name, kind, default, help, minimum=low, maximum=high)


STEP = Step(
    name="gopher_quality",
    kind=DOCUMENT,
    summary="Gopher's quality rules (Rae et al. 2021): word count, mean word length, symbols, bullets, "
    "ellipses, alphabetic words, stop words",
    reasons=REASONS,
    flags=(
        _flag(
            "gopher_min_words",
            int,
            MIN_WORDS,
            "gopher_quality: fewest words (symbols not counted)",
            0,
            None,
        ),
        _flag(
            "gopher_max_words",
            int,
            MAX_WORDS,
            "gopher_quality: most words (symbols not counted)",
            1,
            None,
        ),
        _flag(
            "gopher_min_mean_word_length",
            float,
            MIN_MEAN_WORD_LENGTH,
            "gopher_quality: shortest mean word length, in characters",
            0,
            None,
        ),
        _flag(
            "gopher_max_mean_word_length",
            float,
            MAX_MEAN_WORD_LENGTH,
            "gopher_quality: longest mean word length, in characters",
            0,
            None,
        ),
        _flag(
            "gopher_max_symbol_word_ratio",
            float,
            MAX_SYMBOL_WORD_RATIO,
            "gopher_quality: most '#' per word, and most ellipses per word",
            0,
            None,
        ),
        _flag(
            "gopher_max_bullet_lines_ratio",
            float,
            MAX_BULLET_LINES_RATIO,
            "gopher_quality: largest share of lines starting with a bullet",
            0,
            1,
        ),
        _flag(
            "gopher_max_ellipsis_lines_ratio",
            float,
            MAX_ELLIPSIS_LINES_RATIO,
            "gopher_quality: largest share of lines ending with an ellipsis",
            0,
            1,
        ),
        _flag(
            "gopher_min_alpha_words_ratio",
            float,
            MIN_ALPHA_WORDS_RATIO,
            "gopher_quality: smallest share of words with a letter",
            0,
            1,
        ),
        _flag(
            "gopher_min_stop_words",
            int,
            MIN_STOP_WORDS,
            "gopher_quality: fewest distinct stop words (the, be, to, of, and, that, have, with; "
            "case-sensitive)",
            0,
            len(STOP_WORDS),
        ),
    ),
    build=functools.partial(RuleStep, gopher_quality_removal),
    changes_text=never_changes_text,
)
