"""A shard set that carries its tokenizer: `lmshards train` takes it from there, and the run then exports and
fills masks with no --tokenizer anywhere."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from lmshards.plumbing.errors import LmshardsError
from lmshards.schemas.constants import TOKENIZER_JSON
from lmshards.schemas.manifest import TOKENIZER_RELPATH, read_manifest, write_manifest
from lmshards.train.inputs import mixture, shard_set_tokenizer
from tests.conftest import SAMPLE_DIR
from tests.helpers.shard_factory import carry_tokenizer, write_sample_shards

SEQ_LEN = 32


def write_set(out: Path, tokenizer: Path) -> str:
    write_sample_shards(
        out,
        tokenizer,
        sorted(SAMPLE_DIR.glob("en/*.txt")),
        seq_len=SEQ_LEN,
        train_shards=4,
        validation_shards=2,
        max_lines_per_file=150,
    )
    return str(out)


def altered(tokenizer: Path, out: Path) -> Path:
    """A tokenizer.json with one more token: another fingerprint."""
    other = json.loads(tokenizer.read_text())
    other["model"]["vocab"]["zzz-not-in-the-original"] = len(other["model"]["vocab"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(other))
    return out


@pytest.fixture(scope="module")
def carrying(tmp_path_factory, sample_tokenizer) -> str:
    """A shard set written as `lmshards preprocess` writes it: with tokenizer/ and its path in the manifest."""
    out = tmp_path_factory.mktemp("carrying") / "shards"
    write_set(out, sample_tokenizer)
    carry_tokenizer(out, sample_tokenizer)
    return str(out)


def test_the_run_tokenizer_is_the_copy_the_manifest_records(carrying, sample_tokenizer):
    mix = mixture.open_mixture([carrying])
    assert mix.manifest.tokenizer.path == TOKENIZER_RELPATH
    assert shard_set_tokenizer.shard_set_tokenizer(mix.sets[0]) == f"{carrying}/tokenizer"
    source = shard_set_tokenizer.run_tokenizer(None, mix)
    assert (
        source.path == f"{carrying}/tokenizer" and source.json_text == sample_tokenizer.read_text()
    )
    # A given --tokenizer wins, when it is the shards' own.
    assert shard_set_tokenizer.run_tokenizer(str(sample_tokenizer), mix).path == str(
        sample_tokenizer
    )


def test_the_recorded_path_wins_and_tokenizer_dir_is_the_fallback(sample_tokenizer, tmp_path):
    shards = Path(write_set(tmp_path / "shards", sample_tokenizer))
    assert (
        shard_set_tokenizer.run_tokenizer(None, mixture.open_mixture([str(shards)])) is None
    )  # carries none
    (shards / "tokenizer").mkdir()  # a copy placed by hand: the manifest records none
    shutil.copy(sample_tokenizer, shards / TOKENIZER_RELPATH)
    assert (
        shard_set_tokenizer.run_tokenizer(None, mixture.open_mixture([str(shards)])).path
        == f"{shards}/tokenizer"
    )
    # Recorded elsewhere: that copy is the one, even beside a tokenizer/ that is not the shards' own.
    (shards / "vocab").mkdir()
    shutil.copy(sample_tokenizer, shards / "vocab" / TOKENIZER_JSON)
    altered(sample_tokenizer, shards / "tokenizer" / TOKENIZER_JSON)
    manifest = read_manifest(str(shards))
    write_manifest(
        str(shards),
        dataclasses.replace(
            manifest,
            tokenizer=dataclasses.replace(manifest.tokenizer, path=f"vocab/{TOKENIZER_JSON}"),
        ),
    )
    assert (
        shard_set_tokenizer.run_tokenizer(None, mixture.open_mixture([str(shards)])).path
        == f"{shards}/vocab"
    )


def test_a_replaced_copy_or_another_given_tokenizer_is_refused(
    carrying, sample_tokenizer, tmp_path
):
    copy = tmp_path / "copy"
    shutil.copytree(carrying, copy)
    altered(sample_tokenizer, copy / TOKENIZER_RELPATH)
    expected = read_manifest(carrying).tokenizer.fingerprint
    # Found while the sets are opened, whether or not --tokenizer is given.
    with pytest.raises(LmshardsError, match="The shard set's tokenizer/ was replaced") as e:
        mixture.open_mixture([str(copy)])
    assert f"the tokenizer copy {str(copy / TOKENIZER_RELPATH)!r} has fingerprint sha256:" in str(
        e.value
    ) and expected in str(e.value)
    other = altered(sample_tokenizer, tmp_path / "other" / TOKENIZER_JSON)
    with pytest.raises(
        LmshardsError, match=r"Pass the tokenizer given to `lmshards preprocess`"
    ) as e:
        shard_set_tokenizer.run_tokenizer(str(other), mixture.open_mixture([carrying]))
    assert str(e.value).startswith(f"--tokenizer {str(other)!r} has fingerprint sha256:")


@pytest.mark.slow
def test_train_export_and_fill_mask_need_no_tokenizer_flag(carrying, tmp_path, capsys):
    from lmshards.train.commands import cli, export_cli, fill_mask_cli

    run, model = tmp_path / "run", tmp_path / "model"
    assert (
        cli.main(
            [
                "--shards",
                carrying,
                "--output",
                str(run),
                "--steps",
                "12",
                "--per_replica_batch",
                "8",
                "--masking",
                "whole_word",
                "--mlm_probability",
                "0.2",
                "--log_every",
                "6",
                "--eval_every",
                "12",
                "--checkpoint_every",
                "12",
                "--shuffle_buffer",
                "64",
            ]
        )
        == 0
    )
    # The whole tokenizer directory of the shard set came along, byte for byte.
    copied = sorted(p.name for p in (run / "tokenizer").iterdir())
    assert copied == sorted(p.name for p in (Path(carrying) / "tokenizer").iterdir())
    assert (run / "tokenizer" / TOKENIZER_JSON).read_bytes() == (
        Path(carrying) / TOKENIZER_RELPATH
    ).read_bytes()
    run_config = json.loads((run / "run_config.json").read_text())
    assert run_config["train"]["tokenizer"] is None
    assert (run_config["train"]["masking"], run_config["train"]["mlm_probability"]) == (
        "whole_word",
        0.2,
    )
    capsys.readouterr()

    assert export_cli.main([str(run), "--output", str(model)]) == 0
    exported = json.loads((model / TOKENIZER_JSON).read_text())
    assert (
        exported["model"] == json.loads((run / "tokenizer" / TOKENIZER_JSON).read_text())["model"]
    )
    capsys.readouterr()
    assert (
        fill_mask_cli.main([str(model), "The house of <mask> was", "--json", "--top_k", "3"]) == 0
    )
    predictions = json.loads(capsys.readouterr().out)
    assert len(predictions) == 1 and len(predictions[0]) == 3
    assert all(p["sequence"].startswith("The house of") for p in predictions[0])
