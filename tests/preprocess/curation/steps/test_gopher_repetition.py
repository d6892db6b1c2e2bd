"""Gopher's repetition rules (lmshards/preprocess/curation/steps/gopher_repetition.py): the measures
exactly, and each rule at its threshold and just past it."""

from __future__ import annotations

import itertools
import random

import pytest

from lmshards.preprocess.curation.steps import gopher_repetition as rep

DEFAULTS = {flag.field: flag.default for flag in rep.STEP.flags}
OFF = {field: 1.0 for field in DEFAULTS}  # every rule off: a test turns on the one it holds


def unique_words(n: int, start: int = 0) -> list[str]:
    """n different words of letters."""
    return ["".join("abcdefghij"[int(d)] for d in f"{i:04d}") for i in range(start, start + n)]


def test_the_defaults_are_table_a1():
    assert DEFAULTS == {
        "gopher_max_dup_para_frac": 0.3,
        "gopher_max_dup_para_char_frac": 0.2,
        "gopher_max_dup_line_frac": 0.3,
        "gopher_max_dup_line_char_frac": 0.2,
        "gopher_max_top_2gram_char_frac": 0.2,
        "gopher_max_top_3gram_char_frac": 0.18,
        "gopher_max_top_4gram_char_frac": 0.16,
        "gopher_max_dup_5gram_char_frac": 0.15,
        "gopher_max_dup_6gram_char_frac": 0.14,
        "gopher_max_dup_7gram_char_frac": 0.13,
        "gopher_max_dup_8gram_char_frac": 0.12,
        "gopher_max_dup_9gram_char_frac": 0.11,
        "gopher_max_dup_10gram_char_frac": 0.1,
    }
    assert len(rep.REASONS) == 13


def reference_duplicate_chars(words: list[str], n: int) -> int:
    """datatrove's find_all_duplicate, on tuples of words: the loop the fast version must equal."""
    seen: set[tuple[str, ...]] = set()
    repeated = index = 0
    while index < len(words) - n + 1:
        gram = tuple(words[index : index + n])
        if gram in seen:
            repeated += sum(map(len, gram))
            index += n
        else:
            seen.add(gram)
            index += 1
    return repeated


def ends(words: list[str]) -> list[int]:
    return list(itertools.accumulate(map(len, words), initial=0))


def ngrams(words: list[str], *, numbers: bool) -> rep.ListNgrams | rep.ArrayNgrams:
    """A document's n-grams as tuples of words, or as the 64-bit keys of long documents."""
    return (rep.ArrayNgrams if numbers else rep.ListNgrams)(words, ends(words))


def duplicate_chars(words: list[str], n: int, *, numbers: bool) -> int:
    first = ngrams(words, numbers=numbers).first_occurrences(n)
    return rep.duplicate_ngram_chars(first, ends(words), n)


def test_the_measures():
    assert rep.duplicates(["ab", "c", "ab", "ab", "c", "d"]) == (3, 5)
    # "a b" twice and "b a" twice: the first to appear wins, with its space.
    for numbers in (False, True):  # tuples of words, or 64-bit keys of long documents
        for words, chars in (("a b a b a", 3 * 2), ("xy b a b xy b", 4 * 2), ("x", 0)):
            split = words.split()
            assert ngrams(split, numbers=numbers).top_chars(2) == chars
    words = ["aa", "b", "c", "aa", "b", "c", "aa", "b"]
    # ("aa","b") at 0, 3 and 6; ("b","c") at 1 and 4: the repeat at 3 counts and skips to 5, (c, aa)
    # at 5 repeats 2: counted, skip to 7, the end.
    assert duplicate_chars(words, 2, numbers=False) == 3 + 3 == reference_duplicate_chars(words, 2)


@pytest.mark.parametrize("seed", range(10))
def test_array_ngrams_measure_what_word_tuples_measure(seed):
    rng = random.Random(seed)
    vocabulary = ["a", "bb", "ccc", "dd", "e", "fff", "g"][: rng.randint(2, 7)]
    words = [rng.choice(vocabulary) for _ in range(rng.randint(1, 300))]
    tuples, arrays = ngrams(words, numbers=False), ngrams(words, numbers=True)
    for n in range(2, 11):  # in the order the rules ask, as each class requires
        assert arrays.top_chars(n) == tuples.top_chars(n), n
        assert arrays.repeats(n) == tuples.repeats(n), n
        if len(words) > n:
            assert arrays.longest(n) == tuples.longest(n), n
        assert arrays.first_occurrences(n) == tuples.first_occurrences(n), n


