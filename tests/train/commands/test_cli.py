"""The train-side commands follow the one CLI convention: --help shows defaults and required flags; errors are one line, exit 2."""

from __future__ import annotations

import pytest

from lmshards.train.commands import cli, export_cli, fill_mask_cli

COMMANDS = {"train": cli, "export": export_cli, "fill-mask": fill_mask_cli}


def help_text(module, capsys) -> str:
    with pytest.raises(SystemExit) as exited:
        module.main(["--help"])
    assert exited.value.code == 0
    out, err = capsys.readouterr()
    assert err == ""
    return " ".join(out.split())  # unwrapped


def test_help_marks_required_flags_and_shows_each_default_once(capsys):
    train = help_text(cli, capsys)
    assert train.startswith("usage: lmshards train ")
    assert "--shards SHARDS (required)" in train and "--output OUTPUT (required)" in train
    for flag, default in (
        ("--per_replica_batch", "32"),
        ("--model_family", "roberta"),
        ("--lr_schedule", "linear"),
        ("--learning_rate", "0.0005"),
        ("--log_every", "50"),
        ("--eval_batches", "100"),
        ("--final_eval", "full"),
        ("--precision", "auto"),
        ("--steps_per_execution", "auto"),
    ):
        assert train.count(f"(default: {default})") >= 1, flag
    assert "--eval_steps" not in train and "{full,none}" in train
    for words in (
        "--extend continue this run to a new --steps",
        "falls linearly from its current value to 0",
        "no new warmup",
        "exits 75",
    ):
        assert words in train, words
    assert "%(default)" not in train and "default: 32 (default" not in train
    assert "{roberta,bert,modernbert}" in train

    export = help_text(export_cli, capsys)
    assert export.startswith("usage: lmshards export ") and "--output OUTPUT (required)" in export
    assert "RobertaForMaskedLM / BertForMaskedLM" in export and "--overwrite" in export

    fill_mask = help_text(fill_mask_cli, capsys)
    assert (
        fill_mask.startswith("usage: lmshards fill-mask ")
        and "predictions per mask (default: 5)" in fill_mask
    )


@pytest.mark.parametrize(
    "command, argv, expected",
    [
        (
            "train",
            ["--shards", "s", "--output", "o", "--steps", "5", "--seeds", "3"],
            "lmshards train: error: unrecognized arguments: --seeds 3; unknown flag '--seeds'; did you mean '--seed'?",
        ),
        (
            "train",
            ["--shards", "s", "--output", "o", "--steps", "5", "--per_replica_bach", "8"],
            "lmshards train: error: unrecognized arguments: --per_replica_bach 8; unknown flag '--per_replica_bach'; "
            "did you mean '--per_replica_batch'?",
        ),
        (
            "export",
            ["run", "--output", "m", "--overwirte"],
            "lmshards export: error: unrecognized arguments: --overwirte; unknown flag '--overwirte'; did you mean '--overwrite'?",
        ),
        (
            "fill-mask",
            ["model", "text", "--top-k", "3"],
            "lmshards fill-mask: error: unrecognized arguments: --top-k 3; unknown flag '--top-k'; did you mean '--top_k'?",
        ),
    ],
)
def test_a_bad_flag_is_one_error_line_with_a_hint_and_exit_2(command, argv, expected, capsys):
    with pytest.raises(SystemExit) as exited:
        COMMANDS[command].main(argv)
    assert exited.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(expected) and len(err.splitlines()) == 1


def test_a_bad_value_is_one_error_line_and_exit_2(capsys, tmp_path):
    for flag, value, expected in (
        ("--steps", "0", "'0' is not a whole number in [1, 2147483647]"),
        ("--epochs", "-1", "'-1' is not a finite number in (0, 1000000]"),
    ):
        with pytest.raises(SystemExit) as exited:
            cli.main(["--shards", "s", "--output", "o", flag, value])
        assert exited.value.code == 2
        assert capsys.readouterr().err.startswith(
            f"lmshards train: error: argument {flag}: {expected} "
        )
    assert export_cli.main([str(tmp_path), "--output", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("lmshards export: error: No run_config.json in ")
        and len(err.splitlines()) == 1
    )
