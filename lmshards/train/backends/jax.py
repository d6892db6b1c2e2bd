"""The JAX backend: Keras 3 on JAX, data parallel over every device of every host (lmshards.train.backends.jax_step).

The host input pipeline is the input plan's tf.data (TensorFlow as a CPU data library); each host
feeds its own devices' rows of the global batch, and the compiled step never touches TensorFlow.
On a multi-host TPU slice every host runs the same command: JAX joins the hosts into one mesh, each
reads its share of the files (one input pipeline per host) and host 0 writes the checkpoints.
Checkpoints are lmshards.train.backends.jax_checkpoint's `ckpt-STEP.npz` files.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

from lmshards.plumbing import fs
from lmshards.plumbing.errors import LmshardsError
from lmshards.train.backends import jax_checkpoint, jax_step
from lmshards.train.backends.base import Backend, BuildSpec, Restored, Topology
from lmshards.train.config import TrainConfig
from lmshards.train.devices import (
    PLATFORM_CPU,
    PLATFORM_GPU,
    PLATFORM_TPU,
    STRATEGY_AUTO,
    STRATEGY_CPU,
    STRATEGY_MIRRORED,
    STRATEGY_TPU,
    call_sizes,
    detect_tpu_signals,
    resolve_precision,
    resolve_steps_per_execution,
)
from lmshards.train.evaluation import EvalSums
from lmshards.train.inputs.input_plan import InputPlan
from lmshards.train.inputs.mixture import ShardSet
from lmshards.train.network.keras_weights import assign_keras_weights
from lmshards.train.optim import WarmupDecay

log = logging.getLogger(__name__)

# Topology.strategy of this backend: one data-parallel mesh over every device.
STRATEGY_DATA_PARALLEL = "data_parallel"
# The JAX platform each --strategy asks for (auto: JAX's default, the best one present).
_STRATEGY_PLATFORMS = {
    STRATEGY_TPU: PLATFORM_TPU,
    STRATEGY_MIRRORED: PLATFORM_GPU,
    STRATEGY_CPU: PLATFORM_CPU,
}


# TensorFlow device types that the host input pipeline must never hold: JAX owns the accelerators.
TENSORFLOW_ACCELERATORS = ("GPU", "TPU")


def keep_tensorflow_on_the_cpu() -> None:
    """Hides every GPU and TPU from TensorFlow in this process: its tf.data input pipeline runs on the CPU.

    Otherwise TensorFlow, once its runtime starts, claims the GPUs JAX trains on (it reserves most of
    their memory by default). It works only before TensorFlow's first op; later it warns, as by then
    TensorFlow may already hold a device.
    """
    import tensorflow as tf  # the host input pipeline's library, already imported with lmshards.train.inputs.input_plan

    for kind in TENSORFLOW_ACCELERATORS:
        try:
            tf.config.set_visible_devices([], kind)
        except RuntimeError as e:  # the runtime started: the visible devices are fixed
            log.warning(
                "TensorFlow started before the JAX backend could hide the %ss from it (%s); it may hold "
                "accelerator memory beside JAX.",
                kind,
                e,
            )


def devices_for(strategy: str) -> list[Any]:
    """Every device of the platform --strategy asks for, on every host.

    Raises:
      LmshardsError: that platform has no devices here.
    """
    if strategy == STRATEGY_AUTO:
        return jax.devices()
    platform = _STRATEGY_PLATFORMS[strategy]
    try:
        return jax.devices(platform)
    except RuntimeError as e:
        raise LmshardsError(
            f"--strategy {strategy} with --backend jax needs {platform.upper()} devices, and JAX finds none ({e}). "
            f"Install jax[{'tpu' if platform == PLATFORM_TPU else 'cuda12'}] or pass --strategy auto."
        ) from e


def _compute_capability(device: Any) -> tuple[int, int] | None:
    text = getattr(device, "compute_capability", None)
    try:
        major, minor = str(text).split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None


class JaxBackend(Backend):
    name = "jax"

    def connect(self, config: TrainConfig) -> Topology:
        keep_tensorflow_on_the_cpu()  # before any TensorFlow op: the input pipeline must not take the chips
        jax_step.start_distributed(detect_tpu_signals(tpu_flag=config.tpu))
        self.devices = devices_for(config.strategy)
        platform = self.devices[0].platform
        capabilities = [_compute_capability(d) for d in self.devices if platform == PLATFORM_GPU]
        self.precision = resolve_precision(
            config.precision, platform=platform, gpu_compute_capabilities=capabilities
        )
        self.steps_per_call = resolve_steps_per_execution(
            config.steps_per_execution, platform=platform
        )
        self._sizes_asked: set[int] = set()  # steps per train_steps call so far
        return Topology(
            strategy=STRATEGY_DATA_PARALLEL,
            replicas=len(self.devices),
            device_kind=self.devices[0].device_kind,
            num_input_pipelines=jax.process_count(),
            precision=self.precision,
            steps_per_execution=self.steps_per_call,
        )

    def build(self, spec: BuildSpec) -> Restored:
        self.mesh = jax_step.Mesh.over(self.devices)
        self.spec = spec
        self.model, self.optimizer = jax_step.build(
            spec.model_config,
            schedule=spec.schedule,
            weight_decay=spec.weight_decay,
            clip_norm=spec.clip_norm,
            precision=self.precision,
            seed=spec.seed,
            packed=spec.packed,
            optimizer=spec.optimizer,
        )
        restored = jax_checkpoint.restore_newest(
            spec.checkpoint_dir,
            like=jax_checkpoint.variable_specs(self.model, self.optimizer),
        )
        if restored is None:
            check_no_other_checkpoints(spec.checkpoint_dir)
        else:
            jax_checkpoint.assign_arrays(self.model, self.optimizer, restored[1])
        self.state = self.mesh.replicate(jax_step.state_of(self.model, self.optimizer))
        self._compile_steps()
        return Restored(int(self.optimizer.iterations.value), restored and restored[0])

    def load_weights(self, weights: dict[str, np.ndarray], *, family: str) -> None:
        assign_keras_weights(self.model, weights, family=family)
        self.state = self.mesh.replicate(jax_step.state_of(self.model, self.optimizer))

    def set_schedule(self, schedule: WarmupDecay) -> None:
        self.optimizer.learning_rate = schedule
        self._compile_steps()  # the schedule is traced into the step

    def start_training(self, inputs: InputPlan, start_step: int) -> None:
        self.train_input = inputs.numpy_batches(
            inputs.train_dataset(pipeline_id=jax.process_index(), start_step=start_step)
        )

    def train_steps(self, n: int) -> np.ndarray:
        calls = call_sizes(n, most=self.steps_per_call, asked=self._sizes_asked)
        self._sizes_asked.add(n)
        losses = []
        for size in calls:
            batches = jax_step.stack_batches([next(self.train_input) for _ in range(size)])
            self.state, call_losses = self._train_steps(
                self.state, self.mesh.shard(batches, stacked=True)
            )
            losses.append(call_losses)
        return np.concatenate([np.asarray(x, np.float32) for x in losses])

    def eval_batches(
        self, inputs: InputPlan, shard_set: ShardSet, limit: int | None
    ) -> Iterator[EvalSums]:
        dataset = inputs.eval_dataset(shard_set, pipeline_id=jax.process_index(), limit=limit)
        for batch in inputs.numpy_batches(dataset):
            sums = np.asarray(self._eval_step(self.state, self.mesh.shard(batch)), np.float64)
            yield EvalSums(*(float(v) for v in sums))

    def non_finite_weights(self) -> tuple[list[str], int]:
        # One compiled reduction per variable on its devices; only a bool per variable reaches the host.
        finite = [bool(ok) for ok in jax_step.all_finite(self.state.trainable)]
        names = [v.path for v in self.model.trainable_variables]
        return [name for name, ok in zip(names, finite) if not ok], len(names)

    def save(self, step: int) -> str:
        arrays = jax_step.state_arrays(
            self.state
        )  # every host takes part: the arrays span the mesh
        path = jax_checkpoint.checkpoint_path(self.spec.checkpoint_dir, step)
        if jax.process_index() == 0:
            jax_checkpoint.save(self.spec.checkpoint_dir, arrays, step=step, keep=self.spec.keep)
        return path

    def _compile_steps(self) -> None:
        self._train_steps = jax_step.train_steps_fn(self.model, self.optimizer)
        self._eval_step = jax_step.eval_fn(self.model)


def check_no_other_checkpoints(directory: str) -> None:
    """Raises LmshardsError when directory holds checkpoints of another backend (which this one cannot read)."""
    if fs.isdir(directory) and any(
        name.endswith(".index") for name in map(str, fs.listdir(directory))
    ):
        raise LmshardsError(
            f"{directory!r} holds TensorFlow backend checkpoints and no JAX ones: this run was trained with "
            "--backend tensorflow. Rerun it with --backend tensorflow, or pass --restart to train it again with JAX."
        )


BACKEND = JaxBackend
