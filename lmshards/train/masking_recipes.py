"""The masking recipes' names, span law and probability limits, without TensorFlow.

The command line checks --masking and --mlm_probability with these before the training stack loads;
lmshards.train.inputs.masking implements the recipes in TensorFlow ops.
"""

from __future__ import annotations

import math

import numpy as np

from lmshards.plumbing.errors import LmshardsError

TOKEN, WHOLE_WORD, SPAN = "token", "whole_word", "span"
MASKING_RECIPES = (TOKEN, WHOLE_WORD, SPAN)
WORD_RECIPES = (WHOLE_WORD, SPAN)

SPAN_GEOMETRIC_P = 0.2
SPAN_MAX_WORDS = 10


def span_length_probabilities() -> np.ndarray:
    """P(span = k words) for k = 1..SPAN_MAX_WORDS: geometric(SPAN_GEOMETRIC_P), restricted and renormalised."""
    k = np.arange(1, SPAN_MAX_WORDS + 1)
    weights = SPAN_GEOMETRIC_P * (1 - SPAN_GEOMETRIC_P) ** (k - 1)
    return weights / weights.sum()


def mean_span_words() -> float:
    return float(np.arange(1, SPAN_MAX_WORDS + 1) @ span_length_probabilities())


def max_mlm_probability(recipe: str) -> float:
    """The largest mlm_probability a recipe can reach (exclusive).

    span: spans are separated by at least one word, so at most mean/(mean + 1) of the words (0.79).
    """
    return mean_span_words() / (mean_span_words() + 1) if recipe == SPAN else 1.0


def check_recipe(recipe: str, mlm_probability: float) -> None:
    """Raises LmshardsError for an unknown recipe or an mlm_probability out of the recipe's range."""
    if recipe not in MASKING_RECIPES:
        raise LmshardsError(
            f"--masking {recipe!r} is not a masking recipe; use one of {', '.join(MASKING_RECIPES)}."
        )
    limit = max_mlm_probability(recipe)
    if not 0.0 < mlm_probability < limit:
        raise LmshardsError(
            f"--mlm_probability {mlm_probability} must be above 0 and below {limit:.2f} for --masking {recipe} "
            "(e.g. 0.15; up to 0.5 is tested for every recipe)."
        )


# token: headroom over the expected number of selections; truncation then happens for well under 1% of sequences.
_PREDICTIONS_HEADROOM = 1.2
_PREDICTIONS_SLACK = 8
# Whole words and spans are selected together, so the count per sequence spreads more than the
# token recipe's binomial p(1-p)n: its variance is this many times that, and grows with the tokens
# per word. Measured at seq_len 128 on the bundled corpus: 2.5-3.0 (whole_word) and 4.7-8.4 (span)
# for byte-level BPE and Unigram at 1.6 tokens per word, 5.5 and 16 for a 4k WordPiece at 2.8.
_SELECTION_DISPERSION = {WHOLE_WORD: 6.0, SPAN: 17.0}
# Standard deviations of that spread above the mean that max_predictions leaves room for.
_PREDICTIONS_SIGMAS = 3.0


def max_predictions_for(seq_len: int, mlm_probability: float, recipe: str = TOKEN) -> int:
    """Fixed length of mask_positions: room for the selections of all but a small fraction of sequences.

    token: 1.2x the expected selections + 8 (~3 standard deviations at seq_len 128). whole_word, span:
    at least that, and 3 standard deviations of their wider spread above the mean.
    """
    token = min(
        seq_len, math.ceil(seq_len * mlm_probability * _PREDICTIONS_HEADROOM) + _PREDICTIONS_SLACK
    )
    if recipe == TOKEN:
        return token
    spread = math.sqrt(
        _SELECTION_DISPERSION[recipe] * mlm_probability * (1 - mlm_probability) * seq_len
    )
    return min(
        seq_len, max(token, math.ceil(seq_len * mlm_probability + _PREDICTIONS_SIGMAS * spread))
    )
