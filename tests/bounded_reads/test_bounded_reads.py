"""Bounded reads at every reader: a JSON file over a limit (size, nesting, numbers) or a file of the wrong
kind (a FIFO, a device, a directory, a symlink to one) ends the command at once in one line naming it,
never in a traceback or a hang. Commands run in-process."""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path

import pytest

from lmshards.command.cli import main
from lmshards.plumbing import lease
from lmshards.plumbing.bounded import ReadLimitError
from lmshards.schemas.constants import MANIFEST_NAME
from lmshards.schemas.metrics_log import read_metrics
from tests.helpers.shard_factory import write_sample_shards

DEEP = "[" * 100_000 + "]" * 100_000  # json.loads alone would raise RecursionError
TRAIN_ARGS = ["--steps", "2", "--per_replica_batch", "8"]


def _run(argv: list[str], capsys) -> tuple[int, list[str]]:
    """(exit code, stderr lines) of `lmshards ARGV` run in this process."""
    try:
        code = main(argv)
    except SystemExit as e:
        code = 0 if e.code is None else e.code
    err = capsys.readouterr().err.splitlines()
    assert not [line for line in err if "Traceback" in line]
    return code, err


@pytest.fixture(scope="module")
def shard_set(tmp_path_factory, sample_tokenizer, sample_dir) -> Path:
    out = tmp_path_factory.mktemp("bounded") / "shards"
    write_sample_shards(
        out, sample_tokenizer, [sample_dir / "zh" / "lunyu_shijing.txt"], seq_len=32
    )
    return out


@pytest.fixture
def shards(shard_set, tmp_path) -> Path:
    """A copy of the shard set this test may damage."""
    copy = tmp_path / "shards"
    shutil.copytree(shard_set, copy)
    return copy


def _first_shard(shards: Path) -> Path:
    return sorted((shards / "train").iterdir())[0]


@pytest.mark.timeout(300)  # a FIFO or a device read would never end
def test_verify_of_a_shard_that_links_to_dev_zero_ends_at_once_in_one_line(shards, capsys):
    victim = _first_shard(shards)
    victim.unlink()
    victim.symlink_to("/dev/zero")
    started = time.monotonic()
    code, err = _run(["inspect", str(shards), "--verify"], capsys)
    assert time.monotonic() - started < 30
    assert (code, err) == (
        2,
        [
            f"lmshards inspect: error: {str(victim)!r} is a character device (through the symlink to "
            "'/dev/zero'), not a shard file."
        ],
    )


def test_verify_of_a_shard_that_is_a_directory_is_one_line(shards, capsys):
    victim = _first_shard(shards)
    victim.unlink()
    victim.mkdir()
    code, err = _run(["inspect", str(shards), "--verify"], capsys)
    assert (code, err) == (
        2,
        [f"lmshards inspect: error: {str(victim)!r} is a directory, not a shard file."],
    )


@pytest.mark.timeout(300)  # a FIFO or a device read would never end
def test_train_refuses_a_shard_that_is_a_fifo_before_reading_it(shards, tmp_path, capsys):
    victim = _first_shard(shards)
    victim.unlink()
    os.mkfifo(victim)
    run = tmp_path / "run"
    code, err = _run(["train", "--shards", str(shards), "--output", str(run), *TRAIN_ARGS], capsys)
    assert (code, err) == (
        2,
        [f"lmshards train: error: {str(victim)!r} is a FIFO (named pipe), not a shard file."],
    )


def test_a_manifest_nested_100000_deep_is_one_line(shards, capsys):
    (shards / MANIFEST_NAME).write_text(DEEP)
    code, err = _run(["inspect", str(shards)], capsys)
    path = str(shards / MANIFEST_NAME)
    assert (code, err) == (
        2,
        [
            f"lmshards inspect: error: manifest {path!r} nests 100000 levels deep, over the limit "
            "of 64; is it the right file?"
        ],
    )


@pytest.mark.timeout(300)  # a FIFO or a device read would never end
def test_a_manifest_that_is_a_fifo_is_one_line(shards, capsys):
    path = shards / MANIFEST_NAME
    path.unlink()
    os.mkfifo(path)
    code, err = _run(["inspect", str(shards)], capsys)
    assert (code, err) == (
        2,
        [f"lmshards inspect: error: {str(path)!r} is a FIFO (named pipe), not a manifest."],
    )


