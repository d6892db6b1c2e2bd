"""ReadDocuments on a real Beam runner: every document of every format exactly once, stats as data and counters."""

from __future__ import annotations

import bz2
import gzip
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from lmshards.preprocess.sources import InputError, ReadOptions, ReadStats, expand_inputs
from lmshards.preprocess.stages.metrics import METRICS_NAMESPACE
from lmshards.preprocess.stages.read import COUNTERS, INPUT_BYTES_COUNTER
from lmshards.preprocess.transforms.read import ReadDocuments

LINES = (
    b"\xef\xbb\xbf" + b"alpha one\r\n\r\nbeta \xff two\r\ngamma\x00 three\n   \ndelta four\n" * 3
)
PARAGRAPHS = b"p1 line a\np1 line b\n\n\np2 only\n \t\np3 first\r\np3 second\r\n\r\np4\n\n" * 3


def write_corpus(tmp_path: Path, text: bytes) -> list[Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "a.txt").write_bytes(text)
    (tmp_path / "b.txt.gz").write_bytes(gzip.compress(text))
    (tmp_path / "c.txt.bz2").write_bytes(bz2.compress(text))
    (tmp_path / "d.jsonl").write_bytes(b'{"text": "json one"}\n{"text": \n{"text": "json two"}\n')
    pq.write_table(
        pa.table({"text": ["pq one", "pq two", None, "pq three"]}),
        str(tmp_path / "e.parquet"),
        row_group_size=2,
    )
    return sorted(tmp_path.iterdir())


def run_read(
    files,
    options: ReadOptions,
    *,
    range_bytes: int,
    batch_size: int,
    expected_docs,
    expected_stats,
    input_bytes: int,
):
    pipeline = test_pipeline.TestPipeline(runner="FnApiRunner")
    out = pipeline | ReadDocuments(files, options, range_bytes=range_bytes, batch_size=batch_size)
    assert_that(
        out.documents | "Flatten" >> beam.FlatMap(lambda batch: batch), equal_to(expected_docs)
    )
    assert_that(
        out.documents | "Sizes" >> beam.Map(len),
        lambda sizes: _check(all(1 <= s <= batch_size for s in sizes), sizes),
        label="BatchSizes",
    )
    assert_that(out.stats, equal_to([expected_stats]), label="Stats")
    result = pipeline.run()
    result.wait_until_finish()
    counters = {
        c.key.metric.name: c.committed
        for c in result.metrics().query(MetricsFilter().with_namespace(METRICS_NAMESPACE))[
            "counters"
        ]
    }
    assert {name: counters.get(name, 0) for name in COUNTERS.values()} == {
        COUNTERS[field]: value for field, value in expected_stats.as_dict().items()
    }
    assert (
        counters[INPUT_BYTES_COUNTER] == input_bytes
    )  # the files' sizes, however they were ranged


def _check(ok: bool, what) -> None:
    if not ok:
        raise AssertionError(what)


def text_size(paths) -> int:
    return sum(
        len(gzip.decompress(p.read_bytes()))
        if p.suffix == ".gz"
        else len(bz2.decompress(p.read_bytes()))
        if p.suffix == ".bz2"
        else p.stat().st_size
        for p in paths
        if p.suffix != ".parquet"
    )


def test_read_documents_line_separated(tmp_path):
    files = write_corpus(tmp_path, LINES)
    per_text_file = ["alpha one", "beta \ufffd two", "gamma three", "delta four"] * 3
    expected = per_text_file * 3 + ["json one", "json two", "pq one", "pq two", "pq three"]
    stats = ReadStats(
        documents=len(expected),
        documents_empty=3 * 3 * 2 + 1,
        documents_invalid_utf8=9,
        documents_nul=9,
        documents_invalid_json=1,
        bytes_read=text_size(files) + len("pq onepq twopq three"),
    )
    run_read(
        expand_inputs([str(tmp_path)]),
        ReadOptions(),
        range_bytes=37,
        batch_size=5,
        expected_docs=expected,
        expected_stats=stats,
        input_bytes=sum(p.stat().st_size for p in files),
    )


def test_read_documents_blank_line_separated_from_a_glob(tmp_path):
    files = write_corpus(tmp_path, PARAGRAPHS)
    per_text_file = ["p1 line a\np1 line b", "p2 only", "p3 first\np3 second", "p4"] * 3
    expected = per_text_file * 3 + ["json one", "json two", "pq one", "pq two", "pq three"]
    stats = ReadStats(
        documents=len(expected),
        documents_empty=1,
        documents_invalid_json=1,
        bytes_read=text_size(files) + len("pq onepq twopq three"),
    )
    run_read(
        [str(tmp_path / "*")],
        ReadOptions(doc_separator="blank_line"),
        range_bytes=16,
        batch_size=512,
        expected_docs=expected,
        expected_stats=stats,
        input_bytes=sum(p.stat().st_size for p in files),
    )


