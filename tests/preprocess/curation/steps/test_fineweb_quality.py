"""FineWeb's rules (lmshards/preprocess/curation/steps/fineweb_quality.py): each at its default
threshold and just past it."""

from __future__ import annotations

from lmshards.preprocess.curation.steps import fineweb_quality as fw

DEFAULTS = {flag.field: flag.default for flag in fw.STEP.flags}
PROSE = "this line is long enough to count as prose here"  # 48 characters, 10 words, no end mark


def verdict(lines: list[str]) -> tuple[str, str] | None:
    return fw.fineweb_quality_removal("\n".join(lines), DEFAULTS)


def numbered(n: int, end: str = "") -> list[str]:
    """n different long lines."""
    return [f"{PROSE} {i:03d}{end}" for i in range(n)]


def test_the_defaults_are_the_papers():
    assert DEFAULTS == {
        "fineweb_min_line_punct_ratio": 0.12,
        "fineweb_max_short_line_ratio": 0.67,
        "fineweb_short_line_length": 30,
        "fineweb_max_char_dup_ratio": 0.01,
        "fineweb_max_newline_word_ratio": 0.3,
    }


def test_empty_and_blank_documents():
    assert fw.fineweb_quality_removal(" \n\t\n", DEFAULTS) == ("empty", "non-blank lines 0")


def test_lines_ending_in_punctuation():
    lines = numbered(3, "。") + numbered(25)[3:]  # 3 of 25 = 0.12, any sentence terminal
    assert verdict(lines) is None
    lines = numbered(2, "!") + numbered(25)[2:]
    assert verdict(lines) == ("line_punct_ratio", "line_punct_ratio 0.080 < 0.12")
    assert verdict(numbered(3, ". ") + numbered(25)[3:])[0] == "line_punct_ratio"  # trailing space


def test_short_lines():
    lines = numbered(33, ".") + [
        f"short line {i:02d}." for i in range(67)
    ]  # 67 of 100, 15 characters
    assert verdict(lines) is None
    lines = numbered(32, ".") + [f"short line {i:02d}." for i in range(68)]
    assert verdict(lines) == ("short_line_ratio", "short_line_ratio 0.680 > 0.67")
    exactly_short = [f"{'y' * 28}{i}." for i in range(3)]  # 30 characters: short
    assert verdict(numbered(1, ".") + exactly_short) == (
        "short_line_ratio",
        "short_line_ratio 0.750 > 0.67",
    )


def test_repeated_lines_by_characters():
    lines = numbered(40, ".")  # 40 x 53 = 2120 characters
    repeated = ["aaaaaaaaaaaaaaaaaaaa."]  # 21 characters: 21 / (2120 + 42) < 0.01
    assert verdict(lines + repeated * 2) is None
    assert verdict(lines + ["a" * 22 + "."] * 2) == (
        "char_dup_ratio",
        "char_dup_ratio 0.011 > 0.01",
    )


def test_newlines_per_word():
    text = "\n".join(numbered(10, "."))  # 9 newlines, 120 words
    assert (
        fw.fineweb_quality_removal(text, {**DEFAULTS, "fineweb_max_newline_word_ratio": 0.075})
        is None
    )
    assert fw.fineweb_quality_removal(
        text, {**DEFAULTS, "fineweb_max_newline_word_ratio": 0.07}
    ) == (
        "list_ratio",
        "newlines_per_word 0.075 > 0.07",
    )
