"""Manifest checks match the manifest: a shard listed twice, totals that disagree with the listed shards
and a tokenizer/ copy that is not the manifest's are errors in `inspect --verify` and when `train` opens
the set; the user's shard files are never touched."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lmshards.plumbing.errors import LmshardsError
from lmshards.preprocess import inspect_cli
from lmshards.schemas.manifest import TOKENIZER_RELPATH, read_manifest
from lmshards.train.inputs import mixture
from tests.helpers.shard_factory import carry_tokenizer, write_sample_shards

ERROR = "lmshards inspect: error: "


@pytest.fixture(scope="module")
def good(tmp_path_factory, sample_tokenizer, sample_files) -> Path:
    out = tmp_path_factory.mktemp("good") / "shards"
    write_sample_shards(
        out,
        sample_tokenizer,
        sample_files[:2],
        seq_len=16,
        train_shards=2,
        validation_shards=1,
        max_lines_per_file=20,
    )
    carry_tokenizer(out, sample_tokenizer)
    return out


@pytest.fixture
def shard_set(good, tmp_path) -> Path:
    copy = tmp_path / "shards"
    shutil.copytree(good, copy)
    return copy


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _edit_manifest(shard_set: Path, change) -> None:
    path = shard_set / "manifest.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _inspect(capsys, shard_set: Path) -> tuple[int, str]:
    code = inspect_cli.main([str(shard_set), "--verify"])
    return code, capsys.readouterr().err


def test_the_good_set_verifies(good, capsys):
    assert _inspect(capsys, good)[0] == 0
    mixture.open_mixture([str(good)])


def _duplicate_first_train_shard(data: dict) -> None:
    shards = data["splits"]["train"]["shards"]
    shards.append(dict(shards[0]))
    data["splits"]["train"]["totals"]["records"] += shards[0]["records"]


def _drop_last_train_shard(data: dict) -> None:
    dropped = data["splits"]["train"]["shards"].pop()
    data["splits"]["train"]["totals"]["records"] -= dropped["records"]


def _totals_off_by_one(data: dict) -> None:
    data["splits"]["validation"]["totals"]["records"] += 1


@pytest.mark.parametrize(
    "change, expected",
    [
        (_duplicate_first_train_shard, "Manifest lists shard 'train/"),
        (_drop_last_train_shard, "a shard is missing from the list"),
        (_totals_off_by_one, "Split 'validation': totals say"),
    ],
)
def test_a_manifest_that_says_more_than_its_shards_is_refused_by_verify_and_train(
    shard_set, capsys, change, expected
):
    _edit_manifest(shard_set, change)
    before = _tree(shard_set)
    code, err = _inspect(capsys, shard_set)
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(ERROR) and expected in err
    with pytest.raises(LmshardsError, match=expected):
        mixture.open_mixture([str(shard_set)])
    assert _tree(shard_set) == before


def test_a_replaced_tokenizer_copy_fails_verify_and_train(shard_set, capsys):
    copy = shard_set / TOKENIZER_RELPATH
    other = json.loads(copy.read_text())
    other["model"]["vocab"]["zzz-not-in-the-original"] = len(other["model"]["vocab"])
    copy.write_text(json.dumps(other))
    expected = read_manifest(str(shard_set)).tokenizer.fingerprint
    code, err = _inspect(capsys, shard_set)
    assert code == 1
    mismatch = [line for line in err.splitlines() if line.startswith("MISMATCH ")]
    assert len(mismatch) == 1 and str(copy) in mismatch[0] and expected in mismatch[0]
    with pytest.raises(LmshardsError, match="tokenizer/ was replaced"):
        mixture.open_mixture([str(shard_set)])
    copy.unlink()
    code, err = _inspect(capsys, shard_set)
    assert code == 1 and "named by the manifest is missing" in err