@pytest.mark.parametrize(
    "text, problem",
    [
        ('{"hidden_dim": 1e400}', "holds the number 1e400, which is not finite as a float"),
        ('{"hidden_dim": NaN}', "holds NaN, which is not JSON"),
        (
            '{"hidden_dim": ' + "9" * 5000 + "}",
            "holds an integer of 5000 digits, over the limit of 4300",
        ),
        (DEEP, "nests 100000 levels deep, over the limit of 64"),
    ],
)
def test_a_model_config_over_a_limit_is_one_line(shards, tmp_path, capsys, text, problem):
    config = tmp_path / "model.json"
    config.write_text(text)
    argv = ["train", "--shards", str(shards), "--output", str(tmp_path / "run"), *TRAIN_ARGS]
    code, err = _run([*argv, "--model_config", str(config)], capsys)
    assert (code, err) == (
        2,
        [f"lmshards train: error: --model_config {str(config)!r} {problem}; is it the right file?"],
    )
    assert not (tmp_path / "run").exists()


def test_a_run_config_over_a_limit_is_one_line_with_the_fix(shards, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "run_config.json").write_text(DEEP)
    code, err = _run(["train", "--shards", str(shards), "--output", str(run), *TRAIN_ARGS], capsys)
    assert code == 2 and len(err) == 1
    assert err[0].startswith(
        f"lmshards train: error: run file {str(run / 'run_config.json')!r} nests 100000 levels deep"
    )
    assert "--restart" in err[0]
    assert (run / "run_config.json").read_text() == DEEP  # left as it was


def test_report_of_a_run_config_holding_infinity_is_one_line(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "run_config.json").write_text('{"train": {"learning_rate": Infinity}}')
    code, err = _run(["report", str(run)], capsys)
    assert (code, err) == (
        2,
        [
            f"lmshards report: error: run file {str(run / 'run_config.json')!r} holds Infinity, "
            "which is not JSON; is it the right file?"
        ],
    )


def test_a_tokenizer_json_over_a_limit_is_one_line(sample_tokenizer, tmp_path, capsys):
    tokenizer = json.loads(sample_tokenizer.read_text())
    tokenizer["truncation"] = "BIG"
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(tokenizer).replace('"BIG"', "9" * 5001))
    code, err = _run(["tokenizer", "inspect", str(path), "--text", "a b"], capsys)
    assert (code, err) == (
        2,
        [
            f"lmshards tokenizer inspect: error: Tokenizer file {str(path)!r} holds an integer of "
            "5001 digits, over the limit of 4300; is it the right file?"
        ],
    )


@pytest.mark.timeout(300)  # a FIFO or a device read would never end
def test_fill_mask_refuses_an_export_whose_config_links_to_dev_urandom(tmp_path, capsys):
    export = tmp_path / "model"
    export.mkdir()
    (export / "config.json").symlink_to("/dev/urandom")
    (export / "model.safetensors").write_bytes(b"")
    code, err = _run(["fill-mask", str(export), "Hello <mask>."], capsys)
    assert (code, err) == (
        2,
        [
            f"lmshards fill-mask: error: {str(export / 'config.json')!r} is a character device "
            "(through the symlink to '/dev/urandom'), not a config.json."
        ],
    )


@pytest.mark.timeout(300)  # a FIFO or a device read would never end
def test_init_from_refuses_weights_that_are_a_fifo(tmp_path):
    from lmshards.train.export.init_source import read_hf_state_dict

    weights = tmp_path / "model.safetensors"
    os.mkfifo(weights)
    with pytest.raises(ReadLimitError) as e:
        read_hf_state_dict(str(weights))
    assert str(e.value) == f"{str(weights)!r} is a FIFO (named pipe), not a weights file."


def test_a_damaged_lease_nested_too_deep_is_taken_over_once_stale(tmp_path, caplog):
    output = str(tmp_path / "out")
    os.makedirs(output)
    path = lease.lease_path(output)
    Path(path).write_text(DEEP)
    old = time.time() - lease.STALE_AFTER_S - 10
    os.utime(path, (old, old))
    with caplog.at_level(logging.WARNING, logger="lmshards.plumbing.lease"):
        taken = lease.acquire(output, command="train")
    assert "Taking over the lease" in caplog.text and "unknown" in caplog.text
    assert taken.holder.pid == os.getpid()
    taken.release()


