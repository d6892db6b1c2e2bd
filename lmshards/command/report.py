"""`lmshards report RUN_DIR`: one self-contained HTML page of a training run, drawn with Plotly.

Loss (train and eval on one chart), eval accuracy (with the most-frequent-token baseline, read from the shards),
learning rate, throughput, and the records per shard of every split of the run's shard sets. Every
number says what it was measured on. Plotly's JavaScript is inlined, so the page works offline and
can be mailed or archived as one file (about 5 MB); its charts zoom and show exact values on hover.
"""

from __future__ import annotations

import dataclasses
import html
import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from lmshards.plumbing import bounded, fs, stopping
from lmshards.plumbing.cli import (
    EXIT_OK,
    CommandParser,
    add_verbose_flag,
    one_line_errors,
    setup_logging,
)
from lmshards.plumbing.errors import LmshardsError
from lmshards.plumbing.outputs import check_file_output
from lmshards.schemas.constants import (
    ATTENTION_MASK,
    INPUT_IDS,
    MANIFEST_NAME,
    RUN_CONFIG_JSON,
    TRAIN_SPLIT,
    VALIDATION_SPLIT,
)
from lmshards.schemas.layouts import METRICS_JSONL, OUTPUT_KINDS, REPORT_HTML, RUN_SUMMARY_JSON
from lmshards.schemas.manifest import Manifest, read_manifest
from lmshards.schemas.metrics_log import read_metrics
from lmshards.schemas.reading import read_split

COMMAND = "report"
# In every page's head: how an existing --output file is told to be an earlier report (is_report).
GENERATOR_META = "<meta name='generator' content='lmshards report'>"
# Sequences of each split the most-frequent-token baseline reads (the first ones, in manifest order).
BASELINE_RECORDS = 20_000
# Room left above and below the accuracies on the accuracy chart, as a share of their spread (at least 0.01).
ACCURACY_PAD = 0.1
NO_STEPS_YET = "no steps logged yet: the charts fill in once the run logs its first step"
CHART_HEIGHT = 340
# Between an axis title and its tick labels; automargin makes room for both, so they never overlap.
TITLE_STANDOFF = 12
SHARD_CHART_HEIGHT = 260
TRAIN_COLOR, EVAL_COLOR, BASELINE_COLOR = "#4c78a8", "#e45756", "#72b7b2"
STYLE = (
    # No max-width: the charts are responsive and fill the window.
    "body{font-family:system-ui,sans-serif;margin:2em 1em;color:#222}"
    "th{text-align:left;padding:2px 1em 2px 0;vertical-align:top;white-space:nowrap}"
    "td{padding:2px 0}p.note{color:#555;font-size:0.9em}"
)


@dataclasses.dataclass(frozen=True)
class Reference:
    """An accuracy drawn as a line across the accuracy chart (a baseline's), and what it was measured on."""

    label: str  # e.g. "always 'the'"
    accuracy: float
    measured_on: str


@dataclasses.dataclass(frozen=True)
class RunData:
    """What the report reads from a run directory."""

    metrics: tuple[dict[str, Any], ...]
    run_config: dict[str, Any]
    summary: dict[str, Any] | None  # run_summary.json; None while the run has not finished
    manifests: dict[str, Manifest]  # shard set path -> its manifest


def _run_file(path: str) -> dict[str, Any]:
    """The JSON object of a run file. Raises LmshardsError naming it when it is damaged or over a read limit."""
    try:
        data = bounded.read_json(path, what="run file")
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise LmshardsError(f"{path!r} is damaged: not valid JSON ({e}).") from e
    if not isinstance(data, dict):
        raise LmshardsError(
            f"{path!r} is damaged: it holds a JSON {type(data).__name__}, not an object."
        )
    return data


def read_run(run_dir: str) -> RunData:
    """Raises LmshardsError when run_dir holds no run_config.json (not a training run)."""
    config_path = fs.join(run_dir, RUN_CONFIG_JSON)
    if not fs.exists(config_path):
        raise LmshardsError(
            f"No {RUN_CONFIG_JSON} in {run_dir!r}: not a training run directory; pass the --output "
            "of `lmshards train`."
        )
    run_config = _run_file(config_path)
    metrics_path = fs.join(run_dir, METRICS_JSONL)
    metrics = read_metrics(metrics_path)  # the reader a resumed run starts from
    summary_path = fs.join(run_dir, RUN_SUMMARY_JSON)
    summary = _run_file(summary_path) if fs.exists(summary_path) else None
    manifests = {}
    for path in run_config.get("train", {}).get("shards", ()):
        if fs.exists(fs.join(path, MANIFEST_NAME)):
            manifests[path] = read_manifest(path)
    return RunData(tuple(metrics), run_config, summary, manifests)


