"""The TensorFlow backend's masked-LM loss (lmshards.train.backends.tensorflow.masked_lm_sums).

On a CPU the step runs the head on the predicted positions only (compact=True) instead of on every one of
the batch's max_predictions slots; both must give the same sums, gradients and dropout masks, and the
log-sum-exp cross-entropy must equal TensorFlow's softmax cross-entropy.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

pytest.importorskip("keras_hub")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from lmshards.train.backends.tensorflow import masked_lm_sums  # noqa: E402
from lmshards.train.config import preset_config  # noqa: E402
from lmshards.train.families import family_names, get_family  # noqa: E402
from lmshards.train.network.model import build_masked_lm  # noqa: E402
from tests.helpers.packed_blocks import packed_block_inputs  # noqa: E402

VOCAB = 300
ROWS, SEQ_LEN, SLOTS = 4, 32, 8
REAL_PREDICTIONS = (5, 8, 0, 3)  # per row; the rest of its SLOTS are padding (weight 0)
SEED = 0


def masked_batch(family: str, *, packed: bool) -> dict[str, tf.Tensor]:
    """A batch as the input pipeline gives it: ids, attention inputs, and SLOTS prediction slots per row."""
    rng = np.random.default_rng(SEED)
    uses_segment_ids = get_family(family).uses_segment_ids
    if packed:
        docs = [[rng.integers(5, VOCAB, n) for n in (10, 14)] for _ in range(ROWS)]
        batch = packed_block_inputs(docs, seq_len=SEQ_LEN, uses_segment_ids=uses_segment_ids)
    else:
        batch = {
            "token_ids": rng.integers(5, VOCAB, (ROWS, SEQ_LEN)).astype(np.int32),
            "padding_mask": (np.arange(SEQ_LEN) < SEQ_LEN - 6)
            .astype(np.int32)[None]
            .repeat(ROWS, 0),
        }
        if uses_segment_ids:
            batch["segment_ids"] = np.zeros((ROWS, SEQ_LEN), np.int32)
    weights = (np.arange(SLOTS)[None] < np.array(REAL_PREDICTIONS)[:, None]).astype(np.float32)
    batch["mask_positions"] = rng.integers(0, SEQ_LEN - 6, (ROWS, SLOTS)).astype(np.int32)
    batch["mask_ids"] = rng.integers(5, VOCAB, (ROWS, SLOTS)).astype(np.int32)
    batch["mask_weights"] = weights
    return {name: tf.constant(value) for name, value in batch.items()}


def new_model(family: str, *, packed: bool) -> keras.Model:
    # The same weights and dropout seeds for every model built here.
    keras.utils.set_random_seed(SEED)
    # Dropout on (ModernBERT's presets have none): the checks of its masks need some.
    config = dataclasses.replace(
        preset_config("tiny", family=family, vocabulary_size=VOCAB), dropout=0.1
    )
    return build_masked_lm(config, packed=packed)


def sums_and_grads(model, batch, *, compact: bool, training: bool = False):
    with tf.GradientTape() as tape:
        sums = masked_lm_sums(model, batch, training=training, compact=compact)
    grads = tape.gradient(sums[0], model.trainable_variables)
    return [float(s) for s in sums], grads


CASES = [(family, packed) for family in family_names() for packed in (False, True)]


@pytest.mark.parametrize(("family", "packed"), CASES)
def test_head_on_predictions_only_gives_the_same_sums_and_gradients(family, packed):
    batch = masked_batch(family, packed=packed)
    model = new_model(family, packed=packed)

    full, full_grads = sums_and_grads(model, batch, compact=False)
    compact, compact_grads = sums_and_grads(model, batch, compact=True)

    assert compact[1] == full[1] == sum(REAL_PREDICTIONS)
    assert compact[2] == full[2]
    np.testing.assert_allclose(compact[0], full[0], rtol=1e-6)
    assert len(compact_grads) == len(full_grads)
    for variable, a, b in zip(model.trainable_variables, compact_grads, full_grads):
        if b is None:  # BERT's pooler: not used by the masked-LM loss either way
            assert a is None, variable.path
            continue
        a, b = tf.convert_to_tensor(a).numpy(), tf.convert_to_tensor(b).numpy()
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7, err_msg=variable.path)


@pytest.mark.parametrize("family", family_names())
def test_head_on_predictions_only_draws_the_same_dropout_masks(family):
    batch = masked_batch(family, packed=False)
    full = masked_lm_sums(new_model(family, packed=False), batch, training=True, compact=False)
    compact = masked_lm_sums(new_model(family, packed=False), batch, training=True, compact=True)
    without_dropout = masked_lm_sums(
        new_model(family, packed=False), batch, training=False, compact=True
    )

    np.testing.assert_allclose(float(compact[0]), float(full[0]), rtol=1e-6)
    # Dropout was on: the same weights give another loss without it.
    assert abs(float(compact[0]) - float(without_dropout[0])) > 1e-3


def test_cross_entropy_is_the_softmax_cross_entropy_of_the_full_logits():
    family = family_names()[0]
    batch = masked_batch(family, packed=False)
    model = new_model(family, packed=False)
    logits = model({name: batch[name] for name in model.input}, training=False)
    expected = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=batch["mask_ids"], logits=logits
    )
    expected_sum = float(tf.reduce_sum(expected * batch["mask_weights"]))

    for compact in (False, True):
        loss_sum, weight_sum, _ = masked_lm_sums(model, batch, training=False, compact=compact)
        np.testing.assert_allclose(float(loss_sum), expected_sum, rtol=1e-6)
        assert float(weight_sum) == sum(REAL_PREDICTIONS)


def test_a_batch_without_predictions_sums_to_zero():
    family = family_names()[0]
    batch = masked_batch(family, packed=False)
    batch["mask_weights"] = tf.zeros_like(batch["mask_weights"])

    sums = masked_lm_sums(new_model(family, packed=False), batch, training=False, compact=True)

    assert [float(s) for s in sums] == [0.0, 0.0, 0.0]
