"""The TensorFlow backend: tf.distribute (TPUStrategy, MirroredStrategy over GPUs, or the CPU), a
Keras 3 model on TensorFlow, tf.function steps and tf.train checkpoints (lmshards.train.backends.tensorflow_checkpoint).

Each input pipeline (one per worker host) feeds its replicas through
distribute_datasets_from_function; a host call runs up to steps_per_execution steps in one
tf.function loop. TPUs compile every step with XLA; on GPUs the replica step is jit-compiled.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import keras
import numpy as np
import tensorflow as tf

from lmshards.train.backends import tensorflow_dropout
from lmshards.train.backends.base import Backend, BuildSpec, Restored, Topology
from lmshards.train.backends.tensorflow_checkpoint import RunCheckpoints, checkpoint_root
from lmshards.train.backends.tensorflow_strategy import (
    device_defaults,
    make_strategy,
    num_input_pipelines,
    strategy_platform,
    strategy_summary,
    uses_gpus,
)
from lmshards.train.config import TrainConfig
from lmshards.train.devices import (
    MIXED_FLOAT16,
    PLATFORM_CPU,
    STRATEGY_TPU,
    check_tpu_batch,
    detect_tpu_signals,
)
from lmshards.train.evaluation import EvalSums
from lmshards.train.inputs.input_plan import InputPlan
from lmshards.train.inputs.mixture import ShardSet
from lmshards.train.network.keras_weights import assign_keras_weights
from lmshards.train.network.model import build_masked_lm
from lmshards.train.optim import WarmupDecay, make_optimizer

log = logging.getLogger(__name__)


def masked_lm_sums(
    model: keras.Model, batch: dict[str, tf.Tensor], *, training: bool, compact: bool = False
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """(summed cross-entropy over predicted positions, their count, correct predictions) for one replica batch.

    compact: run the head on the predicted positions only (shapes then change from batch to batch, which
    only a step that XLA does not compile can take). A batch's `max_predictions` slots are ~40% padding at
    15% masking, and the head's vocabulary projection and softmax are most of a small model's step.
    """
    labels, weights = batch["mask_ids"], batch["mask_weights"]
    if compact:
        predicted = tf.where(weights > 0)  # [n, 2]: (row, slot) of each real prediction
        labels, weights = tf.gather_nd(labels, predicted), tf.gather_nd(weights, predicted)
        logits = predicted_logits(model, batch, predicted, training=training)
    else:
        logits = model({name: batch[name] for name in model.input}, training=training)
    logits = tf.cast(logits, tf.float32)
    # log-sum-exp minus the label's logit: the same cross-entropy as sparse_softmax_cross_entropy_with_logits,
    # whose CPU kernel takes 1.6x as long for the head's [predictions, vocabulary] logits (forward and backward).
    ce = tf.reduce_logsumexp(logits, axis=-1) - tf.gather(
        logits, labels, batch_dims=logits.shape.rank - 1
    )
    correct = tf.cast(
        tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), labels), tf.float32
    )
    # where, not a product: a row of eval padding may give non-finite logits, and 0 * nan is nan.
    ce = tf.where(weights > 0, ce, 0.0)
    return tf.reduce_sum(ce * weights), tf.reduce_sum(weights), tf.reduce_sum(correct * weights)


def predicted_logits(
    model: keras.Model, batch: dict[str, tf.Tensor], predicted: tf.Tensor, *, training: bool
) -> tf.Tensor:
    """The masked LM's logits [n, vocabulary] at the (row, slot) pairs `predicted` [n, 2] of the batch.

    The same layers as model(batch) computes, in the same order (so dropout draws the same masks): the
    backbone over the whole batch, then the head on the n gathered positions, as one row of b * seq.
    """
    encoded = model.backbone(
        {name: batch[name] for name in model.backbone.input}, training=training
    )
    if isinstance(encoded, dict):  # BERT's backbone also returns its pooled output
        encoded = encoded["sequence_output"]
    seq_len, hidden = tf.shape(encoded)[1], encoded.shape[-1]
    rows = tf.cast(predicted[:, 0], tf.int32)
    flat_positions = rows * seq_len + tf.gather_nd(batch["mask_positions"], predicted)
    logits = model.masked_lm_head(
        tf.reshape(encoded, [1, -1, hidden]), flat_positions[None], training=training
    )
    # A reshape, not [0]: a slice's gradient writes a zero tensor of the logits' size.
    return tf.reshape(logits, [-1, logits.shape[-1]])


class TensorFlowBackend(Backend):
    name = "tensorflow"

    def connect(self, config: TrainConfig) -> Topology:
        self.strategy = make_strategy(
            config.strategy, tpu=config.tpu, signals=detect_tpu_signals(tpu_flag=config.tpu)
        )
        precision, steps_per_execution = device_defaults(
            self.strategy,
            precision=config.precision,
            steps_per_execution=config.steps_per_execution,
        )
        topology = Topology(
            **strategy_summary(self.strategy),
            num_input_pipelines=num_input_pipelines(self.strategy),
            precision=precision,
            steps_per_execution=steps_per_execution,
        )
        if topology.strategy == STRATEGY_TPU:
            warning = check_tpu_batch(
                config.per_replica_batch * topology.replicas, topology.replicas
            )
            if warning:
                log.warning("%s", warning)
        if topology.replicas > 1:  # each replica's dropout masks: its rows of the global batch's
            tensorflow_dropout.install()
        self.precision = precision
        return topology

    def build(self, spec: BuildSpec) -> Restored:
        # Model, optimizer and checkpoint are created under the strategy so variables are mirrored.
        keras.utils.set_random_seed(spec.seed)  # weight initialisation and dropout
        keras.mixed_precision.set_dtype_policy(self.precision)
        with self.strategy.scope():
            self.model = build_masked_lm(spec.model_config, packed=spec.packed)
            self.optimizer = make_optimizer(
                schedule=spec.schedule,
                weight_decay=spec.weight_decay,
                clip_norm=spec.clip_norm,
                loss_scaling=self.precision == MIXED_FLOAT16,
                optimizer=spec.optimizer,
            )
            self.optimizer.build(self.model.trainable_variables)
            self.checkpoints = RunCheckpoints(
                checkpoint_root(self.model, optimizer=self.optimizer),
                spec.checkpoint_dir,
                keep=spec.keep,
            )
            restored = self.checkpoints.restore_latest()
        self._compile_steps()
        return Restored(int(self.optimizer.iterations.numpy()), restored)

    def load_weights(self, weights: dict[str, np.ndarray], *, family: str) -> None:
        with self.strategy.scope():
            assign_keras_weights(self.model, weights, family=family)

    def set_schedule(self, schedule: WarmupDecay) -> None:
        self.optimizer.learning_rate = schedule

    def start_training(self, inputs: InputPlan, start_step: int) -> None:
        self.iterator = iter(
            self.strategy.distribute_datasets_from_function(
                lambda ctx: inputs.train_dataset(
                    pipeline_id=ctx.input_pipeline_id, start_step=start_step
                )
            )
        )

    def train_steps(self, n: int) -> np.ndarray:
        return self._train_steps(self.iterator, tf.constant(n)).numpy()

    def eval_batches(
        self, inputs: InputPlan, shard_set: ShardSet, limit: int | None
    ) -> Iterator[EvalSums]:
        batches = self.strategy.distribute_datasets_from_function(
            lambda ctx: inputs.eval_dataset(
                shard_set, pipeline_id=ctx.input_pipeline_id, limit=limit
            )
        )
        for batch in batches:
            yield EvalSums(*(float(v) for v in self._eval_step(batch)))

    def non_finite_weights(self) -> tuple[list[str], int]:
        variables = self.model.trainable_variables
        finite = [bool(tf.reduce_all(tf.math.is_finite(v))) for v in variables]
        return [v.path for v, ok in zip(variables, finite) if not ok], len(variables)

    def save(self, step: int) -> str:
        return self.checkpoints.save(step)

    def _compile_steps(self) -> None:
        """The tf.functions of one train call (n steps -> losses [n]) and one eval batch (-> 3 sums)."""
        strategy, model, optimizer = self.strategy, self.model, self.optimizer
        # XLA (TPUs, and GPUs here) compiles for fixed shapes; the CPU's graph runs the head on predictions only.
        compact = strategy_platform(strategy) == PLATFORM_CPU

        def replica_train_step(batch):
            with tf.GradientTape() as tape:
                loss_sum, weight_sum, _ = masked_lm_sums(
                    model, batch, training=True, compact=compact
                )
                # Dividing by the global count makes the replicas' summed gradients the global mean.
                global_weight = tf.distribute.get_replica_context().all_reduce("sum", weight_sum)
                loss = loss_sum / tf.maximum(global_weight, 1.0)
                scaled = optimizer.scale_loss(loss)
            grads = tape.gradient(scaled, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        if uses_gpus(strategy):  # TPUs compile every step with XLA anyway
            replica_train_step = tf.function(replica_train_step, jit_compile=True)

        @tf.function
        def train_steps(iterator, n):
            losses = tf.TensorArray(tf.float32, size=n)
            for i in tf.range(n):
                per_replica = strategy.run(replica_train_step, args=(next(iterator),))
                losses = losses.write(i, strategy.reduce("sum", per_replica, axis=None))
            return losses.stack()

        @tf.function
        def eval_step(batch):
            sums = strategy.run(
                lambda b: masked_lm_sums(model, b, training=False, compact=compact), args=(batch,)
            )
            return [strategy.reduce("sum", s, axis=None) for s in sums]

        self._train_steps, self._eval_step = train_steps, eval_step


BACKEND = TensorFlowBackend
