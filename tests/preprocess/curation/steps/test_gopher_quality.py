"""Gopher's quality rules (lmshards/preprocess/curation/steps/gopher_quality.py): each rule just
inside and just past its default threshold."""

from __future__ import annotations

from lmshards.preprocess.curation.steps import gopher_quality
from lmshards.preprocess.curation.steps.base import DOCUMENT, Judgement

DEFAULTS = {flag.field: flag.default for flag in gopher_quality.STEP.flags}


def verdict(text: str, **options: float) -> tuple[str, str] | None:
    return gopher_quality.gopher_quality_removal(text, {**DEFAULTS, **options})


def prose(n: int, word: str = "apple") -> str:
    """n words of 3+ letters, two of them stop words."""
    return " ".join(["the", "and"] + [word] * (n - 2))


def test_the_defaults_are_the_papers():
    assert {k: v for k, v in DEFAULTS.items()} == {
        "gopher_min_words": 50,
        "gopher_max_words": 100_000,
        "gopher_min_mean_word_length": 3.0,
        "gopher_max_mean_word_length": 10.0,
        "gopher_max_symbol_word_ratio": 0.1,
        "gopher_max_bullet_lines_ratio": 0.9,
        "gopher_max_ellipsis_lines_ratio": 0.3,
        "gopher_min_alpha_words_ratio": 0.8,
        "gopher_min_stop_words": 2,
    }
    assert gopher_quality.STEP.kind == DOCUMENT


def test_word_count_leaves_symbols_out():
    assert verdict(prose(50)) is None
    assert verdict(prose(49)) == ("min_words", "words 49 < 50")
    assert verdict(prose(49) + " , ; !") == ("min_words", "words 49 < 50")
    assert verdict("") == ("min_words", "words 0 < 50")
    assert verdict(prose(60), gopher_max_words=60) is None
    assert verdict(prose(61), gopher_max_words=60) == ("max_words", "words 61 > 60")


def test_mean_word_length_bounds():
    assert verdict(prose(50, "abc")) is None  # exactly 3
    assert verdict(prose(50, "abc") + " abcd") is None  # 154 / 51 > 3
    assert verdict(prose(49, "abc") + " ab") == (
        "min_mean_word_length",
        "mean_word_length 2.98 < 3",
    )
    long = " ".join(["the", "and"] + ["abcdefghij"] * 47 + ["x" * 24])  # (6 + 470 + 24) / 50 = 10
    assert verdict(long) is None
    assert verdict(long + "y") == ("max_mean_word_length", "mean_word_length 10.02 > 10")


def test_hash_and_ellipsis_per_word():
    assert verdict(prose(54) + " #" * 6) is None  # 6 / 60 = 0.1
    assert verdict(prose(53) + " #" * 7) == ("max_hash_ratio", "hash_ratio 0.117 > 0.1")
    assert verdict(" ..." * 6 + " " + prose(54)) is None  # the line does not end with one
    assert verdict(" …" * 7 + " " + prose(53)) == (
        "max_ellipsis_ratio",
        "ellipsis_ratio 0.117 > 0.1",
    )


def test_bullet_and_ellipsis_lines():
    line = "the apple and the apple grows well"  # 7 words
    bullets = "\n".join(["• " + line] * 9 + [line])
    assert verdict(bullets) is None  # 9 of 10
    assert verdict("\n".join(["  - " + line] * 10)) == (
        "max_bullet_lines_ratio",
        "bullet_lines 1.000 > 0.9",
    )
    ends = [line + " ..."] * 3 + [line] * 7
    assert verdict("\n".join(ends)) is None  # 3 of 10
    ends[3] += "…  "
    assert verdict("\n".join(ends)) == ("max_ellipsis_lines_ratio", "ellipsis_lines 0.400 > 0.3")


def test_words_with_a_letter_count_against_every_word():
    assert verdict(prose(80) + " 4242" * 20) is None  # 80 / 100
    assert verdict(prose(79) + " 4242" * 21) == ("min_alpha_words_ratio", "alpha_words 0.790 < 0.8")
    assert verdict(prose(80) + " 4242" * 19 + " ,") is None  # a symbol counts too: 80 / 100
    assert verdict(prose(80) + " 4242" * 20 + " ,") == (
        "min_alpha_words_ratio",
        "alpha_words 0.792 < 0.8",
    )


def test_two_stop_words_case_sensitive():
    assert verdict(" ".join(["to", "with"] + ["apple"] * 48)) is None
    assert verdict(" ".join(["The", "with"] + ["apple"] * 48)) == (
        "min_stop_words",
        "stop_words 1 < 2",
    )
    assert verdict(" ".join(["apple"] * 50), gopher_min_stop_words=0) is None


def test_the_step_keeps_the_text_or_removes_with_the_rule():
    step = gopher_quality.STEP.build(DEFAULTS)
    assert step.judge([prose(50), "short text"]) == [
        Judgement(prose(50)),
        Judgement(None, "min_words", "words 2 < 50"),
    ]
    assert set(gopher_quality.REASONS) == set(gopher_quality.STEP.reasons)
