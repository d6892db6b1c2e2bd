"""Progress: read lines against the input total, one line per stage, counters under the names the lines use."""

from __future__ import annotations

import bz2
import logging
from pathlib import Path

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter

from lmshards.preprocess.sources import (
    ReadOptions,
    ReadRange,
    ReadStats,
    expand_inputs,
    plan_ranges,
)
from lmshards.preprocess.sources.core.ranges import TO_END
from lmshards.preprocess.stages import metrics
from lmshards.preprocess.stages.read import ReadProgress, SizedRange, progress_line, size_ranges
from lmshards.schemas.manifest import (
    InputFileInfo,
    Manifest,
    ShardInfo,
    SplitInfo,
    SplitTotals,
    TokenizerInfo,
)

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"


def messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records]


# ---------------------------------------------------------------- the lines


def test_progress_line_has_percent_rate_and_eta():
    line = progress_line(
        read_bytes=30_000_000, total_bytes=120_000_000, documents=51_200, seconds=10.0
    )
    assert line == "read 30.0 of 120.0 MB (25%), 3.00 MB/s, ETA 30 s, 51,200 documents"
    assert progress_line(read_bytes=0, total_bytes=5, documents=0, seconds=0.0).endswith(
        "0.00 MB/s, ETA unknown, 0 documents"
    )
    assert "(100%)" in progress_line(read_bytes=0, total_bytes=0, documents=0, seconds=1.0)


def test_read_progress_counts_live_ranges_as_read_and_others_when_finished(caplog):
    progress = ReadProgress(total_bytes=10_000_000, every_s=0.0)
    text = SizedRange(ReadRange("a.txt", 0, 6_000_000), input_bytes=6_000_000, live=True)
    packed = SizedRange(ReadRange("b.txt.gz", 0, TO_END), input_bytes=4_000_000, live=False)
    with caplog.at_level(logging.INFO, logger="lmshards.preprocess.stages.read"):
        progress.report(text, ReadStats(documents=3, bytes_read=2_500_000))
        progress.report(text, ReadStats(documents=9, bytes_read=6_000_000), finished=True)
        progress.report(
            packed, ReadStats(documents=2, bytes_read=9_000_000)
        )  # decompressed text, not file bytes
        progress.report(packed, ReadStats(documents=4, bytes_read=15_000_000), finished=True)
    lines = messages(caplog)
    assert [line.split(",")[0] for line in lines] == [
        "read 2.5 of 10.0 MB (25%)",
        "read 6.0 of 10.0 MB (60%)",
        "read 6.0 of 10.0 MB (60%)",
        "read 10.0 of 10.0 MB (100%)",
    ]
    assert [line.split(", ")[-1] for line in lines] == [
        "3 documents",
        "9 documents",
        "11 documents",
        "13 documents",
    ]


def test_read_progress_logs_at_most_every_interval(caplog):
    progress = ReadProgress(total_bytes=10, every_s=3600.0)
    with caplog.at_level(logging.INFO, logger="lmshards.preprocess.stages.read"):
        progress.report(
            SizedRange(ReadRange("a", 0, 10), 10, live=True),
            ReadStats(bytes_read=10),
            finished=True,
        )
    assert messages(caplog) == []


def test_stage_progress_logs_the_last_item_and_what_a_bundle_left(caplog):
    with caplog.at_level(logging.INFO, logger="lmshards.preprocess.stages.metrics"):
        shards = metrics.StageProgress("wrote", "shards", every_s=3600.0)
        for records in (10, 11, 10):
            shards.add(records, total=3)
        shards.flush()  # already logged: nothing new
        groups = metrics.StageProgress("packed", "groups", every_s=3600.0)
        groups.add(400)
        groups.add(2)
        groups.flush()
    assert messages(caplog) == ["wrote 3 of 3 shards, 31 records", "packed 2 groups, 402 records"]


def test_size_ranges_shares_sum_to_each_file(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"x" * 99 + b"\n")
    (tmp_path / "b.txt").write_bytes(b"line\n" * 7)
    (tmp_path / "c.txt.bz2").write_bytes(bz2.compress(b"one\ntwo\n" * 100))
    files = expand_inputs([str(tmp_path)])
    options = ReadOptions()
    sized = size_ranges(files, plan_ranges(files, options=options, range_bytes=30), options)
    by_file = {f.path: [s for s in sized if s.range.path == f.path] for f in files}
    for info in files:
        assert sum(s.input_bytes for s in by_file[info.path]) == info.bytes
    a, b, c = (by_file[str(tmp_path / name)] for name in ("a.txt", "b.txt", "c.txt.bz2"))
    assert [s.input_bytes for s in a] == [30, 30, 30, 10] and all(s.live for s in a + b)
    assert len(c) == 1 and not c[0].live  # compressed: one range, counted when read


