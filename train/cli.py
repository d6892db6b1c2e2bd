"""`lmshards train`: command-line options -> TrainConfig -> trainer.train."""

from __future__ import annotations

from typing import Sequence

from schemas.cli import CommandParser, run_command, setup_logging
from schemas.errors import LmshardsError
from train.config import LR_SCHEDULES, PRECISIONS, PRESETS, STRATEGIES, TrainConfig
from train.families import family_names

COMMAND = "train"
DEFAULTS = TrainConfig(shards="", output="")
# Options that count steps or objects: each must be at least 1 when given.
_POSITIVE_INTS = ("steps", "per_replica_batch", "steps_per_execution", "checkpoint_every", "keep", "eval_every", "log_every")


def build_parser() -> CommandParser:
    p = CommandParser(
        COMMAND,
        description="Train a masked LM on preprocess shards. Rerunning the same command with the same --output resumes.",
    )
    d = DEFAULTS
    p.add_argument("--shards", required=True, help="preprocess output directory (local or gs://) holding manifest.json")
    p.add_argument("--output", required=True, help="run directory (local or gs://): checkpoints, logs, summary")
    model = p.add_mutually_exclusive_group()
    model.add_argument("--model_preset", choices=PRESETS, default=d.model_preset, help="model size")
    model.add_argument("--model_config", help="JSON file with ModelConfig fields instead of a preset")
    p.add_argument("--model_family", choices=family_names(), default=d.model_family, help="keras-hub model family")
    p.add_argument("--tokenizer", help="the tokenizer the shards were made with: checked, and copied into the run")
    length = p.add_mutually_exclusive_group(required=True)
    length.add_argument("--steps", type=int, help="total optimizer steps (a larger value continues a finished run)")
    length.add_argument("--epochs", type=float, help="total epochs over the train split")
    p.add_argument("--per_replica_batch", type=int, default=d.per_replica_batch, help="sequences per replica per step")
    p.add_argument("--learning_rate", type=float, default=d.learning_rate, help="peak learning rate")
    p.add_argument("--weight_decay", type=float, default=d.weight_decay, help="AdamW decay")
    p.add_argument("--warmup_steps", type=int, help="linear warmup steps (default: 5%% of the total steps)")
    p.add_argument("--lr_schedule", choices=LR_SCHEDULES, default=d.lr_schedule, help="decay after warmup")
    p.add_argument("--clip_norm", type=float, help="clip gradients to this global norm")
    p.add_argument("--mlm_probability", type=float, default=d.mlm_probability, help="fraction of tokens to predict")
    p.add_argument("--shuffle_buffer", type=int, default=d.shuffle_buffer, help="records held for shuffling")
    p.add_argument("--seed", type=int, default=d.seed, help="data order, masking, initialisation")
    p.add_argument("--strategy", choices=STRATEGIES, default=d.strategy, help="tf.distribute strategy")
    p.add_argument("--tpu", help="TPU name for TPUClusterResolver ('local' on a TPU VM)")
    p.add_argument("--precision", choices=PRECISIONS, default=d.precision, help="Keras dtype policy")
    p.add_argument("--steps_per_execution", type=int, default=d.steps_per_execution, help="steps per tf.function call")
    p.add_argument("--checkpoint_every", type=int, default=d.checkpoint_every, help="steps between checkpoints")
    p.add_argument("--keep", type=int, default=d.keep, help="checkpoints kept")
    p.add_argument("--eval_every", type=int, default=d.eval_every, help="steps between evaluations")
    p.add_argument("--eval_steps", type=int, help="batches per evaluation (default: the whole validation split)")
    p.add_argument("--log_every", type=int, default=d.log_every, help="steps per logging window")
    return p


def parse_config(argv: Sequence[str]) -> TrainConfig:
    """The TrainConfig of a command line. Raises LmshardsError on a count below 1 or epochs <= 0."""
    args = build_parser().parse_args(list(argv))
    config = TrainConfig(**vars(args))
    for name in _POSITIVE_INTS:
        value = getattr(config, name)
        if value is not None and value < 1:
            raise LmshardsError(f"--{name} {value} must be at least 1.")
    if config.epochs is not None and config.epochs <= 0:
        raise LmshardsError(f"--epochs {config.epochs} must be positive.")
    return config


def _train(argv: Sequence[str]) -> None:
    setup_logging(packages=["train"])
    config = parse_config(argv)
    from train.trainer import train  # the training stack loads only once the options are valid

    train(config)


def main(argv: Sequence[str]) -> int:
    return run_command(COMMAND, lambda: _train(argv))
