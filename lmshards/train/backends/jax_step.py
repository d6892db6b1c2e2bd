"""The JAX backend's compute: a data-parallel mesh, the masked LM, and jit-compiled stateless steps.

Nothing here imports TensorFlow (keras-hub imports it only if it is installed): this module runs on
a machine with JAX and Keras alone. The state of a run is three lists of arrays, the model's
trainable and non-trainable variables (dropout seed states among them) and the optimizer's
variables (its iterations, so the learning-rate step, among them); a step maps state and a batch to
a new state, so a resumed run that restores the state continues exactly.

Loss: the same as the TensorFlow backend's, the summed cross-entropy over predicted positions
(`mask_weights` > 0) divided by their count in the global batch. With the batch sharded over the
mesh, XLA turns the global sums into one all-reduce per step.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import keras
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from lmshards.train.backends import jax_checkpoint
from lmshards.train.config import ModelConfig
from lmshards.train.devices import MIXED_FLOAT16
from lmshards.train.network.model import build_masked_lm
from lmshards.train.optim import WarmupDecay, make_optimizer

log = logging.getLogger(__name__)

# keras.distribution.DataParallel names its one mesh axis so.
BATCH_AXIS = "batch"
# Batch keys that are model inputs; the rest (mask_ids, mask_weights) are targets.
TARGET_KEYS = ("mask_ids", "mask_weights")

Batch = Mapping[str, Any]  # {feature: array [batch, ...]} as lmshards.train.inputs.data yields it


@dataclasses.dataclass
class TrainState:
    """Everything a step reads and writes: lists of arrays in the order of the Keras variables."""

    trainable: list
    non_trainable: list
    optimizer: list

    def tree(self) -> tuple[list, list, list]:
        return self.trainable, self.non_trainable, self.optimizer


def start_distributed(tpu_signals: Sequence[str]) -> None:
    """Joins the other hosts of a TPU slice into one JAX job (every host runs the same command).

    Only on a TPU VM (tpu_signals: lmshards.train.devices.detect_tpu_signals): JAX finds the slice's hosts and
    process ids from the VM's metadata; a one-host slice is a job of one process. Elsewhere, or if it
    fails, the run continues on this host's devices alone, with a warning.
    """
    if not tpu_signals:
        return
    try:
        jax.distributed.initialize()
    except (RuntimeError, ValueError) as e:
        log.warning(
            "Could not join the TPU slice's other hosts (%s); training on this host alone.", e
        )


@dataclasses.dataclass(frozen=True)
class Mesh:
    """Every device of the job in one data-parallel mesh: the batch is split over them, weights are replicated."""

    distribution: keras.distribution.DataParallel

    @classmethod
    def over(cls, devices: Sequence[Any] | None = None) -> Mesh:
        """A mesh over `devices` (default: every device of every host); set as Keras's distribution."""
        devices = list(devices if devices is not None else jax.devices())
        distribution = keras.distribution.DataParallel(devices=devices)
        keras.distribution.set_distribution(distribution)
        return cls(distribution)

    @property
    def jax_mesh(self) -> jax.sharding.Mesh:
        return self.distribution.device_mesh.backend_mesh

    @property
    def size(self) -> int:
        return self.jax_mesh.devices.size

    @property
    def local_size(self) -> int:
        return len(self.jax_mesh.local_devices)

    def replicate(self, state: TrainState) -> TrainState:
        """The state with every array laid out as the compiled step returns it: whole on every device.

        Keras leaves a one-device mesh's variables uncommitted; the step's outputs are mesh-replicated, and a
        jit call whose input layouts change compiles again, so without this the second call compiles the
        step a second time (as long as the first on a CPU).
        """
        replicated = NamedSharding(self.jax_mesh, PartitionSpec())

        def place(arrays: list) -> list:
            return [
                a if a.sharding == replicated else jax.device_put(a, replicated) for a in arrays
            ]

        return TrainState(*(place(arrays) for arrays in state.tree()))

    def shard(self, batch: Batch, *, stacked: bool = False) -> dict[str, jax.Array]:
        """This host's part of a global batch -> global arrays split over the mesh along the batch axis.

        stacked: the arrays are [steps, batch, ...] (several steps for one host call).
        """
        spec = PartitionSpec(None, BATCH_AXIS) if stacked else PartitionSpec(BATCH_AXIS)
        sharding = NamedSharding(self.jax_mesh, spec)
        return {
            name: jax.make_array_from_process_local_data(sharding, np.asarray(value))
            for name, value in batch.items()
        }


def build(
    model_config: ModelConfig,
    *,
    schedule: WarmupDecay,
    weight_decay: float,
    clip_norm: float | None,
    precision: str,
    seed: int,
    packed: bool = False,
    optimizer: str | None = None,
) -> tuple[keras.Model, keras.optimizers.Optimizer]:
    """The masked LM and its optimizer, built under the current distribution (call Mesh.over first)."""
    keras.utils.set_random_seed(seed)  # weight initialisation and dropout
    keras.mixed_precision.set_dtype_policy(precision)
    model = build_masked_lm(model_config, packed=packed)
    built = make_optimizer(
        schedule=schedule,
        weight_decay=weight_decay,
        clip_norm=clip_norm,
        loss_scaling=precision == MIXED_FLOAT16,
        optimizer=optimizer,
    )
    built.build(model.trainable_variables)
    return model, built


