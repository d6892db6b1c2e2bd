"""`lmshards demo`: the README's main job end to end as CI runs it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lmshards.command.demo_report import SUMMARY_JSON
from lmshards.command.demo_scoring import RATIO_TARGET
from lmshards.schemas.manifest import read_manifest
from tests.conftest import REPO


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
