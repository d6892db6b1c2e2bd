"""C4's bad-words rule (lmshards/preprocess/curation/steps/c4_badwords.py): the match is C4's regular
expression's, the list is fingerprinted before work starts, and a bad list is one clear error."""

from __future__ import annotations

import hashlib
import random
import re
from pathlib import Path

import pytest

from lmshards.preprocess.curation.steps import (
    SelectedStep,
    StepError,
    prepare_steps,
    select_steps,
)
from lmshards.preprocess.curation.steps import c4_badwords as bw
from lmshards.preprocess.curation.steps.base import Judgement

# Stand-ins for a real list's entries: single words, ones with non-word characters inside, at the end
# and at the start, and a phrase.
WORDS = ("grue", "zorp", "s&m", "wet blanket", "2g1c", "z.o.r.p.", "@home")


def listed(tmp_path: Path, *lines: str) -> str:
    path = tmp_path / "words.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def c4_regex(words, *, anywhere=False) -> re.Pattern:
    """C4's code's expression (tensorflow_datasets c4_utils), the reference the matcher must equal."""
    alternation = "|".join(map(re.escape, words))
    return re.compile(alternation if anywhere else rf"(?:\W|^)({alternation})(?:\W|$)")


def test_the_found_entry_is_the_longest_at_its_place():
    assert bw.WordMatcher(("z.o.r.p.", "z"), anywhere=False).first("a z.o.r.p. b") == (
        2,
        "z.o.r.p.",
    )


@pytest.mark.parametrize(
    ("page", "found"),
    [
        ("A grue ate him.", (2, "grue")),
        ("GRUE!", (0, "grue")),  # case ignored
        ("the grues are here", None),  # a longer word is not the listed one
        ("agrue", None),
        ("grue_like", None),  # underscore is a word character, as in C4's \w
        ("ok (s&m) ok", (4, "s&m")),
        ("ms&m", None),
        ("a wet  blanket", None),  # the phrase's one space is part of it
        ("a Wet Blanket.", (2, "wet blanket")),
        ("see 2g1c", (4, "2g1c")),
        ("zorp then grue", (0, "zorp")),  # the earliest one
        ("grue then s&m", (0, "grue")),
        ("s&m then grue", (0, "s&m")),
        ("", None),
        ("at z.o.r.p. now", (3, "z.o.r.p.")),
        ("z.o.r.p.x", None),  # a word character after the entry
        ("go @home!", (3, "@home")),
        ("go x@home", None),
    ],
)
def test_the_match_is_c4s_whole_word_match_case_ignored(page, found):
    matcher = bw.WordMatcher(WORDS, anywhere=False)
    assert matcher.first(page) == found
    assert (c4_regex(WORDS).search(page.lower()) is not None) == (found is not None)


def test_anywhere_drops_the_flanks_as_c4_does_for_languages_without_spaces():
    matcher = bw.WordMatcher(("猫", "grue"), anywhere=True)
    assert matcher.first("我的猫") == (2, "猫")
    assert matcher.first("agrues") == (1, "grue")
    assert bw.WordMatcher(("grue",), anywhere=False).first("agrues") is None


def test_the_matcher_agrees_with_c4s_expression_on_random_pages():
    rng = random.Random(7)
    pieces = [
        *WORDS,
        "gru",
        "e",
        "wet",
        "blanket",
        "s",
        "&",
        "m",
        "z",
        "o.",
        "@",
        "home",
        "_",
        " ",
        ".",
    ]
    pieces += ["  ", "-", "é", "2"]
    for anywhere in (False, True):
        matcher = bw.WordMatcher(WORDS, anywhere=anywhere)
        regex = c4_regex(WORDS, anywhere=anywhere)
        for _ in range(3000):
            page = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
            expected = regex.search(page.lower())
            found = matcher.first(page)
            assert (found is None) == (expected is None), (page, anywhere)
            if found is not None:
                start = expected.start(1) if expected.groups() else expected.start()
                assert found[0] == start, (page, anywhere)


def test_a_page_with_a_listed_word_is_removed_naming_it_and_where(tmp_path):
    step = bw.C4BadWords({bw.FILE: listed(tmp_path, *WORDS), bw.ANYWHERE: False})
    assert step.judge(["Nothing here.", "Beware the Grue."]) == [
        Judgement("Nothing here."),
        Judgement(None, "bad_word", "listed 'grue' at character 11"),
    ]


def test_the_list_is_lowercased_deduplicated_and_blank_lines_skipped(tmp_path):
    path = listed(tmp_path, "Grue", "", "  grue  ", "Zorp")
    assert bw.read_word_list(path)[1] == ("grue", "zorp")


def test_prepare_records_the_lists_fingerprint_and_size(tmp_path):
    path = listed(tmp_path, *WORDS)
    selected = select_steps(quality=(), values={bw.FILE: path, bw.ANYWHERE: False}, switches={})
    assert [s.name for s in selected] == ["c4_badwords"]
    (prepared,) = prepare_steps(selected)
    assert prepared.options == {
        bw.FILE: path,
        bw.ANYWHERE: False,
        bw.SHA256: hashlib.sha256(Path(path).read_bytes()).hexdigest(),
        bw.WORDS: len(WORDS),
    }


def test_a_list_changed_after_planning_is_refused_where_the_step_is_built(tmp_path):
    path = listed(tmp_path, *WORDS)
    (prepared,) = prepare_steps(
        [SelectedStep("c4_badwords", "document", {bw.FILE: path, bw.ANYWHERE: False})]
    )
    Path(path).write_text("grue\n", encoding="utf-8")
    with pytest.raises(ValueError, match="changed since the run started"):
        bw.C4BadWords(prepared.options)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "does not exist; give the path of a word list"),
        (b"\n  \n", "holds no words; give a list, one word or phrase a line"),
        (b"\xff\xfe", "is not UTF-8 text"),
        (b"x" * (bw.MAX_LIST_BYTES + 1), "over the 1MiB limit"),
    ],
)
def test_a_bad_list_is_one_error_naming_the_flag_and_the_fix(tmp_path, content, message):
    path = tmp_path / "words.txt"
    if content is not None:
        path.write_bytes(content)
    chosen = SelectedStep("c4_badwords", "document", {bw.FILE: str(path), bw.ANYWHERE: False})
    with pytest.raises(StepError, match=re.escape(message)) as raised:
        prepare_steps([chosen])
    assert "c4_badwords_file" in str(raised.value)
