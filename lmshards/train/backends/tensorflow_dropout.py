"""Dropout on the TensorFlow backend that does not depend on how the global batch is split between replicas.

Keras draws a dropout mask of the shape of the replica's own batch, from a seed that every replica
shares: with R replicas each one draws the same mask for its rows (the replicas' masks are copies of
each other), and the masks change with R, so a run resumed on another number of devices would not
continue like the run. Here replica r draws exactly rows r*b..(r+1)*b-1 of the mask of the whole
global batch, the mask one replica (or the JAX backend's single program) draws for it: TensorFlow's
stateless uniform draws are counter-based, element i of a draw of any shape coming from counter block
i // elements-per-block, so starting replica r's draw r*b rows' worth of blocks in gives those rows
at the cost of its own rows only. Checked for TensorFlow's Philox kernels (CPU, GPU, XLA on CPU).
With one replica nothing changes: the mask is Keras's own.
"""

from __future__ import annotations

import math

import tensorflow as tf
from keras.src.backend.tensorflow import random as keras_tf_random
from keras.src.random.seed_generator import draw_seed

# The algorithm tf.random.stateless_uniform picks when given none (Philox on CPUs and GPUs).
_AUTO_SELECT = tf.random.Algorithm.AUTO_SELECT.value


def install() -> None:
    """Makes Keras's TensorFlow backend draw dropout masks with replica_invariant_dropout (idempotent)."""
    keras_tf_random.dropout = replica_invariant_dropout


def replica_invariant_dropout(inputs, rate, noise_shape=None, seed=None):
    """keras.random.dropout for the TensorFlow backend whose mask for a row does not depend on the replicas."""
    context = tf.distribute.get_replica_context()
    replicas = context.num_replicas_in_sync if context is not None else 1
    if replicas == 1 or rate in (0.0, 1.0):
        return _KERAS_DROPOUT(inputs, rate, noise_shape=noise_shape, seed=seed)
    seed = keras_tf_random._cast_seed(draw_seed(seed))
    shape = _static_noise_shape(inputs, noise_shape) or keras_tf_random._get_concrete_noise_shape(
        inputs, noise_shape
    )
    # The same ops as tf.nn.experimental.stateless_dropout, so one replica's mask is bit for bit Keras's.
    scaled = inputs * tf.convert_to_tensor(1 / (1 - rate), dtype=inputs.dtype)
    if isinstance(shape, list) and shape[0] == 1:
        # A mask shared by every row (noise_shape with 1 in the batch axis) is the same on every replica.
        noise = _uniform(shape, seed, inputs.dtype, replica=0, replicas=1)
    else:
        noise = _uniform(
            shape, seed, inputs.dtype, replica=context.replica_id_in_sync_group, replicas=replicas
        )
    return tf.where(noise >= rate, scaled, tf.zeros([], inputs.dtype))


def _static_noise_shape(inputs, noise_shape) -> list[int] | None:
    """The mask's shape as Python ints (noise_shape's None dims are the inputs'), or None if not static."""
    dims = inputs.shape.as_list()
    shape = (
        dims if noise_shape is None else [d if n is None else n for d, n in zip(dims, noise_shape)]
    )
    return shape if all(isinstance(d, int) for d in shape) else None


def _uniform(shape, seed, dtype, *, replica, replicas: int) -> tf.Tensor:
    """Rows replica*b..(replica+1)*b-1 of stateless_uniform([replicas * b, ...], seed, dtype), b = shape[0]."""
    key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(seed=seed)
    elements = math.prod(shape) if isinstance(shape, list) else None
    per_block = (
        2 if dtype.size == 8 else 4
    )  # uniform draws per counter block (64-bit types take two words)
    if elements is not None and elements % per_block == 0:
        skip = tf.cast(replica, tf.uint64) * tf.constant(elements // per_block, tf.uint64)
        counter = tf.concat([counter[:1] + skip, counter[1:]], axis=0)
        noise = tf.raw_ops.StatelessRandomUniformV2(
            shape=shape, key=key, counter=counter, alg=_AUTO_SELECT, dtype=dtype
        )
    else:  # a replica's draw would start inside a block, or the shape is not static: draw every row
        rows = shape[0]
        whole_shape = tf.concat([[replicas * rows], shape[1:]], axis=0)
        whole = tf.raw_ops.StatelessRandomUniformV2(
            shape=whole_shape, key=key, counter=counter, alg=_AUTO_SELECT, dtype=dtype
        )
        noise = whole[replica * rows : (replica + 1) * rows]
    # stateless_uniform returns draw * (maxval - minval) + minval: exact for [0, 1), kept for the bits.
    return noise * tf.constant(1, dtype) + tf.constant(0, dtype)


_KERAS_DROPOUT = keras_tf_random.dropout