# ---------------------------------------------------------------- what each number was measured on


def masking_description(run_config: Mapping[str, Any]) -> str:
    """How the trainer masked its training and eval batches, e.g. 'token masking, 15% of tokens ...'."""
    train = run_config.get("train", {})
    probability = train.get("mlm_probability")
    share = f"{probability:.0%}" if isinstance(probability, (int, float)) else "?"
    return (
        f"{train.get('masking', 'token')} masking: {share} of the tokens predicted, of which 80% "
        "replaced by the mask token, 10% by a random token, 10% left unchanged"
    )


def run_facts(data: RunData) -> dict[str, str]:
    """The run's headline numbers, each with what it was measured on."""
    config, summary = data.run_config, data.summary or {}
    train = config.get("train", {})
    facts = {
        "shards": ", ".join(train.get("shards", ())) or "?",
        "model": f"{config.get('model', {}).get('family', '?')} "
        f"{train.get('model_preset') or train.get('model_config') or ''}".strip(),
        "sequence length": str(config.get("seq_len", "?")),
    }
    if train.get("init_from"):
        facts["started from"] = train["init_from"]
    if not summary:
        facts["status"] = (
            "not finished (no run_summary.json yet): charts show the steps so far"
            if has_steps(data)
            else NO_STEPS_YET
        )
        return facts
    facts["steps"] = f"{summary.get('global_step')} of global batch {summary.get('global_batch')}"
    if summary.get("train_loss") is not None:
        facts["train loss"] = (
            f"{summary['train_loss']:.4f} nats: mean over the last logging window's training batches"
        )
    if summary.get("eval_loss") is not None:
        on = (
            "the whole validation split"
            if summary.get("final_eval") == "full"
            else f"{summary.get('eval_batches')} global batches of the validation split"
        )
        facts["eval loss"] = f"{summary['eval_loss']:.4f} nats on {on}"
        facts["eval accuracy"] = (
            f"{summary['eval_accuracy']:.4f} on the same tokens; masks as in training "
            f"({masking_description(config)}), so unchanged tokens count too"
        )
    else:
        facts["eval"] = "none: the run has no validation split (or --eval_every was never reached)"
    if summary.get("tokens_per_second"):
        facts["throughput"] = (
            f"{summary['tokens_per_second']:,.0f} tokens/s, {summary.get('sequences_per_second', 0):,.1f} "
            f"sequences/s over this command's {summary.get('steps_this_run')} steps (evaluation excluded)"
        )
    facts["hardware"] = (
        f"{summary.get('strategy')}, {summary.get('replicas')} replicas, {summary.get('device_kind')}"
    )
    return facts


def has_steps(data: RunData) -> bool:
    """Whether the run has logged any step (train loss or an evaluation)."""
    return any("loss" in r or "eval_loss" in r for r in data.metrics)


# ---------------------------------------------------------------- the most-frequent-token baseline


def maskable(
    input_ids: np.ndarray, attention_mask: np.ndarray, special_ids: Sequence[int]
) -> np.ndarray:
    """bool, same shape: real (non-padding) tokens that are not special tokens."""
    return (attention_mask == 1) & ~np.isin(input_ids, np.asarray(special_ids))


def most_frequent_token(
    input_ids: np.ndarray, attention_mask: np.ndarray, special_ids: Sequence[int]
) -> int:
    """The id that occurs most often among the maskable tokens (ties: the smallest id)."""
    counts = np.bincount(input_ids[maskable(input_ids, attention_mask, special_ids)])
    return int(np.argmax(counts))


def token_baseline(
    data: RunData, run_dir: str, *, limit: int = BASELINE_RECORDS
) -> Reference | None:
    """Always predicting the train split's most frequent token: its share of the validation tokens a recipe
    can mask (what that guess scores when masked positions are drawn evenly over them). None when the
    run's first shard set, or its validation split, cannot be read."""
    if not data.manifests:
        return None
    path, manifest = next(iter(data.manifests.items()))
    if VALIDATION_SPLIT not in manifest.splits:
        return None
    special = list(manifest.tokenizer.never_masked_ids)
    try:
        train = read_split(manifest, path, TRAIN_SPLIT, max_records=limit)
        validation = read_split(manifest, path, VALIDATION_SPLIT, max_records=limit)
    except (OSError, LmshardsError):
        return None  # shards moved or unreadable: the report shows the rest
    tokens = maskable(validation[INPUT_IDS], validation[ATTENTION_MASK], special)
    if not tokens.any() or not maskable(train[INPUT_IDS], train[ATTENTION_MASK], special).any():
        return None
    top = most_frequent_token(train[INPUT_IDS], train[ATTENTION_MASK], special)
    share = float(np.mean(validation[INPUT_IDS][tokens] == top))
    return Reference(
        label=f"always {_token_text(run_dir, top)}",
        accuracy=share,
        measured_on=f"its share of the maskable tokens of the first {len(tokens):,} validation sequences",
    )


