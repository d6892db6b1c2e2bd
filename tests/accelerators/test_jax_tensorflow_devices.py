"""The JAX backend keeps TensorFlow, its host input pipeline's library, off every accelerator."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("tensorflow")

from tests.helpers.jax_subprocess import run_jax  # noqa: E402

pytestmark = pytest.mark.slow

# TensorFlow's own record of what it was told, then what it sees once its runtime has started.
PROGRAM = """
import json
import tensorflow as tf
hidden = []
set_visible = tf.config.set_visible_devices
def recording(devices, device_type=None):
    hidden.append([len(devices), device_type])
    return set_visible(devices, device_type)
tf.config.set_visible_devices = recording
from lmshards.train.backends.jax import JaxBackend
from lmshards.train.config import TrainConfig
topology = JaxBackend().connect(TrainConfig(shards=("s",), output="o", strategy="cpu"))
tf.data.Dataset.range(3).reduce(tf.constant(0, tf.int64), lambda a, b: a + b)  # the input pipeline's first op
print(json.dumps({
    "replicas": topology.replicas,
    "hidden": hidden,
    "visible": sorted({d.device_type for d in tf.config.get_visible_devices()}),
    "logical": sorted({d.device_type for d in tf.config.list_logical_devices()}),
}))
"""


def test_tensorflow_sees_only_the_cpu_on_the_jax_backend():
    result = run_jax(PROGRAM, devices=2, without_tensorflow=False, timeout=300)
    assert result["replicas"] == 2
    assert result["hidden"] == [[0, "GPU"], [0, "TPU"]]  # both, before the first op
    assert result["visible"] == ["CPU"] and result["logical"] == ["CPU"]
