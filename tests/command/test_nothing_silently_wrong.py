"""Nothing silently wrong: what a command cannot do right it refuses in one line with its exit code,
never a traceback, never a wrong result that looks complete."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from lmshards.preprocess.cli import main as preprocess_main
from lmshards.preprocess.options import (
    CURATION_FLAGS,
    DEPENDENT_FLAGS,
    PreprocessConfig,
    PreprocessError,
    check_dependent_flags,
    preprocess_flags,
)

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


# ---------------------------------------------------------------- flags a command does not use


def _own_flags(parser) -> set[str]:
    return {opt for action in parser._actions for opt in action.option_strings}


def _refused(main, argv: list[str], capsys, command: str) -> str:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return _error_line(captured.err, command)


def test_stats_refuses_every_preprocess_flag_naming_the_command_that_takes_it(tmp_path, capsys):
    from lmshards.corpus_tools.stats.cli import build_parser
    from lmshards.corpus_tools.stats.cli import main as stats_main

    foreign = sorted(preprocess_flags() - _own_flags(build_parser()))
    assert {"--num_shards", "--keep_tokens", "--text_field", "--seq_len", "--dedup"} <= set(foreign)
    for flag in foreign:
        line = _refused(stats_main, [str(tmp_path), flag, "1"], capsys, "stats")
        assert line == (
            f"lmshards stats: error: {flag} is a flag of `lmshards preprocess`; `lmshards stats` does "
            "not take it (see `lmshards stats --help`)"
        )


def test_repack_refuses_every_preprocess_flag_it_does_not_declare(tmp_path, capsys):
    from lmshards.preprocess.repack_cli import build_parser
    from lmshards.preprocess.repack_cli import main as repack_main

    own = _own_flags(build_parser())
    foreign = sorted(preprocess_flags() - own - set(CURATION_FLAGS))  # curation: its own message
    assert {"--keep_tokens", "--text_field", "--encoding", "--input"} <= set(foreign)
    assert "--num_shards" in own  # a repack flag too: parsed as repack's
    required = ["--tokens", str(tmp_path / "store"), "--output", str(tmp_path / "new")]
    for flag in foreign:
        line = _refused(repack_main, [*required, flag, "1"], capsys, "repack")
        assert line == (
            f"lmshards repack: error: {flag} is a flag of `lmshards preprocess`; `lmshards repack` does "
            "not take it (see `lmshards repack --help`)"
        )
    assert not (tmp_path / "new").exists()


# Every flag that applies only with another option, and a value that differs from its default.
DEPENDENT = [
    (["--minhash_ngram", "3"], "--minhash_ngram is ignored without --dedup near: add --dedup near"),
    (
        ["--minhash_bands", "4", "--dedup", "exact"],
        "--minhash_bands is ignored without --dedup near",
    ),
    (["--minhash_rows", "2"], "--minhash_rows is ignored without --dedup near"),
    (
        ["--decontaminate_ngram", "5"],
        "--decontaminate_ngram is ignored without --decontaminate: add --decontaminate EVAL_SET",
    ),
    (["--decontaminate_text_field", "q"], "--decontaminate_text_field is ignored without"),
    (
        ["--target_shard_mb", "5", "--num_shards", "2"],
        "--target_shard_mb is ignored with --num_shards, which fixes the count: drop --num_shards",
    ),
]


def test_the_dependent_flags_listed_here_are_all_there_are():
    assert sorted(flags[0] for flags, _ in DEPENDENT) == sorted(DEPENDENT_FLAGS)


@pytest.mark.parametrize(("flags", "message"), DEPENDENT)
def test_a_flag_without_the_option_it_needs_is_refused(tmp_path, capsys, flags, message):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(REPEATED, encoding="utf-8")
    argv = ["--input", str(corpus), "--tokenizer", "tok.json", "--output", str(tmp_path / "out")]
    assert preprocess_main([*argv, *flags]) == 2
    line = _error_line(capsys.readouterr().err, "preprocess")
    assert line.startswith(f"lmshards preprocess: error: {message}")
    assert line.endswith(f" or leave {flags[0]} out.")
    assert not (tmp_path / "out").exists()


def test_a_dependent_flag_at_its_default_passes_as_the_flex_template_sends_it(tmp_path):
    config = PreprocessConfig(
        inputs=("in.txt",), tokenizer="tok.json", output="out", minhash_rows=8, num_shards=2
    )
    check_dependent_flags(config)  # --minhash_rows 8 and --target_shard_mb 128 are the defaults
    with pytest.raises(PreprocessError, match="--minhash_rows is ignored without --dedup near"):
        check_dependent_flags(dataclasses.replace(config, minhash_rows=9))


# ---------------------------------------------------------------- reading a run that is training


def _run_whose_checkpoint_is_gone(run: Path, tokenizer: Path) -> Path:
    """A TensorFlow run's directory whose only checkpoint lost its data file, as rotation leaves it."""
    from lmshards.train.config import preset_config

    model = preset_config("tiny", family="roberta", vocabulary_size=2000).to_dict()
    (run / "checkpoints").mkdir(parents=True)
    (run / "tokenizer").mkdir()
    (run / "tokenizer" / "tokenizer.json").write_bytes(tokenizer.read_bytes())
    (run / "run_config.json").write_text(
        json.dumps({"train": {"backend": "tensorflow"}, "model": model})
    )
    (run / "checkpoints" / "ckpt-1.index").write_bytes(b"rotated away")
    return run


