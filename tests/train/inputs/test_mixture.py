"""Weighted mixtures of shard sets: the --shards flag, checks between sets, shares, exact resume, repeats, per-set eval."""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from lmshards.plumbing.errors import LmshardsError  # noqa: E402
from lmshards.schemas.manifest import read_manifest, write_manifest  # noqa: E402
from lmshards.schemas.records import parse_spec  # noqa: E402
from lmshards.train.commands import cli  # noqa: E402
from lmshards.train.commands.preview_cli import unmasked_rows  # noqa: E402
from lmshards.train.inputs import data, mixture  # noqa: E402
from tests.conftest import SAMPLE_DIR  # noqa: E402
from tests.helpers.shard_factory import write_sample_shards  # noqa: E402

SEQ_LEN = 32
BATCH = 16
WEIGHTS = (0.7, 0.3)
STEPS = 150  # 2400 sequences: the small set runs out six times, the large one once


def write_set(
    out: Path, tokenizer: Path, language: str, lines: int, *, seq_len: int = SEQ_LEN
) -> str:
    write_sample_shards(
        out,
        tokenizer,
        sorted(SAMPLE_DIR.glob(f"{language}/*.txt")),
        seq_len=seq_len,
        train_shards=4,
        validation_shards=2,
        max_lines_per_file=lines,
    )
    return str(out)


@pytest.fixture(scope="module")
def sets(tmp_path_factory, sample_tokenizer) -> tuple[str, str]:
    """(a large English set: 948 train records, a small Chinese one: 112), both named `shards`."""
    root = tmp_path_factory.mktemp("sets")
    return (
        write_set(root / "en" / "shards", sample_tokenizer, "en", 150),
        write_set(root / "zh" / "shards", sample_tokenizer, "zh", 40),
    )


@pytest.fixture(scope="module")
def origin(sets) -> dict[bytes, tuple[int, int]]:
    """A train record's input_ids (int32 bytes) -> (set index, file index within the set)."""
    spec = parse_spec(read_manifest(sets[0]).features(), names=("input_ids",))
    table = {}
    for set_index, path in enumerate(sets):
        for file_index, shard in enumerate(read_manifest(path).shard_paths(path, "train")):
            for record in (
                tf.data.TFRecordDataset(shard)
                .map(lambda r: tf.io.parse_single_example(r, spec))
                .as_numpy_iterator()
            ):
                table[bytes(record["input_ids"].astype(np.int32))] = (set_index, file_index)
    return table


def mixture_stream(
    sets, *, start_step: int = 0, num_pipelines: int = 1, pipeline_id: int = 0, seed: int = 5
):
    """The masked batches one input pipeline yields for a 0.7/0.3 mixture of the two sets."""
    mix = mixture.open_mixture(sets, WEIGHTS)
    passes = mixture.pass_records(mix, num_pipelines=num_pipelines, unit=BATCH)
    spec = data.masking_spec(mix.manifest, recipe="token", mlm_probability=0.15, tokenizer=None)
    return data.train_dataset(
        mixture.pipeline_streams(mix, passes, num_pipelines=num_pipelines, pipeline_id=pipeline_id),
        block_counts=mix.block_counts(),
        features=mix.manifest.features(),
        batch_size=BATCH,
        shuffle_buffer=64,
        seed=seed,
        start_step=start_step,
        masking=spec,
        with_segment_ids=False,
        pipeline_id=pipeline_id,
    )


def rows_of(ds, steps: int) -> np.ndarray:
    return np.concatenate(
        [unmasked_rows({k: v.numpy() for k, v in b.items()})[0] for b in ds.take(steps)]
    )


# ----- the flag and the checks between sets


@pytest.mark.parametrize(
    "text, path, weight",
    [
        ("data/shards", "data/shards", None),
        ("data/shards:0.7", "data/shards", 0.7),
        ("data/shards:3", "data/shards", 3.0),
        ("data/shards:1e-2", "data/shards", 0.01),
        ("gs://bucket/shards", "gs://bucket/shards", None),
        ("gs://bucket/shards:0.25", "gs://bucket/shards", 0.25),
        (
            "gs://bucket/a:b",
            "gs://bucket/a:b",
            None,
        ),  # what follows the colon is no number: part of the path
    ],
)
def test_shards_flag_splits_a_weight_off_the_last_colon_only(text, path, weight):
    assert mixture.parse_shards_flag(text) == mixture.ShardSource(path, weight)


