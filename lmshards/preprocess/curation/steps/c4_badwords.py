"""C4's bad-words rule (Raffel et al. 2020, section 2.2): a page holding any word of a list is removed.

C4 used the "List of Dirty, Naughty, Obscene or Otherwise Bad Words" (LDNOOBW). lmshards ships no word
list: `--c4_badwords_file` names one (one word or phrase a line, local or gs://), and the manifest
records its SHA-256 and word count, so a shard set says which list made it. The match is C4's code's
(tensorflow_datasets c4_utils, as datatrove's C4BadWordsFilter): the page lowercased, a listed entry
(lowercased too) flanked by a non-word character or the page's start or end. `--c4_badwords_anywhere`
drops the flanks, as C4's code does for Japanese, Thai and Chinese, which are written without spaces.
Unlike datatrove, no share of the pages with listed words is kept at random: the verdict is a pure
function of the page.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from lmshards.plumbing.bounded import ReadLimitError, read_bytes
from lmshards.preprocess.curation.steps.base import (
    DOCUMENT,
    Judgement,
    Step,
    StepFlag,
    never_changes_text,
)

FILE = "c4_badwords_file"
ANYWHERE = "c4_badwords_anywhere"
SHA256 = "c4_badwords_sha256"  # recorded in the manifest, from the list's bytes
WORDS = "c4_badwords_words"  # recorded in the manifest: the entries in the list
MAX_LIST_BYTES = 1 << 20  # LDNOOBW's en list is 4 KB; a bigger file is likely the wrong one
REASON = "bad_word"
_WORD_RUN = re.compile(r"\w+")
_WORD_CHAR = re.compile(r"\w")


def parse_word_list(data: bytes, path: str) -> tuple[str, ...]:
    """The distinct entries of a word list, lowercased and sorted (blank lines skipped).

    Raises:
      ValueError: not UTF-8 text, or no entry, naming the file and the fix.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(
            f"--{FILE} {path!r} is not UTF-8 text; give a word list, one word or phrase a line."
        ) from None
    words = sorted({line.strip().lower() for line in text.splitlines()} - {""})
    if not words:
        raise ValueError(
            f"--{FILE} {path!r} holds no words; give a list, one word or phrase a line."
        )
    return tuple(words)


def read_word_list(path: str) -> tuple[bytes, tuple[str, ...]]:
    """The list's bytes and entries. Raises ValueError naming the file and the fix."""
    try:
        data = read_bytes(path, what="word list", max_bytes=MAX_LIST_BYTES)
    except FileNotFoundError:
        raise ValueError(
            f"--{FILE} {path!r} does not exist; give the path of a word list."
        ) from None
    except ReadLimitError as e:
        raise ValueError(f"--{FILE}: {e}") from None
    return data, parse_word_list(data, path)


def prepare(options: Mapping[str, Any]) -> dict[str, Any]:
    """The list's fingerprint, read before work starts (the manifest records it)."""
    data, words = read_word_list(options[FILE])
    return {SHA256: hashlib.sha256(data).hexdigest(), WORDS: len(words)}


class WordMatcher:
    """Finds the first listed entry in a page, as C4's regular expression would.

    An entry that starts with a word character and is flanked by non-word characters (or the page's
    ends) starts where a run of word characters starts, and that run is the entry's own leading run.
    So the page's runs are looked up in a dict of the entries' leading runs, one pass over its words,
    and only those entries are compared there. Entries starting otherwise, and every entry with
    `anywhere`, go through a regular expression.
    """

    def __init__(self, words: Sequence[str], *, anywhere: bool) -> None:
        self._by_run: dict[str, list[str]] = {}
        rest = []
        for word in words:
            run = None if anywhere else _WORD_RUN.match(word)
            if run is None:
                rest.append(word)
            else:
                self._by_run.setdefault(run.group(), []).append(word)
        for entries in self._by_run.values():
            entries.sort(key=lambda w: (-len(w), w))  # the longest entry at a place is reported
        alternation = "|".join(re.escape(w) for w in sorted(rest, key=lambda w: (-len(w), w)))
        if not rest:
            self._pattern = None
        elif anywhere:
            self._pattern = re.compile(f"({alternation})")
        else:
            self._pattern = re.compile(rf"(?:\W|^)({alternation})(?:\W|$)")

    def first(self, page: str) -> tuple[int, str] | None:
        """(character offset, entry) of the earliest listed entry in the page, or None."""
        lowered = page.lower()
        found = self._first_by_run(lowered) if self._by_run else None
        if self._pattern is not None:
            match = self._pattern.search(lowered)
            if match is not None and (found is None or match.start(1) < found[0]):
                found = (match.start(1), match.group(1))
        return found

    def _first_by_run(self, lowered: str) -> tuple[int, str] | None:
        for run in _WORD_RUN.finditer(lowered):
            entries = self._by_run.get(run.group())
            if entries is None:
                continue
            start = run.start()
            for entry in entries:
                end = start + len(entry)
                if lowered.startswith(entry, start) and _WORD_CHAR.match(lowered, end) is None:
                    return start, entry
        return None


class C4BadWords:
    """The built step: the list read (and checked against the fingerprint the run recorded)."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        data, words = read_word_list(options[FILE])
        recorded = options.get(SHA256)
        if recorded is not None and hashlib.sha256(data).hexdigest() != recorded:
            raise ValueError(
                f"--{FILE} {options[FILE]!r} changed since the run started (SHA-256 {recorded}); "
                "leave the list alone while a run reads it, or run again."
            )
        self._matcher = WordMatcher(words, anywhere=options[ANYWHERE])

    def judge(self, texts: Sequence[str]) -> list[Judgement]:
        judgements = []
        for text in texts:
            found = self._matcher.first(text)
            if found is None:
                judgements.append(Judgement(text))
            else:
                offset, word = found
                judgements.append(Judgement(None, REASON, f"listed {word!r} at character {offset}"))
        return judgements


STEP = Step(
    name="c4_badwords",
    kind=DOCUMENT,
    summary="C4's bad-words rule (Raffel et al. 2020): remove a page holding a word of --c4_badwords_file",
    reasons=(REASON,),
    flags=(
        StepFlag(
            FILE,
            FILE,
            str,
            "",
            "remove every page holding a word or phrase of this list (one a line, local or gs://; e.g. "
            "LDNOOBW's en, which C4 used) as a whole word, case ignored: C4's bad-words rule",
        ),
        StepFlag(
            ANYWHERE,
            ANYWHERE,
            bool,
            False,
            "c4_badwords: match listed words anywhere, not only as whole words (C4's rule for ja, th, zh)",
        ),
    ),
    build=C4BadWords,
    switch=FILE,
    prepare=prepare,
    changes_text=never_changes_text,
)
