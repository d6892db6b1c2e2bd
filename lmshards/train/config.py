"""Model and run configuration: frozen dataclasses, presets and defaults in one place."""

from __future__ import annotations

import dataclasses
from typing import Any

from lmshards.plumbing.errors import LmshardsError
from lmshards.plumbing.flag_types import (
    COUNT,
    NON_NEGATIVE,
    NON_NEGATIVE_COUNT,
    POSITIVE,
    SEED,
    Number,
    check_ranges,
    real,
    whole,
)
from lmshards.plumbing.lease import STALE_AFTER_RANGE, STALE_AFTER_S
from lmshards.schemas.constants import DEFAULT_PER_REPLICA_BATCH
from lmshards.train.backend_names import DEFAULT_BACKEND
from lmshards.train.devices import AUTO, STRATEGY_AUTO
from lmshards.train.families import DEFAULT_FAMILY, get_family
from lmshards.train.masking_recipes import TOKEN

# --lr_schedule: after the warmup, linear or cosine decay to 0, or wsd (warmup, stable, decay: the rate stays at
# its peak, then the last --decay_fraction of the steps decay with --decay_shape).
LINEAR = "linear"
WSD = "wsd"
LR_SCHEDULES = (LINEAR, "cosine", WSD)
ONE_MINUS_SQRT = "1-sqrt"
DECAY_SHAPES = (LINEAR, ONE_MINUS_SQRT)
DEFAULT_DECAY_FRACTION = 0.1
# --optimizer: AdamW, or StableAdamW (AdamW with update clipping per tensor; lmshards.train.optim.StableAdamW).
ADAMW = "adamw"
STABLE_ADAMW = "stable_adamw"
OPTIMIZERS = (ADAMW, STABLE_ADAMW)
# What the end of training evaluates: one pass over the whole validation split, or nothing more.
FINAL_EVAL_FULL = "full"
FINAL_EVAL_NONE = "none"
FINAL_EVALS = (FINAL_EVAL_FULL, FINAL_EVAL_NONE)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Everything needed to rebuild the network; `vocabulary_size` 0 means "take it from the manifest"."""

    family: str = DEFAULT_FAMILY
    vocabulary_size: int = 0
    num_layers: int = 2
    num_heads: int = 2
    hidden_dim: int = 64
    intermediate_dim: int = 128
    dropout: float = 0.1
    max_sequence_length: int = (
        512  # tokens the model takes; an export may add the family's position offset
    )
    # None: the family's keras-hub defaults. Set for a model taken from transformers (its hidden_act and
    # layer_norm_eps), so it computes exactly as there: "gelu" (exact) or "gelu_approximate" (tanh).
    activation: str | None = None
    layer_norm_epsilon: float | None = None
    # Rotary attention (ModernBERT): RoPE thetas of the global and the local layers, the local layers' window
    # in tokens (half on each side) and every how many layers one is global (the first is). None elsewhere.
    rope_theta_global: float | None = None
    rope_theta_local: float | None = None
    local_window: int | None = None
    global_every: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The fields, without the optional ones left at None (so runs recorded before they existed still match)."""
        return {
            k: v
            for k, v in dataclasses.asdict(self).items()
            if v is not None or k not in _OPTIONAL_MODEL_FIELDS
        }


_OPTIONAL_MODEL_FIELDS = (
    "activation",
    "layer_norm_epsilon",
    "rope_theta_global",
    "rope_theta_local",
    "local_window",
    "global_every",
)
# ModelConfig.activation: exact GELU, or keras-hub's tanh approximation (lmshards.train.network.hf_mapping.HF_ACTIVATIONS).
MODEL_ACTIVATIONS = ("gelu", "gelu_approximate")


# 512 tokens for every family: keras-hub numbers positions from 0, so a family whose transformers form
# numbers them after the padding index (ModelFamily.hf_position_offset) exports more, e.g. roberta-base's 514.
_PRESET_DIMS: dict[str, dict[str, Any]] = {
    "tiny": dict(num_layers=2, num_heads=2, hidden_dim=64, intermediate_dim=128),
    "small": dict(num_layers=4, num_heads=4, hidden_dim=256, intermediate_dim=1024),
    "base": dict(num_layers=12, num_heads=12, hidden_dim=768, intermediate_dim=3072),
}
PRESETS = tuple(_PRESET_DIMS)
DEFAULT_PRESET = "tiny"


def preset_config(name: str, *, family: str, vocabulary_size: int) -> ModelConfig:
    """A preset's ModelConfig for `family`, with the vocabulary taken from the manifest."""
    if name not in _PRESET_DIMS:
        raise LmshardsError(f"Unknown --model_preset {name!r}; choose one of {list(PRESETS)}.")
    own = dict(get_family(family).presets)
    if own:  # a family with presets of its own (lmshards.train.families.base.ModelFamily.presets)
        return ModelConfig(family=family, vocabulary_size=vocabulary_size, **dict(own[name]))
    return ModelConfig(
        family=family,
        vocabulary_size=vocabulary_size,
        max_sequence_length=512,
        **_PRESET_DIMS[name],
    )


