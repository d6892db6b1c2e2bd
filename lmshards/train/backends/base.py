"""The seam between the training loop (lmshards.train.loop.trainer) and a backend that runs it on devices.

The loop owns everything that is the same on every backend: the run directory, the input plan
(lmshards.train.inputs.input_plan: which sequences, masks and batches, in which order), the schedule, when to log,
evaluate and save, preemption and the summary. A backend owns what depends on the framework: its
strategy or mesh, the model and optimizer variables, the compiled train and eval steps and the
checkpoint files. A backend is one module exposing `BACKEND`, a subclass of Backend, and one line in
lmshards.train.backend_names.BACKENDS.

The loop calls, in this order:
  connect(config) -> Topology      devices, replicas, input pipelines, resolved precision and steps per call
  build(spec) -> Restored          model + optimizer under the strategy/mesh, then the newest checkpoint
                                   that restores (restore_newest: damaged ones are skipped with a warning)
  load_weights(weights, family)    only for a new run started from --init_from (no checkpoint restored)
  set_schedule(schedule)           only when --extend continued the run's schedule
  start_training(inputs, step)     the train input from the input plan, positioned at `step`
  train_steps(n) -> losses [n]     n optimizer steps in one host call; each loss the global masked mean
  eval_batches(inputs, set, limit) one EvalSums per global batch of a set's validation split
  non_finite_weights() -> names    before every save: the loop never checkpoints NaN or infinite weights
  save(step) -> path               an atomic checkpoint: a partial save is never taken for a complete one
"""

from __future__ import annotations

import abc
import dataclasses
import logging
import posixpath
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from lmshards.plumbing.errors import LmshardsError
from lmshards.train.config import ModelConfig, TrainConfig
from lmshards.train.evaluation import EvalSums

if TYPE_CHECKING:
    from lmshards.train.inputs.input_plan import InputPlan
    from lmshards.train.inputs.mixture import ShardSet
    from lmshards.train.optim import WarmupDecay

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Topology:
    """What a backend trains on, as connect() found it on this machine.

    strategy: how replicas are driven (tensorflow: tpu | mirrored | cpu; another backend its own word).
    num_input_pipelines: input pipelines feeding the replicas (one per host); each reads its share of
      every set's files and yields per-replica batches (lmshards.train.inputs.input_plan).
    """

    strategy: str
    replicas: int
    device_kind: str
    num_input_pipelines: int
    precision: str  # the Keras dtype policy --precision resolved to
    steps_per_execution: int  # the most train steps one host call runs

    def devices(self) -> dict[str, Any]:
        """{strategy, replicas, device_kind}: the run's log line, run_config.json's "resolved", run_summary.json."""
        return {
            "strategy": self.strategy,
            "replicas": self.replicas,
            "device_kind": self.device_kind,
        }


@dataclasses.dataclass(frozen=True)
class BuildSpec:
    """What build() makes: the model, its AdamW optimizer with the schedule, and where checkpoints live."""

    model_config: ModelConfig
    schedule: WarmupDecay
    weight_decay: float
    clip_norm: float | None
    seed: int  # weight initialisation and dropout
    checkpoint_dir: str
    keep: int  # checkpoints kept
    # The shards are packed blocks: the family's packed backbone (lmshards.train.families.packed).
    packed: bool = False
    optimizer: str | None = None  # TrainConfig.optimizer (None: AdamW)

    @classmethod
    def for_run(
        cls,
        config: TrainConfig,
        model_config: ModelConfig,
        *,
        schedule: WarmupDecay,
        checkpoint_dir: str,
        packed: bool = False,
    ) -> BuildSpec:
        return cls(
            model_config=model_config,
            schedule=schedule,
            weight_decay=config.weight_decay,
            clip_norm=config.clip_norm,
            seed=config.seed,
            checkpoint_dir=checkpoint_dir,
            keep=config.keep,
            packed=packed,
            optimizer=config.optimizer,
        )


@dataclasses.dataclass(frozen=True)
class Restored:
    """The optimizer step the run continues from (0 for a new run) and the checkpoint it came from."""

    step: int
    path: str | None


