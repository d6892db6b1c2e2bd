"""Gopher's repetition rules (Rae et al. 2021, "Scaling Language Models", appendix A.1.1, table A1).

A document is removed when too much of it repeats: the share of paragraphs (split at blank lines) or
lines that repeat an earlier one, the share of its characters in them, the characters of its most
frequent 2-, 3- and 4-gram of words (all its occurrences), or the characters of words in 5- to 10-grams
that repeat an earlier one. The rules, their order and defaults are datatrove's GopherRepetitionFilter:
characters are counted against the whole text's length; an n-gram's characters are its words' (joined
by single spaces for the most frequent n-grams, without for the repeated ones); after a repeated n-gram
the count skips past it, so overlapping repeats are not counted twice.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Mapping
from operator import itemgetter
from typing import Any

from lmshards.preprocess.curation.steps.base import DOCUMENT, Step, StepFlag
from lmshards.preprocess.curation.steps.rules import RuleStep
from lmshards.preprocess.curation.steps.words import split_words

# Rae et al. 2021, table A1: the largest share of a document that may repeat.
MAX_DUP_PARA_FRAC = 0.30
MAX_DUP_PARA_CHAR_FRAC = 0.20
MAX_DUP_LINE_FRAC = 0.30
MAX_DUP_LINE_CHAR_FRAC = 0.20
TOP_NGRAM_CHAR_FRACS = {2: 0.20, 3: 0.18, 4: 0.16}  # n -> most characters in the top n-gram
DUP_NGRAM_CHAR_FRACS = {
    5: 0.15,
    6: 0.14,
    7: 0.13,
    8: 0.12,
    9: 0.11,
    10: 0.10,
}  # n -> repeated n-grams

_PARAGRAPH_BREAK = re.compile(r"\n{2,}")
_LINE_BREAK = re.compile(r"\n+")


def top_flag(n: int) -> str:
    return f"gopher_max_top_{n}gram_char_frac"


def dup_flag(n: int) -> str:
    return f"gopher_max_dup_{n}gram_char_frac"


REASONS = (
    "dup_para_frac",
    "dup_para_char_frac",
    "dup_line_frac",
    "dup_line_char_frac",
    *(f"top_{n}gram_char_frac" for n in TOP_NGRAM_CHAR_FRACS),
    *(f"dup_{n}gram_char_frac" for n in DUP_NGRAM_CHAR_FRACS),
)


def duplicates(items: list[str]) -> tuple[int, int]:
    """(items, characters) that repeat an earlier item."""
    unique = set(items)
    return len(items) - len(unique), sum(map(len, items)) - sum(map(len, unique))


def ngrams(words: list[str], n: int) -> list[tuple[str, ...]]:
    """The n-grams of words, in order."""
    return list(zip(*(words[i:] for i in range(n))))


def top_ngram_chars(words: list[str], n: int) -> int:
    """Characters of all occurrences of the most frequent n-gram (its words joined by single
    spaces; the first to reach the top count on a tie), 0 if there is none."""
    counts = Counter(ngrams(words, n))
    if not counts:
        return 0
    gram, count = max(counts.items(), key=itemgetter(1))
    return (sum(map(len, gram)) + n - 1) * count


def duplicate_ngram_chars(grams: list[tuple[str, ...]], n: int) -> int:
    """Characters of the words of n-grams that repeat an earlier one, skipping past each repeat."""
    seen: set[tuple[str, ...]] = set()
    repeated = index = 0
    while index < len(grams):
        gram = grams[index]
        if gram in seen:
            repeated += sum(map(len, gram))
            index += n
        else:
            seen.add(gram)
            index += 1
    return repeated


def gopher_repetition_removal(text: str, options: Mapping[str, Any]) -> tuple[str, str] | None:
    """(reason, detail) of the first rule text fails, in the paper's order, or None if it passes."""
    size = len(text) or 1
    for reason, parts in (
        ("para", _PARAGRAPH_BREAK.split(text.strip())),
        ("line", _LINE_BREAK.split(text)),
    ):
        count, chars = duplicates(parts)
        frac, limit = count / len(parts), options[f"gopher_max_dup_{reason}_frac"]
        if frac > limit:
            return f"dup_{reason}_frac", f"dup_{reason}_frac {frac:.3f} > {limit:g}"
        frac, limit = chars / size, options[f"gopher_max_dup_{reason}_char_frac"]
        if frac > limit:
            return f"dup_{reason}_char_frac", f"dup_{reason}_char_frac {frac:.3f} > {limit:g}"
    words = split_words(text)
    for n in TOP_NGRAM_CHAR_FRACS:
        frac, limit = top_ngram_chars(words, n) / size, options[top_flag(n)]
        if frac > limit:
            return f"top_{n}gram_char_frac", f"top_{n}gram_char_frac {frac:.3f} > {limit:g}"
    for n in DUP_NGRAM_CHAR_FRACS:
        grams = ngrams(words, n)
        if len(set(grams)) == len(grams):
            break  # no n-gram repeats, so no longer one does either
        frac, limit = duplicate_ngram_chars(grams, n) / size, options[dup_flag(n)]
        if frac > limit:
            return f"dup_{n}gram_char_frac", f"dup_{n}gram_char_frac {frac:.3f} > {limit:g}"
    return None


def _fraction(flag: str, default: float, help: str) -> StepFlag:
    return StepFlag(flag, flag, float, default, help, minimum=0.0, maximum=1.0)


STEP = Step(
    name="gopher_repetition",
    kind=DOCUMENT,
    summary="Gopher's repetition rules (Rae et al. 2021): repeated lines, paragraphs and word n-grams",
    reasons=REASONS,
    flags=(
        _fraction(
            "gopher_max_dup_para_frac",
            MAX_DUP_PARA_FRAC,
            "gopher_repetition: largest share of paragraphs that repeat an earlier one",
        ),
        _fraction(
            "gopher_max_dup_para_char_frac",
            MAX_DUP_PARA_CHAR_FRAC,
            "gopher_repetition: largest share of characters in repeated paragraphs",
        ),
        _fraction(
            "gopher_max_dup_line_frac",
            MAX_DUP_LINE_FRAC,
            "gopher_repetition: largest share of lines that repeat an earlier one",
        ),
        _fraction(
            "gopher_max_dup_line_char_frac",
            MAX_DUP_LINE_CHAR_FRAC,
            "gopher_repetition: largest share of characters in repeated lines",
        ),
        *(
            _fraction(
                top_flag(n),
                frac,
                f"gopher_repetition: largest share of characters in the most frequent {n}-gram",
            )
            for n, frac in TOP_NGRAM_CHAR_FRACS.items()
        ),
        *(
            _fraction(
                dup_flag(n),
                frac,
                f"gopher_repetition: largest share of characters in repeated {n}-grams",
            )
            for n, frac in DUP_NGRAM_CHAR_FRACS.items()
        ),
    ),
    build=functools.partial(RuleStep, gopher_repetition_removal),
)