def test_metrics_lines_over_a_limit_are_left_out_with_a_warning(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    lines = [
        '{"step": 1, "loss": 2.5}',
        '{"step": 2, "loss": 1e400}',
        DEEP,
        '{"step": 3, "loss": 2.0}',
    ]
    path.write_text("\n".join(lines) + "\n")
    with caplog.at_level(logging.WARNING):
        records = read_metrics(str(path))
    assert records == [{"step": 1, "loss": 2.5}, {"step": 3, "loss": 2.0}]
    assert "line(s) 2, 3 are not metrics records" in caplog.text


def test_an_audit_line_over_a_limit_is_not_an_audit_line():
    from lmshards.preprocess.curation.records import removal_from_line

    line = '{"source": "a.txt", "index": 1, "reason": "exact", "bytes": 1e400}'
    with pytest.raises(ValueError, match="not finite"):
        removal_from_line(line)
    with pytest.raises(ValueError, match="nests 100000 levels deep"):
        removal_from_line(DEEP)


def test_a_token_store_manifest_over_a_limit_names_it(tmp_path):
    from lmshards.preprocess.stages.tokens import TokenStoreError, read_store_manifest

    (tmp_path / MANIFEST_NAME).write_text(DEEP)
    with pytest.raises(TokenStoreError) as e:
        read_store_manifest(str(tmp_path))
    assert str(e.value).startswith(
        f"manifest {str(tmp_path / MANIFEST_NAME)!r} nests 100000 levels deep, over the limit of 64"
    )


def test_a_dataset_export_summary_over_a_limit_names_it(tmp_path):
    from lmshards.corpus_tools.dataset.export import read_summary
    from lmshards.schemas.layouts import EXPORT_SUCCESS_JSON

    (tmp_path / EXPORT_SUCCESS_JSON).write_text('{"rows_read": NaN}')
    with pytest.raises(ReadLimitError, match="holds NaN, which is not JSON"):
        read_summary(str(tmp_path))


@pytest.mark.timeout(300)  # a FIFO or a device read would never end
def test_a_jax_checkpoint_that_is_a_fifo_is_refused_before_it_is_read(tmp_path):
    from lmshards.train.backends import jax_checkpoint

    path = tmp_path / "ckpt-00000002.npz"
    os.mkfifo(path)
    with pytest.raises(ReadLimitError, match="is a FIFO \\(named pipe\\), not a checkpoint file"):
        jax_checkpoint.load(str(path), like={})


@pytest.mark.gcs
def test_train_on_gs_shards_under_the_emulator_says_what_to_do_in_one_line(
    gcs_emulator, shard_set, tmp_path, capsys
):
    from lmshards.plumbing import fs

    remote = f"{gcs_emulator}/shards-{time.time_ns()}"
    filesystem, stripped = fs.filesystem(remote)
    filesystem.put(str(shard_set), stripped, recursive=True)
    run = tmp_path / "run"
    code, err = _run(["train", "--shards", remote, "--output", str(run), *TRAIN_ARGS], capsys)
    emulator = os.environ["STORAGE_EMULATOR_HOST"]
    assert (code, err) == (
        2,
        [
            f"lmshards train: error: --shards {remote!r}: training reads gs:// shards with TensorFlow's "
            f"own GCS client, which ignores STORAGE_EMULATOR_HOST={emulator} and would read "
            f"storage.googleapis.com; copy the shard set to a local directory (`gcloud storage cp -r "
            f"{remote} DIR`) and pass --shards DIR, or unset STORAGE_EMULATOR_HOST to train from GCS."
        ],
    )
    assert not run.exists()


def test_tensorflows_error_reading_a_gs_shard_is_one_line():
    from lmshards.train.inputs.input_plan import remote_read_problem

    message = (
        "Error executing an HTTP request: libcurl code 6 meaning 'Could not resolve hostname', error "
        "details: Could not resolve host: storage.googleapis.com\n\t when reading gs://b/s/train/t.tfrecord"
    )
    assert remote_read_problem(message) == (
        "Cannot read gs://b/s/train/t.tfrecord (Error executing an HTTP request: libcurl code 6 meaning "
        "'Could not resolve hostname', error details: Could not resolve host: storage.googleapis.com). "
        "Training reads gs:// shards with TensorFlow's GCS client: check the network and your credentials "
        "(`gcloud auth application-default login`), or copy the shard set to a local directory and pass "
        "that to --shards."
    )
    assert remote_read_problem("Read less bytes than requested") is None


@pytest.mark.slow  # stats imports Beam and tensorflow-transform
@pytest.mark.timeout(300)  # a FIFO or a device read would never end
def test_stats_refuses_a_shard_that_is_a_fifo_before_building_its_pipeline(
    shards, tmp_path, capsys
):
    victim = _first_shard(shards)
    victim.unlink()
    os.mkfifo(victim)
    code, err = _run(["stats", str(shards), "--output", str(tmp_path / "stats")], capsys)
    problems = [line for line in err if " INFO " not in line]  # stats logs its start-up
    assert (code, problems) == (
        2,
        [f"lmshards stats: error: {str(victim)!r} is a FIFO (named pipe), not a shard file."],
    )
    assert not (tmp_path / "stats").exists()
