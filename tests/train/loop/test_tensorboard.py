"""TensorBoard events as Keras lays them out, read back with TensorBoard's own reader."""

from __future__ import annotations

import pytest
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.util.tensor_util import make_ndarray

from lmshards.train.loop.tensorboard import Scalar, TensorBoardWriter, scalars

TRAIN_RECORD = {
    "step": 10,
    "loss": 7.5,
    "learning_rate": 1e-3,
    "sequences_per_second": 200.0,
    "tokens_per_second": 25600.0,
    "step_time_s": 0.16,
    "sequences/wiki": 320,
}
EVAL_RECORD = {
    "step": 10,
    "eval_loss": 7.25,
    "eval_accuracy": 0.125,
    "eval_perplexity": 1408.1,
    "eval_loss/wiki": 7.25,
    "eval_accuracy/wiki": 0.125,
    "eval_masked_tokens": 4096,
    "eval_batches": 8,
}


def _read(run_dir, run: str) -> event_accumulator.EventAccumulator:
    acc = event_accumulator.EventAccumulator(str(run_dir / "tensorboard" / run))
    acc.Reload()
    return acc


def _tags(acc) -> list[str]:
    """The run's scalar tags: TF2 summaries are tensor events the scalars plugin claims by its metadata."""
    tags = acc.Tags()["tensors"]
    assert all(acc.SummaryMetadata(t).plugin_data.plugin_name == "scalars" for t in tags)
    return sorted(tags)


def _values(acc, tag: str) -> list[tuple[int, float]]:
    return [(e.step, pytest.approx(float(make_ndarray(e.tensor_proto)))) for e in acc.Tensors(tag)]


def test_train_and_eval_loss_share_a_tag_in_two_runs_and_bookkeeping_stays_out(tmp_path):
    writer = TensorBoardWriter(str(tmp_path))
    writer.write(TRAIN_RECORD)
    writer.write(EVAL_RECORD)
    writer.write({**TRAIN_RECORD, "step": 20, "loss": 6.5, "learning_rate": 5e-4})
    writer.write({**EVAL_RECORD, "step": 20, "eval_loss": 6.75})
    writer.write({"step": 20, "final_eval_loss": 6.7, "final_eval_batches": 50})

    train, validation = _read(tmp_path, "train"), _read(tmp_path, "validation")
    assert _tags(train) == [
        "learning_rate",
        "loss",
        "throughput/sequences_per_second",
        "throughput/step_time_s",
        "throughput/tokens_per_second",
    ]
    assert _tags(validation) == [
        "accuracy",
        "accuracy/wiki",
        "final/loss",
        "loss",
        "loss/wiki",
        "perplexity",
    ]
    assert _values(train, "loss") == [(10, 7.5), (20, 6.5)]
    assert _values(validation, "loss") == [(10, 7.25), (20, 6.75)]
    assert _values(train, "learning_rate") == [(10, 1e-3), (20, 5e-4)]
    assert _values(train, "throughput/tokens_per_second") == [(10, 25600.0), (20, 25600.0)]
    assert _values(validation, "final/loss") == [(20, 6.7)]


def test_scalars_route_each_key_once():
    assert scalars({"step": 1, "loss": 2.0, "eval_batches": 3, "preempted": True}) == [
        Scalar("train", "loss", 2.0)
    ]
