"""Command lines pasted from Hugging Face's run_mlm.py README and the TPU language-modeling example: every
flag a command does not take is answered with the flag that does the same and the command that takes it,
one line each, before argparse names a missing required flag; exit 2."""

from __future__ import annotations

import re

import pytest

from lmshards.command.cli import main
from lmshards.plumbing.cli import CommandParser

# transformers/examples/pytorch/language-modeling/README.md (run_mlm.py), as written there.
RUN_MLM_README = [
    "--model_name_or_path", "FacebookAI/roberta-base", "--dataset_name", "wikitext",
    "--dataset_config_name", "wikitext-2-raw-v1", "--per_device_train_batch_size", "8",
    "--per_device_eval_batch_size", "8", "--do_train", "--do_eval", "--output_dir", "/tmp/test-mlm",
]  # fmt: skip
RUN_MLM_README_FILES = [
    "--model_name_or_path", "FacebookAI/roberta-base", "--train_file", "path_to_train_file",
    "--validation_file", "path_to_validation_file", "--per_device_train_batch_size", "8",
    "--per_device_eval_batch_size", "8", "--do_train", "--do_eval", "--output_dir", "/tmp/test-mlm",
    "--line_by_line",
]  # fmt: skip
# The TPU example's run_mlm.py line, then its train_model.py (tensorflow/language-modeling-tpu).
RUN_MLM_TPU = [
    "--model_name_or_path", "roberta-base", "--max_seq_length", "512",
    "--per_device_train_batch_size", "16", "--num_train_epochs", "1", "--save_steps", "100",
    "--output_dir", "out",
]  # fmt: skip
TPU_TRAIN_MODEL = [
    "--tokenizer", "unigram-tokenizer-wikitext", "--train_dataset", "gs://bucket/train/",
    "--eval_dataset", "gs://bucket/validation/", "--tpu_name", "my-tpu", "--tpu_zone", "us-central1-a",
    "--gcp_project", "my-project", "--bfloat16", "--num_epochs", "100", "--per_replica_batch_size", "8",
    "--learning_rate", "1e-4", "--weight_decay_rate", "1e-3", "--max_length", "512",
    "--mlm_probability", "0.15", "--output_dir", "trained_model", "--hub_model_id", "me/model",
]  # fmt: skip
COMMAND_LINES = {
    "readme": RUN_MLM_README,
    "readme_files": RUN_MLM_README_FILES,
    "tpu_run_mlm": RUN_MLM_TPU,
    "tpu_train_model": TPU_TRAIN_MODEL,
}
COMMANDS = ["train", "preprocess", "tokenizer train", "export"]
NAMED_COMMAND_RE = re.compile(r"`lmshards ((?:tokenizer )?[a-z][a-z-]*)")
FLAG_RE = re.compile(r"(?<![\w-])--[a-z][a-z0-9_]*[a-z0-9]")


@pytest.fixture(scope="module")
def command_flags() -> dict[str, set[str]]:
    """Each command's own flags, Beam's options included for preprocess."""
    flags = {}
    for command in [*COMMANDS, "repack"]:
        seen: list[CommandParser] = []
        with pytest.MonkeyPatch.context() as monkeypatch:
            original = CommandParser.parse_known_args

            def recording(self, args=None, namespace=None, seen=seen, original=original):
                seen.append(self)
                return original(self, args, namespace)

            monkeypatch.setattr(CommandParser, "parse_known_args", recording)
            with pytest.raises(SystemExit):
                main([*command.split(), "--help"])
        flags[command] = set(seen[-1].known_flags())
    return flags


def _run(argv: list[str], capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    return exited.value.code, capsys.readouterr().err


@pytest.mark.parametrize("line", list(COMMAND_LINES))
@pytest.mark.parametrize("command", COMMANDS)
def test_every_foreign_flag_of_a_pasted_line_gets_its_lmshards_name_first(
    command, line, command_flags, capsys
):
    argv = COMMAND_LINES[line]
    code, err = _run([*command.split(), *argv], capsys)
    assert code == 2
    foreign = [arg for arg in argv if arg.startswith("--") and arg not in command_flags[command]]
    lines = err.splitlines()
    # One line per foreign flag, in the order given, and nothing else: no "required" line before or after.
    assert len(lines) == len(foreign), err
    prefix = f"lmshards {command}: error: "
    for flag, text in zip(foreign, lines, strict=True):
        assert text.startswith(f"{prefix}{flag} "), text
        hint = text.removeprefix(prefix)
        named = NAMED_COMMAND_RE.search(hint)
        target = named[1] if named else command
        assert target in command_flags, hint
        flags = FLAG_RE.findall(hint)[1:]  # the first is the foreign flag itself
        assert flags or hint.startswith(f"{flag} is not needed: `lmshards train`"), hint
        assert all(f in command_flags[target] or f in command_flags["repack"] for f in flags), hint
        # The first flag named is the one to use, on the command named.
        if flags:
            assert flags[0] in command_flags[target], hint
    assert "required" not in err


def test_max_seq_length_given_to_train_names_preprocess_and_repack(capsys):
    code, err = _run(["train", *RUN_MLM_TPU], capsys)
    assert code == 2
    assert (
        "lmshards train: error: --max_seq_length belongs to `lmshards preprocess --seq_len`, not "
        "lmshards train: a shard set already made fixes it; use `lmshards repack --seq_len` to change it\n"
    ) in err
    assert (
        err.splitlines()[0]
        == "lmshards train: error: --model_name_or_path is --init_from in lmshards train"
    )


def test_the_required_flags_come_after_the_hints_are_heeded(capsys):
    """With no foreign flag left, argparse's own message about required flags is the answer."""
    code, err = _run(["train", "--learning_rate", "1e-4"], capsys)
    assert code == 2
    assert err.startswith(
        "lmshards train: error: the following arguments are required: --shards, --output"
    )


def test_help_is_shown_even_beside_a_foreign_flag(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["train", "--max_seq_length", "512", "--help"])
    assert exited.value.code == 0
    assert "--per_replica_batch" in capsys.readouterr().out


def test_a_flag_the_command_takes_is_never_hinted(capsys):
    """--learning_rate is a train flag: train parses it, and preprocess points at train."""
    code, err = _run(["preprocess", "--learning_rate", "1e-4"], capsys)
    assert code == 2
    assert err == (
        "lmshards preprocess: error: --learning_rate belongs to `lmshards train --learning_rate`, not "
        "lmshards preprocess\n"
    )
