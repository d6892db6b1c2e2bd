"""--curate_sample (lmshards/preprocess/curation/sample.py): a sample from every file, judged, and
what each step would remove with examples."""

from __future__ import annotations

from lmshards.preprocess.cli import main as preprocess_main
from lmshards.preprocess.curation.sample import curate_sample, sample_documents
from lmshards.preprocess.curation.steps import select_steps
from lmshards.preprocess.sources import ReadOptions, discover_inputs
from tests.helpers.curation_steps import registered


def _files(tmp_path):
    (tmp_path / "a.txt").write_text(
        "one\n\ntwo words here\nthree\nfour five six\n", encoding="utf-8"
    )
    (tmp_path / "b.txt").write_text("x y z\nw\n", encoding="utf-8")
    return discover_inputs([str(tmp_path / "*.txt")]).files


def test_the_sample_takes_the_first_documents_of_every_file(tmp_path):
    docs = sample_documents(_files(tmp_path), ReadOptions(), 4)
    assert [(d.source.rsplit("/", 1)[1], d.index, d.record, d.text) for d in docs] == [
        ("a.txt", 0, 0, "one"),
        ("a.txt", 1, 2, "two words here"),
        ("b.txt", 0, 0, "x y z"),
        ("b.txt", 1, 1, "w"),
    ]
    assert len(sample_documents(_files(tmp_path), ReadOptions(), 3)) == 3


def test_each_step_says_what_it_would_remove_with_examples(tmp_path, monkeypatch):
    registered(monkeypatch)
    steps = select_steps(quality=("short",), values={"min_words": 2}, switches={"dedup": True})
    lines = curate_sample(steps, _files(tmp_path), ReadOptions(), 4)
    a = str(tmp_path / "a.txt")
    assert lines == [
        "curation sample: 4 documents, the first of each of 2 input files",
        "  short: 4 in, would remove 2 (50.0%; 4 bytes)",
        "    too_few_words: 2 (50.0%, 4 bytes)",
        f"      {a}:0: words 1 < 2: 'one'",
        f"      {tmp_path / 'b.txt'}:1: words 1 < 2: 'w'",
        "    counted: long 2",
        "  dedup: not sampled (it compares documents across the corpus)",
    ]


def test_the_command_prints_the_sample_and_writes_nothing(tmp_path, monkeypatch, capsys):
    registered(monkeypatch)
    _files(tmp_path)
    out = tmp_path / "out"
    code = preprocess_main(
        [
            f"--input={tmp_path / '*.txt'}",
            "--tokenizer=unused",
            f"--output={out}",
            "--quality_filters=short",
            "--curate_sample=2",
        ]
    )
    assert code == 0 and not out.exists()
    assert "short: 2 in, would remove 1 (50.0%; 3 bytes)" in capsys.readouterr().out
    assert (
        preprocess_main(
            [f"--input={tmp_path}", "--tokenizer=t", f"--output={out}", "--curate_sample=2"]
        )
        == 2
    )
    assert "--curate_sample is ignored without a document step" in capsys.readouterr().err
