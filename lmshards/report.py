"""A one-page HTML report of a run: training-loss curve, accuracy against a baseline and shard balance, as inline SVG.

Plain SVG keeps the report dependency-free and viewable in any browser.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

from schemas.manifest import Manifest

CHART_WIDTH = 640
CHART_HEIGHT = 260
MARGIN = 48


@dataclass(frozen=True)
class Series:
    name: str
    points: tuple[tuple[float, float], ...]  # (x, y), x ascending
    color: str


def _scale(value: float, lo: float, hi: float, out_lo: float, out_hi: float) -> float:
    if hi == lo:
        return (out_lo + out_hi) / 2
    return out_lo + (value - lo) * (out_hi - out_lo) / (hi - lo)


def _axes(
    x_label: str, y_label: str, x_range: tuple[float, float], y_range: tuple[float, float]
) -> list[str]:
    w, h, m = CHART_WIDTH, CHART_HEIGHT, MARGIN
    parts = [
        f'<line x1="{m}" y1="{h - m}" x2="{w - m // 2}" y2="{h - m}" stroke="#333"/>',
        f'<line x1="{m}" y1="{m // 2}" x2="{m}" y2="{h - m}" stroke="#333"/>',
        f'<text x="{w // 2}" y="{h - 8}" text-anchor="middle" font-size="12">{html.escape(x_label)}</text>',
        f'<text x="12" y="{h // 2}" text-anchor="middle" font-size="12" transform="rotate(-90 12 {h // 2})">'
        f"{html.escape(y_label)}</text>",
    ]
    for frac in (0.0, 0.5, 1.0):
        xv = x_range[0] + frac * (x_range[1] - x_range[0])
        yv = y_range[0] + frac * (y_range[1] - y_range[0])
        x = _scale(xv, *x_range, m, w - m // 2)
        y = _scale(yv, *y_range, h - m, m // 2)
        parts.append(
            f'<text x="{x:.1f}" y="{h - m + 16}" text-anchor="middle" font-size="11">{xv:g}</text>'
        )
        parts.append(
            f'<text x="{m - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11">{yv:.3g}</text>'
        )
    return parts


def line_chart_svg(series: Sequence[Series], *, x_label: str, y_label: str) -> str:
    """An SVG line chart of one or more series sharing axes."""
    xs = [x for s in series for x, _ in s.points]
    ys = [y for s in series for _, y in s.points]
    if not xs:
        return "<p>(no data)</p>"
    x_range, y_range = (min(xs), max(xs)), (min(0.0, min(ys)), max(ys))
    w, h, m = CHART_WIDTH, CHART_HEIGHT, MARGIN
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img">']
    parts += _axes(x_label, y_label, x_range, y_range)
    for i, s in enumerate(series):
        coords = " ".join(
            f"{_scale(x, *x_range, m, w - m // 2):.1f},{_scale(y, *y_range, h - m, m // 2):.1f}"
            for x, y in s.points
        )
        parts.append(
            f'<polyline class="series" fill="none" stroke="{s.color}" stroke-width="2" points="{coords}"/>'
        )
        parts.append(
            f'<text x="{w - m}" y="{m // 2 + 14 * (i + 1)}" text-anchor="end" font-size="12" '
            f'fill="{s.color}">{html.escape(s.name)}</text>'
        )
    parts.append("</svg>")
    return "\n".join(parts)


def bar_chart_svg(labels: Sequence[str], values: Sequence[int], *, y_label: str) -> str:
    """An SVG bar chart with one bar per value (class="bar"), y axis from 0."""
    if not values:
        return "<p>(no data)</p>"
    w, h, m = CHART_WIDTH, CHART_HEIGHT, MARGIN
    top = max(values) or 1
    width = (w - 1.5 * m) / len(values)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img">']
    parts += _axes("shard", y_label, (0, len(values) - 1), (0, top))
    for i, (label, value) in enumerate(zip(labels, values)):
        bar_h = _scale(value, 0, top, 0, h - 1.5 * m)
        parts.append(
            f'<rect class="bar" x="{m + i * width + 1:.1f}" y="{h - m - bar_h:.1f}" width="{max(width - 2, 1):.1f}" '
            f'height="{bar_h:.1f}" fill="#4c78a8"><title>{html.escape(label)}: {value}</title></rect>'
        )
    parts.append("</svg>")
    return "\n".join(parts)


def comparison_svg(labels: Sequence[str], values: Sequence[float], *, x_label: str) -> str:
    """An SVG of one horizontal bar per value (class="compare"), x axis from 0, each bar labelled with its value."""
    if not values:
        return "<p>(no data)</p>"
    w, m, row = CHART_WIDTH, MARGIN, 28
    label_width = w // 3
    h = m + row * len(values)
    top = max(values) or 1.0
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img">']
    for i, (label, value) in enumerate(zip(labels, values)):
        y = m // 2 + i * row
        bar_w = _scale(value, 0, top, 0, w - label_width - 1.5 * m)
        parts.append(
            f'<text x="{label_width - 6}" y="{y + 16}" text-anchor="end" font-size="12">'
            f"{html.escape(label)}</text>"
        )
        parts.append(
            f'<rect class="compare" x="{label_width}" y="{y}" width="{bar_w:.1f}" height="{row - 6}" '
            f'fill="#4c78a8"><title>{html.escape(label)}: {value:.4g}</title></rect>'
        )
        parts.append(
            f'<text x="{label_width + bar_w + 6:.1f}" y="{y + 16}" font-size="12">{value:.3f}</text>'
        )
    parts.append(
        f'<text x="{label_width + (w - label_width) // 2}" y="{h - 8}" text-anchor="middle" font-size="12">'
        f"{html.escape(x_label)}</text>"
    )
    parts.append("</svg>")
    return "\n".join(parts)


def loss_series(records: Sequence[dict]) -> list[Series]:
    """Training loss (records with 'loss') and eval loss (records with 'eval_loss') by step."""
    train = tuple(
        (float(r["step"]), float(r["loss"])) for r in records if "loss" in r and "step" in r
    )
    evals = tuple(
        (float(r["step"]), float(r["eval_loss"]))
        for r in records
        if "eval_loss" in r and "step" in r
    )
    series = [Series("train loss", train, "#4c78a8")]
    if evals:
        series.append(Series("eval loss", evals, "#e45756"))
    return series


def render_report(
    *,
    title: str,
    manifest: Manifest,
    metrics: Sequence[dict],
    facts: dict[str, str],
    accuracy: Sequence[tuple[str, float]] = (),
) -> str:
    """The whole HTML page: facts table, loss curve, accuracies (label, value) if given, records per shard per split."""
    rows = "\n".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in facts.items()
    )
    sections = [
        f"<h1>{html.escape(title)}</h1>",
        f"<table>{rows}</table>",
        "<h2>Training loss</h2>",
        line_chart_svg(loss_series(metrics), x_label="step", y_label="loss"),
    ]
    if accuracy:
        sections.append("<h2>Masked-token accuracy on the validation split</h2>")
        sections.append(
            comparison_svg(
                [label for label, _ in accuracy],
                [value for _, value in accuracy],
                x_label="accuracy",
            )
        )
    for name, split in manifest.splits.items():
        labels = [s.path.rsplit("/", 1)[-1] for s in split.shards]
        values = [s.records for s in split.shards]
        spread = max(values) - min(values) if values else 0
        sections.append(
            f"<h2>Records per shard: {html.escape(name)} ({len(values)} shards, "
            f"{sum(values)} records, max-min = {spread})</h2>"
        )
        sections.append(bar_chart_svg(labels, values, y_label="records"))
    style = "body{font-family:sans-serif;max-width:720px;margin:2em auto}th{text-align:left;padding-right:1em}"
    return (
        f"<!doctype html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{style}</style></head><body>\n" + "\n".join(sections) + "\n</body></html>\n"
    )
