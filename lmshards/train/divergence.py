"""Non-finite is failure: a loss, an evaluation or weights that are NaN or infinite end training.

Without TensorFlow. The loop checks every train loss, every evaluation and the weights before each
checkpoint, so the newest checkpoint always holds finite weights; `export` checks the weights it writes.
Each case ends the command the same way: DivergenceError, one line, exit 2.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np

from lmshards.plumbing.errors import LmshardsError

# How many non-finite tensors a message names before "and N more".
_NAMES_SHOWN = 3


class DivergenceError(LmshardsError):
    """Training produced a NaN or infinite loss or weights."""


def diverged(step: int, what: str) -> DivergenceError:
    """The error of a run that diverged at `step`: `what` is non-finite (e.g. 'loss nan')."""
    return DivergenceError(
        f"Training diverged at step {step} ({what}); lower --learning_rate or set --clip_norm."
    )


def first_non_finite(values: Iterable[float]) -> float | None:
    """The first NaN or infinite value, or None when all are finite."""
    return next((v for v in values if not math.isfinite(v)), None)


def non_finite_names(arrays: Mapping[str, np.ndarray]) -> list[str]:
    """The names of the arrays holding a NaN or an infinity, in order."""
    return [name for name, array in arrays.items() if not np.isfinite(array).all()]


def describe_non_finite(names: list[str], total: int) -> str:
    """'non-finite weights in 2 of 40 tensors (a, b)'."""
    shown = ", ".join(names[:_NAMES_SHOWN]) + (
        f" and {len(names) - _NAMES_SHOWN} more" if len(names) > _NAMES_SHOWN else ""
    )
    return f"non-finite weights in {len(names)} of {total} tensors ({shown})"
