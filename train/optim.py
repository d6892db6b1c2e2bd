"""AdamW with linear warmup then linear or cosine decay; no weight decay on LayerNorm weights or biases."""

from __future__ import annotations

import math

import keras

# keras LayerNormalization weights are `gamma`/`beta`; Dense/MLM-head biases are `bias`/`output_bias`.
NO_DECAY_NAMES = ["gamma", "beta", "bias"]
DEFAULT_WARMUP_FRACTION = 0.05
ADAM_EPSILON = 1e-6
ADAM_BETA_2 = 0.98


def warmup_steps_for(total_steps: int, warmup_steps: int | None) -> int:
    return warmup_steps if warmup_steps is not None else max(1, math.ceil(DEFAULT_WARMUP_FRACTION * total_steps))


@keras.saving.register_keras_serializable(package="lmshards")
class WarmupDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to `peak` over `warmup_steps`, then linear or cosine decay to 0 at `total_steps`.

    A pure function of the step, so the optimizer's restored `iterations` restores the schedule position.
    """

    def __init__(self, *, peak: float, warmup_steps: int, total_steps: int, decay: str = "linear"):
        self.peak = peak
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps
        self.decay = decay

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        warmup = self.peak * step / max(self.warmup_steps, 1)
        progress = keras.ops.clip((step - self.warmup_steps) / max(self.total_steps - self.warmup_steps, 1), 0.0, 1.0)
        if self.decay == "cosine":
            decayed = self.peak * 0.5 * (1.0 + keras.ops.cos(math.pi * progress))
        else:
            decayed = self.peak * (1.0 - progress)
        return keras.ops.where(step < self.warmup_steps, warmup, decayed)

    def get_config(self):
        return {"peak": self.peak, "warmup_steps": self.warmup_steps, "total_steps": self.total_steps, "decay": self.decay}


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
