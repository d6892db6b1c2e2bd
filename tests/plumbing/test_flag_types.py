"""Numeric flags: every value out of its range is one line naming the flag, the value and the range, exit 2,
before any work; a config built in code is held to the same ranges."""

from __future__ import annotations

import math

import pytest

from lmshards.command.cli import main as lmshards_main
from lmshards.plumbing.flag_types import COUNT, SEED, FlagRangeError, real, whole
from lmshards.preprocess.options import PreprocessConfig
from lmshards.preprocess.stages.shard import ShardCountError, check_shard_count
from lmshards.train.config import TrainConfig


@pytest.mark.parametrize(
    "number, text, value",
    [
        (COUNT, "3", 3),
        (COUNT, "1e3", 1000),  # a float with no fraction is a whole number
        (SEED, "0", 0),
        (real(0.0, low_open=True), "2.5", 2.5),
        (whole(1, 10, words=("auto",)), "auto", "auto"),
    ],
)
def test_values_in_range_parse(number, text, value):
    assert number(text) == value


@pytest.mark.parametrize(
    "number, text",
    [
        (COUNT, "0"),
        (COUNT, "1.5"),
        (COUNT, "x"),
        (SEED, "-1"),
        (SEED, "1e20"),
        (real(0.0), "nan"),
        (real(0.0), "inf"),
        (real(0.0), "-0.1"),
        (real(0.0, low_open=True), "0"),
    ],
)
def test_values_out_of_range_are_refused(number, text):
    assert number.parse(text) is None
    with pytest.raises(FlagRangeError, match=r"--x .* is out of range: it must be"):
        number.check("--x", float(text) if text != "x" else text)


TRAIN = ["train", "--shards", "missing", "--output", "missing-run", "--steps", "3"]


@pytest.mark.parametrize(
    "argv, shown",
    [
        (
            TRAIN + ["--learning_rate", "-1"],
            "argument --learning_rate: '-1' is not a finite number > 0",
        ),
        (
            TRAIN + ["--weight_decay", "-1"],
            "argument --weight_decay: '-1' is not a finite number >= 0",
        ),
        (
            TRAIN + ["--weight_decay", "nan"],
            "argument --weight_decay: 'nan' is not a finite number >= 0",
        ),
        (
            TRAIN + ["--warmup_steps", "-5"],
            "argument --warmup_steps: '-5' is not a whole number in [0, ",
        ),
        (TRAIN + ["--clip_norm", "nan"], "argument --clip_norm: 'nan' is not a finite number > 0"),
        (
            TRAIN[:-2] + ["--epochs", "nan"],
            "argument --epochs: 'nan' is not a finite number in (0, ",
        ),
        (
            TRAIN[:-2] + ["--epochs", "inf"],
            "argument --epochs: 'inf' is not a finite number in (0, ",
        ),
        (
            TRAIN + ["--shuffle_buffer", "0"],
            "argument --shuffle_buffer: '0' is not a whole number in [1, ",
        ),
        (
            TRAIN + ["--shuffle_buffer", "-1"],
            "argument --shuffle_buffer: '-1' is not a whole number",
        ),
        (
            TRAIN + ["--shuffle_buffer", "1e20"],
            "argument --shuffle_buffer: '1e20' is not a whole number",
        ),
        (
            TRAIN + ["--seed", "-1"],
            "argument --seed: '-1' is not a whole number in [0, 2147483647]",
        ),
        (
            TRAIN + ["--seed", "1e20"],
            "argument --seed: '1e20' is not a whole number in [0, 2147483647]",
        ),
        (
            [
                "preprocess",
                "--input",
                "a",
                "--tokenizer",
                "t",
                "--output",
                "o",
                "--num_shards",
                "100000",
            ],
            "argument --num_shards: '100000' is not a whole number in [1, 10000]",
        ),
        (
            [
                "preprocess",
                "--input",
                "a",
                "--tokenizer",
                "t",
                "--output",
                "o",
                "--num_shards",
                "1e20",
            ],
            "argument --num_shards: '1e20' is not a whole number in [1, 10000]",
        ),
        (
            ["repack", "--tokens", "a", "--output", "o", "--num_shards", "1e20"],
            "argument --num_shards: '1e20' is not a whole number in [0, 10000]",
        ),
        (["stats", "s", "--top_k", "-1"], "argument --top_k: '-1' is not a whole number in [1, "),
        (
            ["tokenizer", "train", "--input", "a", "--output", "o", "--seed", "nan"],
            "argument --seed: 'nan' is not a whole number",
        ),
    ],
)
def test_a_number_out_of_range_is_one_line_naming_value_and_range_and_exit_2(argv, shown, capsys):
    with pytest.raises(SystemExit) as exited:
        lmshards_main(argv)
    assert exited.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert shown in err, err


def test_help_states_every_range(capsys):
    with pytest.raises(SystemExit):
        lmshards_main(["train", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert (
        "records held for shuffling (default: 10000); a whole number in [1, 100000000]" in help_text
    )
    assert (
        "AdamW decay; fixed by the run's first command (default: 0.01); a finite number >= 0"
        in help_text
    )


def test_configs_built_in_code_keep_the_same_ranges():
    with pytest.raises(FlagRangeError, match=r"--weight_decay nan is out of range"):
        TrainConfig(shards=("s",), output="o", steps=1, weight_decay=math.nan)
    with pytest.raises(FlagRangeError, match=r"--num_shards 100000 is out of range"):
        PreprocessConfig(inputs=("a",), tokenizer="t", output="o", num_shards=100_000)


def test_more_shards_than_train_records_is_refused_before_writing():
    with pytest.raises(
        ShardCountError, match=r"--num_shards 50 is more than the 40 records of the train split"
    ):
        check_shard_count(50, records=40, split="train")
    check_shard_count(40, records=40, split="train")
    check_shard_count(
        50, records=3, split="validation"
    )  # a small validation split keeps empty shards
    check_shard_count(None, records=3, split="train")