def test_read_documents_checks_inputs_while_building(tmp_path):
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 but not really")
    with pytest.raises(InputError, match="bad.parquet"):
        ReadDocuments([str(tmp_path / "bad.parquet")], ReadOptions())
    with pytest.raises(InputError, match="matches no file"):
        ReadDocuments([str(tmp_path / "*.txt")], ReadOptions())


def check_numbered(files, options: ReadOptions, range_bytes: int, expected) -> None:
    """Checks the (file name, document index, record, text) of every document of a numbered read."""
    from lmshards.preprocess.curation.stage import NumberDocuments

    with test_pipeline.TestPipeline(runner="FnApiRunner") as p:
        docs = (
            p
            | ReadDocuments(files, options, range_bytes=range_bytes, batch_size=2, numbered=True)
            | NumberDocuments()
            | beam.Map(lambda d: (Path(d.source).name, d.index, d.record, d.text))
        )
        assert_that(docs, equal_to(expected))


def _line_records(raw: bytes) -> list[tuple[int, str]]:
    """(0-based line, document) of each line that gives one: every line counts, empty ones too."""
    lines = raw.removeprefix(b"\xef\xbb\xbf").split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    texts = [
        line.removesuffix(b"\r").decode("utf-8", "replace").replace("\x00", "") for line in lines
    ]
    return [(i, t) for i, t in enumerate(texts) if t.strip()]


@pytest.mark.parametrize("range_bytes", [5, 40, 1 << 20])
def test_numbered_read_gives_each_document_its_raw_line_or_row_whatever_the_ranges(
    tmp_path, range_bytes
):
    files = [str(f) for f in write_corpus(tmp_path, LINES)]
    expected = []
    for name in ("a.txt", "b.txt.gz", "c.txt.bz2"):
        records = _line_records(LINES)
        expected += [(name, index, line, text) for index, (line, text) in enumerate(records)]
    # JSON Lines: line 1 is not JSON (skipped) but counts; Parquet: row 2 is null (empty) but counts.
    expected += [("d.jsonl", 0, 0, "json one"), ("d.jsonl", 1, 2, "json two")]
    expected += [("e.parquet", 0, 0, "pq one"), ("e.parquet", 1, 1, "pq two")]
    expected += [("e.parquet", 2, 3, "pq three")]
    check_numbered(files, ReadOptions(), range_bytes, expected)


@pytest.mark.parametrize("range_bytes", [3, 1 << 20])
def test_numbered_pieces_of_a_split_line_share_its_record_and_blank_line_documents_count_as_read(
    tmp_path, range_bytes
):
    lines = tmp_path / "lines.txt"
    lines.write_bytes(b"short\n\n" + b"x" * 25 + b"\nend\n")
    options = ReadOptions(max_document_chars=10)
    pieces = [(1, "x" * 10), (2, "x" * 10), (3, "x" * 5)]  # each piece its own index
    check_numbered(
        [str(lines)],
        options,
        range_bytes,
        [("lines.txt", 0, 0, "short")]
        + [("lines.txt", index, 2, text) for index, text in pieces]
        + [("lines.txt", 4, 3, "end")],
    )
    paragraphs = tmp_path / "p.txt"
    paragraphs.write_bytes(PARAGRAPHS)
    texts = ["p1 line a\np1 line b", "p2 only", "p3 first\np3 second", "p4"] * 3
    check_numbered(
        [str(paragraphs)],
        ReadOptions(doc_separator="blank_line"),
        range_bytes,
        [("p.txt", i, i, text) for i, text in enumerate(texts)],
    )


def test_a_range_that_gives_other_documents_when_read_again_stops_the_run(tmp_path):
    from lmshards.preprocess.stages.read import RangePlace, numbered_batches, plan_sized_ranges

    path = tmp_path / "docs.txt"
    path.write_text("one\ntwo\nthree\n", encoding="utf-8")
    _, (sized,) = plan_sized_ranges([str(path)], ReadOptions(), range_bytes=1 << 20)
    place = RangePlace(first_document=10, first_record=20, documents=3)
    (batch,) = numbered_batches(sized, place, ReadOptions(), batch_size=8)
    assert (batch.first, batch.records, batch.texts) == (10, [20, 21, 22], ["one", "two", "three"])
    with pytest.raises(
        InputError, match=r"docs\.txt.* 3 documents when read again and 4 .*changed"
    ):
        list(numbered_batches(sized, RangePlace(0, 0, 4), ReadOptions(), batch_size=8))
