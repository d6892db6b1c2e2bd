"""The demo's results: the fill-mask word check, the summary's ratio and verdict."""

from __future__ import annotations

import json

import pytest

from lmshards.command.demo import parse_args
from lmshards.command.demo_report import is_real_word, summary_dict, summary_lines
from lmshards.command.demo_scoring import RATIO_TARGET, Scores


@pytest.mark.parametrize(
    "token, real",
    [
        ("Ġman", True),
        (" the", True),
        ("▁wife", True),
        ("wife", True),
        (",", False),
        (" a", False),
        ("Ġ", False),
        ("Ġ2000", False),
        ("Ġdon't", False),
        ("<mask>", False),
    ],
)
def test_is_real_word(token, real):
    assert is_real_word(token) is real


def test_summary_ratio_and_verdict_follow_the_scores(tmp_path):
    cfg = parse_args(["--output", str(tmp_path)])

    def summary(accuracy: float) -> dict:
        scores = Scores(
            eval_loss=4.5,
            eval_accuracy=accuracy,
            baseline_accuracy=0.05,
            baseline_token_id=16,
            baseline_token=",",
            masked_tokens=1000,
            validation_records=90,
        )
        return summary_dict(
            cfg, scores, [",", " the", " man"], {"a": 1.0, "b": 2.5}, {"loss": 4.0, "accuracy": 0.2}
        )

    met, missed = summary(0.125), summary(0.075)
    assert met["accuracy_ratio"] == pytest.approx(2.5) and met["ratio_target_met"] is True
    assert missed["accuracy_ratio"] == pytest.approx(1.5) and missed["ratio_target_met"] is False
    assert met["fill_mask"]["real_words"] == [" the", " man"] and met["total_seconds"] == 3.5
    assert json.loads(json.dumps(met)) == met
    assert any(line.endswith(f"target >= {RATIO_TARGET:g}x met") for line in summary_lines(met))
    assert any(line.endswith("NOT met") for line in summary_lines(missed))
