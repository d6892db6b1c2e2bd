"""Every command that takes a directory says what kind it was given and what to run instead."""

from __future__ import annotations

import json
import re

import pytest

from lmshards.command.cli import main as lmshards_main
from lmshards.schemas import directory_kind as kinds
from lmshards.schemas.constants import MANIFEST_FORMAT, TOKENS_FORMAT


def _make(root, kind):
    """A directory holding only the marker files of `kind`: what the commands must recognise it by."""
    path = root / kind.replace(" ", "_")
    path.mkdir()
    if kind == kinds.SHARD_SET:
        (path / "manifest.json").write_text(json.dumps({"format": MANIFEST_FORMAT}))
    elif kind == kinds.TOKEN_STORE:
        (path / "manifest.json").write_text(json.dumps({"format": TOKENS_FORMAT}))
    elif kind == kinds.UNFINISHED_OUTPUT:
        (path / ".lmshards-tmp").mkdir()
    elif kind == kinds.RUN_DIRECTORY:
        (path / "run_config.json").write_text("{}")
        (path / "checkpoints").mkdir()
    elif kind == kinds.MODEL_EXPORT:
        (path / "config.json").write_text("{}")
        (path / "model.safetensors").write_bytes(b"")
    elif kind == kinds.TOKENIZER:
        (path / "tokenizer.json").write_text("{}")
    elif kind == kinds.DATASET_EXPORT:
        (path / "_SUCCESS.json").write_text("{}")
    elif kind == kinds.STATS:
        (path / "stats.json").write_text("{}")
    return str(path)


@pytest.mark.parametrize("kind", kinds.KINDS)
def test_each_kind_is_told_by_its_marker_files(tmp_path, kind):
    assert kinds.directory_kind(_make(tmp_path, kind)) == kind


def test_other_directories_are_no_kind(tmp_path):
    (tmp_path / "web").mkdir()
    (tmp_path / "web" / "manifest.json").write_text(json.dumps({"format": "webapp"}))
    assert kinds.directory_kind(str(tmp_path / "web")) == kinds.OTHER
    assert kinds.directory_kind(str(tmp_path / "missing")) == kinds.OTHER
    assert kinds.wrong_kind_message(str(tmp_path / "web"), wanted=kinds.SHARD_SET) is None


# (command line, the kind given, what the error must say)
CASES = [
    (["inspect", "{path}"], kinds.RUN_DIRECTORY, "is a training run directory.*lmshards report"),
    (["inspect", "{path}"], kinds.MODEL_EXPORT, "is a model directory.*not a shard set.*fill-mask"),
    (["inspect", "{path}"], kinds.UNFINISHED_OUTPUT, "unfinished `lmshards preprocess` output"),
    (
        ["inspect", "{path}"],
        kinds.TOKENIZER,
        "is a tokenizer directory.*lmshards preprocess --tokenizer",
    ),
    (
        ["fill-mask", "{path}", "a <mask>"],
        kinds.RUN_DIRECTORY,
        "`lmshards export {path} --output MODEL_DIR`",
    ),
    (
        ["fill-mask", "{path}", "a <mask>"],
        kinds.SHARD_SET,
        "is a shard set.*not a model directory.*lmshards train --shards",
    ),
    (["fill-mask", "{path}", "a <mask>"], kinds.TOKEN_STORE, "is a token store.*`lmshards repack`"),
    (
        ["tokenizer", "inspect", "{path}", "--text", "a"],
        kinds.SHARD_SET,
        "is a shard set.*its tokenizer is {path}/tokenizer",
    ),
    (
        ["tokenizer", "inspect", "{path}", "--text", "a"],
        kinds.RUN_DIRECTORY,
        "is a training run directory.*{path}/tokenizer",
    ),
    (
        ["tokenizer", "inspect", "{path}", "--text", "a"],
        kinds.TOKEN_STORE,
        "is a token store.*{path}/tokenizer",
    ),
]


@pytest.mark.parametrize("argv, kind, said", CASES)
def test_commands_name_the_kind_given_and_what_to_run(tmp_path, capsys, argv, kind, said):
    path = _make(tmp_path, kind)
    assert lmshards_main([a.format(path=path) for a in argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    line = err.strip().splitlines()[-1]
    assert re.search(said.format(path=re.escape(path)), line), line


@pytest.mark.parametrize(
    "kind, said",
    [
        (kinds.TOKEN_STORE, "is a token store.*`lmshards repack --tokens {path} --output NEW_DIR`"),
        (kinds.RUN_DIRECTORY, "is a training run directory.*not a shard set"),
        (kinds.MODEL_EXPORT, "is a model directory.*not a shard set"),
    ],
)
def test_train_shards_names_the_kind_given_before_writing(tmp_path, capsys, kind, said):
    path = _make(tmp_path, kind)
    run = tmp_path / "run"
    assert lmshards_main(["train", "--shards", path, "--output", str(run), "--steps", "1"]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert re.search(said.format(path=re.escape(path)), line), line
    assert not run.exists()


def test_a_token_store_is_told_apart_from_the_shard_set_holding_it(tmp_path):
    shards = _make(tmp_path, kinds.SHARD_SET)
    (tmp_path / "shard_set" / "tokens").mkdir()
    (tmp_path / "shard_set" / "tokens" / "manifest.json").write_text(
        json.dumps({"format": TOKENS_FORMAT})
    )
    assert kinds.is_token_store(f"{shards}/tokens")
    assert not kinds.is_token_store(shards)
    (tmp_path / "damaged").mkdir()
    (tmp_path / "damaged" / "manifest.json").write_bytes(b"\xff not JSON")
    (tmp_path / "unreadable" / "manifest.json").mkdir(parents=True)  # a directory, not a file
    for path in (tmp_path / "damaged", tmp_path / "unreadable"):
        # Ours whatever is wrong with it: the shard set's reader names the problem.
        assert kinds.directory_kind(str(path)) == kinds.SHARD_SET
        assert not kinds.is_token_store(str(path))
    assert not kinds.is_token_store(str(tmp_path / "missing"))
