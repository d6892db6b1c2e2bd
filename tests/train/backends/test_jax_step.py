"""The JAX backend's step on 4 XLA host devices: the batch split, 4 vs 1 devices, steps per call, bf16,
checkpoints, and no TensorFlow."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.jax_subprocess import run_jax

STEPS = 20
GLOBAL_BATCH = 8

# Trains `tiny` for STEPS steps on the same synthetic global batches with 4 devices (4 steps per
# call) and with 1 device (1 step per call), then a few steps in mixed_bfloat16.
PROGRAM = f"""
import json, sys
import jax, keras, numpy as np
from lmshards.train.backends import jax_step as js
from lmshards.train.config import preset_config
from lmshards.train.optim import WarmupDecay

config = preset_config("tiny", family="roberta", vocabulary_size=300)
rng = np.random.default_rng(0)
batches = [
    js.synthetic_batch(rng, batch={GLOBAL_BATCH}, seq_len=32, max_predictions=5, vocab_size=300,
                       with_segment_ids=False)
    for _ in range({STEPS})
]

def train(devices, per_call, precision="float32", steps={STEPS}):
    mesh = js.Mesh.over(devices)
    model, optimizer = js.build(
        config, schedule=WarmupDecay(peak=2e-3, warmup_steps=2, total_steps={STEPS}),
        weight_decay=0.01, clip_norm=1.0, precision=precision, seed=0)
    state, step_fn, losses = js.state_of(model, optimizer), js.train_steps_fn(model, optimizer), []
    for i in range(0, steps, per_call):
        sharded = mesh.shard(js.stack_batches(batches[i:i + per_call]), stacked=True)
        rows = sorted(len(s.data[0]) for s in sharded["token_ids"].addressable_shards)
        state, out = step_fn(state, sharded)
        losses += [float(x) for x in out]
    return dict(
        mesh=mesh.size, rows_per_device=rows, losses=losses,
        weights_replicated=bool(state.trainable[0].sharding.is_fully_replicated),
        compute_dtype=model.backbone.dtype_policy.compute_dtype,
        variable_dtype=str(state.trainable[0].dtype),
        iterations=int(state.optimizer[0]),
    )

print(json.dumps(dict(
    four=train(jax.devices(), per_call=4),
    one=train(jax.devices()[:1], per_call=1),
    bf16=train(jax.devices(), per_call=2, precision="mixed_bfloat16", steps=4),
    tensorflow_loaded="tensorflow" in sys.modules,
    devices=len(jax.devices()),
)))
"""


@pytest.fixture(scope="module")
def runs():
    return run_jax(PROGRAM, devices=4)


def test_global_batch_is_split_over_4_devices(runs):
    assert runs["devices"] == 4
    four = runs["four"]
    assert four["mesh"] == 4
    assert four["rows_per_device"] == [GLOBAL_BATCH // 4] * 4
    assert four["weights_replicated"]


def test_4_devices_and_1_device_give_the_same_losses(runs):
    four, one = runs["four"]["losses"], runs["one"]["losses"]
    assert len(four) == len(one) == STEPS
    np.testing.assert_allclose(four, one, atol=1e-4, rtol=0)
    assert runs["one"]["mesh"] == 1


def test_steps_per_call_and_learning(runs):
    # 4 steps per compiled call and 1 step per call advance the optimizer alike, and the copy task is learnt.
    assert runs["four"]["iterations"] == runs["one"]["iterations"] == STEPS
    losses = runs["four"]["losses"]
    assert np.mean(losses[-4:]) < np.mean(losses[:4]) - 0.2


def test_mixed_bfloat16_computes_in_bf16_with_float32_weights(runs):
    bf16 = runs["bf16"]
    assert bf16["compute_dtype"] == "bfloat16"
    assert bf16["variable_dtype"] == "float32"
    assert all(np.isfinite(bf16["losses"]))
    np.testing.assert_allclose(bf16["losses"][0], runs["four"]["losses"][0], atol=0.05)


def test_the_step_runs_without_tensorflow(runs):
    assert runs["tensorflow_loaded"] is False
