"""Language identification (lmshards/preprocess/curation/steps/language.py), with the bundled lid.176 model."""

from __future__ import annotations

import math

import pytest

from lmshards.preprocess.curation import steps
from lmshards.preprocess.curation.steps import language
from lmshards.preprocess.curation.steps.base import DOCUMENT, Judgement

# Article 1 of the Universal Declaration of Human Rights, and one English sentence.
SENTENCES = {
    "en": "The weather is nice today and we are going to the park.",
    "de": "Alle Menschen sind frei und gleich an Würde und Rechten geboren.",
    "fr": "Tous les êtres humains naissent libres et égaux en dignité et en droits.",
    "ru": "Все люди рождаются свободными и равными в своем достоинстве и правах.",
    "ja": "すべての人間は、生まれながらにして自由であり、かつ、尊厳と権利とについて平等である。",
}


@pytest.fixture(scope="module")
def counting() -> language.LanguageIdentifier:
    return language.build({"languages": "all", "language_threshold": language.DEFAULT_THRESHOLD})


@pytest.fixture(scope="module")
def english_german() -> language.LanguageIdentifier:
    return language.build({"languages": "en,de", "language_threshold": language.DEFAULT_THRESHOLD})


def test_the_step_is_a_document_step_with_its_two_flags():
    step = language.STEP
    assert (step.name, step.kind, step.reasons) == (
        "language",
        DOCUMENT,
        ("language", "language_score"),
    )
    flags = {flag.flag: flag for flag in step.flags}
    assert step.switch == "languages" and flags["languages"].default == ""  # on with --languages
    assert flags["languages"].help.split()[-len(language.LABELS) :] == list(language.LABELS)
    threshold = flags["language_threshold"]
    assert (threshold.default, threshold.minimum, threshold.maximum) == (0.65, 0.0, 1.0)


def test_the_bundled_model_has_the_176_labels_and_names_each_sentence(counting):
    assert counting.labels() == set(language.LABELS) and len(language.LABELS) == 176
    for code, text in SENTENCES.items():
        found, score = counting.identify(text)
        assert found == code and 0.95 < score <= 1.0, (code, found, score)


def test_languages_all_keeps_every_document_and_counts_it(counting):
    texts = [*SENTENCES.values(), "", "12345 !!!"]
    judgements = counting.judge(texts)
    assert [j.text for j in judgements] == texts
    assert [dict(j.counts) for j in judgements] == [{code: 1} for code in SENTENCES] + [
        {"und": 1}
    ] * 2


def test_a_filter_keeps_listed_languages_and_names_each_removal(english_german):
    texts = [SENTENCES["en"], SENTENCES["de"], SENTENCES["fr"], "ok", ""]
    judgements = english_german.judge(texts)
    assert judgements[:2] == [
        Judgement(texts[0], counts={"en": 1}),
        Judgement(texts[1], counts={"de": 1}),
    ]
    assert judgements[2] == Judgement(
        None, "language", "language fr 0.98 not in [de,en]", {"fr": 1}
    )
    # "ok" alone: English, but with 0.6298 only.
    assert judgements[3] == Judgement(None, "language_score", "language en 0.62 < 0.65", {"en": 1})
    assert judgements[4] == Judgement(
        None, "language", "language und 0.00 not in [de,en]", {"und": 1}
    )


def test_a_score_exactly_at_the_threshold_is_kept(counting):
    _, score = counting.identify("ok")
    at = language.LanguageIdentifier(languages=frozenset({"en"}), threshold=score)
    above = language.LanguageIdentifier(
        languages=frozenset({"en"}), threshold=math.nextafter(score, 1.0)
    )
    assert at.judge(["ok"])[0].text == "ok"
    assert above.judge(["ok"])[0].reason == "language_score"
    assert language.removal("en", 0.65, languages=frozenset({"en"}), threshold=0.65) is None
    # Just under reads as under, never as 0.65 < 0.65.
    assert language.removal("en", 0.6499, languages=frozenset({"en"}), threshold=0.65) == (
        "language_score",
        "language en 0.64 < 0.65",
    )


def test_no_filter_removes_nothing_whatever_the_score():
    assert language.removal("und", 0.0, languages=frozenset(), threshold=1.0) is None


def test_identification_reads_a_one_line_prefix(counting):
    assert language.identification_text("a\nb\n" + "x" * 2000) == "a b " + "x" * (
        language.PREFIX_CHARS - 4
    )
    # A German prefix decides, whatever follows it.
    german = (SENTENCES["de"] + " ") * 20
    assert counting.identify(german + SENTENCES["fr"] * 50) == counting.identify(
        german[: language.PREFIX_CHARS]
    )
    assert counting.identify(german)[0] == "de"


def test_text_without_letters_is_undetermined_without_asking_the_model(counting):
    assert not language.has_letters("  12,345.67 — !!! 🙂 \n")
    assert language.has_letters("42 ж")
    assert counting.identify(" \n\t") == counting.identify("2024-01-01") == ("und", 0.0)


def test_languages_are_parsed_and_unknown_codes_refused():
    assert language.parse_languages("") == language.parse_languages(" ALL") == frozenset()
    assert language.parse_languages(" EN, de,yue ") == frozenset({"en", "de", "yue"})
    with pytest.raises(ValueError) as error:
        language.parse_languages("en,eng")
    message = str(error.value)
    assert "'eng'" in message and "did you mean en" in message
    assert (
        "listed under --languages in `lmshards preprocess --help`" in message
        and "\n" not in message
    )
    with pytest.raises(ValueError, match="'xyz' is not a code"):
        language.STEP.check({"languages": "en,xyz", "language_threshold": 0.65})
    with pytest.raises(ValueError, match="'xyz' is not a code"):
        language.build({"languages": "xyz", "language_threshold": 0.65})
    with pytest.raises(ValueError, match="an empty code"):
        language.parse_languages("en,,de")


def test_the_registry_runs_the_step_only_with_languages_and_refuses_unknown_codes():
    values = {"languages": "", "language_threshold": 0.65}
    assert "language" not in [
        s.name for s in steps.select_steps(quality=(), values=values, switches={})
    ]
    values["languages"] = "all"
    selected = [
        s
        for s in steps.select_steps(quality=(), values=values, switches={})
        if s.name == "language"
    ]
    assert [s.options for s in selected] == [{"languages": "all", "language_threshold": 0.65}]
    with pytest.raises(steps.StepError, match="'eng' is not a code of the language model"):
        steps.check_step_values({"languages": "en,eng", "language_threshold": 0.65})
