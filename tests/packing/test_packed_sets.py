"""`--packing best_fit` end to end: the records, the manifest and schema that say so, determinism, refusals."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from lmshards.command.cli import main as lmshards_main
from lmshards.plumbing.errors import ManifestError
from lmshards.preprocess.options import PreprocessConfig, PreprocessError
from lmshards.preprocess.plan import check_packing_options
from lmshards.preprocess.repack import RepackConfig, run_repack
from lmshards.preprocess.stages.encode import encode_documents
from lmshards.schemas.constants import PACKED_MANIFEST_FORMAT_VERSION
from lmshards.schemas.manifest import (
    check_packed_positions,
    continued_positions,
    read_manifest,
    require_concatenated,
)
from lmshards.schemas.records import decode_examples, read_records
from lmshards.schemas.tfmd import read_schema

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
IN_PROCESS = ["--direct_running_mode=in_memory"]
PACKED = ["--packing", "best_fit", "--seq_len", "64", "--validation_fraction", "0.2"]


def _preprocess(output: Path, *flags: str) -> int:
    argv = ["preprocess", "--input", str(GOLDEN / "corpus" / "*.txt")]
    argv += ["--tokenizer", str(GOLDEN / "tokenizer.json"), "--output", str(output)]
    return lmshards_main([*argv, "--packing_group_tokens", "2000", *flags])


def _shards(output: Path) -> dict[str, str]:
    return {
        p.relative_to(output).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(output.glob("*/*.tfrecord"))
    }


@pytest.fixture(scope="module")
def packed_set(tmp_path_factory) -> Path:
    output = tmp_path_factory.mktemp("packed") / "out"
    assert _preprocess(output, *PACKED, *IN_PROCESS, "--keep_tokens") == 0
    return output


def _records(output: Path, split: str) -> dict[str, np.ndarray]:
    names = ("input_ids", "attention_mask", "segment_ids", "positions")
    records = [
        r for p in sorted((output / split).glob("*.tfrecord")) for r in read_records(p.open("rb"))
    ]
    return decode_examples(records, names)


def test_a_packed_set_holds_every_document_whole_in_segments_and_says_so(packed_set):
    from tokenizers import Tokenizer

    manifest = read_manifest(str(packed_set))
    assert (
        manifest.packing == "best_fit" and manifest.format_version == PACKED_MANIFEST_FORMAT_VERSION
    )
    assert list(manifest.features()) == ["input_ids", "attention_mask", "segment_ids", "positions"]
    assert manifest.options["packing"] == "best_fit" and manifest.options["remainder"] == "pad"
    schema = {f.name: f for f in read_schema(str(packed_set)).feature}
    assert sorted(schema) == ["attention_mask", "input_ids", "positions", "segment_ids"]
    assert schema["segment_ids"].int_domain.max == 64 and schema["positions"].int_domain.max == 63
    raw = json.loads((packed_set / "manifest.json").read_text())
    assert raw["format_version"] == 4 and raw["packing"] == "best_fit"

    # Every text of the corpus comes back as one segment or, when longer than a block, as its
    # block-sized pieces: each segment's positions run 0, 1, ..., below seq_len.
    tokenizer = Tokenizer.from_file(str(GOLDEN / "tokenizer.json"))
    texts = [
        line
        for p in sorted((GOLDEN / "corpus").glob("*.txt"))
        for line in p.read_text().splitlines()
        if line
    ]
    chunk = encode_documents(tokenizer, texts)
    starts = np.cumsum(chunk.lengths) - chunk.lengths
    expected = sorted(
        tuple(chunk.tokens[s + i : s + min(n, i + 64)].tolist())
        for s, n in zip(starts.tolist(), chunk.lengths.tolist())
        for i in range(0, n, 64)
    )
    found = []
    for split in ("train", "validation"):
        f = _records(packed_set, split)
        totals = manifest.split(split).totals
        assert totals.padding_tokens == int((f["segment_ids"] == 0).sum())
        assert totals.segments == sum(int(row.max()) for row in f["segment_ids"])
        assert (f["attention_mask"] == (f["segment_ids"] > 0)).all()
        for ids, segments, positions in zip(f["input_ids"], f["segment_ids"], f["positions"]):
            for segment in range(1, int(segments.max()) + 1):
                where = segments == segment
                assert positions[where].tolist() == list(range(int(where.sum())))
                found.append(tuple(ids[where].tolist()))
    assert sorted(found) == expected
    assert sum(s.totals.documents_split for s in manifest.splits.values()) == int(
        (chunk.lengths > 64).sum()
    )
    documents = sum(s.totals.documents for s in manifest.splits.values())
    assert documents == len(texts)
    assert all(s.totals.tokens_dropped == 0 for s in manifest.splits.values())


def test_best_fit_pads_far_less_than_one_document_per_block(packed_set):
    """The golden corpus' documents average 47 tokens: one per block of 64 pads 14k tokens; two rarely
    fit one block, so best fit saves about half of that here (far more on corpora of varied lengths)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(GOLDEN / "tokenizer.json"))
    texts = [
        line
        for p in sorted((GOLDEN / "corpus").glob("*.txt"))
        for line in p.read_text().splitlines()
        if line
    ]
    lengths = encode_documents(tokenizer, texts).lengths
    one_per_block = int((-lengths % 64).sum())
    manifest = read_manifest(str(packed_set))
    padding = sum(s.totals.padding_tokens for s in manifest.splits.values())
    assert padding < 0.6 * one_per_block
    assert manifest.split("train").totals.segments_per_block > 1.1


