"""Parquet: row-group ranges, string and binary columns, and columns that cannot be read."""

from __future__ import annotations

import gzip

import pytest

from lmshards.preprocess.sources import (
    InputError,
    ReadOptions,
    ReadRange,
    ReadStats,
    expand_inputs,
    iter_documents,
    plan_ranges,
)
from tests.helpers.text_corpus import read_in_ranges, write, write_parquet


def test_parquet_ranges_are_row_groups(tmp_path):
    texts = [f"document {i} \u00e9" for i in range(7)] + [None, "", "nul\x00"]
    path = write_parquet(
        tmp_path / "a.parquet", {"body": texts, "n": list(range(10))}, row_group_size=4
    )
    options = ReadOptions(text_column="body")
    files = expand_inputs([str(path)])
    assert plan_ranges(files, options=options, range_bytes=1) == [
        ReadRange(str(path), 0, 1),
        ReadRange(str(path), 1, 2),
        ReadRange(str(path), 2, -1),
    ]
    assert plan_ranges(files, options=options) == [ReadRange(str(path), 0, -1)]
    expected = texts[:7] + ["nul"]
    for range_bytes in (1, 10**9):
        docs, stats = read_in_ranges(path, options, range_bytes)
        assert docs == expected
        assert stats == ReadStats(
            documents=8,
            documents_empty=2,
            documents_nul=1,
            bytes_read=sum(len(t.encode()) for t in texts if t),
        )


def test_parquet_binary_column_and_bad_columns(tmp_path):
    path = write_parquet(
        tmp_path / "b.parquet", {"text": [b"ok", b"bad \xff"], "n": [1, 2]}, row_group_size=10
    )
    stats = ReadStats()
    assert list(iter_documents([str(path)], ReadOptions(), stats)) == ["ok", "bad \ufffd"]
    assert stats.documents_invalid_utf8 == 1
    files = expand_inputs([str(path)])
    with pytest.raises(InputError, match=r"no column 'body'.*\['text', 'n'\]"):
        plan_ranges(files, options=ReadOptions(text_column="body"))
    with pytest.raises(InputError, match="column 'n' holds int64"):
        plan_ranges(files, options=ReadOptions(text_column="n"))
    broken = write(tmp_path / "c.parquet", b"not parquet at all")
    with pytest.raises(InputError, match="c.parquet.*not a readable Parquet"):
        plan_ranges(expand_inputs([str(broken)]), options=ReadOptions())


@pytest.mark.parametrize("data", [b"", gzip.compress(b"PAR1")])
def test_compressed_parquet_is_refused_even_when_empty(tmp_path, data):
    path = write(tmp_path / "a.parquet.gz", data)
    with pytest.raises(
        InputError, match="a.parquet.gz.*compressed Parquet files are not supported"
    ):
        plan_ranges(expand_inputs([str(path)]), options=ReadOptions())


def test_empty_parquet_files_are_counted(tmp_path):
    empty = write(tmp_path / "a.parquet", b"")
    import pyarrow as pa

    no_rows = write_parquet(
        tmp_path / "b.parquet", {"text": pa.array([], pa.string())}, row_group_size=10
    )
    stats = ReadStats()
    assert list(iter_documents([str(empty), str(no_rows)], ReadOptions(), stats)) == []
    assert stats == ReadStats(files_empty=2)
