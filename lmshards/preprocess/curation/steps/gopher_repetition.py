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

import bisect
import functools
import itertools
import operator
import re
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from lmshards.preprocess.curation.steps.base import DOCUMENT, Step, StepFlag, never_changes_text
from lmshards.preprocess.curation.steps.ngrams import ngram_finish, ngram_step
from lmshards.preprocess.curation.steps.rules import RuleStep
from lmshards.preprocess.curation.steps.words import words_of

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

PARAGRAPH_BREAK = re.compile(r"\n{2,}")  # what paragraphs() splits at (datatrove's expression)
LINE_BREAK = re.compile(r"\n+")  # what lines() splits at
# From this many words a document's n-grams are counted as numpy-made 64-bit keys (ArrayNgrams);
# below, as tuples of words (ListNgrams), which numpy's fixed cost per call would make dearer
# (measured on 2 cores: bench_curation_datatrove.py's documents).
NUMPY_MIN_WORDS = 200


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


def paragraphs(text: str) -> list[str]:
    """PARAGRAPH_BREAK.split(text.strip()), from str.split: a third of the regular expression's cost."""
    stripped = text.strip()
    if "\n\n" not in stripped:
        return [stripped]
    parts = stripped.split("\n")  # a run of k > 1 line breaks leaves k - 1 empty parts
    return ["\n".join(lines) for nonempty, lines in itertools.groupby(parts, bool) if nonempty]


def lines(text: str) -> list[str]:
    """LINE_BREAK.split(text), from str.split: empty only first or last, as the expression's are."""
    parts = text.split("\n")
    if len(parts) <= 2:
        return parts
    return [parts[0], *filter(None, parts[1:-1]), parts[-1]]


def duplicates(items: list[str]) -> tuple[int, int]:
    """(items, characters) that repeat an earlier item."""
    unique = set(items)
    return len(items) - len(unique), sum(map(len, items)) - sum(map(len, unique))


def ngram_keys(words: Sequence[str], n: int) -> list[Hashable]:
    """One key per n-gram of words, in order: the n-gram itself, a tuple of words."""
    return list(zip(*(words[i:] for i in range(n))))


def word_hashes(words: Sequence[str]) -> np.ndarray:
    """uint64 [words]: each word's 64-bit str hash. Equal words get equal hashes and two different
    words the same one with a chance of 2^-64; the hashes never leave the document's judging, so that
    they differ between processes (PYTHONHASHSEED) changes no verdict. One C pass: a third of the cost
    of numbering the words through a dict."""
    return np.fromiter(map(hash, words), dtype=np.int64, count=len(words)).view(np.uint64)


def top_ngram_chars(keys: list[Hashable], ends: list[int], n: int) -> int:
    """Characters of all occurrences of the most frequent n-gram (its words joined by single
    spaces; on a tie, the one that appears first), 0 if there is none. ends: the characters of the
    words before each word index."""
    if not keys:
        return 0
    counts = Counter(keys)  # in order of first appearance
    top = max(counts.values())
    at = keys.index(next(key for key, count in counts.items() if count == top))
    return (ends[at + n] - ends[at] + n - 1) * top


def first_occurrences(keys: list[Hashable]) -> list[int]:
    """The index of each n-gram's first occurrence."""
    first = dict(zip(reversed(keys), range(len(keys) - 1, -1, -1)))  # the earliest index wins
    return list(map(first.__getitem__, keys))


def duplicate_ngram_chars(first: list[int], ends: list[int], n: int) -> int:
    """Characters of the words of n-grams that repeat an earlier one, read left to right and skipping
    past each repeat (datatrove's loop). first: the index of each n-gram's first occurrence; ends: the
    characters of the words before each word index.

    Only the n-grams that occurred before are visited: one repeats if its first occurrence was read
    (not inside a skip) or an earlier occurrence was read in place of it.
    """
    later = itertools.compress(itertools.count(), map(operator.lt, first, itertools.count()))
    skip_starts: list[int] = []  # the skipped index ranges [start, end), in order
    skip_ends: list[int] = []
    read_late: set[int] = set()  # n-grams (by first index) first read at a later occurrence
    repeated = free = 0
    for index in later:
        if index < free:
            continue  # skipped
        origin = first[index]
        at = bisect.bisect_right(skip_starts, origin) - 1
        if (at < 0 or origin >= skip_ends[at]) or origin in read_late:
            repeated += ends[index + n] - ends[index]
            skip_starts.append(index + 1)
            skip_ends.append(index + n)
            free = index + n
        else:
            read_late.add(origin)
    return repeated


