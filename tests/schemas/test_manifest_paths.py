"""Manifest containment: shard paths stay inside the shard set, and their names agree with the manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmshards.command.cli import main as lmshards_main
from lmshards.plumbing.errors import ManifestError
from lmshards.schemas.manifest import (
    Manifest,
    ShardInfo,
    SplitInfo,
    SplitTotals,
    TokenizerInfo,
    check_shard_relpath,
    read_manifest,
    write_manifest,
)
from lmshards.schemas.shards import shard_relpath

SEQ_LEN = 8
RECORDS = 3
SHARD = shard_relpath("train", 0, 1, RECORDS)


def _manifest() -> Manifest:
    shards = (ShardInfo(path=SHARD, records=RECORDS, bytes=10, sha256="ab" * 32),)
    totals = SplitTotals(
        documents=1, tokens_in=RECORDS * SEQ_LEN, tokens_written=RECORDS * SEQ_LEN, records=RECORDS
    )
    return Manifest(
        tool_version="0.1.0",
        seq_len=SEQ_LEN,
        tokenizer=TokenizerInfo(
            fingerprint="sha256:00",
            vocab_size=100,
            special_token_ids={"pad": 1},
            all_special_ids=(0, 1),
        ),
        splits={"train": SplitInfo(shards=shards, totals=totals)},
        inputs=(),
        seed=1,
        options={},
    )


def _tamper(output: Path, path: str, records: int = RECORDS) -> None:
    data = json.loads((output / "manifest.json").read_text(encoding="utf-8"))
    data["splits"]["train"]["shards"][0].update(path=path, records=records)
    (output / "manifest.json").write_text(json.dumps(data), encoding="utf-8")


@pytest.fixture
def shard_sets(tmp_path) -> tuple[Path, Path]:
    """Two shard sets side by side: `set/` (the one read) and `other_set/` (which must stay out of reach)."""
    for name in ("set", "other_set"):
        write_manifest(str(tmp_path / name), _manifest())
        (tmp_path / name / SHARD).parent.mkdir()
        (tmp_path / name / SHARD).write_bytes(f"{name} shard".encode())
    return tmp_path / "set", tmp_path / "other_set"


ESCAPING_PATHS = [
    ("../../../etc/passwd", "has a '.' or '..' segment"),
    ("/etc/passwd", "is absolute"),
    (f"../other_set/{SHARD}", "has a '.' or '..' segment"),
    ("gs://x/y", "has a scheme"),
    (f"file:///{SHARD}", "has a scheme"),
    ("C:/train/x.tfrecord", "has a scheme"),
    ("train/../../x", "has a '.' or '..' segment"),
    (f"./{SHARD}", "has a '.' or '..' segment"),
    ("train\\..\\x", "contains a backslash"),
    ("train//x.tfrecord", "has an empty segment"),
    ("train/", "has an empty segment"),
    ("", "is not a path"),
    ("train/x\0.tfrecord", "contains a NUL character"),
]


@pytest.mark.parametrize("path,problem", ESCAPING_PATHS)
def test_check_shard_relpath_refuses_paths_outside_the_shard_set(path, problem):
    with pytest.raises(ManifestError) as caught:
        check_shard_relpath(path)
    assert str(caught.value).startswith(f"Manifest shard path {path!r} {problem}; ")
    assert "re-run `lmshards preprocess`" in str(caught.value)


def test_check_shard_relpath_returns_a_good_path():
    assert check_shard_relpath(SHARD) == "train/train-00000-of-00001-3.tfrecord"


@pytest.mark.parametrize("path,problem", ESCAPING_PATHS)
def test_read_manifest_refuses_an_escaping_shard_path(shard_sets, path, problem):
    output, other = shard_sets
    _tamper(output, path)
    with pytest.raises(ManifestError, match=f"Manifest shard path .* {problem}"):
        read_manifest(str(output))
    assert (other / SHARD).read_bytes() == b"other_set shard"


@pytest.mark.parametrize(
    "path,records,message",
    [
        (
            shard_relpath("train", 0, 1, 4),
            RECORDS,
            "its file name says 4 records, the manifest says 3",
        ),
        ("train/data.tfrecord", RECORDS, "is not a shard file name"),
        (
            shard_relpath("validation", 0, 1, RECORDS),
            RECORDS,
            "listed under split 'train' but is not a 'train' shard",
        ),
        (
            f"validation/{shard_relpath('train', 0, 1, RECORDS).split('/')[1]}",
            RECORDS,
            "is not a 'train' shard",
        ),
        (f"train/sub/{SHARD.split('/')[1]}", RECORDS, "is not a 'train' shard in 'train/'"),
        (SHARD.split("/")[1], RECORDS, "is not a 'train' shard"),
    ],
)
def test_read_manifest_refuses_a_shard_that_disagrees_with_its_name(
    shard_sets, path, records, message
):
    output, _ = shard_sets
    _tamper(output, path, records)
    with pytest.raises(ManifestError, match=message):
        read_manifest(str(output))


def test_inspect_verify_never_opens_a_file_outside_the_shard_set(shard_sets, capsys):
    output, other = shard_sets
    _tamper(output, f"../other_set/{SHARD}")
    assert lmshards_main(["inspect", "--verify", str(output)]) == 2
    captured = capsys.readouterr()
    assert f"Manifest shard path '../other_set/{SHARD}' has a '.' or '..' segment" in captured.err
    assert "Traceback" not in captured.err and "OK" not in captured.out
    assert (other / SHARD).read_bytes() == b"other_set shard"
