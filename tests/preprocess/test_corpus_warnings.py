"""Preprocess warns, naming the fix, when the corpus as read looks off."""

from __future__ import annotations

import dataclasses

from lmshards.preprocess.cli import main
from lmshards.preprocess.corpus_warnings import corpus_warnings
from lmshards.preprocess.options import PreprocessConfig
from lmshards.schemas.manifest import Manifest, SplitInfo, SplitTotals, TokenizerInfo

CONFIG = PreprocessConfig(inputs=("in.txt",), tokenizer="tok.json", output="out")


def _manifest(*, documents: int, empty: int, bytes_read: int, validation_records: int) -> Manifest:
    def split(records: int) -> SplitInfo:
        return SplitInfo(shards=(), totals=SplitTotals(records=records))

    return Manifest(
        tool_version="0.1.0",
        seq_len=16,
        tokenizer=TokenizerInfo(
            fingerprint="sha256:00", vocab_size=100, special_token_ids={}, all_special_ids=()
        ),
        splits={"train": split(1000), "validation": split(validation_records)},
        inputs=(),
        seed=0,
        options={},
        reading={"documents": documents, "documents_empty": empty, "bytes_read": bytes_read},
    )


def test_a_well_shaped_corpus_gives_no_warning():
    manifest = _manifest(documents=1000, empty=50, bytes_read=500_000, validation_records=64)
    assert corpus_warnings(manifest, CONFIG) == []


def test_hard_wrapped_books_read_line_by_line_get_both_corpus_warnings():
    # The bundled books with --doc_separator line: 59,757 documents, 21,353 of them empty.
    manifest = _manifest(
        documents=38_404, empty=21_353, bytes_read=2_600_000, validation_records=64
    )
    empty, wrapped = corpus_warnings(manifest, CONFIG)
    assert empty.startswith("21,353 of 59,757 documents (36%) are empty (skipped)")
    assert wrapped.startswith("documents average 68 bytes: most are one short line")
    assert empty.endswith("pass --doc_separator blank_line.") and wrapped.endswith(
        "pass --doc_separator blank_line."
    )
    blank_line = dataclasses.replace(CONFIG, doc_separator="blank_line")
    marker = dataclasses.replace(CONFIG, doc_marker="%")
    for config in (blank_line, marker):
        assert corpus_warnings(manifest, config) == [
            "21,353 of 59,757 documents (36%) are empty (skipped); check --doc_separator "
            "(or --doc_marker) and the input files."
        ]


def test_a_validation_split_below_one_default_batch_is_named():
    manifest = _manifest(documents=1000, empty=0, bytes_read=500_000, validation_records=5)
    (warning,) = corpus_warnings(manifest, CONFIG)
    assert warning.startswith("the validation split has 5 records, fewer than one training batch")
    assert "raise --validation_fraction (now 0.005)" in warning
    no_validation = dataclasses.replace(CONFIG, validation_fraction=0.0)
    assert corpus_warnings(manifest, no_validation) == []


def test_the_command_logs_the_warnings_on_stderr(tmp_path, sample_tokenizer, capsys):
    paragraph = "\n".join(["It is a truth universally acknowledged, that a single man"] * 3)
    corpus = tmp_path / "book.txt"
    corpus.write_text("\n\n\n".join([paragraph] * 100))
    argv = ["--input", str(corpus), "--tokenizer", str(sample_tokenizer), "--output"]
    argv += [str(tmp_path / "out"), "--seq_len", "16", "--tokenizer_threads", "1"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "WARNING lmshards.preprocess.cli: 198 of 498 documents (40%) are empty" in captured.err
    assert "most are one short line" in captured.err
    assert "the validation split has" in captured.err
    assert "WARNING" not in captured.out