@pytest.mark.parametrize("text", ["a:0", "a:-1", "gs://b/a:nan", "a:inf"])
def test_a_weight_must_be_positive_and_finite(text):
    with pytest.raises(LmshardsError, match="must be a positive number"):
        mixture.parse_shards_flag(text)


def test_weights_are_given_for_every_set_or_none():
    assert mixture.source_weights([mixture.ShardSource("a"), mixture.ShardSource("b")]) == (
        1.0,
        1.0,
    )
    assert mixture.source_weights(
        [mixture.ShardSource("a", 2.0), mixture.ShardSource("b", 1.0)]
    ) == (2.0, 1.0)
    with pytest.raises(LmshardsError, match="--shards 'b' has no weight"):
        mixture.source_weights([mixture.ShardSource("a", 2.0), mixture.ShardSource("b")])


def test_set_names_are_basenames_made_unique():
    assert mixture.set_names(["gs://a/shards", "/b/shards/", "c/web", "d/shards"]) == (
        "shards",
        "shards-2",
        "web",
        "shards-3",
    )


def test_block_counts_follow_the_weights(sets):
    assert mixture.open_mixture(sets, WEIGHTS).block_counts() == (700, 300)
    assert mixture.open_mixture([*sets, sets[0]]).block_counts() == (
        334,
        333,
        333,
    )  # equal weights by default
    assert mixture.open_mixture(sets, (2.0, 1.0)).block_counts() == (667, 333)
    with pytest.raises(LmshardsError, match="too small to be drawn"):
        mixture.open_mixture(sets, (1.0, 1e-4))


def train_error(capsys, *argv: str) -> str:
    assert cli.main(["--steps", "1", "--output", "unused", *argv]) == 2
    return capsys.readouterr().err


def test_sets_with_another_seq_len_or_tokenizer_are_refused(
    sets, sample_tokenizer, tmp_path, capsys
):
    short = write_set(tmp_path / "short", sample_tokenizer, "ru", 50, seq_len=16)
    err = train_error(capsys, "--shards", sets[0], "--shards", short)
    assert err.startswith(
        f"lmshards train: error: --shards {sets[0]!r} and --shards {short!r} differ in seq_len (32 vs 16)"
    )
    other = write_set(tmp_path / "other", sample_tokenizer, "ru", 50)
    manifest = read_manifest(other)
    other_tokenizer = dataclasses.replace(manifest.tokenizer, fingerprint="sha256:" + "0" * 64)
    write_manifest(other, dataclasses.replace(manifest, tokenizer=other_tokenizer))
    err = train_error(capsys, "--shards", f"{sets[1]}:1", "--shards", f"{other}:2")
    assert f"--shards {sets[1]!r} and --shards {other!r} differ in tokenizer fingerprint" in err
    assert "sha256:" + "0" * 64 in err and len(err.splitlines()) == 1


# ----- sampling


def test_realised_shares_match_the_weights_and_the_closed_form_counts(sets, origin):
    rows = rows_of(mixture_stream(sets), STEPS)
    from_set = np.array([origin[bytes(r.astype(np.int32))][0] for r in rows])
    # Over the whole run, and over every run of at least 200 sequences (stopped anywhere within a block).
    shares = np.cumsum(from_set == 0) / np.arange(1, len(rows) + 1)
    assert np.abs(shares[199:] - WEIGHTS[0]).max() < 0.01
    # Which set each example came from is exactly the choice stream, and counting needs no reading.
    choices = list(
        data.mixture_choices((700, 300), seed=5, pipeline_id=0, start_example=0)
        .take(len(rows))
        .as_numpy_iterator()
    )
    np.testing.assert_array_equal(from_set, choices)
    read = data.sequences_read((700, 300), seed=5, num_pipelines=1, examples_per_pipeline=len(rows))
    assert read == tuple(np.bincount(from_set))
    # Every block of 1000 holds exactly 700 and 300.
    assert np.bincount(from_set[:1000]).tolist() == [700, 300] and np.bincount(
        from_set[1000:2000]
    ).tolist() == [700, 300]


