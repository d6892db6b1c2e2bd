"""The options `lmshards train` and `lmshards preview` both take: what decides which sequences a step reads
and which of their tokens are masked. Declared once, so preview's masks are the run's for the same values."""

from __future__ import annotations

import argparse

from lmshards.train.config import TRAIN_RANGES, TrainConfig
from lmshards.train.masking_recipes import MASKING_RECIPES, SPAN, max_mlm_probability


def add_input_flags(p: argparse.ArgumentParser, defaults: TrainConfig) -> None:
    """--masking, --mlm_probability, --per_replica_batch, --shuffle_buffer and --seed, with defaults' values."""
    p.add_argument(
        "--masking",
        choices=MASKING_RECIPES,
        default=defaults.masking,
        help="which tokens to predict: single tokens, whole words, or SpanBERT spans of whole words",
    )
    p.add_argument(
        "--mlm_probability",
        type=TRAIN_RANGES["mlm_probability"],
        default=defaults.mlm_probability,
        help=f"fraction of tokens to predict: below 1 (below {max_mlm_probability(SPAN):.2f} for span)",
    )
    p.add_argument(
        "--per_replica_batch",
        type=TRAIN_RANGES["per_replica_batch"],
        default=defaults.per_replica_batch,
        help="sequences per replica per step (masks are drawn per batch)",
    )
    p.add_argument(
        "--shuffle_buffer",
        type=TRAIN_RANGES["shuffle_buffer"],
        default=defaults.shuffle_buffer,
        help="records held for shuffling",
    )
    p.add_argument(
        "--seed",
        type=TRAIN_RANGES["seed"],
        default=defaults.seed,
        help="data order and masks (and, in training, the model's initial weights)",
    )
