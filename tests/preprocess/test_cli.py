"""`lmshards preprocess` follows the CLI convention: --help, error lines, typo hints over ours and Beam's flags."""

from __future__ import annotations

import pytest

from preprocess.cli import main

REQUIRED = ["--input", "in.txt", "--tokenizer", "tok.json", "--output", "out"]


def _usage_error(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    return captured.err


def test_help_marks_required_flags_and_shows_defaults(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # unwrapped
    assert text.startswith("usage: lmshards preprocess")
    for flag in ("--input", "--tokenizer", "--output"):
        assert f"{flag} {flag[2:].upper()} (required)" in text
    assert "(default: 128)" in text and "(default: drop)" in text and "(default: line)" in text
    assert "DaskRunner" in text


@pytest.mark.parametrize(
    "typo,meant",
    [
        ("--runer", "--runner"),  # a Beam flag, not --remainder
        ("--seq-len", "--seq_len"),
        ("--projct", "--project"),
        ("--tokenizer_thread", "--tokenizer_threads"),
    ],
)
def test_a_misspelt_flag_gets_a_hint_from_every_known_flag(capsys, typo, meant):
    err = _usage_error([*REQUIRED, typo, "5"], capsys)
    assert err.startswith("lmshards preprocess: error: ")
    assert f"unknown flag {typo!r}; did you mean {meant!r}?" in err


def test_missing_required_flags_are_named(capsys):
    err = _usage_error(["--tokenizer", "tok.json"], capsys)
    assert err.startswith(
        "lmshards preprocess: error: the following arguments are required: --input, --output"
    )


def test_unknown_runner_is_an_error_line_not_a_traceback(capsys):
    assert main([*REQUIRED, "--runner", "Foo"]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [
        "lmshards preprocess: error: --runner 'Foo' is not a known runner; use one of DirectRunner, DataflowRunner, "
        "DaskRunner, FlinkRunner, SparkRunner, PrismRunner (or a full class path)."
    ]
    assert captured.out == ""


def test_logs_go_to_stderr_and_stdout_holds_only_the_summary(tmp_path, sample_tokenizer, capsys):
    corpus = tmp_path / "in.txt"
    corpus.write_text(
        "\n".join(f"line {i} of a small corpus with a few more words" for i in range(300))
    )
    argv = [
        "--input",
        str(corpus),
        "--tokenizer",
        str(sample_tokenizer),
        "--output",
        str(tmp_path / "out"),
        "--seq_len",
        "16",
        "--tokenizer_threads",
        "1",
    ]
    assert main(argv) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0].startswith(f"lmshards preprocess: wrote {tmp_path / 'out'} in ")
    assert [line.split()[0] for line in lines[1:]] == ["train", "validation"]
    assert "preprocess finished in" in captured.err  # our INFO log line
