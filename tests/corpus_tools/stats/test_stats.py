"""`lmshards stats`: tensorflow-transform counts over real shards equal numpy's, and the figures derived from them."""

from __future__ import annotations

import io
import json
import re
import shutil

import numpy as np
import pytest

from lmshards.corpus_tools.stats import cli
from lmshards.corpus_tools.stats.figures import top_tokens, vocabulary_figures
from lmshards.corpus_tools.stats.page import (
    decade_label,
    rank_frequency_svg,
    sampled_ranks,
    stats_page,
)
from lmshards.corpus_tools.stats.stats import (
    AnalyzerCounts,
    StatsConfig,
    StatsError,
    corpus_stats,
    parse_counts,
    plan_stats,
    run_stats,
)
from lmshards.corpus_tools.tokenizer.corpus_report import byte_fallback_ids
from lmshards.plumbing.errors import ManifestError, TokenizerError
from lmshards.schemas.constants import ATTENTION_MASK, INPUT_IDS, TRAIN_SPLIT, VALIDATION_SPLIT
from lmshards.schemas.manifest import read_manifest
from lmshards.schemas.records import parse_spec, read_records
from tests.helpers.chromium import chromium, layout, needs_chromium, overlaps, png_colors
from tests.helpers.shard_factory import write_sample_shards

SEQ_LEN = 32


@pytest.fixture(scope="module")
def shards(tmp_path_factory, sample_tokenizer, sample_files):
    """A small real shard set (both splits, the last record padded) with its tokenizer in SHARDS_DIR/tokenizer."""
    out = tmp_path_factory.mktemp("shards")
    write_sample_shards(
        out,
        sample_tokenizer,
        sample_files,
        seq_len=SEQ_LEN,
        max_lines_per_file=60,
        train_shards=4,
        validation_shards=2,
    )
    (out / "tokenizer").mkdir()
    shutil.copy(sample_tokenizer, out / "tokenizer" / "tokenizer.json")
    return out


def _parsed(shards_dir, splits) -> tuple[np.ndarray, np.ndarray]:
    """input_ids and attention_mask of every record of the splits, parsed as the trainer parses them."""
    import tensorflow as tf

    manifest = read_manifest(str(shards_dir))
    serialized = [
        record
        for split in splits
        for path in manifest.shard_paths(str(shards_dir), split)
        for record in read_records(io.BytesIO(open(path, "rb").read()))
    ]
    parsed = tf.io.parse_example(serialized, parse_spec(manifest.features()))
    return parsed[INPUT_IDS].numpy(), parsed[ATTENTION_MASK].numpy()


@pytest.fixture(scope="module")
def cli_run(shards):
    """`lmshards stats SHARDS_DIR --top_k 20` (all splits, default output), run once for the module."""
    assert cli.main([str(shards), "--top_k", "20"]) == 0
    return json.loads((shards / "stats" / "stats.json").read_text())


def test_counts_equal_numpy_over_the_parsed_shards(shards, cli_run):
    stats = cli_run
    manifest = read_manifest(str(shards))
    ids, mask = _parsed(shards, manifest.splits)
    real = ids[mask == 1]
    counts = np.bincount(real, minlength=manifest.tokenizer.vocab_size)

    assert (
        stats["tokens"]
        == sum(s.totals.tokens_written for s in manifest.splits.values())
        == real.size
    )
    assert stats["records"] == len(ids)
    assert stats["padding_tokens"] == int((mask == 0).sum()) > 0
    assert stats["padding_share"] == pytest.approx((mask == 0).mean())
    assert stats["vocab_size"] == manifest.tokenizer.vocab_size
    assert stats["vocab_unused_fraction"] == pytest.approx(np.mean(counts == 0))
    assert stats["unk_rate"] == counts[manifest.tokenizer.special_token_ids["unk"]] / real.size
    assert stats["byte_fallback_rate"] == 0.0  # a byte-level BPE has no <0x..> pieces
    expected_top = sorted(range(len(counts)), key=lambda i: (-counts[i], i))[:20]
    assert [t["id"] for t in stats["top_tokens"]] == expected_top
    assert [t["count"] for t in stats["top_tokens"]] == counts[expected_top].tolist()
    per_record = mask.sum(axis=1)
    histogram = [[int(n), int((per_record == n).sum())] for n in np.unique(per_record)]
    assert stats["tokens_per_record"]["histogram"] == histogram
    assert stats["manifest_mismatches"] == []


def test_records_per_shard_and_split_match_the_manifest(shards, cli_run):
    manifest = read_manifest(str(shards))
    expected = [
        {"path": s.path, "records": s.records}
        for split in manifest.splits.values()
        for s in split.shards
    ]
    assert cli_run["records_per_shard"]["shards"] == expected
    assert cli_run["records_per_split"] == {
        name: split.records for name, split in manifest.splits.items()
    }


