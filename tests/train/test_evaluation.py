"""Evaluation records over a mixture's sets, without TensorFlow."""

from __future__ import annotations

import math

import pytest

from lmshards.train.evaluation import EvalSums, eval_record, final_eval_record, is_final_eval, total


def test_eval_record_is_per_set_plus_the_weighted_mean():
    weights = {"a": 0.75, "b": 0.25}
    record = eval_record(7, {"a": EvalSums(20.0, 10.0, 5.0), "b": EvalSums(6.0, 2.0, 2.0)}, weights)
    assert record["eval_loss/a"] == 2.0 and record["eval_loss/b"] == 3.0
    assert record["eval_loss"] == pytest.approx(0.75 * 2.0 + 0.25 * 3.0)
    assert record["eval_accuracy"] == pytest.approx(0.75 * 0.5 + 0.25 * 1.0)
    assert record["eval_perplexity"] == pytest.approx(math.exp(2.25))
    assert record["eval_masked_tokens"] == 12
    alone = eval_record(7, {"b": EvalSums(6.0, 2.0, 2.0)}, weights)  # a has no validation split
    assert alone["eval_loss"] == 3.0 and "eval_loss/a" not in alone


def test_batches_add_in_order_and_final_records_are_renamed():
    assert total([EvalSums(1.0, 2.0, 1.0), EvalSums(0.5, 1.0, 0.0)]) == EvalSums(1.5, 3.0, 1.0)
    final = final_eval_record({"step": 6, "eval_loss": 1.5, "eval_loss/a": 1.4})
    assert final == {"step": 6, "final_eval_loss": 1.5, "final_eval_loss/a": 1.4}
    assert is_final_eval(final) and not is_final_eval({"step": 6, "eval_loss": 1.5})