def model_config_from_dict(data: dict[str, Any], *, source: str) -> ModelConfig:
    """Builds a ModelConfig from JSON fields. Raises LmshardsError naming unknown or missing fields."""
    names = {f.name for f in dataclasses.fields(ModelConfig)}
    unknown = set(data) - names
    if unknown:
        raise LmshardsError(
            f"Model config {source!r} has unknown fields {sorted(unknown)}; allowed: {sorted(names)}."
        )
    try:
        config = ModelConfig(**data)
    except TypeError as e:
        raise LmshardsError(f"Model config {source!r} is invalid: {e}.") from e
    get_family(config.family)
    if config.activation is not None and config.activation not in MODEL_ACTIVATIONS:
        raise LmshardsError(
            f"Model config {source!r} has activation {config.activation!r}; choose one of {list(MODEL_ACTIVATIONS)}."
        )
    return config


# Records a shuffle buffer may hold: far beyond any host's memory for real sequences would be a typo.
MAX_SHUFFLE_BUFFER = 10**8
MAX_EPOCHS = 10**6
MAX_STEPS_PER_EXECUTION = 10**4
# The range of every numeric TrainConfig field: the argparse type of its flag and the check of a config
# built in code (TrainConfig.__post_init__), so each is written once.
TRAIN_RANGES: dict[str, Number] = {
    "steps": COUNT,
    "epochs": real(0.0, MAX_EPOCHS, low_open=True),
    "per_replica_batch": COUNT,
    "learning_rate": POSITIVE,
    "weight_decay": NON_NEGATIVE,
    "warmup_steps": NON_NEGATIVE_COUNT,
    "clip_norm": POSITIVE,
    "decay_fraction": real(0.0, 1.0, low_open=True),
    "rope_theta_global": POSITIVE,
    # Any finite number here: its range depends on --masking, and check_recipe states and checks it.
    "mlm_probability": real(),
    "shuffle_buffer": whole(1, MAX_SHUFFLE_BUFFER),
    "seed": SEED,
    "steps_per_execution": whole(1, MAX_STEPS_PER_EXECUTION, words=(AUTO,)),
    "checkpoint_every": COUNT,
    "keep": COUNT,
    "eval_every": COUNT,
    "eval_batches": COUNT,
    "log_every": COUNT,
    "lease_stale_s": STALE_AFTER_RANGE,
}


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """One training run, as given on the command line (recorded in run_config.json).

    shards: the shard set directories; shard_weights: their weights as given (1.0 each by default).
    """

    shards: tuple[str, ...]
    output: str
    # None only with init_from when not given: the architecture then comes from the source.
    model_preset: str | None = DEFAULT_PRESET
    model_config: str | None = None
    model_family: str | None = DEFAULT_FAMILY
    # A transformers model directory or an lmshards run directory whose weights a new run starts from.
    init_from: str | None = None
    tokenizer: str | None = None
    steps: int | None = None
    epochs: float | None = None
    per_replica_batch: int = DEFAULT_PER_REPLICA_BATCH
    learning_rate: float = 5e-4
    weight_decay: float = 0.01
    warmup_steps: int | None = None
    lr_schedule: str = "linear"
    clip_norm: float | None = None
    # Left None unless given, so runs that do not use them record what they always did (to_dict).
    decay_fraction: float | None = None  # --lr_schedule wsd: the share of the steps that decay
    decay_shape: str | None = None  # --lr_schedule wsd: linear (default) or 1-sqrt
    optimizer: str | None = None  # None: adamw
    # The RoPE theta of a rotary family's global layers, in place of the model's (a long-context phase).
    rope_theta_global: float | None = None
    shard_weights: tuple[float, ...] = ()
    masking: str = TOKEN
    mlm_probability: float = 0.15
    shuffle_buffer: int = 10_000
    seed: int = 0
    backend: str = DEFAULT_BACKEND
    strategy: str = STRATEGY_AUTO
    tpu: str | None = None
    precision: str = AUTO
    steps_per_execution: int | str = AUTO
    checkpoint_every: int = 500
    keep: int = 3
    eval_every: int = 1000
    eval_batches: int = 100  # global batches each periodic evaluation reads
    final_eval: str = FINAL_EVAL_FULL
    log_every: int = 50
    # How this command treats an existing run (lmshards.train.run_dir), and what it logs; not what it trains.
    extend: bool = False
    restart: bool = False
    verbose: bool = False
    lease_stale_s: float = STALE_AFTER_S

    def __post_init__(self) -> None:
        check_ranges(self, TRAIN_RANGES)

    def to_dict(self) -> dict[str, Any]:
        return {
            k: v
            for k, v in dataclasses.asdict(self).items()
            if v is not None or k not in _OPTIONAL_TRAIN_FIELDS
        }


_OPTIONAL_TRAIN_FIELDS = ("decay_fraction", "decay_shape", "optimizer", "rope_theta_global")