def test_top_tokens_are_named_by_the_tokenizer_beside_the_shards(shards, cli_run, sample_tokenizer):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(sample_tokenizer))
    assert cli_run["tokenizer"] == str(shards / "tokenizer" / "tokenizer.json")
    for entry in cli_run["top_tokens"]:
        assert entry["token"] == tokenizer.id_to_token(entry["id"])
        assert entry["text"] == tokenizer.decode([entry["id"]], skip_special_tokens=False)


def test_html_page_has_the_rank_frequency_plot(shards, cli_run):
    page = (shards / "stats" / "stats.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and "<polyline" in page
    used = cli_run["vocab_size"] - round(cli_run["vocab_unused_fraction"] * cli_run["vocab_size"])
    assert len(re.search(r'<polyline points="([^"]+)"', page)[1].split()) == len(
        sampled_ranks(used)
    )
    assert f"<td>{cli_run['tokens']:,}</td>" in page


def test_one_split_to_another_output(shards, tmp_path):
    report = run_stats(
        StatsConfig(
            shards_dir=str(shards),
            output=str(tmp_path / "s"),
            splits=(VALIDATION_SPLIT,),
            tokenizer=None,
            top_k=3,
        )
    )
    manifest = read_manifest(str(shards))
    ids, mask = _parsed(shards, [VALIDATION_SPLIT])
    assert report.json_path == str(tmp_path / "s" / "stats.json")
    assert json.loads((tmp_path / "s" / "stats.json").read_text()) == report.stats
    assert report.stats["splits"] == [VALIDATION_SPLIT]
    assert (
        report.stats["tokens"]
        == manifest.split(VALIDATION_SPLIT).totals.tokens_written
        == int(mask.sum())
    )
    assert len(report.stats["top_tokens"]) == 3


# ---------------------------------------------------------------- errors, before any pipeline


def test_bad_arguments_are_one_error_line_exit_2(shards, tmp_path, capsys):
    assert cli.main([str(tmp_path)]) == 2
    assert "No manifest.json" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        cli.main([str(shards), "--top-k", "3"])
    assert exit_.value.code == 2
    assert "did you mean '--top_k'" in capsys.readouterr().err
    with pytest.raises(StatsError, match="--top_k 0"):
        StatsConfig(shards_dir=str(shards), top_k=0)


def test_beam_flags_pass_through_and_a_stray_word_is_refused(capsys):
    parser = cli.build_parser()
    argv = ["d", "--runner", "DataflowRunner", "--top_k=5", "--temp_location=gs://b/t"]
    args, beam_args = cli.parse_args(parser, argv)
    assert (args.shards_dir, args.top_k) == ("d", 5)
    assert beam_args == ["--runner", "DataflowRunner", "--temp_location=gs://b/t"]
    with pytest.raises(SystemExit):
        cli.parse_args(parser, ["d", "e"])
    assert "unrecognized arguments: e" in capsys.readouterr().err


def test_a_tokenizer_other_than_the_shards_own_is_refused(shards, tmp_path):
    other = tmp_path / "tokenizer.json"
    data = json.loads((shards / "tokenizer" / "tokenizer.json").read_text())
    data["added_tokens"][0]["content"] = "<S>"
    other.write_text(json.dumps(data))
    with pytest.raises(TokenizerError, match="not the one the shards were made with"):
        plan_stats(StatsConfig(shards_dir=str(shards), tokenizer=str(other)))


def test_unknown_split_is_refused(tmp_path, sample_tokenizer, sample_files):
    write_sample_shards(
        tmp_path,
        sample_tokenizer,
        sample_files[:1],
        seq_len=SEQ_LEN,
        max_lines_per_file=5,
        train_shards=1,
        validation_shards=1,
    )
    plan = plan_stats(StatsConfig(shards_dir=str(tmp_path), splits=(TRAIN_SPLIT, TRAIN_SPLIT)))
    assert plan.splits == (TRAIN_SPLIT,) and plan.tokenizer is None
    manifest_path = tmp_path / "manifest.json"
    data = json.loads(manifest_path.read_text())
    del data["splits"][VALIDATION_SPLIT]
    manifest_path.write_text(json.dumps(data))
    with pytest.raises(ManifestError, match="Split 'validation' not in manifest"):
        plan_stats(StatsConfig(shards_dir=str(tmp_path), splits=(VALIDATION_SPLIT,)))


# ---------------------------------------------------------------- pure helpers


def test_parse_counts_reads_tft_count_files():
    assert parse_counts("6 351\n11 127\n\n1 0\n") == {351: 6, 127: 11, 0: 1}
    assert parse_counts("") == {}


def test_top_tokens_break_ties_by_id():
    assert top_tokens({5: 2, 3: 2, 9: 7, 1: 1}, 3) == [
        {"id": 9, "count": 7, "share": 7 / 12},
        {"id": 3, "count": 2, "share": 2 / 12},
        {"id": 5, "count": 2, "share": 2 / 12},
    ]


def test_ids_past_the_vocabulary_count_as_tokens_but_not_as_used_ids():
    """A shard set's and a token store's stats.json share these figures: both pass every counted id."""
    figures = vocabulary_figures({0: 5, 3: 2, 7: 1, 9: 4}, vocab_size=8, unk_id=3, tokenizer=None)
    assert figures == {
        "vocab_used": 3,
        "vocab_unused_fraction": 5 / 8,
        "out_of_vocab_tokens": 4,
        "unk_id": 3,
        "unk_tokens": 2,
        "unk_rate": 2 / 12,
        "byte_fallback_ids": None,
        "byte_fallback_tokens": None,
        "byte_fallback_rate": None,
    }
    assert vocabulary_figures({}, vocab_size=8, unk_id=None, tokenizer=None)["unk_rate"] is None


def test_unk_and_byte_fallback_rates_from_a_unigram_vocabulary(shards):
    """A SentencePiece-style Unigram vocabulary with byte fallback: <unk> and <0x..> pieces are counted."""
    from tokenizers import Tokenizer, decoders, models

    pieces = ["<s>", "<pad>", "</s>", "<unk>", "▁the", "<0x41>", "<0xE2>", "<0x4>", "x<0x41>"]
    tokenizer = Tokenizer(models.Unigram([(p, -1.0) for p in pieces], unk_id=3, byte_fallback=True))
    tokenizer.decoder = decoders.ByteFallback()
    assert byte_fallback_ids(tokenizer.get_vocab()) == {5, 6}
    plan = plan_stats(StatsConfig(shards_dir=str(shards), top_k=2))
    assert plan.manifest.tokenizer.special_token_ids["unk"] == 3
    counts = AnalyzerCounts(
        tokens={3: 2, 4: 93, 5: 3, 6: 2},
        record_tokens={50: 2},
        shard_records=dict.fromkeys(range(len(plan.shards)), 0) | {0: 2},
    )
    stats = corpus_stats(counts, plan=plan, tokenizer=tokenizer)
    assert stats["tokens"] == 100 and stats["records"] == 2
    assert stats["unk_tokens"] == 2 and stats["unk_rate"] == 2 / 100
    assert stats["byte_fallback_tokens"] == 5 and stats["byte_fallback_rate"] == 5 / 100
    assert stats["top_tokens"] == [
        {"id": 4, "count": 93, "share": 0.93, "token": "▁the", "text": "▁the"},
        {"id": 5, "count": 3, "share": 0.03, "token": "<0x41>", "text": "A"},
    ]
    assert stats["records_per_shard"]["min"] == 0 and stats["records_per_shard"]["max"] == 2
    assert any("tokens_written" in problem for problem in stats["manifest_mismatches"])


def test_rank_frequency_svg_is_log_log_and_sampled():
    assert sampled_ranks(5) == [1, 2, 3, 4, 5]
    ranks = sampled_ranks(50_000)
    assert ranks[0] == 1 and ranks[-1] == 50_000 and len(ranks) <= 400
    svg = rank_frequency_svg([10_000 // r for r in range(1, 1001)])
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert ">1k</text>" in svg and ">10k</text>" in svg  # decade ticks on both axes
    xs = [float(p.split(",")[0]) for p in re.search(r'points="([^"]+)"', svg)[1].split()]
    assert xs == sorted(xs) and len(xs) == len(sampled_ranks(1000))
    assert "no tokens counted" in rank_frequency_svg([])


def test_decade_labels_are_at_most_five_characters():
    exponents = (0, 1, 2, 3, 5, 6, 8, 9, 11, 12, -1)
    labels = ["1", "10", "100", "1k", "100k", "1M", "100M", "1G", "100G", "1e12", "1e-1"]
    assert [decade_label(e) for e in exponents] == labels


# A token store's stats.json as the page reads it: counts up to 10 M, so the y ticks run to "10M".
STORE_STATS = {
    "kind": "token_store",
    "shards_dir": "/data/out/tokens",
    "documents": 20_000,
    "tokens": 48_500_000,
    "tokens_per_document": {
        "mean": 2425.0,
        "min": 3,
        "max": 91_000,
        "longer_than": {"128": 19_000, "512": 12_000},
        "histogram": [],
        "longest": [
            {"file": "part-0a1b.parquet", "record": 1234, "tokens": 91_000},
            {"file": "part-9f8e.parquet", "record": 7, "tokens": 88_000},
        ],
    },
    "vocab_size": 32_000,
    "vocab_unused_fraction": 0.1,
    "unk_rate": 0.0,
    "byte_fallback_rate": None,
    "top_tokens": [{"id": 4, "count": 9_000_000, "share": 0.19}],
    "manifest_mismatches": [],
}
PLOT, Y_TICKS, Y_TITLE, X_TICKS, X_TITLE = "svg.plot", ".ytick", ".ytitle", ".xtick", ".xtitle"


@needs_chromium
@pytest.mark.slow
@pytest.mark.parametrize("width", [1400, 800])
def test_the_page_fills_the_window_and_no_tick_label_meets_an_axis_title(tmp_path, width):
    page = tmp_path / "stats.html"
    page.write_text(stats_page(STORE_STATS, [9_000_000 // r for r in range(1, 30_001)]))
    found = layout(page, width=width, selectors=[PLOT, Y_TICKS, Y_TITLE, X_TICKS, X_TITLE])
    boxes = found["boxes"]
    (plot,) = boxes[PLOT]
    assert (
        plot["right"] - plot["left"] >= found["window"] - 100
    )  # the page's margins (and a scrollbar)
    assert [t["text"] for t in boxes[Y_TICKS]] == ["100", "1k", "10k", "100k", "1M", "10M"]
    titles = boxes[Y_TITLE] + boxes[X_TITLE]
    for tick in boxes[Y_TICKS] + boxes[X_TICKS]:
        assert plot["left"] <= tick["left"] and tick["right"] <= plot["right"], tick  # not clipped
        assert not any(overlaps(tick, title) for title in titles), tick
    assert all(plot["left"] <= t["left"] for t in titles)
    shot = tmp_path / f"stats-{width}.png"
    chromium(f"--screenshot={shot}", f"--window-size={width},1200", page.as_uri())
    assert png_colors(shot.read_bytes()) > 20  # a plot, not a blank page
    # The longest documents are named by part file and row.
    assert '<td>91,000</td><td class="l"><code>part-0a1b.parquet</code></td><td>1,234</td>' in (
        page.read_text()
    )


@pytest.mark.gcs
@pytest.mark.usefixtures(
    "gcs_emulator"
)  # the DataflowRunner's staging-bucket lookup goes to the emulator
def test_dataflow_dry_run_builds_the_job_and_writes_nothing(shards, tmp_path):
    job_file = tmp_path / "job.json"
    temp = (
        tmp_path / "temp"
    )  # local: TensorFlow, which writes tft's temporary files, cannot reach the emulator
    argv = [
        str(shards),
        f"--output={tmp_path / 'out'}",
        "--runner=DataflowRunner",
        "--dry_run=True",
        "--project=lmshards-test",
        "--region=us-central1",
        f"--dataflow_job_file={job_file}",
        f"--temp_location={temp}",
    ]
    assert cli.main(argv) == 0
    transforms = json.loads(job_file.read_text())["pipeline"]["components"]["transforms"].values()
    assert {"Read", "Batch", "Decode", "Analyze", "WriteCounts"} <= {
        t["uniqueName"] for t in transforms
    }
    assert not (tmp_path / "out").exists()
    assert not temp.exists() or not any(temp.iterdir())  # the analysis directory is removed


def test_the_default_output_belongs_to_the_shard_set_for_overwrite(shards, cli_run):
    """`preprocess --overwrite` once refused 'files lmshards did not write' after a default `lmshards stats`."""
    from lmshards.plumbing.outputs import owned_entries
    from lmshards.schemas.layouts import PREPROCESS_OUTPUT

    owned, foreign = owned_entries(str(shards), kind=PREPROCESS_OUTPUT)
    assert "stats" in owned and not [f for f in foreign if f.startswith("stats")], foreign


@pytest.mark.slow
def test_stats_shows_progress_and_no_tensorflow_start_up_lines(shards, tmp_path):
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    env = {
        k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "GRPC_VERBOSITY")
    }
    proc = subprocess.run(
        [sys.executable, "-m", "lmshards", "stats", str(shards), "--output", str(tmp_path / "s")],
        cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines and all(re.match(r"^\d{4}-\d\d-\d\d ", line) for line in lines), lines
    assert "stats: loading TensorFlow and tensorflow-transform" in lines[0]
    assert any("stats: analysing" in line for line in lines)
