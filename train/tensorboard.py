"""TensorBoard scalars of the metrics records, written without needing the tensorboard package installed."""

from __future__ import annotations

from typing import Any

import tensorflow as tf
from tensorflow.core.framework import summary_pb2

# What tf.summary.scalar writes.
_SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
)


class TensorBoardScalars:
    """Called with each metrics record: writes its numbers as scalars at its step under `directory`."""

    def __init__(self, directory: str):
        self.writer = tf.summary.create_file_writer(directory)

    def __call__(self, record: dict[str, Any]) -> None:
        with self.writer.as_default(step=record["step"]):
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)):
                    tf.summary.write(key, tf.constant(value, tf.float32), metadata=_SCALAR_METADATA)
        self.writer.flush()
