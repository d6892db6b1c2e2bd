"""The demo's HTML report: one bar per shard with its record count, and the loss curve's points."""

from __future__ import annotations

import re

from lmshards.report import bar_chart_svg, line_chart_svg, loss_series, render_report
from tests.test_schemas import _manifest


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
    page = render_report(title="t", manifest=_manifest(), metrics=[{"step": 1, "loss": 2.0}],
                         facts={"model": "tiny & <small>"})
    assert "tiny &amp; &lt;small&gt;" in page
    assert "Records per shard: train (1 shards, 3 records, max-min = 0)" in page
