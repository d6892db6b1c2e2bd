"""stats.html: the key figures, a rank-frequency plot (inline SVG, log-log) and the top tokens.

Plain strings, no plotting library: the page is one self-contained file that opens anywhere. The plot
is drawn in a PLOT_WIDTH x PLOT_HEIGHT viewBox and scaled to the window's width; its left margin is
sized from its longest tick label, so the labels and the axis title never overlap or leave the frame.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

PLOT_WIDTH, PLOT_HEIGHT = 800, 400  # the viewBox: the plot itself is as wide as the page
PLOT_MARGIN = 40  # top, right and bottom, in viewBox units
FONT_SIZE = 11  # of the plot's text, in viewBox units
CHAR_WIDTH = 7  # an upper bound of one label character's width at FONT_SIZE (digits, k, M)
TICK_GAP = 6  # between a y tick label and the frame
TITLE_ROOM = 24  # left of the y tick labels: the rotated y axis title
PLOT_POINTS = 400  # most points drawn; ranks are sampled evenly on the log axis

_STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em;color:#222}"
    "table{border-collapse:collapse}td,th{padding:2px 10px;border-bottom:1px solid #ddd;text-align:right}"
    f"td.l,th.l{{text-align:left}}svg.plot{{display:block}}svg text{{font-size:{FONT_SIZE}px;fill:#444}}"
)


_SUFFIXES = ((9, "G"), (6, "M"), (3, "k"), (0, ""))


def decade_label(exponent: int) -> str:
    """10^exponent in at most five characters: 1, 10, 100, 1k, ..., 100M, 1G, ..., 1e12."""
    if not 0 <= exponent < 12:
        return f"1e{exponent}"
    power, suffix = next((p, x) for p, x in _SUFFIXES if exponent >= p)
    return f"{10 ** (exponent - power)}{suffix}"


def sampled_ranks(n: int, points: int = PLOT_POINTS) -> list[int]:
    """Up to `points` ranks in 1..n, evenly spaced on a log axis, always with 1 and n."""
    if n <= points:
        return list(range(1, n + 1))
    return sorted({round(10 ** (math.log10(n) * k / (points - 1))) for k in range(points)})


def rank_frequency_svg(
    frequencies: Sequence[int], *, width: int = PLOT_WIDTH, height: int = PLOT_HEIGHT
) -> str:
    """An SVG log-log plot of count against rank; frequencies are counts sorted from most frequent, all > 0.

    The SVG is 100% wide and keeps its aspect ratio; width and height are its viewBox.
    """
    m = PLOT_MARGIN
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="100%" viewBox="0 0 {width} {height}" '
        'role="img" class="plot">'
    )
    if not frequencies:
        return f'{head}<text x="{m}" y="{height // 2}">no tokens counted</text></svg>'
    x_max = max(1, math.ceil(math.log10(len(frequencies))))
    y_min, y_max = (
        math.floor(math.log10(frequencies[-1])),
        max(1, math.ceil(math.log10(frequencies[0]))),
    )
    y_max = max(y_max, y_min + 1)
    widest = max(len(decade_label(e)) for e in range(y_min, y_max + 1))
    left = TITLE_ROOM + widest * CHAR_WIDTH + TICK_GAP

    def x(rank: float) -> float:
        return left + (width - left - m) * math.log10(rank) / x_max

    def y(count: float) -> float:
        return height - m - (height - 2 * m) * (math.log10(count) - y_min) / (y_max - y_min)

    frame = f'<rect x="{left}" y="{m}" width="{width - left - m}" height="{height - 2 * m}" fill="none" stroke="#999"/>'
    parts = [head, frame]
    for e in range(x_max + 1):
        parts.append(
            f'<line x1="{x(10**e):.1f}" y1="{m}" x2="{x(10**e):.1f}" y2="{height - m}" stroke="#eee"/>'
        )
        parts.append(
            f'<text class="xtick" x="{x(10**e):.1f}" y="{height - m + 16}" text-anchor="middle">'
            f"{decade_label(e)}</text>"
        )
    for e in range(y_min, y_max + 1):
        parts.append(
            f'<line x1="{left}" y1="{y(10**e):.1f}" x2="{width - m}" y2="{y(10**e):.1f}" stroke="#eee"/>'
        )
        parts.append(
            f'<text class="ytick" x="{left - TICK_GAP}" y="{y(10**e) + 4:.1f}" text-anchor="end">'
            f"{decade_label(e)}</text>"
        )
    points = " ".join(
        f"{x(r):.1f},{y(frequencies[r - 1]):.1f}" for r in sampled_ranks(len(frequencies))
    )
    parts += [
        f'<polyline points="{points}" fill="none" stroke="#1f77b4" stroke-width="1.5"/>',
        f'<text class="xtitle" x="{(left + width - m) / 2:.0f}" y="{height - 8}" '
        'text-anchor="middle">rank (log)</text>',
        f'<text class="ytitle" x="14" y="{height / 2:.0f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {height / 2:.0f})">occurrences (log)</text>',
        "</svg>",
    ]
    return "".join(parts)


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4%}"


def _set_figures(stats: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The figures of a shard set: its records and shards."""
    per_record, per_shard = stats["tokens_per_record"], stats["records_per_shard"]
    return [
        ("splits", ", ".join(stats["splits"])),
        ("records", f"{stats['records']:,}"),
        ("non-padding tokens", f"{stats['tokens']:,}"),
        ("padding share", _share(stats["padding_share"])),
        (
            "tokens per record (min / mean / max)",
            f"{per_record['min']:,} / {per_record['mean']:,.1f} / {per_record['max']:,}",
        ),
        (
            "records per shard (min / mean / max)",
            f"{per_shard['min']:,} / {per_shard['mean']:,.1f} / {per_shard['max']:,}",
        ),
    ]