def _token_text(run_dir: str, token_id: int) -> str:
    """'the' (id 5) from the run's tokenizer copy, or 'token 5' without one."""
    path = fs.join(run_dir, "tokenizer", "tokenizer.json")
    try:
        from tokenizers import Tokenizer

        source = bounded.read_text(
            path, what="tokenizer file", max_bytes=bounded.MAX_TOKENIZER_JSON_BYTES
        )
        text = Tokenizer.from_str(source).decode([token_id]).strip()
    except Exception:  # noqa: BLE001  (no copy, or not a tokenizers file: the id alone says enough)
        return f"token {token_id}"
    return f"{text!r} (id {token_id})"


# ---------------------------------------------------------------- charts


def _points(records: Sequence[Mapping[str, Any]], key: str) -> tuple[list[int], list[float]]:
    rows = [(r["step"], r[key]) for r in records if isinstance(r.get(key), (int, float))]
    return [s for s, _ in rows], [float(v) for _, v in rows]


def _layout(title: str, y_title: str, **extra: Any) -> dict[str, Any]:
    return dict(
        title=dict(text=title, x=0, font=dict(size=15)),
        xaxis=dict(title=dict(text="step", standoff=TITLE_STANDOFF), automargin=True),
        yaxis=dict(title=dict(text=y_title, standoff=TITLE_STANDOFF), automargin=True),
        height=CHART_HEIGHT,
        margin=dict(l=70, r=20, t=50, b=50),
        legend=dict(orientation="h", y=-0.25),
        template="plotly_white",
        **extra,
    )


def loss_figure(data: RunData):
    """Train loss (line) and eval loss (marked points) on axes fitted to the data."""
    import plotly.graph_objects as go

    fig = go.Figure()
    steps, values = _points(data.metrics, "loss")
    fig.add_trace(
        go.Scatter(
            x=steps, y=values, name="train (logging window mean)", line=dict(color=TRAIN_COLOR)
        )
    )
    steps, values = _points(data.metrics, "eval_loss")
    if steps:
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=values,
                name="eval (eval_batches of the validation split)",
                mode="lines+markers",
                marker=dict(size=8),
                line=dict(color=EVAL_COLOR),
            )
        )
    steps, values = _points(data.metrics, "final_eval_loss")
    if steps:
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=values,
                name="final eval (whole validation split)",
                mode="markers",
                marker=dict(size=12, symbol="star", color=EVAL_COLOR),
            )
        )
    return fig.update_layout(**_layout("Loss", "cross-entropy (nats)"))


def accuracy_figure(data: RunData, references: Sequence[Reference]):
    import plotly.graph_objects as go

    fig = go.Figure()
    steps, values = _points(data.metrics, "eval_accuracy")
    fig.add_trace(
        go.Scatter(
            x=steps,
            y=values,
            name="eval accuracy (training masks: unchanged tokens count too)",
            mode="lines+markers",
            marker=dict(size=8),
            line=dict(color=EVAL_COLOR),
        )
    )
    for reference in references:
        fig.add_hline(
            y=reference.accuracy,
            line=dict(color=BASELINE_COLOR, dash="dash"),
            annotation_text=f"{reference.label}: {reference.accuracy:.3f} ({reference.measured_on})",
            annotation_position="bottom right",
        )
    fig.update_layout(**_layout("Eval accuracy on masked tokens", "accuracy"), showlegend=True)
    return fig.update_yaxes(range=accuracy_range([*values, *(r.accuracy for r in references)]))


def accuracy_range(accuracies: Sequence[float]) -> list[float] | None:
    """The accuracy axis fitted to the accuracies and baselines shown, within [0, 1]; None: nothing to fit."""
    if not accuracies:
        return None
    low, high = min(accuracies), max(accuracies)
    pad = max((high - low) * ACCURACY_PAD, 0.01)
    return [max(0.0, low - pad), min(1.0, high + pad)]


