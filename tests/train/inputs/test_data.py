"""The input pipeline and the checks before any compute: exact epochs, resumable order, clear errors."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from lmshards.plumbing.errors import LmshardsError  # noqa: E402
from lmshards.schemas.manifest import read_manifest  # noqa: E402
from lmshards.schemas.records import parse_spec  # noqa: E402
from lmshards.schemas.tokenizer_info import locate_tokenizer  # noqa: E402
from lmshards.train.backends.tensorflow_checkpoint import RunCheckpoints  # noqa: E402
from lmshards.train.commands import cli  # noqa: E402
from lmshards.train.inputs import data, mixture  # noqa: E402
from lmshards.train.masking_recipes import MASKING_RECIPES, WORD_RECIPES  # noqa: E402
from tests.helpers.shard_factory import write_sample_shards  # noqa: E402

SEQ_LEN = 32
BATCH = 16


@pytest.fixture(scope="module")
def shards(tmp_path_factory, sample_tokenizer, sample_files) -> str:
    out = tmp_path_factory.mktemp("shards")
    write_sample_shards(
        out, sample_tokenizer, sample_files, seq_len=SEQ_LEN, max_lines_per_file=150
    )
    return str(out)


def token_masking(manifest, p: float = 0.15):
    return data.masking_spec(manifest, recipe="token", mlm_probability=p, tokenizer=None)


def make_train_dataset(shards: str, *, start_step: int = 0, seed: int = 3, masking=None):
    """The one-set pipeline as the trainer builds it on one replica: (dataset, steps per epoch, manifest)."""
    mix = mixture.open_mixture([shards])
    passes = mixture.pass_records(mix, num_pipelines=1, unit=BATCH)
    ds = data.train_dataset(
        mixture.pipeline_streams(mix, passes, num_pipelines=1, pipeline_id=0),
        block_counts=mix.block_counts(),
        features=mix.manifest.features(),
        batch_size=BATCH,
        shuffle_buffer=64,
        seed=seed,
        start_step=start_step,
        masking=masking or token_masking(mix.manifest),
        with_segment_ids=False,
    )
    return ds, mixture.steps_per_epoch(passes, unit=BATCH), mix.manifest


def unmasked(batch) -> np.ndarray:
    """The records a masked batch came from: mask_ids put back at mask_positions."""
    ids = batch["token_ids"].numpy().copy()
    w = batch["mask_weights"].numpy() > 0
    rows = np.nonzero(w)[0]
    ids[rows, batch["mask_positions"].numpy()[w]] = batch["mask_ids"].numpy()[w]
    return ids


def test_an_epoch_is_exact_and_visits_each_record_at_most_once(shards):
    ds, spe, manifest = make_train_dataset(shards)
    assert spe == manifest.splits["train"].records // BATCH
    predictions = token_masking(manifest).max_predictions
    assert ds.element_spec["token_ids"].shape == (BATCH, SEQ_LEN)  # static, as XLA/TPU steps need
    assert ds.element_spec["mask_positions"].shape == (BATCH, predictions)
    rows = np.concatenate([unmasked(b) for b in ds.take(spe)])
    assert len(rows) == spe * BATCH
    spec = parse_spec(manifest.features(), names=("input_ids",))
    stored = tf.data.TFRecordDataset(manifest.shard_paths(shards, "train")).map(
        lambda r: tf.io.parse_single_example(r, spec)
    )
    available = Counter(bytes(r["input_ids"].astype(np.int32)) for r in stored.as_numpy_iterator())
    seen = Counter(bytes(r.astype(np.int32)) for r in rows)
    assert not seen - available  # every row is a stored record, none more often than it is stored


def test_order_and_masks_are_deterministic_and_resume_mid_stream(shards):
    full, spe, _ = make_train_dataset(shards)
    steps = spe + 3  # crosses an epoch boundary
    expected = [b["token_ids"].numpy() for b in full.take(steps)]
    tf.random.set_seed(0)  # what keras.utils.set_random_seed(0) does; neither may change the stream
    try:
        again = [b["token_ids"].numpy() for b in make_train_dataset(shards)[0].take(steps)]
    finally:
        tf.random.set_seed(None)
    np.testing.assert_array_equal(np.stack(expected), np.stack(again))
    for start in (5, spe + 1):
        resumed = [
            b["token_ids"].numpy()
            for b in make_train_dataset(shards, start_step=start)[0].take(steps - start)
        ]
        np.testing.assert_array_equal(np.stack(resumed), np.stack(expected[start:]))
    other_seed = make_train_dataset(shards, seed=4)[0]
    assert (next(iter(other_seed))["token_ids"].numpy() != expected[0]).any()
    # The second epoch reads in another order than the first.
    assert (expected[spe] != expected[0]).any()


def test_eval_batches_are_full_and_fixed_and_cover_every_record(shards):
    manifest = read_manifest(shards)
    files = mixture.split_files(manifest, shards, "validation")
    records = files.total_records
    ds = data.eval_dataset(
        files,
        features=manifest.features(),
        batch_size=BATCH,
        masking=token_masking(manifest),
        with_segment_ids=True,
        replicas=4,
    )
    assert ds.element_spec["token_ids"].shape == (BATCH, SEQ_LEN)
    batches = list(ds)
    assert len(batches) % 4 == 0 and len(batches) >= records / BATCH
    rows = np.concatenate([b["padding_mask"].numpy() for b in batches])
    assert (rows.sum(axis=1) > 0).sum() == records  # padding rows only after the real ones
    assert (rows[records:] == 0).all()
    again = list(
        data.eval_dataset(
            files,
            features=manifest.features(),
            batch_size=BATCH,
            masking=token_masking(manifest),
            with_segment_ids=True,
            replicas=4,
        )
    )
    for a, b in zip(batches, again):
        np.testing.assert_array_equal(a["token_ids"].numpy(), b["token_ids"].numpy())


@pytest.mark.parametrize("recipe", MASKING_RECIPES)
def test_every_recipe_has_fixed_shapes_and_resumes_exactly(shards, sample_tokenizer, recipe):
    manifest = read_manifest(shards)
    masking = data.masking_spec(
        manifest,
        recipe=recipe,
        mlm_probability=0.3,
        tokenizer=locate_tokenizer(str(sample_tokenizer)),
    )
    assert masking.recipe == recipe and masking.mlm_probability == 0.3
    assert (masking.word_starts is not None) == (recipe in WORD_RECIPES)
    ds, _, _ = make_train_dataset(shards, masking=masking)
    assert ds.element_spec["mask_positions"].shape == (BATCH, masking.max_predictions)
    full = [b["mask_positions"].numpy() for b in ds.take(6)]
    resumed = [
        b["mask_positions"].numpy()
        for b in make_train_dataset(shards, masking=masking, start_step=4)[0].take(2)
    ]
    np.testing.assert_array_equal(np.stack(resumed), np.stack(full[4:]))


@pytest.mark.parametrize("recipe", WORD_RECIPES)
def test_a_word_recipe_without_a_tokenizer_names_the_fix(capsys, shards, tmp_path, recipe):
    err = run_cli(
        capsys, "--shards", shards, "--output", str(tmp_path / "run"), "--masking", recipe
    )
    assert f"--masking {recipe} finds words with the tokenizer the shards were made with" in err
    assert "pass --tokenizer PATH" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--masking", "span", "--mlm_probability", "0.8"],
            "--mlm_probability 0.8 must be above 0 and below 0.79 for --masking span",
        ),
        (
            ["--mlm_probability", "1.0"],
            "--mlm_probability 1.0 must be above 0 and below 1.00 for --masking token",
        ),
        (
            ["--masking", "whole_word", "--mlm_probability", "0"],
            "--mlm_probability 0.0 must be above 0 and below 1.00 for --masking whole_word",
        ),
    ],
)
def test_mlm_probability_is_checked_per_recipe(capsys, flags, message):
    err = run_cli(capsys, "--shards", "s", "--output", "o", *flags)
    assert (
        err
        == f"lmshards train: error: {message} (e.g. 0.15; up to 0.5 is tested for every recipe).\n"
    )


def test_files_must_divide_between_input_pipelines(shards):
    files = mixture.split_files(read_manifest(shards), shards, "train")
    assert mixture.pipeline_files(files, num_pipelines=4, pipeline_id=1).paths == files.paths[1::4]
    with pytest.raises(
        LmshardsError, match="8 shard files do not divide evenly between 3 input pipelines"
    ):
        mixture.pipeline_files(files, num_pipelines=3, pipeline_id=0)


def corrupt_copy(shards: str, tmp_path) -> tuple[str, str]:
    """A copy of the shards with bytes overwritten inside train shard 5 (same size: only reading finds it)."""
    copy = tmp_path / "shards"
    shutil.copytree(shards, copy)
    bad = read_manifest(str(copy)).shard_paths(str(copy), "train")[5]
    raw = bytearray(open(bad, "rb").read())
    raw[len(raw) // 2 : len(raw) // 2 + 8] = b"\xff" * 8
    open(bad, "wb").write(bytes(raw))
    return str(copy), bad


def test_corrupt_shard_is_named(shards, tmp_path):
    copy, bad = corrupt_copy(shards, tmp_path)
    manifest = read_manifest(copy)
    ds, _, _ = make_train_dataset(copy)
    files = mixture.split_files(manifest, copy, "train")
    with pytest.raises(tf.errors.DataLossError) as e:
        for _ in ds.take(10_000):
            pass
    err = data.corrupt_shard_error(files.paths, e.value)
    assert repr(bad) in str(err) and "corrupt" in str(err)


def run_cli(capsys, *args) -> str:
    assert cli.main(["--steps", "1", *args]) == 2
    return capsys.readouterr().err


def test_no_manifest(capsys, tmp_path):
    err = run_cli(capsys, "--shards", str(tmp_path), "--output", str(tmp_path / "run"))
    assert "No manifest.json" in err and "incomplete or not a preprocess output" in err
    assert "Traceback" not in err


def test_truncated_shard(capsys, shards, tmp_path):
    copy = tmp_path / "shards"
    shutil.copytree(shards, copy)
    bad = read_manifest(str(copy)).shard_paths(str(copy), "train")[2]
    raw = open(bad, "rb").read()
    open(bad, "wb").write(raw[: len(raw) // 2])
    err = run_cli(capsys, "--shards", str(copy), "--output", str(tmp_path / "run"))
    assert repr(bad) in err and "truncated" in err


def test_corrupt_shard_stops_training_with_its_name(capsys, shards, tmp_path):
    copy, bad = corrupt_copy(shards, tmp_path)
    err = run_cli(
        capsys, "--shards", copy, "--output", str(tmp_path / "run"), "--eval_every", "100"
    )
    assert repr(bad) in err and "is corrupt" in err and "Traceback" not in err


def test_tokenizer_fingerprint_mismatch(capsys, shards, sample_tokenizer, tmp_path):
    other = json.loads(sample_tokenizer.read_text())
    other["model"]["vocab"]["zzz-not-in-the-original"] = len(other["model"]["vocab"])
    (tmp_path / "tokenizer.json").write_text(json.dumps(other))
    err = run_cli(
        capsys,
        "--shards",
        shards,
        "--output",
        str(tmp_path / "run"),
        "--tokenizer",
        str(tmp_path / "tokenizer.json"),
    )
    expected = read_manifest(shards).tokenizer.fingerprint
    assert (
        "fingerprint sha256:" in err
        and expected in err
        and "Pass the tokenizer given to `lmshards preprocess`" in err
    )


def test_seq_len_longer_than_the_model(capsys, shards, tmp_path):
    config = tmp_path / "model.json"
    config.write_text(json.dumps({"family": "roberta", "max_sequence_length": 20}))
    err = run_cli(
        capsys, "--shards", shards, "--output", str(tmp_path / "run"), "--model_config", str(config)
    )
    assert f"sequences of {SEQ_LEN} tokens" in err and "at most 20" in err and "--seq_len" in err


def test_vocabulary_mismatch(capsys, shards, tmp_path):
    config = tmp_path / "model.json"
    config.write_text(json.dumps({"vocabulary_size": 30522}))
    err = run_cli(
        capsys, "--shards", shards, "--output", str(tmp_path / "run"), "--model_config", str(config)
    )
    assert "vocabulary_size 30522" in err and "has 2000 tokens" in err


def test_half_written_checkpoint_is_ignored(tmp_path):
    v = tf.Variable(0)
    checkpoints = RunCheckpoints(tf.train.Checkpoint(v=v), str(tmp_path), keep=3)
    v.assign(10)
    checkpoints.save(10)
    v.assign(20)
    good = checkpoints.save(20)
    # A save killed part-way: data written, no index yet, and even named in the state file.
    (tmp_path / "ckpt-30.data-00000-of-00001").write_bytes(b"partial")
    (tmp_path / "ckpt-30_temp").mkdir()
    tf.compat.v1.train.update_checkpoint_state(
        str(tmp_path),
        str(tmp_path / "ckpt-30"),
        all_model_checkpoint_paths=[*checkpoints.manager.checkpoints, str(tmp_path / "ckpt-30")],
    )
    v.assign(0)
    reopened = RunCheckpoints(tf.train.Checkpoint(v=v), str(tmp_path), keep=3)
    assert reopened.restore_latest() == good and int(v.numpy()) == 20
