"""The contract: manifest round trip and validation, shard names, tokenizer identity."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from lmshards.plumbing import fs
from lmshards.plumbing.errors import ManifestError, TokenizerError
from lmshards.schemas.manifest import (
    InputFileInfo,
    Manifest,
    ShardInfo,
    SplitInfo,
    SplitTotals,
    TokenizerInfo,
    read_manifest,
    write_manifest,
)
from lmshards.schemas.shards import parse_shard_name, shard_name
from lmshards.schemas.tokenizer_info import fingerprint, locate_tokenizer, special_token_ids

HF_RUN_MLM_RE = re.compile(r"-\d+-(\d+)\.tfrecord")  # what run_mlm.py counts samples with


def _manifest(seq_len: int = 8) -> Manifest:
    shards = (
        ShardInfo(
            path="train/" + shard_name("train", 0, 1, 3), records=3, bytes=100, sha256="ab" * 32
        ),
    )
    totals = SplitTotals(
        documents=2, tokens_in=22, tokens_written=20, tokens_dropped=2, padding_tokens=4, records=3
    )
    return Manifest(
        tool_version="0.1.0",
        seq_len=seq_len,
        tokenizer=TokenizerInfo(
            fingerprint="sha256:00",
            vocab_size=100,
            special_token_ids={"pad": 1},
            all_special_ids=(0, 1),
        ),
        splits={"train": SplitInfo(shards=shards, totals=totals)},
        inputs=(InputFileInfo(path="a.txt", bytes=10),),
        seed=1,
        options={"remainder": "pad"},
        created_at="2026-01-01T00:00:00Z",
    )


def test_shard_name_round_trip_and_hf_pattern():
    name = shard_name("train", 3, 16, 12345)
    assert name == "train-00003-of-00016-12345.tfrecord"
    assert parse_shard_name("gs://b/out/train/" + name) == ("train", 3, 16, 12345)
    assert int(HF_RUN_MLM_RE.search(name).group(1)) == 12345
    with pytest.raises(ValueError):
        shard_name("train", 16, 16, 1)
    with pytest.raises(ValueError):
        parse_shard_name("train-3-of-16.tfrecord")


def test_manifest_round_trip(tmp_path):
    manifest = _manifest()
    write_manifest(str(tmp_path), manifest)
    assert read_manifest(str(tmp_path)) == manifest
    data = json.loads((tmp_path / "manifest.json").read_text())
    assert data["features"] == {
        "input_ids": {"dtype": "int64", "shape": [8]},
        "attention_mask": {"dtype": "int64", "shape": [8]},
    }
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]  # no temp file left behind


def test_manifest_refuses_unbalanced_accounting(tmp_path):
    bad = dataclasses.replace(
        _manifest(),
        splits={
            "train": SplitInfo(
                shards=_manifest().splits["train"].shards,
                totals=SplitTotals(
                    tokens_in=23, tokens_written=20, tokens_dropped=2, padding_tokens=4, records=3
                ),
            )
        },
    )
    with pytest.raises(ManifestError, match="tokens_in 23"):
        write_manifest(str(tmp_path), bad)
    assert not (tmp_path / "manifest.json").exists()


def test_missing_manifest_names_the_fix(tmp_path):
    with pytest.raises(ManifestError, match="incomplete or not a preprocess output"):
        read_manifest(str(tmp_path))


def test_corrupt_manifest(tmp_path):
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(ManifestError, match="not valid JSON"):
        read_manifest(str(tmp_path))


def test_tokenizer_fingerprint_is_canonical(sample_tokenizer, tmp_path):
    text = sample_tokenizer.read_text()
    reformatted = tmp_path / "tokenizer.json"
    reformatted.write_text(json.dumps(json.loads(text), indent=None))
    assert fingerprint(text) == fingerprint(reformatted.read_text())
    assert fingerprint(text).startswith("sha256:") and len(fingerprint(text)) == 7 + 64
    source = locate_tokenizer(str(tmp_path))  # a directory holding tokenizer.json
    assert special_token_ids(source) == {"cls": 0, "pad": 1, "sep": 2, "unk": 3, "mask": 4}


def test_tokenizer_errors(tmp_path):
    with pytest.raises(TokenizerError, match="not found"):
        locate_tokenizer(str(tmp_path / "nope"))
    with pytest.raises(TokenizerError, match="No tokenizer.json"):
        locate_tokenizer(str(tmp_path))
    (tmp_path / "tokenizer.json").write_text('{"model": ')
    with pytest.raises(TokenizerError, match="corrupt"):
        locate_tokenizer(str(tmp_path))


@pytest.mark.gcs
def test_manifest_on_gcs(gcs_emulator):
    out = f"{gcs_emulator}/schemas-test"
    write_manifest(out, _manifest())
    assert read_manifest(out) == _manifest()
    assert fs.listdir(out) == [f"{out}/manifest.json"]


def test_never_masked_ids_are_the_special_and_role_ids_once_each_sorted():
    from lmshards.schemas.manifest import TokenizerInfo

    info = TokenizerInfo(
        fingerprint="sha256:0",
        vocab_size=10,
        special_token_ids={"pad": 1, "mask": 7, "cls": 0},
        all_special_ids=(3, 0, 1),
    )
    assert info.never_masked_ids == (0, 1, 3, 7)


def test_a_tokenizer_of_another_fingerprint_is_refused_naming_both(sample_tokenizer):
    from lmshards.schemas.tokenizer_info import checked_tokenizer

    right = fingerprint(sample_tokenizer.read_text())
    source = checked_tokenizer(
        str(sample_tokenizer), expected=right, named="--tokenizer", reference="x", fix="y"
    )
    assert source.json_path == str(sample_tokenizer)
    with pytest.raises(TokenizerError) as refused:
        checked_tokenizer(
            str(sample_tokenizer),
            expected="sha256:other",
            named="--tokenizer",
            reference="the shards were made with",
            fix="Pass the right one.",
        )
    assert str(refused.value) == (
        f"--tokenizer {str(sample_tokenizer)!r} has fingerprint {right}: it is not the one the shards were "
        "made with (sha256:other). Pass the right one."
    )
