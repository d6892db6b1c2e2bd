"""`lmshards dataset export`: local datasets -> Parquet/JSONL shards that the preprocess reader reads back."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from lmshards.command.cli import main as lmshards_main
from lmshards.corpus_tools.dataset import export as de
from lmshards.plumbing import fs
from lmshards.preprocess import sources

ROWS = 1037  # not a multiple of any shard count used here


def _texts() -> list[str]:
    # Multilingual, with newlines, quotes and a duplicate, so that exactly-once is a real check.
    base = [f'row {i}: Привет, мир 学而时习之 "quoted" line' for i in range(ROWS - 2)]
    return base + ["two\nlines", base[0]]


@pytest.fixture(scope="module")
def saved_dataset(tmp_path_factory) -> tuple[Path, list[str]]:
    """A save_to_disk directory with a text column, an int column and a None text."""
    import datasets

    texts = _texts()
    column = texts + [None]
    ds = datasets.Dataset.from_dict({"content": column, "label": list(range(len(column)))})
    path = tmp_path_factory.mktemp("saved") / "ds"
    ds.save_to_disk(str(path))
    return path, texts


def _read_shard(path: str, fmt: str, column: str = "text") -> list[str]:
    if fmt == de.PARQUET:
        with fs.open_file(path, "rb") as f:
            table = pq.read_table(f)
        assert table.column_names == [column]
        return table.column(column).to_pylist()
    return [json.loads(line)[column] for line in fs.read_text(path).splitlines()]


@pytest.mark.parametrize("fmt", de.FORMATS)
@pytest.mark.parametrize("streaming", [False, True])
def test_export_every_row_exactly_once(saved_dataset, tmp_path, fmt, streaming):
    source, texts = saved_dataset
    out = tmp_path / "out"
    config = de.ExportConfig(
        dataset=str(source),
        output=str(out),
        text_column="content",
        num_shards=4,
        format=fmt,
        streaming=streaming,
    )
    summary = de.export(config)
    names = [de.shard_name("train", i, 4, fmt) for i in range(4)]
    assert sorted(p.name for p in out.iterdir()) == sorted(names + [de.EXPORT_SUCCESS_JSON])
    shards = [_read_shard(str(out / name), fmt) for name in names]
    assert Counter(t for shard in shards for t in shard) == Counter(texts)
    assert [s["rows"] for s in summary["shards"]] == [len(s) for s in shards]
    assert summary["rows_read"] == len(texts) + 1 and summary["rows_without_text"] == 1
    # Balanced within a row, the row without text aside.
    assert max(map(len, shards)) - min(map(len, shards)) <= 1 + summary["rows_without_text"]
    if streaming:  # dealt round-robin
        assert shards[1][0] == texts[1]
    else:  # contiguous runs in dataset order
        assert [t for shard in shards for t in shard] == texts
    assert de.read_summary(str(out)) == summary


def test_preprocess_reader_reads_the_export(saved_dataset, tmp_path):
    source, texts = saved_dataset
    for fmt in de.FORMATS:
        de.export(
            de.ExportConfig(
                dataset=str(source),
                output=str(tmp_path / fmt),
                text_column="content",
                num_shards=3,
                format=fmt,
            )
        )
    options = sources.ReadOptions(text_field="text", text_column="text")
    # The directory as input: _SUCCESS.json is skipped as a hidden name.
    for fmt in de.FORMATS:
        docs = list(sources.iter_documents([str(tmp_path / fmt)], options))
        assert docs == texts


def test_cli_exports_json_files_with_a_builder(tmp_path, capsys):
    data = tmp_path / "data.jsonl"
    rows = [{"body": f"document {i}", "id": i} for i in range(50)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    code = lmshards_main(
        [
            "dataset",
            "export",
            "json",
            "--data_files",
            str(data),
            "--text_column",
            "body",
            "--output",
            str(out),
            "--num_shards",
            "2",
            "--format",
            "jsonl",
            "--output_column",
            "txt",
        ]
    )
    assert code == 0
    assert "Wrote 50 rows" in capsys.readouterr().out
    shards = [
        _read_shard(str(out / de.shard_name("train", i, 2, "jsonl")), "jsonl", "txt")
        for i in range(2)
    ]
    assert shards == [
        [f"document {i}" for i in range(25)],
        [f"document {i}" for i in range(25, 50)],
    ]


def test_existing_output_needs_overwrite(saved_dataset, tmp_path, capsys):
    source, texts = saved_dataset
    out = tmp_path / "out"
    args = ["dataset", "export", str(source), "--text_column", "content", "--output", str(out)]
    assert lmshards_main(args + ["--num_shards", "3"]) == 0
    capsys.readouterr()
    assert lmshards_main(args) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith("lmshards dataset export: error: --output")
    assert "is not empty" in err and "--overwrite" in err
    assert lmshards_main(args + ["--overwrite"]) == 0
    # No shard of the 3-shard export is left beside the new single shard.
    assert sorted(p.name for p in out.iterdir()) == [
        de.EXPORT_SUCCESS_JSON,
        de.shard_name("train", 0, 1, "parquet"),
    ]


def test_a_failed_export_leaves_no_shard(saved_dataset, tmp_path, monkeypatch):
    """Local shards are written under temporary names: an error midway leaves neither shards nor temporaries."""
    source, _ = saved_dataset

    def failing_batches(dataset, column):
        yield ["a row"] * 10
        raise OSError("disk full")

    monkeypatch.setattr(de, "iter_text_batches", failing_batches)
    out = tmp_path / "out"
    with pytest.raises(OSError, match="disk full"):
        de.export(
            de.ExportConfig(
                dataset=str(source), output=str(out), text_column="content", num_shards=2
            )
        )
    assert list(out.iterdir()) == []


@pytest.mark.parametrize(
    "args, message",
    [
        (["--text_column", "missing"], "has no column 'missing'"),
        (["--text_column", "label"], "not text"),
        (["--num_shards", "0"], "argument --num_shards: '0' is not a whole number in [1, 10000]"),
    ],
)
def test_bad_options_are_clear_errors(saved_dataset, tmp_path, capsys, args, message):
    source, _ = saved_dataset
    try:
        code = lmshards_main(
            ["dataset", "export", str(source), "--output", str(tmp_path / "out"), *args]
        )
    except SystemExit as exited:  # a value out of its flag's range is argparse's error
        code = exited.code
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out" / de.EXPORT_SUCCESS_JSON).exists()


def test_hub_name_without_network_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code = lmshards_main(
        ["dataset", "export", "someone/some-corpus", "--output", str(tmp_path / "out")]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "Cannot reach the Hugging Face Hub" in err and "--data_files" in err


@pytest.mark.gcs
def test_export_to_gcs(saved_dataset, gcs_emulator):
    source, texts = saved_dataset
    output = f"{gcs_emulator}/exports/ds"
    summary = de.export(
        de.ExportConfig(
            dataset=str(source),
            output=output,
            text_column="content",
            num_shards=2,
            format=de.JSONL,
            streaming=True,
        )
    )
    names = [de.shard_name("train", i, 2, "jsonl") for i in range(2)]
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.listdir(output)) == sorted(
        names + [de.EXPORT_SUCCESS_JSON]
    )
    got = [t for name in names for t in _read_shard(fs.join(output, name), "jsonl")]
    assert Counter(got) == Counter(texts)
    assert de.read_summary(output)["rows_written"] == summary["rows_written"] == len(texts)
