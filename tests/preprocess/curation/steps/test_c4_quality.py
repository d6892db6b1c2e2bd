"""C4's rules (lmshards/preprocess/curation/steps/c4_quality.py): which lines C4 keeps, the page
rules on them, the sentence count, and --c4_remove_lines."""

from __future__ import annotations

import pytest

from lmshards.preprocess.curation.steps import c4_quality as c4
from lmshards.preprocess.curation.steps.base import Judgement

DEFAULTS = {flag.field: flag.default for flag in c4.STEP.flags}
SENTENCE = "The river runs past the old mill."


def judge(text: str, **options: object) -> Judgement:
    return c4.c4_quality_judgement(text, {**DEFAULTS, **options})


def test_the_defaults_are_the_papers_and_line_removal_is_off():
    assert DEFAULTS == {
        "c4_min_sentences": 5,
        "c4_min_words_per_line": 3,
        "c4_max_word_length": 1000,
        "c4_remove_lines": False,
    }


def test_five_sentences_in_kept_lines_keep_the_page_unchanged():
    text = "\n".join([SENTENCE] * 5)
    assert judge(text) == Judgement(text)
    assert judge("\n".join([SENTENCE] * 4)) == Judgement(
        None, "too_few_sentences", "sentences 4 < 5"
    )


@pytest.mark.parametrize(
    "line",
    [
        "Menu",  # no terminal punctuation
        "Two words.",  # fewer than 3 words
        "It was late and then...",  # an ellipsis
        "Please enable JavaScript to continue.",
        "This site uses cookies to work well.",
        "Read our Privacy Policy before you go.",
        "A word " + "x" * 1001 + " that is too long.",
    ],
)
def test_a_line_c4_drops_does_not_count(line):
    text = "\n".join([SENTENCE] * 4 + [line])
    assert judge(text).reason == "too_few_sentences"
    assert judge(text + "\n" + SENTENCE) == Judgement(text + "\n" + SENTENCE)


def test_the_line_length_and_word_count_boundaries():
    base = "\n".join([SENTENCE] * 4)
    assert judge(base + "\nOne two three.").text is not None  # 3 words
    assert judge(base + "\nA " + "x" * 1000 + " c.").text is not None  # a word of exactly 1000
    assert (
        judge(base + "\nA " + "x" * 999 + " c.", c4_max_word_length=998).reason
        == "too_few_sentences"
    )


def test_citations_go_before_the_punctuation_check():
    text = "\n".join([SENTENCE] * 4 + ["The mill was built in 1820.[1]"])
    assert judge(text).text == text
    assert judge(text, c4_remove_lines=True).text == "\n".join(
        [SENTENCE] * 4 + ["The mill was built in 1820."]
    )


def test_lorem_ipsum_and_curly_brackets_remove_the_page_only_in_a_kept_line():
    text = "\n".join([SENTENCE] * 5)
    assert judge(text + "\nLorem ipsum dolor sit amet.") == Judgement(
        None, "lorem_ipsum", "'lorem ipsum' in a kept line"
    )
    assert judge(text + "\nThe body is { x } here.") == Judgement(
        None, "curly_bracket", "'{' in a kept line"
    )
    assert judge(text + "\nlorem ipsum {").text == text + "\nlorem ipsum {"  # a dropped line


def test_remove_lines_keeps_only_c4s_lines_and_counts_the_others():
    text = "Home | About\n" + "\n".join([SENTENCE] * 5) + "\n  \nShare this"
    assert judge(text, c4_remove_lines=True) == Judgement(
        "\n".join([SENTENCE] * 5), counts={"lines_removed": 3}
    )


@pytest.mark.parametrize(
    ("line", "sentences"),
    [
        ("One. Two. Three.", 3),
        ("Is it? yes it is! fine.", 3),  # '?' and '!' end a sentence before any word
        ("It costs 3.50 dollars. Then 4.", 2),
        ("Mr. Smith met J. Doe of Acme Ltd. Today.", 1),
        ('He said "stop." Then left.', 2),
        ("lower. case after a period.", 1),
    ],
)
def test_sentences_in_a_line(line, sentences):
    assert c4.count_sentences(line) == sentences


def test_a_long_run_of_marks_is_one_break_at_most():
    assert c4.count_sentences("!" * 100_000 + "x") == 1
    assert c4.count_sentences("Wait" + "." * 100_000 + " Then it came.") == 2