def state_of(model: keras.Model, optimizer: keras.optimizers.Optimizer) -> TrainState:
    """The current values of the Keras variables."""
    return TrainState(
        trainable=[v.value for v in model.trainable_variables],
        non_trainable=[v.value for v in model.non_trainable_variables],
        optimizer=[v.value for v in optimizer.variables],
    )


def state_arrays(state: TrainState) -> dict[str, list[np.ndarray]]:
    """The state as host arrays, grouped as lmshards.train.backends.jax_checkpoint saves them."""
    return {
        group: [np.asarray(a) for a in arrays]
        for group, arrays in zip(jax_checkpoint.GROUPS, state.tree())
    }


def masked_lm_sums(logits: jax.Array, batch: Batch) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(summed cross-entropy over predicted positions, their count, correct predictions).

    logits: [batch, max_predictions, vocab]; positions with mask_weights 0 (no prediction, or eval
    padding rows) count for nothing, even where their logits are not finite.
    """
    logits = logits.astype(jnp.float32)
    weights = batch["mask_weights"]
    labels = batch["mask_ids"]
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    ce = -jnp.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]
    ce = jnp.where(weights > 0, ce, 0.0)
    correct = (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)
    return jnp.sum(ce * weights), jnp.sum(weights), jnp.sum(correct * weights)


def _inputs(model: keras.Model, batch: Batch) -> dict[str, jax.Array]:
    return {name: batch[name] for name in model.input}


def train_steps_fn(
    model: keras.Model, optimizer: keras.optimizers.Optimizer
) -> Callable[[TrainState, Batch], tuple[TrainState, jax.Array]]:
    """A jit-compiled function (state, batches [n, batch, ...]) -> (state after n steps, losses [n]).

    n steps run in one compiled call (--steps_per_execution) as a lax.scan; each distinct n
    compiles once. The input state's buffers are donated: use only the returned state.
    """

    def loss_fn(trainable, non_trainable, optimizer_vars, batch):
        logits, non_trainable = model.stateless_call(
            trainable, non_trainable, _inputs(model, batch), training=True
        )
        loss_sum, weight_sum, _ = masked_lm_sums(logits, batch)
        loss = loss_sum / jnp.maximum(weight_sum, 1.0)
        # float16 loss scaling reads the optimizer's current scale, a variable held in optimizer_vars.
        with keras.StatelessScope(state_mapping=list(zip(optimizer.variables, optimizer_vars))):
            scaled = optimizer.scale_loss(loss)
        return scaled, (loss, non_trainable)

    grad_fn = jax.grad(loss_fn, has_aux=True)

    def one_step(tree, batch):
        trainable, non_trainable, optimizer_vars = tree
        grads, (loss, non_trainable) = grad_fn(trainable, non_trainable, optimizer_vars, batch)
        trainable, optimizer_vars = optimizer.stateless_apply(optimizer_vars, grads, trainable)
        return (trainable, non_trainable, optimizer_vars), loss

    @jax.jit(donate_argnums=0)
    def steps(tree, batches):
        return jax.lax.scan(one_step, tree, batches)

    def call(state: TrainState, batches: Batch) -> tuple[TrainState, jax.Array]:
        tree, losses = steps(state.tree(), dict(batches))
        return TrainState(*tree), losses

    return call


def eval_fn(model: keras.Model) -> Callable[[TrainState, Batch], jax.Array]:
    """A jit-compiled function (state, batch) -> [loss sum, predicted positions, correct] (float32 [3])."""

    @jax.jit
    def sums(trainable, non_trainable, batch):
        logits, _ = model.stateless_call(
            trainable, non_trainable, _inputs(model, batch), training=False
        )
        return jnp.stack(masked_lm_sums(logits, batch))

    return lambda state, batch: sums(state.trainable, state.non_trainable, dict(batch))


@jax.jit
def all_finite(arrays: list[jax.Array]) -> list[jax.Array]:
    """Whether every element of each array is finite (a bool scalar per array), in one compiled program."""
    return [jnp.isfinite(a).all() for a in arrays]


def stack_batches(batches: Sequence[Batch]) -> dict[str, np.ndarray]:
    """[{name: [batch, ...]}] * n -> {name: [n, batch, ...]}: the input of one train_steps_fn call."""
    return {name: np.stack([b[name] for b in batches]) for name in batches[0]}


def synthetic_batch(
    rng: np.random.Generator,
    *,
    batch: int,
    seq_len: int,
    max_predictions: int,
    vocab_size: int,
    with_segment_ids: bool,
) -> dict[str, np.ndarray]:
    """A batch shaped like lmshards.train.inputs.data's, of random tokens with max_predictions random positions per row.

    For benchmarks and tests that must run without TensorFlow (lmshards.train.inputs.data is tf.data).
    """
    positions = np.sort(
        np.stack([rng.choice(seq_len, max_predictions, replace=False) for _ in range(batch)]),
        axis=1,
    ).astype(np.int32)
    out = {
        "token_ids": rng.integers(0, vocab_size, (batch, seq_len), dtype=np.int32),
        "padding_mask": np.ones((batch, seq_len), np.int32),
        "mask_positions": positions,
        "mask_ids": np.zeros((batch, max_predictions), np.int32),
        "mask_weights": np.ones((batch, max_predictions), np.float32),
    }
    # The targets are the tokens at the positions, left in place: a copy task a model learns in a few steps.
    out["mask_ids"] = np.take_along_axis(out["token_ids"], positions, axis=1)
    if with_segment_ids:
        out["segment_ids"] = np.zeros((batch, seq_len), np.int32)
    return out