class Backend(abc.ABC):
    """One framework's way of training the run; see the module docstring for the call order.

    A backend implements every one of these (tests/helpers/fake_backend.py is a whole one in 150 lines):

    >>> sorted(Backend.__abstractmethods__)  # doctest: +NORMALIZE_WHITESPACE
    ['build', 'connect', 'eval_batches', 'load_weights', 'non_finite_weights', 'save',
     'set_schedule', 'start_training', 'train_steps']
    >>> from lmshards.train.backend_names import entry
    >>> entry("jax").module  # the module whose BACKEND `--backend jax` loads
    'lmshards.train.backends.jax'
    """

    name: ClassVar[str]

    @abc.abstractmethod
    def connect(self, config: TrainConfig) -> Topology:
        """Builds the strategy or mesh over this machine's devices; resolves --precision and --steps_per_execution.

        Raises:
          LmshardsError: the devices asked for (--strategy, --tpu) are not there.
        """

    @abc.abstractmethod
    def build(self, spec: BuildSpec) -> Restored:
        """Creates model and optimizer (variables placed for the topology) and restores the newest good checkpoint.

        Raises:
          LmshardsError: there are complete checkpoints but none of them restores.
        """

    @abc.abstractmethod
    def load_weights(self, weights: dict[str, np.ndarray], *, family: str) -> None:
        """Replaces the new model's initial weights by these (--init_from), named as
        lmshards.train.network.hf_mapping.keras_weight_names lists them; a subset leaves the others as initialised."""

    @abc.abstractmethod
    def set_schedule(self, schedule: WarmupDecay) -> None:
        """Trains on with this learning-rate schedule (--extend continued the run's)."""

    @abc.abstractmethod
    def start_training(self, inputs: InputPlan, start_step: int) -> None:
        """Opens the train input (inputs.train_dataset per input pipeline) at the batches of start_step."""

    @abc.abstractmethod
    def train_steps(self, n: int) -> np.ndarray:
        """Runs n optimizer steps in one host call; float losses [n], each the global mean over masked tokens."""

    @abc.abstractmethod
    def eval_batches(
        self, inputs: InputPlan, shard_set: ShardSet, limit: int | None
    ) -> Iterator[EvalSums]:
        """One EvalSums (summed over all replicas) per global batch of inputs.eval_dataset(shard_set, limit)."""

    @abc.abstractmethod
    def non_finite_weights(self) -> tuple[list[str], int]:
        """(names of the trainable variables holding a NaN or an infinity, how many trainable variables there are)."""

    @abc.abstractmethod
    def save(self, step: int) -> str:
        """Writes the checkpoint of `step` atomically and keeps the newest spec.keep; returns its path."""


def one_line(error: BaseException) -> str:
    """An exception as one short line, for warnings about skipped checkpoints."""
    text = getattr(error, "message", None) or str(error) or type(error).__name__
    return " ".join(text.split())[:300]


def restore_newest(
    candidates: Sequence[str], restore: Callable[[str], None], *, directory: str
) -> str | None:
    """Restores the first of `candidates` (newest first) that `restore` accepts; returns it, None if there are none.

    Every backend's fallback rule: a checkpoint that raises while restoring (damaged, truncated, of
    another model) is skipped with a warning naming it and why, and the next older one is tried.

    >>> def restore(path):
    ...     if path.endswith("ckpt-3"):
    ...         raise ValueError("CRC mismatch")
    >>> restore_newest(["run/ckpt-3", "run/ckpt-2"], restore, directory="run")
    'run/ckpt-2'
    >>> restore_newest([], restore, directory="run") is None
    True

    Raises:
      LmshardsError: there are candidates but none of them restores.
    """
    failures = []
    for path in candidates:
        try:
            restore(path)
        except (
            Exception
        ) as e:  # a damaged checkpoint fails in many ways: DataLossError, IndexError, OpError, ...
            failures.append(f"{posixpath.basename(path)}: {one_line(e)}")
            log.warning("Skipping checkpoint %s: it does not restore (%s).", path, one_line(e))
            continue
        if failures:
            log.warning(
                "Restored %s, the newest checkpoint that restores (skipped: %s).",
                path,
                "; ".join(failures),
            )
        return path
    if failures:
        raise LmshardsError(
            f"No checkpoint in {directory!r} restores ({'; '.join(failures)}). Restore the checkpoint files from a "
            "copy, or pass --restart to train this run again from step 0 (deleting its checkpoints and metrics)."
        )
    return None


def no_checkpoint(directory: str) -> LmshardsError:
    """The error of a run directory with no complete checkpoint to read weights from."""
    return LmshardsError(
        f"No complete checkpoint under {directory!r}; train longer than --checkpoint_every steps."
    )
