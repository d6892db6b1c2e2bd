"""AdamW with linear warmup then linear or cosine decay (and linear --extend segments); no weight decay on
LayerNorm weights or biases. The rules of a run's schedule across its commands (first_schedule,
continue_schedule: --extend, a new --learning_rate) live beside WarmupDecay."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

import keras

from lmshards.plumbing.errors import LmshardsError
from lmshards.train.config import (
    DEFAULT_DECAY_FRACTION,
    LINEAR,
    ONE_MINUS_SQRT,
    STABLE_ADAMW,
    WSD,
    TrainConfig,
)

log = logging.getLogger(__name__)

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
        decay_fraction: float = DEFAULT_DECAY_FRACTION,
        decay_shape: str = LINEAR,
    ):
        self.peak = peak
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps
        self.decay = decay
        self.extensions = tuple(ScheduleExtension(**e) for e in extensions)
        # WSD only (decay "wsd"): the last decay_fraction of the steps decay, linearly or as 1 - sqrt.
        self.decay_fraction = decay_fraction
        self.decay_shape = decay_shape

    @property
    def end_step(self) -> int:
        """The step at which the rate reaches 0 and the run ends."""
        return self.extensions[-1].end_step if self.extensions else self.total_steps

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        warmup = self.peak * step / max(self.warmup_steps, 1)
        decay_start = (
            wsd_decay_start(self.total_steps, self.warmup_steps, self.decay_fraction)
            if self.decay == WSD
            else self.warmup_steps
        )
        progress = keras.ops.clip(
            (step - decay_start) / max(self.total_steps - decay_start, 1), 0.0, 1.0
        )
        if self.decay == WSD and self.decay_shape == ONE_MINUS_SQRT:
            decayed = self.peak * (1.0 - keras.ops.sqrt(progress))
        elif self.decay == "cosine":
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
        config: dict[str, Any] = {
            "peak": self.peak,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
            "decay": self.decay,
            "extensions": [dataclasses.asdict(e) for e in self.extensions],
        }
        if self.decay == WSD:  # only then, so the other schedules' records stay as they were
            config.update(decay_fraction=self.decay_fraction, decay_shape=self.decay_shape)
        return config


def wsd_decay_start(total_steps: int, warmup_steps: int, decay_fraction: float) -> int:
    """The step a warmup-stable-decay schedule starts to decay at: the last decay_fraction of the steps
    (rounded), never before the warmup ends."""
    return max(warmup_steps, total_steps - round(decay_fraction * total_steps))


def first_schedule(
    config: TrainConfig, total_steps: int, previous_run: dict[str, Any] | None
) -> WarmupDecay:
    """The run's learning-rate schedule: the one run_config.json keeps, or a new one for a new run."""
    kept = (previous_run or {}).get("schedule")
    if kept:
        return WarmupDecay.from_config(kept)
    return WarmupDecay(
        peak=config.learning_rate,
        warmup_steps=warmup_steps_for(total_steps, config.warmup_steps),
        total_steps=total_steps,
        decay=config.lr_schedule,
        decay_fraction=config.decay_fraction or DEFAULT_DECAY_FRACTION,
        decay_shape=config.decay_shape or LINEAR,
    )


def continue_schedule(
    schedule: WarmupDecay,
    *,
    total_steps: int,
    start_step: int,
    extend: bool,
    new_peak: float | None = None,
    warmup_steps: int | None = None,
) -> WarmupDecay:
    """The schedule this command trains with: the run's, or with --extend the run's continued to total_steps.

    new_peak: the --learning_rate this command gives in place of the run's (None: the same). It restarts
    a schedule that has ended, warming up over warmup_steps (None: 5% of the added steps).
    Raises:
      LmshardsError: total_steps differs from where the run's schedule ends and --extend is not given;
        with --extend, total_steps is not past that end, or the rate has already fallen to 0 and no new
        --learning_rate is given; a new --learning_rate for a schedule that has not ended.
    """
    end = schedule.end_step
    if total_steps == end and new_peak is None:
        return schedule
    if not extend:
        raise LmshardsError(
            f"This command trains {total_steps} steps in all but the run's schedule, fixed by its first command, ends "
            f"at step {end}. Rerun with the run's --steps/--epochs and --per_replica_batch, or pass --extend to "
            f"continue it to step {total_steps}."
        )
    if total_steps <= end:
        raise LmshardsError(
            f"--extend needs more steps than the run's schedule has ({end}); this command asks for {total_steps}."
        )
    ended = float(schedule(start_step)) <= 0.0
    if ended and new_peak is None:
        raise LmshardsError(
            f"--extend continues from the current learning rate, and at step {start_step} this run's rate has already "
            "fallen to 0: the added steps would not train. Pass a new --learning_rate (and --warmup_steps) for the "
            "added steps, extend a run before its schedule ends (stop it with SIGTERM or Ctrl-C, then rerun with "
            "--extend), or start a new run."
        )
    if new_peak is not None and not ended:
        raise LmshardsError(
            f"--learning_rate {new_peak:g} differs from the run's, and a new rate starts only once the run's schedule "
            f"has ended (at step {end}; this run is at step {start_step}). Rerun with the run's --learning_rate and "
            "--warmup_steps to extend it from its current rate."
        )
    if new_peak is not None:
        warmup = warmup_steps_for(total_steps - start_step, warmup_steps)
        log.info(
            "--extend: from step %d the learning rate warms up to %.3e over %d steps, then falls linearly to 0 "
            "at step %d.",
            start_step,
            new_peak,
            warmup,
            total_steps,
        )
        return schedule.extended(
            from_step=start_step, to_step=total_steps, peak=new_peak, warmup_steps=warmup
        )
    extended = schedule.extended(from_step=start_step, to_step=total_steps)
    log.info(
        "--extend: from step %d the learning rate falls linearly from %.3e to 0 at step %d.",
        start_step,
        float(schedule(start_step)),
        total_steps,
    )
    return extended


