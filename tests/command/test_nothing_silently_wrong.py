"""Nothing silently wrong: what a command cannot do right it refuses in one line with its exit code,
never a traceback, never a wrong result that looks complete."""

from __future__ import annotations

from pathlib import Path

from lmshards.preprocess.cli import main as preprocess_main

SHORT_LINES = "a b c\nd e f\ng h\n"
REPEATED = "the cat sat on the mat today\n"


def _error_line(err: str, command: str) -> str:
    """The one error line of err; fails on a traceback or more than one line."""
    assert "Traceback" not in err
    (line,) = [line for line in err.splitlines() if line.startswith(f"lmshards {command}: error: ")]
    return line


def _preprocess(tmp_path: Path, tokenizer: Path, text: str, *flags: str) -> tuple[int, Path]:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(text, encoding="utf-8")
    output = tmp_path / "out"
    argv = ["--input", str(corpus), "--tokenizer", str(tokenizer), "--output", str(output)]
    return preprocess_main([*argv, *flags]), output


# ---------------------------------------------------------------- an empty result is a failure


def test_preprocess_of_documents_all_too_short_exits_1_and_leaves_no_manifest(
    tmp_path, sample_tokenizer, capsys
):
    code, output = _preprocess(tmp_path, sample_tokenizer, SHORT_LINES, "--seq_len", "64")
    assert code == 1
    line = _error_line(capsys.readouterr().err, "preprocess")
    assert line == (
        "lmshards preprocess: error: every document was removed, so no record was written and no "
        "manifest: 3 too short to fill one 64-token record (their 14 tokens dropped by --remainder drop). "
        "Pass a smaller --seq_len or --remainder pad for short documents, or check --dedup, "
        "--decontaminate and the inputs."
    )
    assert not (output / "manifest.json").exists()


def test_preprocess_whose_curation_removes_everything_names_each_reason(
    tmp_path, sample_tokenizer, capsys
):
    eval_set = tmp_path / "eval.txt"
    eval_set.write_text(REPEATED, encoding="utf-8")
    text = REPEATED + "a b\n" * 2  # contaminated; then two copies of a document too short to keep
    code, output = _preprocess(
        tmp_path,
        sample_tokenizer,
        text,
        "--seq_len",
        "8",
        "--dedup",
        "exact",
        "--decontaminate",
        str(eval_set),
        "--decontaminate_ngram",
        "3",
    )
    assert code == 1
    line = _error_line(capsys.readouterr().err, "preprocess")
    assert (
        ": 1 removed by --decontaminate; 1 exact duplicates (--dedup); 1 too short to fill one "
        "8-token record (their 4 tokens dropped by --remainder drop). "
    ) in line
    assert not (output / "manifest.json").exists()
