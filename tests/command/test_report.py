"""`lmshards report RUN_DIR`: the charts' data, what each number says it was measured on, and the page
as headless Chromium renders it (no script errors, not blank)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lmshards.command.cli import main as lmshards_main
from lmshards.command.report import (
    Reference,
    curation_funnel,
    funnel_figure,
    funnel_table,
    integer_dtick,
    loss_figure,
    read_run,
    render_report,
    shards_figure,
)
from lmshards.schemas.manifest import (
    CurationInfo,
    InputFileInfo,
    Manifest,
    ShardInfo,
    SplitInfo,
    SplitTotals,
    TokenizerInfo,
    write_manifest,
)
from lmshards.schemas.shards import shard_relpath
from tests.helpers.chromium import chromium, layout, needs_chromium, overlaps, png_colors

REPO = Path(__file__).resolve().parents[2]


def _split(name: str, records_per_shard: list[int]) -> SplitInfo:
    n = len(records_per_shard)
    shards = tuple(
        ShardInfo(path=shard_relpath(name, i, n, r), records=r, bytes=100, sha256="ab" * 32)
        for i, r in enumerate(records_per_shard)
    )
    totals = SplitTotals(
        documents=n,
        tokens_in=8 * sum(records_per_shard),
        tokens_written=8 * sum(records_per_shard),
        records=sum(records_per_shard),
    )
    return SplitInfo(shards=shards, totals=totals)


def _manifest() -> Manifest:
    return Manifest(
        tool_version="0.1.0",
        seq_len=8,
        tokenizer=TokenizerInfo(
            fingerprint="sha256:00",
            vocab_size=100,
            special_token_ids={"pad": 1},
            all_special_ids=(0, 1),
        ),
        splits={"train": _split("train", [4, 3, 4, 3]), "validation": _split("validation", [2, 1])},
        inputs=(InputFileInfo(path="a.txt", bytes=10),),
        seed=1,
        options={"remainder": "pad"},
    )


METRICS = [
    {"step": 10, "loss": 7.6, "learning_rate": 1e-3, "tokens_per_second": 1000.0},
    {"step": 10, "eval_loss": 7.2, "eval_accuracy": 0.05, "eval_batches": 2},
    {"step": 20, "loss": 5.7, "learning_rate": 5e-4, "tokens_per_second": 1100.0},
    {"step": 20, "eval_loss": 6.1, "eval_accuracy": 0.178, "eval_batches": 2},
]


@pytest.fixture
def run_dir(tmp_path) -> Path:
    shards, run = tmp_path / "shards", tmp_path / "run"
    run.mkdir()
    write_manifest(str(shards), _manifest())
    run_config = {
        "train": {"shards": [str(shards)], "masking": "token", "mlm_probability": 0.3},
        "model": {"family": "roberta"},
        "seq_len": 8,
    }
    (run / "run_config.json").write_text(json.dumps(run_config))
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in METRICS))
    summary = {
        "global_step": 20,
        "global_batch": 4,
        "train_loss": 5.7,
        "eval_loss": 6.1,
        "eval_accuracy": 0.178,
        "eval_batches": 2,
        "tokens_per_second": 1050.0,
        "sequences_per_second": 131.2,
        "steps_this_run": 20,
        "strategy": "cpu",
        "replicas": 1,
        "device_kind": "CPU",
    }
    (run / "run_summary.json").write_text(json.dumps(summary))
    return run


def test_loss_chart_overlays_train_and_marked_eval_points_on_fitted_axes(run_dir):
    fig = loss_figure(read_run(str(run_dir)))
    train, evals = fig.data
    assert list(train.x) == [10, 20] and list(train.y) == [7.6, 5.7]
    assert list(evals.x) == [10, 20] and list(evals.y) == [7.2, 6.1]
    assert "markers" in evals.mode
    assert fig.layout.yaxis.rangemode in (None, "normal")  # fitted to the data, not drawn from 0


def test_shard_chart_has_integer_ticks_and_stays_low(run_dir):
    fig = shards_figure(read_run(str(run_dir)).manifests[str(run_dir.parent / "shards")], name="s")
    assert [list(bar.y) for bar in fig.data] == [[4, 3, 4, 3], [2, 1]]
    assert fig.layout.yaxis.tickformat == ",d" and fig.layout.yaxis.dtick == 1
    assert fig.layout.height <= 300
    assert "train: 14 records in 4 shards, 3-4 per shard" in fig.layout.annotations[0].text
    assert [integer_dtick(t) for t in (1, 4, 7, 60, 1234)] == [1, 1, 2, 20, 500]


def test_every_number_says_what_it_was_measured_on(run_dir):
    page = render_report(
        read_run(str(run_dir)),
        title="t",
        references=[Reference("always 'the'", 0.05, "demo's masks")],
    )
    assert "6.1000 nats on 2 global batches of the validation split" in page
    assert (
        "0.1780 on the same tokens; masks as in training (token masking: 30% of the tokens" in page
    )
    assert "mean over the last logging window" in page
    assert "always 'the': 0.050 (demo's masks)" in page
    assert "http://" not in page.split("<script>", 1)[0]  # nothing fetched: the page is one file


def test_report_command_writes_the_page_and_refuses_a_non_run(run_dir, tmp_path, capsys):
    assert lmshards_main(["report", str(run_dir)]) == 0
    assert capsys.readouterr().out.strip() == f"lmshards report: wrote {run_dir / 'report.html'}"
    assert (run_dir / "report.html").read_text().startswith("<!doctype html>")
    assert lmshards_main(["report", str(tmp_path / "nothing")]) == 2
    assert "not a training run directory" in capsys.readouterr().err


# The training stack: `lmshards report` reads a run's files by the contract's names (schemas/) without it.
TRAINING_STACK = ("tensorflow", "keras", "keras_hub", "jax", "flax", "train")


def test_a_report_loads_no_training_stack(run_dir):
    """`lmshards report RUN_DIR`, in a fresh interpreter, writes its page without importing train/ or a
    backend's framework."""
    code = (
        "import json, sys\n"
        "from lmshards.command.cli import main\n"
        f"assert main(['report', {str(run_dir)!r}]) == 0\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {TRAINING_STACK!r})))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (run_dir / "report.html").exists()
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


@needs_chromium
@pytest.mark.slow
def test_the_page_renders_in_headless_chromium_without_script_errors(run_dir, tmp_path):
    assert lmshards_main(["report", str(run_dir)]) == 0
    page = (run_dir / "report.html").as_uri()
    dom = chromium("--dump-dom", page)
    errors = [
        line
        for line in dom.stderr.splitlines()
        if "CONSOLE" in line and ("Uncaught" in line or "Error" in line)
    ]
    assert errors == [], errors
    # Plotly marks each chart it has drawn; 5 charts: loss, accuracy, lr, throughput, shards.
    assert dom.stdout.count('class="plot-container plotly"') == 5, dom.stdout[-2000:]
    shot = tmp_path / "shot.png"
    chromium(f"--screenshot={shot}", "--window-size=1000,1600", page)
    assert png_colors(shot.read_bytes()) > 20  # charts, not a blank page


# Plotly's chart boxes, tick labels and axis titles.
CHART, Y_TICKS, Y_TITLES = ".svg-container", ".ytick text", ".g-ytitle text"
X_TICKS, X_TITLES = ".xtick text", ".g-xtitle text"


@needs_chromium
@pytest.mark.slow
@pytest.mark.parametrize("width", [1400, 800])
def test_the_charts_fill_the_window_and_no_tick_label_meets_an_axis_title(run_dir, tmp_path, width):
    assert lmshards_main(["report", str(run_dir)]) == 0
    page = run_dir / "report.html"
    found = layout(page, width=width, selectors=[CHART, Y_TICKS, Y_TITLES, X_TICKS, X_TITLES])
    boxes = found["boxes"]
    charts = boxes[CHART]
    assert len(charts) == 5  # loss, accuracy, learning rate, throughput, shards
    # Each chart spans the window but the page's margins (and a scrollbar).
    assert all(c["right"] - c["left"] >= found["window"] - 100 for c in charts), charts
    assert all(c["right"] <= found["window"] for c in charts)
    assert len(boxes[Y_TITLES]) == 5 and boxes[Y_TICKS]
    for tick in boxes[Y_TICKS] + boxes[X_TICKS]:
        assert tick["left"] >= 0 and tick["right"] <= found["window"], tick  # never clipped
        assert not any(overlaps(tick, title) for title in boxes[Y_TITLES] + boxes[X_TITLES]), tick
    shot = tmp_path / f"report-{width}.png"
    chromium(f"--screenshot={shot}", f"--window-size={width},1600", page.as_uri())
    assert png_colors(shot.read_bytes()) > 20  # charts, not a blank page


def test_the_accuracy_axis_fits_the_accuracies_and_the_baseline(run_dir):
    from lmshards.command.report import accuracy_figure, accuracy_range

    fig = accuracy_figure(read_run(str(run_dir)), [Reference("always 'the'", 0.03, "m")])
    low, high = fig.layout.yaxis.range
    assert 0.0 <= low < 0.03 and 0.178 < high < 0.25  # not 0..1: the curve keeps its shape
    assert accuracy_range([0.0, 0.995]) == [0.0, 1.0] and accuracy_range([]) is None


def test_an_empty_run_says_no_steps_were_logged_and_draws_no_empty_charts(run_dir):
    from lmshards.command.report import NO_STEPS_YET

    (run_dir / "metrics.jsonl").write_text("")
    (run_dir / "run_summary.json").unlink()
    page = render_report(read_run(str(run_dir)), title="t")
    assert NO_STEPS_YET in page
    assert '"text":"Loss"' not in page and "Records per shard" in page


def test_the_report_of_any_run_shows_the_most_frequent_token_baseline(
    tmp_path, sample_tokenizer, sample_files, capsys
):
    from lmshards.command.report import token_baseline
    from tests.helpers.shard_factory import write_sample_shards

    shards = tmp_path / "shards"
    write_sample_shards(shards, sample_tokenizer, sample_files, seq_len=16, max_lines_per_file=20)
    run = tmp_path / "run"
    (run / "tokenizer").mkdir(parents=True)
    shutil.copy(sample_tokenizer, run / "tokenizer" / "tokenizer.json")
    (run / "run_config.json").write_text(json.dumps({"train": {"shards": [str(shards)]}}))
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in METRICS))
    baseline = token_baseline(read_run(str(run)), str(run))
    assert baseline is not None and 0 < baseline.accuracy < 0.5
    assert baseline.label.startswith("always '") and "(id " in baseline.label
    assert lmshards_main(["report", str(run)]) == 0
    page = (run / "report.html").read_text()
    assert f"{baseline.label}: {baseline.accuracy:.3f}".replace("'", "&#x27;") in page or (
        f"{baseline.accuracy:.3f} (its share of the maskable tokens" in page
    )