@pytest.mark.parametrize("live", [True, False])
def test_export_of_a_run_whose_checkpoint_rotated_away(tmp_path, sample_tokenizer, capsys, live):
    from lmshards.plumbing.lease import acquire
    from lmshards.train.commands.export_cli import main as export_main

    run = _run_whose_checkpoint_is_gone(tmp_path / "run", sample_tokenizer)
    lease = acquire(str(run), command="train") if live else None
    try:
        code = export_main([str(run), "--output", str(tmp_path / "model")])
    finally:
        if lease is not None:
            lease.release()
    assert code == 2
    line = _error_line(capsys.readouterr().err, "export")
    if live:
        assert line.startswith(
            f"lmshards export: error: {str(run)!r} is a live run: `lmshards train` on host "
        )
        assert line.endswith(
            "is training it (its lease says so), and it removed the checkpoint this command was "
            "reading as it keeps only its newest ones. Run this command again (it reads the newest "
            "checkpoint), or once the run has finished."
        )
        assert "--restart" not in line
    else:  # nobody trains it: the checkpoint is damaged, and the run's own fixes apply
        assert line.startswith(
            f"lmshards export: error: No checkpoint in {str(run / 'checkpoints')!r}"
        )
    assert not (tmp_path / "model").exists()


def _init_source(run: Path, backend: str):
    from lmshards.train.config import preset_config
    from lmshards.train.export.init_source import RUN, InitSource

    model = preset_config("tiny", family="roberta", vocabulary_size=2000)
    return InitSource(str(run), RUN, model, {}, None, backend=backend)


def test_init_from_a_run_whose_checkpoint_rotated_away_says_it_is_live(tmp_path, sample_tokenizer):
    from lmshards.plumbing.errors import LmshardsError
    from lmshards.plumbing.lease import acquire
    from lmshards.train.export.init_source import load_init_weights

    run = _run_whose_checkpoint_is_gone(tmp_path / "run", sample_tokenizer)
    lease = acquire(str(run), command="train")
    try:
        with pytest.raises(LmshardsError) as refused:
            load_init_weights(_init_source(run, "tensorflow"), backend="tensorflow")
    finally:
        lease.release()
    message = str(refused.value)
    assert message.startswith(f"{str(run)!r} is a live run: `lmshards train` on host ")
    assert message.endswith(
        "Run this command again (it reads the newest checkpoint), or once the run has finished."
    )
    assert "--restart" not in message


def test_jax_from_a_tensorflow_run_names_exports_own_command_line(tmp_path):
    from lmshards.plumbing.errors import LmshardsError
    from lmshards.train.export.init_source import load_init_weights

    with pytest.raises(LmshardsError) as refused:
        load_init_weights(_init_source(tmp_path / "run", "tensorflow"), backend="jax")
    message = str(refused.value)
    assert f"Export it (`lmshards export {tmp_path / 'run'} --output DIR`)" in message
    assert "--run" not in message
