"""The README's main job, `lmshards demo`, end to end with a step count small enough for CI."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from schemas.manifest import read_manifest
from tests.conftest import REPO

DEMO_STEPS = 20


@pytest.mark.slow
def test_demo_runs_the_whole_story(tmp_path):
    out = tmp_path / "demo"
    proc = subprocess.run(
        [sys.executable, "-m", "lmshards", "demo", "--output", str(out), "--steps", str(DEMO_STEPS),
         "--vocab_size", "6000", "--model_preset", "tiny", "--per_replica_batch", "8"],
        cwd=REPO, capture_output=True, text=True, timeout=1200,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    manifest = read_manifest(str(out / "shards"))
    train_counts = [s.records for s in manifest.splits["train"].shards]
    assert len(train_counts) == 8 and max(train_counts) - min(train_counts) <= 1

    summary = json.loads((out / "run" / "run_summary.json").read_text())
    assert summary["global_step"] == DEMO_STEPS
    assert summary["eval_perplexity"] > 1

    assert json.loads((out / "hf_model" / "config.json").read_text())["architectures"] == ["RobertaForMaskedLM"]
    # fill-mask prints its top-5 candidates, one "score token_id token_str sequence" line each
    predictions = re.findall(r"^\s*[01]\.\d{4}\s+\d+\s", proc.stdout, flags=re.M)
    assert len(predictions) == 5, proc.stdout[-3000:]

    report = (out / "report.html").read_text()
    n_shards = sum(len(s.shards) for s in manifest.splits.values())
    assert report.count('class="bar"') == n_shards
    assert 'class="series"' in report
    for artifact in ("tokenizer", "shards", "run", "hf_model", "report.html"):
        assert str(out / artifact) in proc.stdout

    # A re-run wipes only its own directory and succeeds again; a foreign non-empty directory is refused.
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    refused = subprocess.run([sys.executable, "-m", "lmshards", "demo", "--output", str(foreign)],
                             cwd=REPO, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "not made by `lmshards demo`" in refused.stderr
    assert (foreign / "keep.txt").read_text() == "mine"