def test_a_curated_shard_set_shows_its_funnel_and_an_uncurated_one_none():
    curation = CurationInfo(
        dedup="near",
        options={},
        documents_in=13,
        bytes_in=900,
        removed={
            "contaminated": {"documents": 1, "bytes": 50},
            "exact": {"documents": 4, "bytes": 200},
            "near": {"documents": 2, "bytes": 120},
        },
        clusters=3,
        eval_files=(),
        audit=(),
    )
    curated = dataclasses.replace(_manifest(), curation=curation)
    assert curation_funnel(curated) == [
        ("documents in", "13 (900 bytes)"),
        ("removed: contaminated", "1 (50 bytes)"),
        ("removed: exact", "4 (200 bytes)"),
        ("removed: near", "2 (120 bytes)"),
        ("documents written", "6"),
        ("tokens written", "136"),  # 8 tokens x 17 records,
    ]
    assert "Curation of s (--dedup near)" in funnel_table(curated, name="s")
    assert curation_funnel(_manifest()) == [] and funnel_table(_manifest(), name="s") == ""


def test_a_shard_set_with_document_steps_shows_each_step_of_its_funnel():
    row = {
        "name": "language",
        "options": {"languages": "en"},
        "documents_in": 10,
        "bytes_in": 500,
        "documents_out": 6,
        "bytes_out": 300,
        "removed": {"not_listed": {"documents": 4, "bytes": 200}},
        "counts": {"de": 4, "en": 6},
    }
    curation = CurationInfo(
        dedup="none",
        options={},
        documents_in=10,
        bytes_in=500,
        removed={"language:not_listed": {"documents": 4, "bytes": 200}},
        clusters=0,
        eval_files=(),
        audit=(),
        steps=(row,),
    )
    manifest = dataclasses.replace(_manifest(), curation=curation)
    rows = curation_funnel(manifest)
    (drawn,) = funnel_figure(manifest, name="s").data
    assert list(drawn.y) == ["read", "language"] and list(drawn.x) == [10, 6]
    assert rows[:4] == [
        ("documents in", "10 (500 bytes)"),
        ("language: kept", "6 of 10 (300 of 500 bytes)"),
        ("language: removed not_listed", "4 (200 bytes)"),
        ("language: counted", "de 4, en 6"),
    ]