def test_a_resumed_mixture_reads_exactly_what_an_uninterrupted_one_does(sets):
    full = [b["token_ids"].numpy() for b in mixture_stream(sets).take(STEPS)]
    # Resume inside the first block, after a block boundary (1000 examples) and after the small set's passes.
    for start in (3, 70, 140):
        resumed = [
            b["token_ids"].numpy()
            for b in mixture_stream(sets, start_step=start).take(STEPS - start)
        ]
        np.testing.assert_array_equal(
            np.stack(resumed), np.stack(full[start:]), err_msg=f"start_step {start}"
        )
    assert (next(iter(mixture_stream(sets, seed=6)))["token_ids"].numpy() != full[0]).any()


def test_an_epoch_is_one_pass_over_all_sets_and_a_set_that_runs_out_repeats_counted(sets, origin):
    mix = mixture.open_mixture(sets, WEIGHTS)
    passes = mixture.pass_records(mix, num_pipelines=1, unit=BATCH)
    assert passes == (944, 112)  # 948 and 112 records, in whole batches
    assert mixture.steps_per_epoch(passes, unit=BATCH) == (944 + 112) // BATCH
    rows = rows_of(mixture_stream(sets), STEPS)
    seen = Counter(bytes(r.astype(np.int32)) for r in rows)
    read = data.sequences_read(
        mix.block_counts(), seed=5, num_pipelines=1, examples_per_pipeline=len(rows)
    )
    progress = mixture.set_progress(read, passes, num_pipelines=1)
    assert [p.repeats for p in progress] == [1, 6] and progress[1].passes == pytest.approx(
        read[1] / 112
    )
    # Within a pass no record comes twice: the small set's records come at most once per pass begun.
    small = [n for key, n in seen.items() if origin[key][0] == 1]
    assert max(small) <= progress[1].repeats + 1 and sum(small) == read[1]


def test_each_input_pipeline_reads_only_its_own_files_of_every_set(sets, origin):
    for pipeline_id in (0, 1):
        rows = rows_of(mixture_stream(sets, num_pipelines=2, pipeline_id=pipeline_id), 40)
        where = {origin[bytes(r.astype(np.int32))] for r in rows}
        assert {s for s, _ in where} == {0, 1}
        assert {f % 2 for _, f in where} == {
            pipeline_id
        }  # files pipeline_id, pipeline_id + 2 of each set


@pytest.mark.slow
def test_a_mixture_run_reports_sequences_and_eval_per_set(sets, tmp_path):
    from lmshards.train.loop.trainer import train

    run = tmp_path / "run"
    steps, batch = 40, 8
    config = cli.parse_config(
        [
            "--shards",
            f"{sets[0]}:3",
            "--shards",
            f"{sets[1]}:1",
            "--output",
            str(run),
            "--steps",
            str(steps),
            "--per_replica_batch",
            str(batch),
            "--log_every",
            "20",
            "--eval_every",
            "40",
            "--checkpoint_every",
            "40",
            "--shuffle_buffer",
            "64",
            "--learning_rate",
            "3e-3",
            "--seed",
            "2",
        ]
    )
    summary = train(config)
    sets_summary = summary["sets"]
    assert list(sets_summary) == ["shards", "shards-2"]
    read = [sets_summary[name]["sequences"] for name in sets_summary]
    assert sum(read) == steps * batch and abs(read[0] / sum(read) - 0.75) < 0.01
    assert (
        sets_summary["shards-2"]["weight"] == 0.25
        and sets_summary["shards-2"]["train_records"] == 112
    )
    assert sets_summary["shards-2"]["repeats"] == math.ceil(read[1] / 112) - 1
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in metrics if "loss" in r]
    assert [r["sequences/shards"] + r["sequences/shards-2"] for r in logged] == [
        20 * batch,
        40 * batch,
    ]
    assert [logged[-1]["sequences/shards"], logged[-1]["sequences/shards-2"]] == read
    evals = [r for r in metrics if "eval_loss" in r]
    per_set = [evals[-1]["eval_loss/shards"], evals[-1]["eval_loss/shards-2"]]
    assert evals[-1]["eval_loss"] == pytest.approx(0.75 * per_set[0] + 0.25 * per_set[1])
    assert (
        summary["eval_loss"] == evals[-1]["eval_loss"]
        and sets_summary["shards"]["eval_loss"] == per_set[0]
    )
    run_config = json.loads((run / "run_config.json").read_text())
    assert run_config["train"]["shards"] == list(sets) and run_config["train"]["shard_weights"] == [
        3.0,
        1.0,
    ]