def series_figure(data: RunData, key: str, *, title: str, y_title: str, name: str):
    import plotly.graph_objects as go

    steps, values = _points(data.metrics, key)
    fig = go.Figure(go.Scatter(x=steps, y=values, name=name, line=dict(color=TRAIN_COLOR)))
    return fig.update_layout(**_layout(title, y_title), showlegend=False)


def integer_dtick(top: int, *, ticks: int = 5) -> int:
    """A tick step of 1, 2 or 5 times a power of ten giving at most `ticks` ticks from 0 to top."""
    raw = max(top / ticks, 1.0)
    power = 10 ** math.floor(math.log10(raw))
    return int(next(m * power for m in (1, 2, 5, 10) if m * power >= raw))


def shards_figure(manifest: Manifest, *, name: str):
    """One bar per shard, a panel per split, integer ticks, y from 0: balance at a glance, low height."""
    from plotly.subplots import make_subplots

    splits = list(manifest.splits.items())
    titles = []
    for split_name, split in splits:
        records = [s.records for s in split.shards]
        titles.append(
            f"{split_name}: {sum(records):,} records in {len(records)} shards, "
            f"{min(records):,}-{max(records):,} per shard"
        )
    fig = make_subplots(rows=1, cols=len(splits), subplot_titles=titles)
    for column, (split_name, split) in enumerate(splits, start=1):
        records = [s.records for s in split.shards]
        fig.add_bar(
            x=list(range(len(records))),
            y=records,
            name=split_name,
            marker_color=TRAIN_COLOR if column == 1 else EVAL_COLOR,
            hovertext=[s.path for s in split.shards],
            row=1,
            col=column,
        )
        fig.update_xaxes(
            title=dict(text="shard", standoff=TITLE_STANDOFF),
            automargin=True,
            dtick=1 if len(records) <= 16 else None,
            row=1,
            col=column,
        )
        fig.update_yaxes(
            title=dict(text="records" if column == 1 else None, standoff=TITLE_STANDOFF),
            automargin=True,
            tickformat=",d",
            dtick=integer_dtick(max(records, default=1)),
            rangemode="tozero",
            row=1,
            col=column,
        )
    fig.update_annotations(font_size=12)
    return fig.update_layout(
        title=dict(text=f"Records per shard: {html.escape(name)}", x=0, font=dict(size=15)),
        height=SHARD_CHART_HEIGHT,
        margin=dict(l=70, r=20, t=70, b=50),
        showlegend=False,
        template="plotly_white",
    )


def curation_funnel(manifest: Manifest) -> list[tuple[str, str]]:
    """(stage, count) rows of a curated shard set: documents in, then each step's documents kept and
    removed per reason (the manifest's funnel; a set made before it: removed per reason), documents and
    tokens written; [] for a shard set made without curation."""
    curation = manifest.curation
    if curation is None:
        return []
    rows = [("documents in", f"{curation.documents_in:,} ({curation.bytes_in:,} bytes)")]
    for step in curation.steps:
        rows.append(
            (
                f"{step['name']}: kept",
                f"{step['documents_out']:,} of {step['documents_in']:,} "
                f"({step['bytes_out']:,} of {step['bytes_in']:,} bytes)",
            )
        )
        for reason, removed in step["removed"].items():
            rows.append(
                (
                    f"{step['name']}: removed {reason}",
                    f"{removed['documents']:,} ({removed['bytes']:,} bytes)",
                )
            )
        if step["counts"]:
            counted = ", ".join(f"{label} {n:,}" for label, n in step["counts"].items())
            rows.append((f"{step['name']}: counted", counted))
    for reason, removed in curation.removed.items() if not curation.steps else ():
        rows.append(
            (f"removed: {reason}", f"{removed['documents']:,} ({removed['bytes']:,} bytes)")
        )
    splits = manifest.splits.values()
    rows += [
        ("documents written", f"{sum(s.totals.documents for s in splits):,}"),
        ("tokens written", f"{sum(s.totals.tokens_written for s in splits):,}"),
    ]
    return rows


