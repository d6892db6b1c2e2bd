"""TensorBoard scalars from the trainer's metrics records, laid out as Keras' TensorBoard callback lays them out.

RUN_DIR/tensorboard/train and RUN_DIR/tensorboard/validation are two runs, and one quantity has one tag
in both (`loss`), so TensorBoard draws train and eval loss on one chart. Learning rate and throughput
are charted; bookkeeping values (batches read, masked-token counts, sequences per set) stay in
metrics.jsonl only. Events are written with tf.summary.write, so training needs no tensorboard package.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from lmshards.plumbing import fs
from lmshards.schemas.layouts import TENSORBOARD_DIR

TRAIN_RUN = "train"
VALIDATION_RUN = "validation"
EVAL_PREFIX = "eval_"
FINAL_PREFIX = "final_"
# train record key -> tag
TRAIN_TAGS = {
    "loss": "loss",
    "learning_rate": "learning_rate",
    "sequences_per_second": "throughput/sequences_per_second",
    "tokens_per_second": "throughput/tokens_per_second",
    "step_time_s": "throughput/step_time_s",
}
# eval record quantity (after eval_) -> tag; per shard set, `loss/<set>` and `accuracy/<set>`
VALIDATION_TAGS = {"loss": "loss", "accuracy": "accuracy", "perplexity": "perplexity"}
# What tf.summary.scalar writes, without needing the tensorboard package installed to write it.
_SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
)


@dataclasses.dataclass(frozen=True)
class Scalar:
    run: str  # TRAIN_RUN or VALIDATION_RUN
    tag: str
    value: float


def scalars(record: Mapping[str, Any]) -> list[Scalar]:
    """The charted scalars of one metrics.jsonl record; bookkeeping keys are left out.

    A final evaluation's keys (final_eval_loss, ...) go to the validation run as `final/loss`, ...:
    one point at the last step, not a second point on the periodic eval curve.
    """
    out = []
    for key, value in record.items():
        if key == "step" or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if key in TRAIN_TAGS:
            out.append(Scalar(TRAIN_RUN, TRAIN_TAGS[key], float(value)))
            continue
        final = key.startswith(FINAL_PREFIX)
        name = key.removeprefix(FINAL_PREFIX)
        if not name.startswith(EVAL_PREFIX):
            continue
        quantity, _, shard_set = name.removeprefix(EVAL_PREFIX).partition("/")
        if quantity not in VALIDATION_TAGS:
            continue  # eval_batches, eval_masked_tokens
        tag = VALIDATION_TAGS[quantity] + (f"/{shard_set}" if shard_set else "")
        out.append(Scalar(VALIDATION_RUN, f"final/{tag}" if final else tag, float(value)))
    return out


class TensorBoardWriter:
    """One event-file writer per run under RUN_DIR/tensorboard, fed the trainer's metrics records."""

    def __init__(self, run_dir: str):
        root = fs.join(run_dir, TENSORBOARD_DIR)
        self._writers = {
            run: tf.summary.create_file_writer(fs.join(root, run))
            for run in (TRAIN_RUN, VALIDATION_RUN)
        }

    def write(self, record: Mapping[str, Any]) -> None:
        written = set()
        for scalar in scalars(record):
            with self._writers[scalar.run].as_default(step=record["step"]):
                tf.summary.write(
                    scalar.tag, tf.constant(scalar.value, tf.float32), metadata=_SCALAR_METADATA
                )
            written.add(scalar.run)
        for run in written:
            self._writers[run].flush()