def _store_figures(stats: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The figures of a token store: its documents before packing."""
    per_doc = stats["tokens_per_document"]
    return [
        ("documents", f"{stats['documents']:,}"),
        ("tokens", f"{stats['tokens']:,}"),
        (
            "tokens per document (min / mean / max)",
            f"{per_doc['min']:,} / {per_doc['mean']:,.1f} / {per_doc['max']:,}",
        ),
        *(
            (f"documents longer than {n} tokens", f"{count:,}")
            for n, count in per_doc["longer_than"].items()
        ),
    ]


def longest_table(stats: Mapping[str, Any]) -> str:
    """A token store's longest documents, each named by its part file and 0-based row ("" for a
    shard set, whose records are not documents)."""
    longest = stats.get("tokens_per_document", {}).get("longest", [])
    if not longest:
        return ""
    rows = "".join(
        f'<tr><td>{d["tokens"]:,}</td><td class="l"><code>{html.escape(d["file"])}</code></td>'
        f"<td>{d['record']:,}</td></tr>"
        for d in longest
    )
    return (
        f"<h2>The {len(longest)} longest documents</h2>"
        '<table><tr><th>tokens</th><th class="l">part file</th><th>row</th></tr>'
        f"{rows}</table>"
    )


def stats_page(stats: Mapping[str, Any], frequencies: Sequence[int]) -> str:
    """The whole HTML page for a stats.json dict (a shard set's or a token store's) and the
    rank-frequency curve of its token counts."""
    esc = html.escape
    figures = _store_figures(stats) if stats.get("kind") == "token_store" else _set_figures(stats)
    figures += [
        ("vocabulary size", f"{stats['vocab_size']:,}"),
        ("vocabulary never used", _share(stats["vocab_unused_fraction"])),
        ("unknown-token rate", _share(stats["unk_rate"])),
        ("byte-fallback rate", _share(stats["byte_fallback_rate"])),
    ]
    named = any("token" in entry for entry in stats["top_tokens"])
    rows = [
        f"<tr><td>{rank}</td><td>{entry['id']}</td>"
        + (
            "".join(
                f'<td class="l"><code>{esc(repr(entry[key]))}</code></td>'
                for key in ("token", "text")
            )
            if named
            else ""
        )
        + f"<td>{entry['count']:,}</td><td>{entry['share']:.3%}</td></tr>"
        for rank, entry in enumerate(stats["top_tokens"], 1)
    ]
    header = "<tr><th>rank</th><th>id</th>" + (
        '<th class="l">piece</th><th class="l">text</th>' if named else ""
    )
    warnings = "".join(f"<li>{esc(problem)}</li>" for problem in stats["manifest_mismatches"])
    return "\n".join(
        [
            "<!DOCTYPE html>",
            f'<html><head><meta charset="utf-8"><title>lmshards stats: {esc(stats["shards_dir"])}</title>',
            f"<style>{_STYLE}</style></head><body>",
            f"<h1>Corpus statistics of <code>{esc(stats['shards_dir'])}</code></h1>",
            f"<p><strong>Differences from the manifest:</strong></p><ul>{warnings}</ul>"
            if warnings
            else "",
            "<table>"
            + "".join(f'<tr><th class="l">{esc(k)}</th><td>{esc(v)}</td></tr>' for k, v in figures)
            + "</table>",
            longest_table(stats),
            "<h2>Token frequencies by rank</h2>",
            rank_frequency_svg(frequencies),
            f"<h2>Top {len(rows)} tokens</h2>",
            f"<table>{header}<th>count</th><th>share</th></tr>{''.join(rows)}</table>",
            "</body></html>",
            "",
        ]
    )
