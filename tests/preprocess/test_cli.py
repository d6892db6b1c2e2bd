"""`lmshards preprocess` follows the CLI convention: --help, error lines, typo hints over ours and Beam's flags."""

from __future__ import annotations

import pytest

from lmshards.preprocess.cli import main

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
    assert "(default: 128)" in text and "(default: concat)" in text and "(default: line)" in text
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


def test_a_flag_that_neither_lmshards_nor_beam_declares_is_refused(capsys):
    """Beam alone logs a warning and drops it: --max_seq_length once gave 128-token shards silently."""
    err = _usage_error([*REQUIRED, "--max_seq_length", "64"], capsys)
    assert (
        err == "lmshards preprocess: error: --max_seq_length is --seq_len in lmshards preprocess\n"
    )
    err = _usage_error([*REQUIRED, "--no_such_flag=1"], capsys)
    assert "unrecognized arguments: --no_such_flag=1" in err


def test_the_old_batch_size_flag_names_its_new_name(capsys):
    err = _usage_error([*REQUIRED, "--batch_size", "500"], capsys)
    assert "--batch_size is --documents_per_tokenizer_call in lmshards preprocess" in err


def test_beam_options_and_their_values_pass_through():
    from lmshards.preprocess.cli import build_parser, check_flags

    parser = build_parser()
    argv = [*REQUIRED, "--runner", "DirectRunner", "--direct_num_workers", "2", "--experiments=a"]
    _, others = parser.parse_known_args(argv)
    check_flags(parser, others)  # no SystemExit
    assert others == argv[len(REQUIRED) :]


@pytest.mark.parametrize("value, expected", [("", True), ("=true", True), ("=false", False)])
def test_overwrite_and_verbose_are_switches_as_in_every_command(value, expected):
    from lmshards.plumbing.cli import normalize_switches
    from lmshards.preprocess.cli import build_parser

    parser = build_parser()
    args, _ = parser.parse_known_args([*REQUIRED, f"--overwrite{value}", f"--verbose{value}"])
    assert (args.overwrite, args.verbose) == (expected, expected)
    assert normalize_switches(["--overwrite=yes", "--seq_len=true"], parser.switches()) == [
        "--overwrite",
        "--seq_len=true",
    ]


def test_a_switch_given_another_value_is_refused(capsys):
    err = _usage_error([*REQUIRED, "--overwrite=later"], capsys)
    assert err.startswith("lmshards preprocess: error: --overwrite is a switch")


def _one_error_line(argv: list[str], tmp_path, capsys) -> str:
    """The one stderr line of `lmshards preprocess ARGV` that exits 2 before reading any input."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    (line,) = captured.err.splitlines()
    assert not (tmp_path / "out").exists()  # refused before the output was touched
    return line


@pytest.mark.parametrize(
    "encoding, codec",
    [("rot13", "rot-13"), ("base64", "base64"), ("zlib_codec", "zlib"), ("hex", "hex")],
)
def test_an_encoding_that_is_a_codec_but_not_a_text_encoding_is_one_line(
    encoding, codec, tmp_path, sample_tokenizer, capsys
):
    (tmp_path / "in.txt").write_text("a line\n")
    argv = ["--input", str(tmp_path / "in.txt"), "--tokenizer", str(sample_tokenizer)]
    line = _one_error_line(
        [*argv, "--output", str(tmp_path / "out"), "--encoding", encoding], tmp_path, capsys
    )
    assert line == (
        f"lmshards preprocess: error: --encoding {encoding!r} is not a text encoding (Python's {codec!r} "
        "codec does not decode bytes to text); use a text encoding such as utf-8 (the default), latin-1, "
        "cp1252 or shift_jis."
    )


def test_minhash_bands_and_rows_whose_product_needs_gigabytes_are_one_line(
    tmp_path, sample_tokenizer, capsys
):
    (tmp_path / "in.txt").write_text("a line\n")
    argv = ["--input", str(tmp_path / "in.txt"), "--tokenizer", str(sample_tokenizer)]
    argv += ["--output", str(tmp_path / "out"), "--dedup", "near"]
    line = _one_error_line(
        [*argv, "--minhash_bands", "100", "--minhash_rows", "100"], tmp_path, capsys
    )
    assert line == (
        "lmshards preprocess: error: --minhash_bands 100 x --minhash_rows 100 = 10,000 MinHash values per "
        "document need about 2.0 GB of memory to hash a document, over the 1.0 GB limit; lower "
        "--minhash_bands or --minhash_rows so that their product is at most 5,086 (the default is 14 x 8)."
    )


def test_the_minhash_memory_limit_at_its_boundary():
    from lmshards.preprocess.curation.minhash import MAX_HASHING_BYTES, hashing_bytes
    from lmshards.preprocess.options import PreprocessError, check_minhash_memory

    assert hashing_bytes(5086) <= MAX_HASHING_BYTES < hashing_bytes(5087)
    check_minhash_memory(bands=2543, rows=2)  # 5,086 values: allowed
    with pytest.raises(PreprocessError, match="= 5,087 MinHash values"):
        check_minhash_memory(bands=5087, rows=1)
