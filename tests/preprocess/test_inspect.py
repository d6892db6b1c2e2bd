"""`lmshards inspect`: the summary, --json, and --verify catching a flipped byte."""

from __future__ import annotations

import json
import shutil

import pytest

from lmshards.cli import main as lmshards_main
from schemas.manifest import read_manifest
from tests.helpers.shard_factory import write_sample_shards


def inspect_main(argv: list[str]) -> int:
    return lmshards_main(["inspect", *argv])


@pytest.fixture(scope="module")
def small_output(tmp_path_factory, sample_dir, sample_tokenizer):
    """Shards and a manifest as the contract defines them, of one sample file."""
    out = tmp_path_factory.mktemp("inspect") / "out"
    write_sample_shards(out, sample_tokenizer, [sample_dir / "zh" / "lunyu_shijing.txt"], seq_len=64)
    return out


def test_summary_and_json(small_output, capsys):
    assert inspect_main([str(small_output)]) == 0
    text = capsys.readouterr().out
    manifest = read_manifest(str(small_output))
    train = manifest.split("train")
    assert f"{train.records:,} records in {len(train.shards)} shards" in text
    assert manifest.tokenizer.fingerprint in text and "seq_len 64" in text
    assert inspect_main([str(small_output / "manifest.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads((small_output / "manifest.json").read_text())


def test_verify_passes_then_names_a_shard_with_one_flipped_byte(small_output, tmp_path, capsys):
    assert inspect_main([str(small_output), "--verify"]) == 0
    assert "verify: OK" in capsys.readouterr().err

    broken = tmp_path / "broken"
    shutil.copytree(small_output, broken)
    shard = max((broken / "validation").iterdir(), key=lambda p: p.stat().st_size)
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x20
    shard.write_bytes(bytes(data))
    assert inspect_main([str(broken), "--verify"]) == 1
    err = capsys.readouterr().err
    mismatches = [line for line in err.splitlines() if line.startswith("MISMATCH")]
    assert mismatches and all(shard.name in line for line in mismatches)
    assert "sha256" in err and "checksum mismatch" in err


def test_missing_manifest_is_a_clear_error(tmp_path, capsys):
    assert inspect_main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lmshards inspect: error: ") and "incomplete or not a preprocess output" in err