@pytest.mark.parametrize("seed", range(40))
def test_repeated_ngrams_equal_datatroves_loop(seed):
    rng = random.Random(seed)
    vocabulary = ["a", "bb", "ccc", "dddd"][: rng.randint(1, 4)]
    words = [rng.choice(vocabulary) for _ in range(rng.randint(0, 60))]
    for n in (2, 3, 5):
        expected = reference_duplicate_chars(words, n)
        assert duplicate_chars(words, n, numbers=False) == expected
        assert duplicate_chars(words, n, numbers=True) == expected


def test_repeated_paragraphs_and_lines():
    paragraph = " ".join(unique_words(20))
    paras = [paragraph] + [" ".join(unique_words(20, 20 * k)) for k in range(1, 7)]
    text = "\n\n".join(paras + [paragraph] * 3)  # 3 of 10 repeat
    assert rep.gopher_repetition_removal(text, {**OFF, "gopher_max_dup_para_frac": 0.3}) is None
    text = "\n\n".join(paras[:6] + [paragraph] * 4)
    assert rep.gopher_repetition_removal(text, {**OFF, "gopher_max_dup_para_frac": 0.3}) == (
        "dup_para_frac",
        "dup_para_frac 0.400 > 0.3",
    )
    lines = "\n".join(["short"] * 4 + paras[1:7])  # 3 of 10 lines repeat "short"
    assert rep.gopher_repetition_removal(lines, {**OFF, "gopher_max_dup_line_frac": 0.3}) is None
    assert rep.gopher_repetition_removal(
        lines + "\nshort", {**OFF, "gopher_max_dup_line_frac": 0.3}
    ) == (
        "dup_line_frac",
        "dup_line_frac 0.364 > 0.3",
    )


TAIL = " " + " ".join(unique_words(30))


@pytest.mark.parametrize(
    ("flag", "reason", "text", "chars"),
    [  # chars: the repeated (or top n-gram's) characters, counted by hand
        (
            "gopher_max_dup_para_char_frac",
            "dup_para_char_frac",
            "one two three\n\nfour\n\none two three",
            13,
        ),
        (
            "gopher_max_dup_line_char_frac",
            "dup_line_char_frac",
            "one two three\nfour\none two three",
            13,
        ),
        (
            "gopher_max_top_2gram_char_frac",
            "top_2gram_char_frac",
            "red fox red fox red fox" + TAIL,
            7 * 3,
        ),
        (
            "gopher_max_top_3gram_char_frac",
            "top_3gram_char_frac",
            "a red fox a red fox a red fox" + TAIL,
            9 * 3,
        ),
        (
            "gopher_max_top_4gram_char_frac",
            "top_4gram_char_frac",
            "a red fox ran " * 2 + "a red fox ran" + TAIL,
            13 * 3,
        ),
        ("gopher_max_dup_5gram_char_frac", "dup_5gram_char_frac", "a b c d e a b c d e" + TAIL, 5),
        (
            "gopher_max_dup_10gram_char_frac",
            "dup_10gram_char_frac",
            "a b c d e f g h i j " * 2 + TAIL,
            10,
        ),
    ],
)
def test_each_rule_keeps_at_its_threshold_and_removes_just_past_it(flag, reason, text, chars):
    frac = chars / len(text)
    assert rep.gopher_repetition_removal(text, {**OFF, flag: frac}) is None
    assert rep.gopher_repetition_removal(text, {**OFF, flag: frac - 1e-9}) == (
        reason,
        f"{reason} {frac:.3f} > {frac - 1e-9:g}",
    )


def test_no_repeated_5gram_means_no_longer_one_is_looked_for():
    text = " ".join(unique_words(200))
    assert rep.gopher_repetition_removal(text, DEFAULTS) is None
    assert rep.gopher_repetition_removal("", DEFAULTS) is None


@pytest.mark.parametrize("repeats", [10, 120])
def test_a_long_document_gets_the_same_verdict_from_64_bit_keys(monkeypatch, repeats):
    text = " ".join(unique_words(300)) + " a b c d e f" * repeats
    assert len(text.split()) >= rep.NUMPY_MIN_WORDS
    keyed = rep.gopher_repetition_removal(text, DEFAULTS)
    monkeypatch.setattr(rep, "NUMPY_MIN_WORDS", 10**9)
    assert rep.gopher_repetition_removal(text, DEFAULTS) == keyed
    assert (keyed is None) == (repeats == 10)


@pytest.mark.parametrize("seed", range(60))
def test_paragraphs_and_lines_split_as_the_expressions_do(seed):
    rng = random.Random(seed)
    text = "".join(rng.choice("ab \n\n\t\r") for _ in range(rng.randint(0, 40)))
    assert rep.paragraphs(text) == rep.PARAGRAPH_BREAK.split(text.strip())
    assert rep.lines(text) == rep.LINE_BREAK.split(text)
