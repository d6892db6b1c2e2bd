"""The train step compiles with XLA (jit_compile=True) for every model family and masking recipe.

A TPU compiles every step with XLA, so an op XLA cannot compile would first fail there. This compiles
on the CPU what the trainer runs: the model from lmshards.train.network.model, the optimizer from lmshards.train.optim, the loss
from lmshards.train.backends.tensorflow.masked_lm_sums, a batch from real shards through lmshards.train.inputs.data's input pipeline, in the
TPUs' precision (mixed_bfloat16), and runs it once.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("keras_hub")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from lmshards.schemas.constants import TRAIN_SPLIT  # noqa: E402
from lmshards.schemas.manifest import read_manifest  # noqa: E402
from lmshards.schemas.tokenizer_info import locate_tokenizer  # noqa: E402
from lmshards.train.backends.tensorflow import masked_lm_sums  # noqa: E402
from lmshards.train.config import preset_config  # noqa: E402
from lmshards.train.devices import MIXED_BFLOAT16  # noqa: E402
from lmshards.train.families import family_names, get_family  # noqa: E402
from lmshards.train.inputs import data, mixture  # noqa: E402
from lmshards.train.masking_recipes import MASKING_RECIPES  # noqa: E402
from lmshards.train.network.model import build_masked_lm  # noqa: E402
from lmshards.train.optim import WarmupDecay, make_optimizer  # noqa: E402
from tests.helpers.shard_factory import write_sample_shards  # noqa: E402

pytestmark = pytest.mark.slow
SEQ_LEN = 32
BATCH = 8
# BERT's pooler feeds the next-sentence head, which masked-LM training does not have: no gradient.
UNUSED_BY_THE_LOSS = ("pooled_dense/",)


@pytest.fixture(scope="module")
def shards(tmp_path_factory, sample_tokenizer, sample_files):
    out = tmp_path_factory.mktemp("shards")
    write_sample_shards(out, sample_tokenizer, sample_files, seq_len=SEQ_LEN, max_lines_per_file=20)
    return str(out)


@pytest.fixture
def tpu_precision():
    """The dtype policy `--precision auto` picks on a TPU, for this test only."""
    before = keras.mixed_precision.dtype_policy()
    keras.mixed_precision.set_dtype_policy(MIXED_BFLOAT16)
    yield
    keras.mixed_precision.set_dtype_policy(before)


def first_batch(shards: str, *, recipe: str, family: str, tokenizer: str) -> dict[str, tf.Tensor]:
    """One masked batch of the train split, as lmshards.train.inputs.data reads, parses and masks it."""
    manifest = read_manifest(shards)
    masking = data.masking_spec(
        manifest, recipe=recipe, mlm_probability=0.15, tokenizer=locate_tokenizer(tokenizer)
    )
    dataset = data.eval_dataset(
        mixture.split_files(manifest, shards, TRAIN_SPLIT),
        features=manifest.features(),
        batch_size=BATCH,
        masking=masking,
        with_segment_ids=get_family(family).uses_segment_ids,
        max_batches=1,
    )
    return next(iter(dataset))


def compiled_train_step(model: keras.Model, optimizer: keras.optimizers.Optimizer):
    """The trainer's replica train step, compiled with XLA as on GPUs and TPUs."""

    @tf.function(jit_compile=True)
    def step(batch):
        with tf.GradientTape() as tape:
            loss_sum, weight_sum, _ = masked_lm_sums(model, batch, training=True)
            global_weight = tf.distribute.get_replica_context().all_reduce("sum", weight_sum)
            loss = loss_sum / tf.maximum(global_weight, 1.0)
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step


@pytest.mark.parametrize("recipe", MASKING_RECIPES)
@pytest.mark.parametrize("family", family_names())
def test_train_step_compiles_with_xla_and_trains(
    shards, sample_tokenizer, tpu_precision, family, recipe
):
    batch = first_batch(shards, recipe=recipe, family=family, tokenizer=str(sample_tokenizer))
    assert float(tf.reduce_sum(batch["mask_weights"])) > 0  # the batch has predictions to learn
    keras.utils.set_random_seed(0)
    vocab = read_manifest(shards).tokenizer.vocab_size
    model = build_masked_lm(preset_config("tiny", family=family, vocabulary_size=vocab))
    optimizer = make_optimizer(
        schedule=WarmupDecay(peak=1e-3, warmup_steps=0, total_steps=10),
        weight_decay=0.01,
        clip_norm=1.0,
        loss_scaling=False,
    )
    optimizer.build(model.trainable_variables)
    step = compiled_train_step(model, optimizer)
    before = [v.numpy() for v in model.trainable_variables]

    loss = float(
        step(batch)
    )  # jit_compile=True: an op XLA cannot compile raises, nothing falls back

    assert math.isfinite(loss) and abs(loss - math.log(vocab)) < 1.0  # about uniform, untrained
    unchanged = [
        v.path
        for a, v in zip(before, model.trainable_variables)
        if np.array_equal(a, v.numpy()) and not v.path.startswith(UNUSED_BY_THE_LOSS)
    ]
    assert unchanged == []
    assert int(optimizer.iterations.numpy()) == 1
