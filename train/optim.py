"""AdamW with linear warmup then linear or cosine decay (and linear --extend segments); no weight decay on
LayerNorm weights or biases."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import keras

# keras LayerNormalization weights are `gamma`/`beta`; Dense/MLM-head biases are `bias`/`output_bias`.
NO_DECAY_NAMES = ["gamma", "beta", "bias"]
DEFAULT_WARMUP_FRACTION = 0.05
ADAM_EPSILON = 1e-6
ADAM_BETA_2 = 0.98


def warmup_steps_for(total_steps: int, warmup_steps: int | None) -> int:
    return (
        warmup_steps
        if warmup_steps is not None
        else max(1, math.ceil(DEFAULT_WARMUP_FRACTION * total_steps))
    )


@dataclasses.dataclass(frozen=True)
class ScheduleExtension:
    """From start_step on (an --extend): over warmup_steps the rate rises linearly from 0 to start_rate, then
    falls linearly from start_rate to 0 at end_step (warmup_steps 0: it falls from start_step on)."""

    start_step: int
    end_step: int
    start_rate: float
    warmup_steps: int = 0


@keras.saving.register_keras_serializable(package="lmshards")
class WarmupDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to `peak` over `warmup_steps`, then linear or cosine decay to 0 at `total_steps`.

    Each of `extensions` (mappings with ScheduleExtension's fields, in the order they were made) takes
    over from its start_step. A pure function of the step, so the optimizer's restored `iterations`
    restores the schedule position; get_config() is what run_config.json keeps, so a resumed run
    rebuilds the same schedule.
    """

    def __init__(
        self,
        *,
        peak: float,
        warmup_steps: int,
        total_steps: int,
        decay: str = "linear",
        extensions: Sequence[Mapping[str, Any]] = (),
    ):
        self.peak = peak
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps
        self.decay = decay
        self.extensions = tuple(ScheduleExtension(**e) for e in extensions)

    @property
    def end_step(self) -> int:
        """The step at which the rate reaches 0 and the run ends."""
        return self.extensions[-1].end_step if self.extensions else self.total_steps

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        warmup = self.peak * step / max(self.warmup_steps, 1)
        progress = keras.ops.clip(
            (step - self.warmup_steps) / max(self.total_steps - self.warmup_steps, 1), 0.0, 1.0
        )
        if self.decay == "cosine":
            decayed = self.peak * 0.5 * (1.0 + keras.ops.cos(math.pi * progress))
        else:
            decayed = self.peak * (1.0 - progress)
        rate = keras.ops.where(step < self.warmup_steps, warmup, decayed)
        for e in self.extensions:
            decay_start = e.start_step + e.warmup_steps
            left = keras.ops.clip((step - decay_start) / max(e.end_step - decay_start, 1), 0.0, 1.0)
            extension = e.start_rate * (1.0 - left)
            if e.warmup_steps:
                rising = e.start_rate * (step - e.start_step) / e.warmup_steps
                extension = keras.ops.where(step < decay_start, rising, extension)
            rate = keras.ops.where(step >= e.start_step, extension, rate)
        return rate

    def extended(
        self, *, from_step: int, to_step: int, peak: float | None = None, warmup_steps: int = 0
    ) -> WarmupDecay:
        """This schedule continued from `from_step` (the step training resumes at) to end at `to_step`.

        Without `peak` the rate falls linearly from the one this schedule gives at from_step to 0 at
        to_step: it neither jumps nor warms up again. With `peak` (a schedule that has ended) it warms
        up from 0 to peak over warmup_steps, then falls linearly to 0 at to_step.
        """
        rate = float(self(from_step)) if peak is None else peak
        extension = ScheduleExtension(
            start_step=from_step,
            end_step=to_step,
            start_rate=rate,
            warmup_steps=0 if peak is None else warmup_steps,
        )
        config = self.get_config()
        config["extensions"].append(dataclasses.asdict(extension))
        return WarmupDecay(**config)

    def get_config(self):
        return {
            "peak": self.peak,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
            "decay": self.decay,
            "extensions": [dataclasses.asdict(e) for e in self.extensions],
        }


def make_optimizer(
    *,
    schedule: WarmupDecay,
    weight_decay: float,
    clip_norm: float | None,
    loss_scaling: bool,
) -> keras.optimizers.Optimizer:
    """AdamW (wrapped in a LossScaleOptimizer for float16). Call before the optimizer is built."""
    optimizer = keras.optimizers.AdamW(
        learning_rate=schedule,
        weight_decay=weight_decay,
        beta_2=ADAM_BETA_2,
        epsilon=ADAM_EPSILON,
        global_clipnorm=clip_norm,
    )
    optimizer.exclude_from_weight_decay(var_names=NO_DECAY_NAMES)
    if loss_scaling:
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer
