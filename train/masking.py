"""Dynamic BERT/RoBERTa masking in TensorFlow ops for the tf.data pipeline, with fixed output shapes (XLA/TPU-ready).

Per batch, each non-special, non-padding token is selected with probability `mlm_probability`; of
the selected, 80% become the mask id, 10% a random non-special token and 10% stay. At most
`max_predictions` per sequence are kept (the first ones), so labels have a fixed shape; the 80/10/10
choice is drawn only for those.
Randomness is stateless and seeded by (seed, step): a resumed run masks exactly like an
uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import math

import tensorflow as tf

MASK_FRACTION = 0.8
RANDOM_FRACTION = 0.1
# Headroom over the expected number of selections; truncation then happens for well under 1% of sequences.
_PREDICTIONS_HEADROOM = 1.2
_PREDICTIONS_SLACK = 8


def max_predictions_for(seq_len: int, mlm_probability: float) -> int:
    """Fixed length of mask_positions: ~3 standard deviations above the expected selections for seq_len."""
    return min(seq_len, math.ceil(seq_len * mlm_probability * _PREDICTIONS_HEADROOM) + _PREDICTIONS_SLACK)


@dataclasses.dataclass(frozen=True)
class MaskingSpec:
    """What masking needs from the manifest's tokenizer."""

    vocab_size: int
    mask_id: int
    special_ids: tuple[int, ...]  # never selected, never drawn as random replacements
    mlm_probability: float
    max_predictions: int


def mask_batch(input_ids: tf.Tensor, attention_mask: tf.Tensor, spec: MaskingSpec, seed: tf.Tensor) -> dict[str, tf.Tensor]:
    """Masks a batch. input_ids, attention_mask: int [batch, seq_len]; seed: int64 [2].

    Returns int32 `token_ids`, `padding_mask` [batch, seq_len], `mask_positions`, `mask_ids`
    [batch, max_predictions] and float32 `mask_weights` (1.0 where a position holds a prediction).
    """
    ids = tf.cast(input_ids, tf.int32)
    padding_mask = tf.cast(attention_mask, tf.int32)
    batch, seq_len = tf.shape(ids)[0], tf.shape(ids)[1]
    select_seed, kind_seed, random_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 3))

    # Only the selection needs a draw per token; everything after works on [batch, max_predictions].
    special = tf.gather(tf.constant(_special_table(spec)), ids)
    candidate = (padding_mask > 0) & ~special
    selected = (tf.random.stateless_uniform(tf.shape(ids), select_seed) < spec.mlm_probability) & candidate

    # The first max_predictions selected positions of each row, ascending, padded with -1: tf.where
    # lists them row-major, and to_tensor cuts each row at max_predictions (far cheaper than top_k).
    where = tf.cast(tf.where(selected), tf.int32)  # (row, position) pairs
    ranked = tf.RaggedTensor.from_value_rowids(where[:, 1], where[:, 0], nrows=batch)
    ranked = ranked.to_tensor(default_value=-1, shape=[None, spec.max_predictions])
    valid = ranked >= 0
    positions = tf.maximum(ranked, 0)
    mask_ids = tf.where(valid, tf.gather(ids, positions, batch_dims=1), 0)

    shape = tf.shape(positions)
    kind = tf.random.stateless_uniform(shape, kind_seed)
    regular_ids = tf.constant(_regular_ids(spec), tf.int32)
    random_ids = tf.gather(regular_ids, tf.random.stateless_uniform(shape, random_seed, maxval=len(regular_ids), dtype=tf.int32))
    new_ids = tf.where(kind < MASK_FRACTION, spec.mask_id, tf.where(kind < MASK_FRACTION + RANDOM_FRACTION, random_ids, mask_ids))
    # Padding slots write into an extra column that is then dropped, so they never clash with a real position.
    target = tf.where(valid, positions, seq_len)
    rows = tf.broadcast_to(tf.range(batch)[:, None], shape)
    token_ids = tf.tensor_scatter_nd_update(
        tf.pad(ids, [[0, 0], [0, 1]]), tf.stack([rows, target], axis=-1), new_ids
    )[:, :seq_len]
    return {
        "token_ids": token_ids,
        "padding_mask": padding_mask,
        "mask_positions": positions,
        "mask_ids": mask_ids,
        "mask_weights": tf.cast(valid, tf.float32),
    }


def _special_table(spec: MaskingSpec) -> list[bool]:
    """is_special[id] for every id of the vocabulary: one gather instead of a comparison per special id."""
    special = set(spec.special_ids)
    return [i in special for i in range(spec.vocab_size)]


def _regular_ids(spec: MaskingSpec) -> list[int]:
    special = set(spec.special_ids)
    return [i for i in range(spec.vocab_size) if i not in special]
