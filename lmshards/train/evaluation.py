"""Evaluation metrics over a mixture's sets: per-batch sums -> per-set and weighted-mean records.

Without TensorFlow: a backend's eval step returns EvalSums per global batch; this module turns them
into the metrics.jsonl record, the same for every backend.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

# log(perplexity) above this would overflow a float.
_MAX_LOG_PERPLEXITY = 700.0
# Perplexities above this print in scientific notation (exp of a diverged loss has hundreds of digits).
PERPLEXITY_FIXED_MAX = 1e6
# Keys of the end-of-training pass over the whole validation split start with this (eval_loss -> final_eval_loss).
FINAL_EVAL_PREFIX = "final_"


def format_perplexity(value: float | None) -> str:
    """A perplexity for people: 2 decimals up to PERPLEXITY_FIXED_MAX, above it 3 significant digits (1.23e+300)."""
    if value is None:
        return "-"
    return f"{value:.2f}" if value <= PERPLEXITY_FIXED_MAX else f"{value:.3g}"


@dataclasses.dataclass(frozen=True)
class EvalSums:
    """One set's (or batch's) evaluation: summed cross-entropy over the predicted tokens, their count, correct predictions."""

    loss: float
    tokens: float
    correct: float

    def __add__(self, other: EvalSums) -> EvalSums:
        return EvalSums(
            self.loss + other.loss, self.tokens + other.tokens, self.correct + other.correct
        )


ZERO = EvalSums(0.0, 0.0, 0.0)


def total(batches: Iterable[EvalSums]) -> EvalSums:
    """The sums of batches, added in order (the order fixes the float result)."""
    result = ZERO
    for batch in batches:
        result = result + batch
    return result


def eval_record(
    step: int, sums: Mapping[str, EvalSums], weights: Mapping[str, float]
) -> dict[str, float | int]:
    """The metrics record of an evaluation: per set `eval_loss/<name>` and `eval_accuracy/<name>`, and as
    `eval_loss`, `eval_accuracy` their means weighted by the sets' mixture `weights` (renormalised over
    the evaluated sets); `eval_perplexity` is exp(eval_loss)."""
    total_weight = sum(weights[name] for name in sums)
    record: dict[str, float | int] = {"step": step}
    loss = accuracy = 0.0
    for name, s in sums.items():
        set_loss, set_accuracy = s.loss / max(s.tokens, 1.0), s.correct / max(s.tokens, 1.0)
        record[f"eval_loss/{name}"], record[f"eval_accuracy/{name}"] = set_loss, set_accuracy
        loss += weights[name] / total_weight * set_loss
        accuracy += weights[name] / total_weight * set_accuracy
    record.update(
        eval_loss=loss,
        eval_perplexity=math.exp(min(loss, _MAX_LOG_PERPLEXITY)),
        eval_accuracy=accuracy,
        eval_masked_tokens=int(sum(s.tokens for s in sums.values())),
    )
    return record


def final_eval_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """An evaluation record under the end-of-training names: eval_loss -> final_eval_loss, ..."""
    return {
        key if key == "step" else FINAL_EVAL_PREFIX + key: value for key, value in record.items()
    }


def is_final_eval(record: Mapping[str, Any]) -> bool:
    return FINAL_EVAL_PREFIX + "eval_loss" in record