def test_size_ranges_parquet_row_groups_get_equal_shares(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    pq.write_table(
        pa.table({"text": [f"document {i} " * 20 for i in range(40)]}), str(path), row_group_size=10
    )
    files = expand_inputs([str(path)])
    sized = size_ranges(
        files, plan_ranges(files, options=ReadOptions(), range_bytes=1), ReadOptions()
    )
    shares = [s.input_bytes for s in sized]
    assert len(shares) == 4 and sum(shares) == files[0].bytes and max(shares) - min(shares) <= 1
    assert not any(s.live for s in sized)


def test_finished_line():
    split = SplitInfo(
        shards=(ShardInfo("train/a", 5, 10, "x"), ShardInfo("train/b", 6, 10, "y")),
        totals=SplitTotals(records=11),
    )
    manifest = Manifest(
        tool_version="0",
        seq_len=8,
        tokenizer=TokenizerInfo("f", 10, {}, ()),
        splits={"train": split},
        inputs=(InputFileInfo("a", 3_000_000), InputFileInfo("b", 1_500_000)),
        seed=0,
        options={},
        reading={"documents": 12_345},
    )
    assert metrics.finished_line(manifest, 90.0) == (
        "preprocess finished in 1 min 30 s: read 4.5 MB (0.05 MB/s), 12,345 documents; wrote 2 shards, 11 records"
    )


# ---------------------------------------------------------------- a whole run


def test_a_run_logs_each_stage_and_counts_under_the_same_names(tmp_path, caplog):
    from lmshards.preprocess import pipeline as pipeline_module
    from lmshards.preprocess.launch import write_known_files
    from lmshards.preprocess.options import PreprocessConfig
    from lmshards.schemas.manifest import read_manifest

    output = tmp_path / "out"
    config = PreprocessConfig(
        inputs=(str(GOLDEN / "docs.jsonl"), str(GOLDEN / "corpus" / "en.txt")),
        tokenizer=str(GOLDEN / "tokenizer.json"),
        output=str(output),
        seq_len=48,
        validation_fraction=0.1,
        packing_group_tokens=500,
        shard_multiple=4,
        range_mb=0.005,
    )
    plan = pipeline_module.plan_preprocess(config)
    pipeline = beam.Pipeline(options=pipeline_module.runners.pipeline_options([]))
    with caplog.at_level(logging.INFO, logger="lmshards.preprocess"):
        pipeline_module.build_pipeline(pipeline, plan)
        write_known_files(pipeline_module.shard_set(plan))
        result = pipeline.run()
        result.wait_until_finish()
    manifest = read_manifest(str(output))
    groups = sum(plan.groups.values())
    shards = sum(len(split.shards) for split in manifest.splits.values())
    records = sum(split.totals.records for split in manifest.splits.values())
    input_bytes = sum(f.bytes for f in plan.files)

    lines = messages(caplog)
    ranges = len(
        plan_ranges(list(plan.files), options=ReadOptions(), range_bytes=int(0.005 * (1 << 20)))
    )
    assert f"input: {input_bytes / 1e6:.1f} MB in 2 files, {ranges} read ranges" in lines
    assert lines[-2:] == [
        f"packed {groups} groups, {records} records",
        f"wrote {shards} of {shards} shards, {records} records",
    ]

    counters = {
        c.key.metric.name: c.committed
        for c in result.metrics().query(MetricsFilter().with_namespace(metrics.METRICS_NAMESPACE))[
            "counters"
        ]
    }
    assert {
        name: counters[name]
        for name in (
            "input_bytes_read",
            "bytes_read",
            "documents_read",
            "groups_packed",
            "shards_written",
            "records_written",
        )
    } == {
        "input_bytes_read": input_bytes,
        "bytes_read": manifest.reading["bytes_read"],
        "documents_read": manifest.reading["documents"],
        "groups_packed": groups,
        "shards_written": shards,
        "records_written": records,
    }