def gopher_repetition_removal(text: str, options: Mapping[str, Any]) -> tuple[str, str] | None:
    """(reason, detail) of the first rule text fails, in the paper's order, or None if it passes."""
    size = len(text) or 1
    for reason, parts in (
        ("para", paragraphs(text)),
        ("line", lines(text)),
    ):
        count, chars = duplicates(parts)
        frac, limit = count / len(parts), options[f"gopher_max_dup_{reason}_frac"]
        if frac > limit:
            return f"dup_{reason}_frac", f"dup_{reason}_frac {frac:.3f} > {limit:g}"
        frac, limit = chars / size, options[f"gopher_max_dup_{reason}_char_frac"]
        if frac > limit:
            return f"dup_{reason}_char_frac", f"dup_{reason}_char_frac {frac:.3f} > {limit:g}"
    words = words_of(text)
    ends = list(itertools.accumulate(map(len, words), initial=0))  # characters before each word
    ngrams = ArrayNgrams(words, ends) if len(words) >= NUMPY_MIN_WORDS else ListNgrams(words, ends)
    for n in TOP_NGRAM_CHAR_FRACS:
        chars, limit = ngrams.top_chars(n), options[top_flag(n)]
        if chars / size > limit:
            return f"top_{n}gram_char_frac", f"top_{n}gram_char_frac {chars / size:.3f} > {limit:g}"
    for n in DUP_NGRAM_CHAR_FRACS:
        repeats = ngrams.repeats(n)
        if not repeats:
            break  # no n-gram repeats, so no longer one does either
        limit = options[dup_flag(n)]
        if repeats * ngrams.longest(n) <= limit * size:
            continue  # under the limit even if each repeat were the longest n-gram
        chars = duplicate_ngram_chars(ngrams.first_occurrences(n), ends, n)
        if chars / size > limit:
            return f"dup_{n}gram_char_frac", f"dup_{n}gram_char_frac {chars / size:.3f} > {limit:g}"
    return None


class ListNgrams:
    """A short document's n-grams as tuples of words (numpy's fixed cost per call would cost more)."""

    def __init__(self, words: Sequence[str], ends: list[int]) -> None:
        self._words, self._ends = words, ends
        self._keys: dict[int, list[Hashable]] = {}

    def keys(self, n: int) -> list[Hashable]:
        if n not in self._keys:
            self._keys = {n: ngram_keys(self._words, n)}  # one n at a time is asked
        return self._keys[n]

    def top_chars(self, n: int) -> int:
        return top_ngram_chars(self.keys(n), self._ends, n)

    def repeats(self, n: int) -> int:
        keys = self.keys(n)
        return len(keys) - len(set(keys))

    def longest(self, n: int) -> int:
        """Characters of the words of the longest n-gram."""
        return max(map(operator.sub, self._ends[n:], self._ends[:-n]))

    def first_occurrences(self, n: int) -> list[int]:
        return first_occurrences(self.keys(n))


class ArrayNgrams:
    """A long document's n-grams as 64-bit hashes of its words' hashes (a collision would need two of
    its words or n-grams to share a 64-bit hash), counted by sorting in numpy; each n's hashes are the
    last n's extended by one word (ngram_hashes(ids, n) for every n, in one pass)."""

    def __init__(self, words: Sequence[str], ends: list[int]) -> None:
        self._ids = word_hashes(words)
        self._ends = np.asarray(ends, dtype=np.int64)
        self._n = 0
        self._acc = np.zeros(len(words), dtype=np.uint64)  # the windows' polynomials of n words
        self._hashes = self._sorted = self._acc

    def _built(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(hashes in order, hashes sorted) of the n-grams."""
        assert n >= self._n, f"n-grams are built longer only: {n} after {self._n}"
        if self._n == n:
            return self._hashes, self._sorted
        for m in range(self._n, n):  # from windows of m words to windows of m + 1
            count = max(len(self._ids) - m, 0)
            self._acc = ngram_step(self._acc[:count], self._ids[m : m + count])
        self._n = n
        self._hashes = ngram_finish(self._acc, bits=64)
        self._sorted = np.sort(self._hashes)  # a plain sort: cheaper than np.unique's argsort
        return self._hashes, self._sorted

    def top_chars(self, n: int) -> int:
        hashes, ordered = self._built(n)
        if not len(hashes):
            return 0
        starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        counts = np.diff(np.r_[starts, len(ordered)])
        top = int(counts.max())
        # Of the most frequent, the first to appear (with none repeated, the first n-gram); one
        # most frequent n-gram, as is usual, is found by comparison, without isin's sort.
        tops = ordered[starts[counts == top]]
        if top == 1:
            at = 0
        elif len(tops) == 1:
            at = int(np.argmax(hashes == tops[0]))
        else:
            at = int(np.argmax(np.isin(hashes, tops)))
        return int(self._ends[at + n] - self._ends[at] + n - 1) * top

    def repeats(self, n: int) -> int:
        _, ordered = self._built(n)
        return int(np.count_nonzero(ordered[1:] == ordered[:-1]))

    def longest(self, n: int) -> int:
        return int((self._ends[n:] - self._ends[:-n]).max())

    def first_occurrences(self, n: int) -> list[int]:
        hashes, _ = self._built(n)
        _, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
        return first[inverse].tolist()


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
    changes_text=never_changes_text,
)
