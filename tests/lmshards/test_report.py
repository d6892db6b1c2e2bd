"""The demo's HTML report: one bar per shard with its record count, and the loss curve's points."""

from __future__ import annotations

import re

import pytest

from lmshards.report import (
    bar_chart_svg,
    comparison_svg,
    line_chart_svg,
    loss_series,
    render_report,
)
from schemas.manifest import (
    InputFileInfo,
    Manifest,
    ShardInfo,
    SplitInfo,
    SplitTotals,
    TokenizerInfo,
)
from schemas.shards import shard_relpath


def _manifest(records_per_shard: list[int]) -> Manifest:
    """A train split of one shard per entry of records_per_shard."""
    n = len(records_per_shard)
    shards = tuple(
        ShardInfo(
            path=shard_relpath("train", i, n, records), records=records, bytes=100, sha256="ab" * 32
        )
        for i, records in enumerate(records_per_shard)
    )
    totals = SplitTotals(
        documents=2, tokens_in=80, tokens_written=80, records=sum(records_per_shard)
    )
    return Manifest(
        tool_version="0.1.0",
        seq_len=8,
        tokenizer=TokenizerInfo(
            fingerprint="sha256:00",
            vocab_size=100,
            special_token_ids={"pad": 1},
            all_special_ids=(0, 1),
        ),
        splits={"train": SplitInfo(shards=shards, totals=totals)},
        inputs=(InputFileInfo(path="a.txt", bytes=10),),
        seed=1,
        options={"remainder": "pad"},
    )


def test_bar_chart_has_one_bar_per_shard_scaled_to_value():
    svg = bar_chart_svg(["a", "b", "c"], [10, 5, 0], y_label="records")
    heights = [float(h) for h in re.findall(r'class="bar"[^>]*height="([\d.]+)"', svg)]
    assert len(heights) == 3
    assert heights[0] == 2 * heights[1] and heights[2] == 0
    assert "<title>b: 5</title>" in svg


def test_loss_series_separates_train_and_eval():
    records = [{"step": 10, "loss": 7.0}, {"step": 20, "loss": 5.0}, {"step": 20, "eval_loss": 5.5}]
    train, evals = loss_series(records)
    assert train.points == ((10.0, 7.0), (20.0, 5.0))
    assert evals.points == ((20.0, 5.5),)
    svg = line_chart_svg([train, evals], x_label="step", y_label="loss")
    assert svg.count('class="series"') == 2


def test_render_report_lists_every_split_and_fact():
    page = render_report(
        title="t",
        manifest=_manifest([3, 4, 3]),
        metrics=[{"step": 1, "loss": 2.0}],
        facts={"model": "tiny & <small>"},
    )
    assert "tiny &amp; &lt;small&gt;" in page
    assert "Records per shard: train (3 shards, 10 records, max-min = 1)" in page
    assert page.count('class="bar"') == 3


def test_comparison_bars_scale_to_the_largest_value_and_show_it():
    svg = comparison_svg(["baseline", "model"], [0.05, 0.2], x_label="accuracy")
    widths = [float(w) for w in re.findall(r'class="compare"[^>]*width="([\d.]+)"', svg)]
    assert len(widths) == 2 and widths[1] == pytest.approx(4 * widths[0], abs=0.2)
    assert "<title>model: 0.2</title>" in svg and ">0.050<" in svg


def test_render_report_shows_accuracies_only_when_given():
    manifest, metrics = _manifest([3, 3]), [{"step": 1, "loss": 2.0}]
    page = render_report(
        title="t",
        manifest=manifest,
        metrics=metrics,
        facts={},
        accuracy=[("always ','", 0.04), ("model", 0.11)],
    )
    assert "Masked-token accuracy" in page and page.count('class="compare"') == 2
    assert "always &#x27;,&#x27;" in page
    assert 'class="compare"' not in render_report(
        title="t", manifest=manifest, metrics=metrics, facts={}
    )