def funnel_figure(manifest: Manifest, *, name: str):
    """The documents left after each curation step, read first (a set curated with the step funnel)."""
    import plotly.graph_objects as go

    curation = manifest.curation
    assert curation is not None and curation.steps, "drawn for a set with the funnel"
    stages = ["read", *(row["name"] for row in curation.steps)]
    documents = [curation.documents_in, *(row["documents_out"] for row in curation.steps)]
    fig = go.Figure(go.Funnel(y=stages, x=documents, textinfo="value+percent initial"))
    return fig.update_layout(
        title=dict(
            text=f"Curation: documents after each step, {html.escape(name)}",
            x=0,
            font=dict(size=15),
        ),
        height=SHARD_CHART_HEIGHT + 30 * len(stages),
        margin=dict(l=140, r=20, t=70, b=40),
        template="plotly_white",
    )


def funnel_table(manifest: Manifest, *, name: str) -> str:
    """The curation funnel of one shard set as an HTML table ("" without curation)."""
    rows = curation_funnel(manifest)
    if not rows:
        return ""
    cells = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    dedup = manifest.curation.dedup if manifest.curation else "none"
    return (
        f"<h2>Curation of {html.escape(name)} (--dedup {html.escape(dedup)})</h2>"
        f"<table>{cells}</table>"
    )


# ---------------------------------------------------------------- the page


def render_report(
    data: RunData,
    *,
    title: str,
    facts: Mapping[str, str] | None = None,
    references: Sequence[Reference] = (),
    notes: Sequence[str] = (),
) -> str:
    """The whole HTML page, Plotly's JavaScript inlined once. facts default to run_facts(data)."""
    import plotly.io as pio
    from plotly.offline import get_plotlyjs

    rows = "\n".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
        for k, v in (facts if facts is not None else run_facts(data)).items()
    )
    figures = []
    if has_steps(data):  # an empty run draws no empty axes: its status says why
        figures.append(loss_figure(data))
        if any("eval_accuracy" in r for r in data.metrics) or references:
            figures.append(accuracy_figure(data, references))
        figures.append(
            series_figure(
                data,
                "learning_rate",
                title="Learning rate (at the end of each logging window)",
                y_title="learning rate",
                name="learning rate",
            )
        )
        figures.append(
            series_figure(
                data,
                "tokens_per_second",
                title="Throughput (training steps only, per logging window)",
                y_title="tokens / s",
                name="tokens per second",
            )
        )
    figures += [shards_figure(m, name=path) for path, m in data.manifests.items()]
    figures += [
        funnel_figure(m, name=path)
        for path, m in data.manifests.items()
        if m.curation is not None and m.curation.steps
    ]
    charts = [
        pio.to_html(fig, full_html=False, include_plotlyjs=False, config={"responsive": True})
        for fig in figures
    ]
    sections = [
        f"<h1>{html.escape(title)}</h1>",
        f"<table>{rows}</table>",
        *(f"<p class='note'>{html.escape(note)}</p>" for note in notes),
        *charts,
        *(funnel_table(m, name=path) for path, m in data.manifests.items() if m.curation),
    ]
    return (
        f"<!doctype html>\n<html><head><meta charset='utf-8'>{GENERATOR_META}"
        f"<title>{html.escape(title)}</title><style>{STYLE}</style>"
        f"<script>{get_plotlyjs()}</script></head><body>\n"
        + "\n".join(sections)
        + "\n</body></html>\n"
    )


def is_report(head: bytes) -> bool:
    """Whether a file starting with `head` is a page this command wrote (one --output may replace)."""
    return GENERATOR_META.encode() in head


def write_report(html_text: str, path: str) -> str:
    fs.write_text_atomic(path, html_text)
    return path


# ---------------------------------------------------------------- the command


def build_parser() -> CommandParser:
    parser = CommandParser(COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the --output of `lmshards train`")
    parser.add_argument(
        "--output", default=None, help=f"the HTML file to write (default RUN_DIR/{REPORT_HTML})"
    )
    add_verbose_flag(parser)
    return parser


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    setup_logging(verbose=args.verbose, packages=("lmshards",))
    run_dir, output = args.run_dir, args.output
    with one_line_errors(COMMAND) as failed, stopping.stop_signals():
        # The run's own report.html is the run's file; anywhere else only an earlier report is replaced.
        if output and os.path.abspath(output) != os.path.abspath(fs.join(run_dir, REPORT_HTML)):
            check_file_output(output, ours=is_report, kinds=OUTPUT_KINDS)
        data = read_run(run_dir)
        baseline = token_baseline(data, run_dir)
        path = write_report(
            render_report(
                data, title=f"lmshards run {run_dir}", references=[baseline] if baseline else []
            ),
            output or fs.join(run_dir, REPORT_HTML),
        )
        print(f"lmshards {COMMAND}: wrote {path}")
        return EXIT_OK
    return failed.code
