"""A backend without a model, for testing the training loop in seconds: fixed losses, eval sums and
checkpoints that are one small file per step.

Tests register it with `register(monkeypatch)` (one registry line, as for a real backend). EVENTS records
every call in order; `interrupt_at(name, signum)` raises a signal when that call begins.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator

import numpy as np

from lmshards.train import backend_names
from lmshards.train.backends.base import Backend, BuildSpec, Restored, Topology
from lmshards.train.evaluation import EvalSums

NAME = "fake"
EVENTS: list[tuple[str, object]] = []
_INTERRUPT: dict[str, int] = {}
# "weights" or "eval" -> the first global step at which they are NaN (set by a test, cleared by register).
NON_FINITE_FROM_STEP: dict[str, int] = {}
# Named like the JAX backend's, so that the run directory holds only what a run writes.
_STEP_FILE = re.compile(r"^ckpt-(\d+)\.npz$")
# What one eval batch sums to: loss 2.0 over 4 masked tokens, 1 correct.
BATCH_SUMS = EvalSums(8.0, 4.0, 1.0)
NAN_SUMS = EvalSums(float("nan"), 4.0, 0.0)


def register(monkeypatch) -> None:
    monkeypatch.setitem(
        backend_names.BACKENDS,
        NAME,
        backend_names.BackendEntry(__name__, keras_backend="tensorflow"),
    )
    EVENTS.clear()
    _INTERRUPT.clear()
    NON_FINITE_FROM_STEP.clear()


def interrupt_at(name: str, signum: int = signal.SIGTERM) -> None:
    _INTERRUPT[name] = signum


def step_loss(step: int) -> float:
    """The loss the fake reports for global step `step` (1-based): falls as 1 / step."""
    return 1.0 / step


def _event(name: str, detail: object = None) -> None:
    EVENTS.append((name, detail))
    if name in _INTERRUPT:
        signal.raise_signal(_INTERRUPT.pop(name))


class FakeBackend(Backend):
    name = NAME

    def connect(self, config) -> Topology:
        _event("connect")
        spe = config.steps_per_execution
        return Topology(
            strategy="fake",
            replicas=1,
            device_kind="none",
            num_input_pipelines=1,
            precision="float32",
            steps_per_execution=spe if isinstance(spe, int) else 1,
        )

    def build(self, spec: BuildSpec) -> Restored:
        _event("build")
        self.directory = spec.checkpoint_dir
        steps = (
            sorted(int(m[1]) for m in map(_STEP_FILE.match, os.listdir(self.directory)) if m)
            if os.path.isdir(self.directory)
            else []
        )
        if not steps:
            return Restored(0, None)
        return Restored(steps[-1], os.path.join(self.directory, f"ckpt-{steps[-1]}.npz"))

    def load_weights(self, weights, *, family: str) -> None:
        _event("load_weights", family)

    def set_schedule(self, schedule) -> None:
        _event("set_schedule")

    def start_training(self, inputs, start_step: int) -> None:
        _event("start_training", start_step)
        self.step = start_step

    def train_steps(self, n: int) -> np.ndarray:
        _event("train_steps", n)
        losses = np.array([step_loss(s) for s in range(self.step + 1, self.step + n + 1)])
        self.step += n
        return losses

    def eval_batches(self, inputs, shard_set, limit) -> Iterator[EvalSums]:
        _event("eval", limit)
        bad = NON_FINITE_FROM_STEP.get("eval")
        sums = NAN_SUMS if bad is not None and self.step >= bad else BATCH_SUMS
        for _ in range(inputs.eval_batches(shard_set, limit)):
            yield sums

    def non_finite_weights(self) -> tuple[list[str], int]:
        _event("check_weights")
        bad = NON_FINITE_FROM_STEP.get("weights")
        return (["dense/kernel"] if bad is not None and self.step >= bad else []), 2

    def save(self, step: int) -> str:
        _event("save", step)
        os.makedirs(self.directory, exist_ok=True)
        path = os.path.join(self.directory, f"ckpt-{step}.npz")
        with open(path, "w") as f:
            f.write(str(step))
        return path


BACKEND = FakeBackend
