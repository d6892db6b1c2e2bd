"""`lmshards train`: command-line options -> TrainConfig -> trainer.train."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Sequence

from schemas.errors import LmshardsError
from train.config import FAMILIES, LR_SCHEDULES, PRECISIONS, PRESETS, STRATEGIES, TrainConfig

DEFAULTS = TrainConfig(shards="", output="")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lmshards train",
        description="Train a masked LM on preprocess shards. Rerunning the same command with the same --output resumes.",
    )
    d = DEFAULTS
    p.add_argument("--shards", required=True, help="preprocess output directory (local or gs://) holding manifest.json")
    p.add_argument("--output", required=True, help="run directory (local or gs://): checkpoints, logs, summary")
    model = p.add_mutually_exclusive_group()
    model.add_argument("--model_preset", choices=PRESETS, default=d.model_preset, help="model size (default: %(default)s)")
    model.add_argument("--model_config", help="JSON file with ModelConfig fields instead of a preset")
    p.add_argument("--model_family", choices=FAMILIES, default=d.model_family, help="default: %(default)s")
    p.add_argument("--tokenizer", help="the tokenizer the shards were made with: checked, and copied into the run")
    length = p.add_mutually_exclusive_group(required=True)
    length.add_argument("--steps", type=int, help="total optimizer steps (a larger value continues a finished run)")
    length.add_argument("--epochs", type=float, help="total epochs over the train split")
    p.add_argument("--per_replica_batch", type=int, default=d.per_replica_batch, help="default: %(default)s")
    p.add_argument("--learning_rate", type=float, default=d.learning_rate, help="peak learning rate (default: %(default)s)")
    p.add_argument("--weight_decay", type=float, default=d.weight_decay, help="AdamW decay (default: %(default)s)")
    p.add_argument("--warmup_steps", type=int, help="default: 5%% of the total steps")
    p.add_argument("--lr_schedule", choices=LR_SCHEDULES, default=d.lr_schedule, help="decay after warmup (default: %(default)s)")
    p.add_argument("--clip_norm", type=float, help="clip gradients to this global norm")
    p.add_argument("--mlm_probability", type=float, default=d.mlm_probability, help="default: %(default)s")
    p.add_argument("--shuffle_buffer", type=int, default=d.shuffle_buffer, help="records (default: %(default)s)")
    p.add_argument("--seed", type=int, default=d.seed, help="data order, masking, initialisation (default: %(default)s)")
    p.add_argument("--strategy", choices=STRATEGIES, default=d.strategy, help="default: %(default)s")
    p.add_argument("--tpu", help="TPU name for TPUClusterResolver ('local' on a TPU VM)")
    p.add_argument("--precision", choices=PRECISIONS, default=d.precision, help="default: %(default)s")
    p.add_argument("--steps_per_execution", type=int, default=d.steps_per_execution, help="default: %(default)s")
    p.add_argument("--checkpoint_every", type=int, default=d.checkpoint_every, help="steps (default: %(default)s)")
    p.add_argument("--keep", type=int, default=d.keep, help="checkpoints kept (default: %(default)s)")
    p.add_argument("--eval_every", type=int, default=d.eval_every, help="steps (default: %(default)s)")
    p.add_argument("--eval_steps", type=int, help="batches per evaluation (default: the whole validation split)")
    p.add_argument("--log_every", type=int, default=d.log_every, help="steps per logging window (default: %(default)s)")
    return p


def parse_config(argv: Sequence[str]) -> TrainConfig:
    args = build_parser().parse_args(list(argv))
    config = TrainConfig(**vars(args))
    for name in ("steps", "per_replica_batch", "steps_per_execution", "checkpoint_every", "keep", "eval_every", "log_every"):
        value = getattr(config, name)
        if value is not None and value < 1:
            raise LmshardsError(f"--{name} {value} must be at least 1.")
    if config.epochs is not None and config.epochs <= 0:
        raise LmshardsError(f"--epochs {config.epochs} must be positive.")
    return config


def main(argv: Sequence[str]) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stdout)
    logging.getLogger("train").setLevel(logging.INFO)
    try:
        config = parse_config(argv)
        from train.trainer import train  # the training stack loads only once the options are valid

        train(config)
    except LmshardsError as e:
        print(f"lmshards train: {e}", file=sys.stderr)
        return 2
    return 0
