"""The quality filters' word splitting (lmshards/preprocess/curation/steps/words.py)."""

from __future__ import annotations

import concurrent.futures

import pytest

from lmshards.preprocess.curation.steps.words import (
    WORDS_KEPT_CHARS,
    _KeptWords,
    count_content_words,
    has_letter,
    is_symbol,
    split_words,
    words_of,
)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("Hello, world.", ["Hello", ",", "world", "."]),
        ("Don't stop...", ["Do", "n't", "stop", "..."]),
        ("it's (really) fine!", ["it", "'s", "(", "really", ")", "fine", "!"]),
        (
            "e-mail 64-bit 2022-10-30 3.14",
            ["e", "-", "mail", "64", "-", "bit", "2022", "-", "10", "-", "30", "3.14"],
        ),
        ("I/O A1:E10 =item", ["I", "/", "O", "A1", ":", "E10", "=", "item"]),
        (
            "see https://x.org/a?b=1. /etc -s --verify",
            ["see", "https://x.org/a?b=1", ".", "/etc", "-s", "--verify"],
        ),
        ("#tag ===", ["#", "tag", "=", "=", "="]),
        ("   \n\t ", []),
    ],
)
def test_words_are_spaced_chunks_with_punctuation_split_off_their_ends_and_some_infixes(
    text, words
):
    assert split_words(text) == words


def test_a_language_without_spaces_is_one_word_per_spaced_run():
    assert split_words("我们今天去公园。天气很好 对") == ["我们今天去公园。天气很好", "对"]


def test_symbols_are_words_of_punctuation_only():
    assert [is_symbol(w) for w in ("...", "--", "#", "。", "©", "a.", "_")] == [
        True,
        True,
        True,
        True,
        False,
        False,
        True,
    ]
    assert [has_letter(w) for w in ("abc", "a1", "42", "_", "é", "3.14")] == [
        True,
        True,
        False,
        False,
        True,
        False,
    ]


def test_a_long_piece_is_one_word_and_a_run_of_marks_costs_its_length():
    junk = ")" * 50_000 + "x"
    assert split_words(f"a {junk} b") == ["a", junk, "b"]  # quadratic in the regex: not taken there
    assert split_words("a" + "." * 150 + "x") == ["a" + "." * 150 + "x"]
    assert split_words("end" + "." * 150) == ["end", "." * 150]


def test_count_content_words_is_the_words_that_are_not_symbols():
    text = "Hello, world... -- # 。 © a. _ (see: x-y) \u2026 ?! it's 3.14"
    words = split_words(text)
    assert count_content_words(words) == sum(not is_symbol(w) for w in words) == 10
    assert count_content_words([]) == 0


def test_words_of_is_split_words_kept_for_the_steps_after():
    text = "The cat's toys (all 3) were 'lost'... see https://example.com/x."
    assert words_of(text) == tuple(split_words(text))
    assert words_of(text) is words_of(text)  # split once, read again by the next step
    long = "word " * (WORDS_KEPT_CHARS // 5 + 1)
    assert words_of(long) == tuple(split_words(long)) and words_of(long) is not words_of(long)


def test_kept_words_hold_at_most_their_characters_oldest_out_first():
    kept = _KeptWords(max_chars=20)
    first, second, third = "aaaa bbbb", "cccc dddd", "eeee ffff"  # 9 characters each
    words = kept.words(first)
    assert kept.words(first) is words and kept.words(second) is kept.words(second)
    kept.words(third)  # 27 characters: the first goes
    assert kept.words(second) is kept.words(second) and kept.words(third) is kept.words(third)
    assert kept.words(first) is not words and kept.words(first) == words


def test_kept_words_shared_by_threads_stay_within_their_characters():
    kept = _KeptWords(max_chars=200)
    texts = [f"text {i} " + "w " * (i % 40) for i in range(300)]

    def split_all(offset: int) -> list[bool]:
        return [kept.words(t) == tuple(split_words(t)) for t in texts[offset:] + texts[:offset]]

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(split_all, range(0, 300, 75)))
    assert all(all(r) for r in results)
    assert kept._chars == sum(map(len, kept._words)) <= 200