@keras.saving.register_keras_serializable(package="lmshards")
class StableAdamW(keras.optimizers.AdamW):
    """AdamW with update clipping per tensor (Wortsman et al. 2023, "Stable and low-precision training for
    large-scale vision-language models"; the optimizer of ModernBERT, Warner et al. 2024).

    Each tensor's learning rate is divided by max(1, RMS), RMS = sqrt(mean(g^2 / max(v_hat, eps^2))) over the
    tensor, v_hat the bias-corrected second moment after this step's update: a gradient far larger than its
    running estimate (a spike) moves the weights no more than Adam's usual step. Weight decay is fully decoupled
    as in the paper: each step multiplies a weight by 1 - weight_decay * lr / peak_lr (the schedule's fraction of
    its peak), independent of the learning rate's size.
    """

    def __init__(self, *, peak_learning_rate: float, **kwargs):
        super().__init__(**kwargs)
        self.peak_learning_rate = peak_learning_rate

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        lr = keras.ops.cast(learning_rate, dtype)
        gradient = keras.ops.cast(gradient, dtype)
        step = keras.ops.cast(self.iterations + 1, dtype)
        beta_1_power = keras.ops.power(keras.ops.cast(self.beta_1, dtype), step)
        beta_2_power = keras.ops.power(keras.ops.cast(self.beta_2, dtype), step)
        m = self._momentums[self._get_variable_index(variable)]
        v = self._velocities[self._get_variable_index(variable)]
        self.assign_add(m, (gradient - m) * (1 - self.beta_1))
        self.assign_add(v, (keras.ops.square(gradient) - v) * (1 - self.beta_2))
        v_hat = v / (1 - beta_2_power)
        rms = keras.ops.sqrt(
            keras.ops.mean(keras.ops.square(gradient) / keras.ops.maximum(v_hat, self.epsilon**2))
        )
        alpha = (
            lr / keras.ops.maximum(1.0, rms) * keras.ops.sqrt(1 - beta_2_power) / (1 - beta_1_power)
        )
        self.assign_sub(variable, m * alpha / (keras.ops.sqrt(v) + self.epsilon))

    def _apply_weight_decay(self, variables):
        if self.weight_decay is None:
            return
        for variable in variables:
            if self._use_weight_decay(variable):
                fraction = (
                    keras.ops.cast(self.learning_rate, variable.dtype) / self.peak_learning_rate
                )
                variable.assign(variable - variable * self.weight_decay * fraction)

    def get_config(self):
        return {**super().get_config(), "peak_learning_rate": self.peak_learning_rate}


def make_optimizer(
    *,
    schedule: WarmupDecay,
    weight_decay: float,
    clip_norm: float | None,
    loss_scaling: bool,
    optimizer: str | None = None,
) -> keras.optimizers.Optimizer:
    """AdamW, or StableAdamW (optimizer STABLE_ADAMW), wrapped in a LossScaleOptimizer for float16. Call before
    the optimizer is built. Both with beta_2 0.98 and epsilon 1e-6 (RoBERTa's, and ModernBERT's)."""
    stable = {"peak_learning_rate": schedule.peak} if optimizer == STABLE_ADAMW else {}
    optimizer_class = StableAdamW if stable else keras.optimizers.AdamW
    built = optimizer_class(
        **stable,
        learning_rate=schedule,
        weight_decay=weight_decay,
        beta_2=ADAM_BETA_2,
        epsilon=ADAM_EPSILON,
        global_clipnorm=clip_norm,
    )
    built.exclude_from_weight_decay(var_names=NO_DECAY_NAMES)
    if loss_scaling:
        return keras.optimizers.LossScaleOptimizer(built)
    return built
