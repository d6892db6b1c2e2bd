"""`lmshards demo`: the README's main job end to end as CI runs it, and the baseline arithmetic it reports."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from lmshards.demo import (
    IGNORE_LABEL,
    RATIO_TARGET,
    SUMMARY_JSON,
    Scores,
    baseline_accuracy,
    is_real_word,
    mask_records,
    most_frequent_token,
    parse_args,
    summary_dict,
    summary_lines,
)
from schemas.constants import ATTENTION_MASK, INPUT_IDS
from schemas.manifest import read_manifest
from tests.conftest import REPO

SPECIAL = (0, 1, 2, 3, 4)  # RoBERTa's <s> <pad> </s> <unk> <mask>
MASK_ID = 4


def _records(rows: int = 64, seq_len: int = 32, seed: int = 5) -> dict[str, np.ndarray]:
    """Random ids 5..99 with a padded tail (id 1, attention 0) and a leading <s> in every row."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, 100, size=(rows, seq_len))
    attention = np.ones_like(ids)
    attention[:, -4:] = 0
    ids[:, -4:] = 1
    ids[:, 0] = 0
    return {INPUT_IDS: ids, ATTENTION_MASK: attention}


def test_most_frequent_token_counts_only_real_non_special_tokens():
    ids = np.array([[0, 7, 7, 9, 1, 1, 1, 1], [0, 9, 7, 4, 4, 4, 1, 1]])
    attention = np.array([[1, 1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 0, 0]])
    assert (
        most_frequent_token(ids, attention, SPECIAL) == 7
    )  # 3x 7 beats 2x 9; pads, <s> and <mask> are skipped
    ids[0, 1:3] = 9
    assert most_frequent_token(ids, attention, SPECIAL) == 9


def test_mask_records_is_seeded_and_masks_only_real_tokens():
    records = _records()
    first = mask_records(records, special_ids=SPECIAL, mask_id=MASK_ID, probability=0.15, seed=0)
    again = mask_records(records, special_ids=SPECIAL, mask_id=MASK_ID, probability=0.15, seed=0)
    other = mask_records(records, special_ids=SPECIAL, mask_id=MASK_ID, probability=0.15, seed=1)
    assert np.array_equal(first.input_ids, again.input_ids) and np.array_equal(
        first.labels, again.labels
    )
    assert not np.array_equal(first.labels, other.labels)

    where = first.masked
    assert np.all(first.input_ids[where] == MASK_ID)
    assert np.array_equal(first.labels[where], records[INPUT_IDS][where])
    assert np.array_equal(first.input_ids[~where], records[INPUT_IDS][~where])
    assert np.all(first.labels[~where] == IGNORE_LABEL)
    assert not where[:, 0].any() and not where[:, -4:].any()  # never <s>, never padding
    maskable = 64 * (32 - 5)
    assert abs(where.sum() / maskable - 0.15) < 0.03


def test_baseline_accuracy_is_the_share_of_masked_labels_equal_to_the_token():
    records = _records()
    masked = mask_records(records, special_ids=SPECIAL, mask_id=MASK_ID, probability=0.5, seed=0)
    labels = masked.labels[masked.masked]
    token = int(np.bincount(labels).argmax())
    assert baseline_accuracy(masked, token) == pytest.approx(
        np.count_nonzero(labels == token) / labels.size
    )
    assert baseline_accuracy(masked, 200) == 0.0


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


@pytest.mark.slow
def test_demo_learns_beyond_the_most_frequent_token(tmp_path):
    """The demo as a user runs it (its defaults): the model beats the most-frequent-token baseline at least
    RATIO_TARGET times on the same masked validation tokens, reports that consistently, and fills the mask with
    a word.
    """
    out = tmp_path / "demo"
    proc = subprocess.run(
        [sys.executable, "-m", "lmshards", "demo", "--output", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    summary = json.loads((out / SUMMARY_JSON).read_text())
    assert 0 < summary["baseline_accuracy"] < summary["eval_accuracy"] <= 1
    assert summary["accuracy_ratio"] == pytest.approx(
        summary["eval_accuracy"] / summary["baseline_accuracy"]
    )
    assert summary["accuracy_ratio"] >= RATIO_TARGET and summary["ratio_target_met"] is True
    assert summary["masked_tokens"] > 0 and summary["eval_loss"] > 0
    assert summary["total_seconds"] == pytest.approx(sum(summary["seconds"].values()))

    top_k = summary["fill_mask"]["top_k"]
    assert len(top_k) == 5
    words = [t.strip().lstrip("Ġ▁") for t in top_k]
    assert any(w.isalpha() and len(w) >= 2 for w in words), top_k
    assert "holds a real word: yes" in proc.stdout
    # The printed summary carries the same figures as the JSON.
    assert f"eval accuracy      {summary['eval_accuracy']:.3f}" in proc.stdout
    assert f"baseline accuracy  {summary['baseline_accuracy']:.3f}" in proc.stdout
    assert f"ratio              {summary['accuracy_ratio']:.2f}x" in proc.stdout

    manifest = read_manifest(str(out / "shards"))
    train_counts = [s.records for s in manifest.splits["train"].shards]
    assert len(train_counts) == 8 and max(train_counts) - min(train_counts) <= 1
    run_summary = json.loads((out / "run" / "run_summary.json").read_text())
    assert run_summary["global_step"] == summary["settings"]["steps"]
    assert json.loads((out / "hf_model" / "config.json").read_text())["architectures"] == [
        "RobertaForMaskedLM"
    ]

    report = (out / "report.html").read_text()
    for name, split in manifest.splits.items():  # one panel per split
        assert f"{name}: {split.totals.records:,} records in {len(split.shards)} shards" in report
    assert (
        f"{summary['accuracy_ratio']:.2f}x the baseline, both on the demo&#x27;s masks "
        f"(target &gt;= {RATIO_TARGET:g}x: met)"
    ) in report
    assert "Two accuracies, two masks" in report
    assert "it/s]" not in proc.stdout + proc.stderr  # no third-party progress bars
    for artifact in ("tokenizer", "shards", "run", "hf_model", "report.html", SUMMARY_JSON):
        assert str(out / artifact) in proc.stdout

    # A foreign non-empty directory is refused and left as it was.
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    refused = subprocess.run(
        [sys.executable, "-m", "lmshards", "demo", "--output", str(foreign)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2 and "not made by `lmshards demo`" in refused.stderr
    assert (foreign / "keep.txt").read_text() == "mine"
