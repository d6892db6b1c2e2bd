"""C4's cleaning rules (Raffel et al. 2020, "Exploring the Limits of Transfer Learning", section 2.2).

C4 keeps only the lines of a page that end in terminal punctuation (. ? ! " ', not an ellipsis) and
hold at least 3 words (split at whitespace), after removing Wikipedia citation marks ("[1]", "[edit]",
"[citation needed]"); it also drops lines with a word over 1000 characters, lines that mention
"javascript", and cookie or terms-of-use notices. Of the lines left, one with "lorem ipsum" or a curly
bracket removes the whole page, and so do fewer than 5 sentences in all. The rules, their order and
defaults are datatrove's C4QualityFilter (which adds the long-word and policy lines from C4's code;
the bad-words list is not applied).

The page-level verdict is always the one above. Whether the kept text is the page with its lines
removed (what C4 released) or the page as it came is `--c4_remove_lines`, off by default: with it off,
a kept document is not changed. Sentences in a kept line are counted as spaCy's sentencizer (which
datatrove uses) mostly counts them: a break after '!' or '?' and a space, or after '.' and a space
before a capital letter or digit, unless the '.' ends an initial ("J. Smith") or a common abbreviation
("Mr.", "Ltd.", "e.g."; ABBREVIATIONS).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from lmshards.preprocess.curation.steps.base import DOCUMENT, Judgement, Step, StepFlag

# Raffel et al. 2020, section 2.2 (the defaults of datatrove's C4QualityFilter).
MIN_SENTENCES = 5
MIN_WORDS_PER_LINE = 3
MAX_WORD_LENGTH = 1000  # from C4's code (tensorflow_datasets c4_utils), not the paper
END_PUNCTUATION = (".", "?", "!", '"', "'")
ELLIPSIS = "..."
POLICY_SUBSTRINGS = (  # from C4's code: cookie and terms notices
    "terms of use",
    "privacy policy",
    "cookie policy",
    "uses cookies",
    "use of cookies",
    "use cookies",
)
_CITATION = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
# Where one sentence ends and another starts inside a line: after '!' or '?' and a space, or after
# '.' and a space before a capital or digit, unless the '.' ends an initial or an abbreviation. Only
# the first mark of a run starts a match, so a long run costs its length, not its square.
ABBREVIATIONS = (
    "Mr",
    "Mrs",
    "Ms",
    "Dr",
    "St",
    "Jr",
    "Sr",
    "Ltd",
    "Inc",
    "Co",
    "Corp",
    "vs",
    "etc",
    "e.g",
    "i.e",
    "No",
)
_NOT_ABBREVIATION = r"(?<!\b[A-Z]\.)" + "".join(rf"(?<!\b{re.escape(a)}\.)" for a in ABBREVIATIONS)
_CLOSE = r"[.!?]*[\"'”’)\]]*\s+"
_SENTENCE_BREAK = re.compile(
    rf"(?<![.!?])(?:[!?]{_CLOSE}|\.{_NOT_ABBREVIATION}{_CLOSE}(?=[\"'“‘(\[]?[A-Z0-9]))"
)

REASONS = ("lorem_ipsum", "curly_bracket", "too_few_sentences")


def count_sentences(line: str) -> int:
    """Sentences in a non-empty line."""
    return 1 + len(_SENTENCE_BREAK.findall(line))


def c4_quality_judgement(text: str, options: Mapping[str, Any]) -> Judgement:
    """The page removed by C4's page rules, or kept (with C4's lines only if c4_remove_lines)."""
    max_word_length = options["c4_max_word_length"]
    min_words = options["c4_min_words_per_line"]
    kept: list[str] = []
    sentences = 0
    for line in text.splitlines():
        line = line.strip()
        words = line.split()
        if max(map(len, words), default=0) > max_word_length:
            continue
        if "[" in line:
            line = _CITATION.sub("", line)
        if not line.endswith(END_PUNCTUATION) or line.endswith(ELLIPSIS):
            continue
        if len(words) < min_words:
            continue
        lower = line.lower()
        if "lorem ipsum" in lower:
            return Judgement(None, "lorem_ipsum", "'lorem ipsum' in a kept line")
        if "javascript" in lower:
            continue
        if "{" in line:
            return Judgement(None, "curly_bracket", "'{' in a kept line")
        if any(phrase in lower for phrase in POLICY_SUBSTRINGS):
            continue
        sentences += count_sentences(line)
        kept.append(line)
    if sentences < options["c4_min_sentences"]:
        return Judgement(
            None, "too_few_sentences", f"sentences {sentences} < {options['c4_min_sentences']}"
        )
    if not options["c4_remove_lines"]:
        return Judgement(text)
    lines_in = len(text.splitlines())
    return Judgement("\n".join(kept).strip(), counts={"lines_removed": lines_in - len(kept)})


class C4Quality:
    """The built step: each text judged on its own."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = dict(options)

    def judge(self, texts: Sequence[str]) -> list[Judgement]:
        return [c4_quality_judgement(text, self.options) for text in texts]


STEP = Step(
    name="c4_quality",
    kind=DOCUMENT,
    summary="C4's page rules (Raffel et al. 2020): lorem ipsum, curly brackets, too few sentences in "
    "the lines C4 keeps; --c4_remove_lines also keeps only those lines",
    reasons=REASONS,
    flags=(
        StepFlag(
            "c4_min_sentences",
            "c4_min_sentences",
            int,
            MIN_SENTENCES,
            "c4_quality: fewest sentences in the lines C4 keeps",
            minimum=0,
        ),
        StepFlag(
            "c4_min_words_per_line",
            "c4_min_words_per_line",
            int,
            MIN_WORDS_PER_LINE,
            "c4_quality: fewest words (split at whitespace) in a line C4 keeps",
            minimum=0,
        ),
        StepFlag(
            "c4_max_word_length",
            "c4_max_word_length",
            int,
            MAX_WORD_LENGTH,
            "c4_quality: a line with a longer word is not kept, in characters",
            minimum=1,
        ),
        StepFlag(
            "c4_remove_lines",
            "c4_remove_lines",
            bool,
            False,
            "c4_quality: keep only the lines C4 keeps in a kept document (off: the document as it came)",
        ),
    ),
    build=C4Quality,
    changes_text=lambda options: bool(options["c4_remove_lines"]),
)
