"""The masking recipes' names, span law and probability limits, without TensorFlow.

The command line checks --masking and --mlm_probability with these before the training stack loads;
train.masking implements the recipes in TensorFlow ops.
"""

from __future__ import annotations

import numpy as np

from plumbing.errors import LmshardsError

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
