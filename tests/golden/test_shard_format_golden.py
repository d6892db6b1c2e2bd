"""The shard format is a promise: for the same inputs, tokenizer and options the bytes never change.

tests/data/golden holds a small fixed corpus, a fixed tokenizer and, for three option sets, the
SHA-256 of every shard and the manifest that lmshards 0.1.0 wrote for them. A change that alters a
single byte of a shard fails here; if that change is intended, it needs a new format version.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from lmshards.command.cli import main as lmshards_main

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
CASES = json.loads((GOLDEN / "cases.json").read_text(encoding="utf-8"))
EXPECTED = json.loads((GOLDEN / "expected_0.1.0.json").read_text(encoding="utf-8"))
# Manifest fields that legitimately differ from 0.1.0's: when and by which version it was written.
VOLATILE_FIELDS = ("created_at", "tool_version")
# Per-split counters that 0.1.0 wrote but never set (always 0); format_version 2 dropped them.
DROPPED_IN_V2 = ("documents_empty", "documents_invalid_utf8", "documents_nul")
# Reading counters added since 0.1.0; the golden corpus has none of these.
READING_ADDED_IN_V2 = (
    "documents_missing_field",
    "documents_non_string_text",
    "files_utf16",
    "files_utf32",
    "files_skipped_lmshards_output",
    "files_duplicate",
    "entries_skipped_hidden",
    "directories_empty",
    "documents_json_too_long",
    "documents_json_too_deep",
    "documents_lone_surrogate",
    "documents_tokenizer_error",
    "files_skipped_binary",
)
# Files a format_version 2 output holds beside its shards, as the manifest lists them.
TOKENIZER_COPY = "tokenizer/tokenizer.json"
SCHEMA = "schema.pbtxt"


def _manifest_for_comparison(manifest: dict) -> dict:
    manifest = {k: v for k, v in manifest.items() if k not in VOLATILE_FIELDS}
    for info in manifest["inputs"]:
        info["path"] = Path(info["path"]).resolve().relative_to(GOLDEN).as_posix()
    return manifest


def _expected_today(manifest_0_1_0: dict) -> dict:
    """0.1.0's manifest as format_version 2 writes it: the same, less the dropped always-zero counters, plus
    the new reading counters (all 0 here), the tokenizer's copy and the schema."""
    manifest = json.loads(json.dumps(manifest_0_1_0))
    for split in manifest["splits"].values():
        for name in DROPPED_IN_V2:
            assert split["totals"].pop(name) == 0
    for name in READING_ADDED_IN_V2:
        assert name not in manifest["reading"]
        manifest["reading"][name] = 0
    # Discovery's count of the files it found: each case names every input file once.
    manifest["reading"]["files_found"] = len(manifest["inputs"])
    manifest["tokenizer"]["path"] = TOKENIZER_COPY
    manifest["schema"] = SCHEMA
    manifest["format_version"] = 2
    return manifest


# The default runner runs preprocess as one in-process step; an in-process runner set up otherwise runs
# its Beam stages. Both must write the same bytes.
RUNNERS = {"default": [], "beam_stages": ["--direct_running_mode=multi_threading"]}


@pytest.mark.parametrize("runner", sorted(RUNNERS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_shards_are_byte_identical_to_0_1_0(case, runner, tmp_path):
    output = tmp_path / "out"
    argv = ["preprocess", "--tokenizer", str(GOLDEN / "tokenizer.json"), "--output", str(output)]
    argv += RUNNERS[runner]
    for name in CASES[case]["inputs"]:
        argv += ["--input", str(GOLDEN / name)]
    assert lmshards_main(argv + CASES[case]["flags"]) == 0

    expected = EXPECTED[case]
    written = {
        path.relative_to(output).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in output.glob("*/*.tfrecord")
    }
    assert written == expected["shards"]
    manifest = json.loads((output / "manifest.json").read_text(encoding="utf-8"))
    assert _manifest_for_comparison(manifest) == _expected_today(expected["manifest"])
    # The tokenizer's copy is the very tokenizer given.
    assert (output / TOKENIZER_COPY).read_bytes() == (GOLDEN / "tokenizer.json").read_bytes()
    assert (output / SCHEMA).is_file()


def test_a_0_1_0_manifest_still_reads(tmp_path):
    from lmshards.schemas.manifest import read_manifest

    manifest = dict(EXPECTED["lines_default"]["manifest"], created_at="", tool_version="0.1.0")
    (tmp_path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    read = read_manifest(str(tmp_path))
    assert read.format_version == 1 and read.splits["train"].totals.records == 381
