"""Dynamic BERT/RoBERTa masking in TensorFlow ops, with fixed output shapes (XLA- and TPU-friendly).

Per batch, each non-special, non-padding token is selected with probability `mlm_probability`; of
the selected, 80% become the mask id, 10% a random non-special token and 10% stay. At most
`max_predictions` per sequence are kept (the first ones), so labels have a fixed shape.
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
    shape = tf.shape(ids)
    select_seed, kind_seed, random_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 3))

    special = tf.reduce_any(ids[..., None] == tf.constant(spec.special_ids, tf.int32), axis=-1)
    candidate = (padding_mask > 0) & ~special
    selected = (tf.random.stateless_uniform(shape, select_seed) < spec.mlm_probability) & candidate
    # Keep the first max_predictions selections of each sequence.
    selected &= tf.cumsum(tf.cast(selected, tf.int32), axis=1) <= spec.max_predictions

    kind = tf.random.stateless_uniform(shape, kind_seed)
    to_mask = selected & (kind < MASK_FRACTION)
    to_random = selected & (kind >= MASK_FRACTION) & (kind < MASK_FRACTION + RANDOM_FRACTION)
    regular_ids = tf.constant(_regular_ids(spec), tf.int32)
    draws = tf.random.stateless_uniform(shape, random_seed, minval=0, maxval=len(regular_ids), dtype=tf.int32)
    token_ids = tf.where(to_mask, spec.mask_id, ids)
    token_ids = tf.where(to_random, tf.gather(regular_ids, draws), token_ids)

    # Selected positions in ascending order, padded with position 0 (weight 0): top_k of a key that
    # is larger for earlier selected positions and 0 for unselected ones.
    seq_len = shape[1]
    key = tf.where(selected, seq_len - tf.range(seq_len)[None, :], 0)
    top, _ = tf.math.top_k(key, k=spec.max_predictions, sorted=True)
    valid = top > 0
    positions = tf.where(valid, seq_len - top, 0)
    mask_ids = tf.where(valid, tf.gather(ids, positions, batch_dims=1), 0)
    return {
        "token_ids": token_ids,
        "padding_mask": padding_mask,
        "mask_positions": positions,
        "mask_ids": mask_ids,
        "mask_weights": tf.cast(valid, tf.float32),
    }


def _regular_ids(spec: MaskingSpec) -> list[int]:
    special = set(spec.special_ids)
    return [i for i in range(spec.vocab_size) if i not in special]