def test_best_fit_writes_the_same_bytes_on_other_runners_and_from_a_token_store(
    packed_set, tmp_path
):
    workers = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
    assert _preprocess(tmp_path / "mp", *PACKED, *workers, "--range_mb", "0.005") == 0
    assert _shards(tmp_path / "mp") == _shards(packed_set)
    run_repack(
        RepackConfig(tokens=str(packed_set), output=str(tmp_path / "repacked"), seed=0), IN_PROCESS
    )
    assert _shards(tmp_path / "repacked") == _shards(packed_set)


def test_a_concat_store_repacks_into_a_packed_set(tmp_path):
    assert _preprocess(tmp_path / "concat", "--seq_len", "64", *IN_PROCESS, "--keep_tokens") == 0
    assert (
        _preprocess(tmp_path / "text", "--seq_len", "64", "--packing", "best_fit", *IN_PROCESS) == 0
    )
    manifest = run_repack(
        RepackConfig(
            tokens=str(tmp_path / "concat"), output=str(tmp_path / "re"), packing="best_fit"
        ),
        IN_PROCESS,
    )
    assert manifest.packing == "best_fit" and manifest.options["remainder"] == "pad"
    assert _shards(tmp_path / "re") == _shards(tmp_path / "text")


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--packing", "best_fit", "--remainder", "drop"],
            "--packing best_fit cannot honour --remainder drop",
        ),
        (["--packing", "first_fit"], "argument --packing: invalid choice: 'first_fit'"),
    ],
)
def test_bad_packing_flags_are_refused_in_one_line_before_any_work(
    tmp_path, capsys, flags, message
):
    try:
        code = _preprocess(tmp_path / "out", *flags)
    except SystemExit as e:  # a usage error, from the parser
        code = e.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_best_fit_needs_a_pad_token():
    config = PreprocessConfig(
        inputs=("x",), tokenizer="tok.json", output="out", packing="best_fit", remainder="pad"
    )
    with pytest.raises(PreprocessError, match="--packing best_fit pads blocks with the pad token"):
        check_packing_options(config, model_max_length=None, pad_id=None)


def test_inspect_reports_padding_share_segments_and_split_documents(packed_set, capsys):
    assert lmshards_main(["inspect", str(packed_set)]) == 0
    out = capsys.readouterr().out
    totals = read_manifest(str(packed_set)).split("train").totals
    share = totals.padding_tokens / (totals.records * 64)
    assert f"padding {totals.padding_tokens:,} ({share:.2%})" in out
    assert (
        f"best_fit: {totals.segments:,} segments, {totals.segments / totals.records:.2f} per block; "
        f"{totals.documents_split:,} documents longer than a block" in out
    )
    assert "features input_ids, attention_mask, segment_ids, positions" in out
    assert "lmshards.manifest v4" in out


@pytest.mark.parametrize("readable", [(1, 2), (1, 2, 3)])
def test_an_older_reader_refuses_a_packed_set(packed_set, monkeypatch, readable):
    """What an older lmshards does with a packed set: it stops, naming the version, never trains across
    documents (versions 1 and 2) nor on positions it numbered otherwise (version 3)."""
    import lmshards.schemas.manifest

    monkeypatch.setattr(lmshards.schemas.manifest, "READABLE_MANIFEST_VERSIONS", readable)
    with pytest.raises(
        ManifestError,
        match=rf"Manifest format version 4 is not supported by this version \(reads \{list(readable)}\)",
    ):
        read_manifest(str(packed_set))


def test_packing_and_format_version_must_agree(packed_set, tmp_path):
    data = json.loads((packed_set / "manifest.json").read_text())
    (tmp_path / "manifest.json").write_text(json.dumps({**data, "format_version": 2}))
    with pytest.raises(
        ManifestError, match="packed sets, and only they, are format version 3 or 4"
    ):
        read_manifest(str(tmp_path))


def test_a_reader_of_concatenated_records_only_refuses_a_packed_set_saying_what_it_needs(
    packed_set,
):
    manifest = read_manifest(str(packed_set))
    with pytest.raises(ManifestError) as e:
        require_concatenated(
            manifest, str(packed_set), reader="this reader", fix="use a concat set."
        )
    assert str(e.value) == (
        f"{str(packed_set)!r} is a best_fit packed set (manifest format_version 4: its records need "
        "['input_ids', 'attention_mask', 'segment_ids', 'positions'], attention within each segment), which "
        "this reader cannot honour; use a concat set."
    )


def test_only_a_version_3_set_that_cut_a_document_has_the_old_positions(packed_set):
    manifest = read_manifest(str(packed_set))
    assert sum(s.totals.documents_split for s in manifest.splits.values()) > 0
    old = dataclasses.replace(manifest, format_version=3)
    uncut = dataclasses.replace(
        old,
        splits={
            name: dataclasses.replace(
                split, totals=dataclasses.replace(split.totals, documents_split=0)
            )
            for name, split in old.splits.items()
        },
    )
    assert [continued_positions(m) for m in (manifest, old, uncut)] == [False, True, False]
    check_packed_positions(uncut, str(packed_set))
    with pytest.raises(ManifestError, match="run `lmshards repack --tokens "):
        check_packed_positions(old, str(packed_set))  # it keeps its tokens
