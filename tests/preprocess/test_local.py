"""The default runner without Beam: a run with no Beam flag never imports Beam, and writes what the
same step writes inside Beam's FnApiRunner (and what Beam's parser makes of the same flags)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from lmshards.command.cli import main as lmshards_main
from lmshards.preprocess.cli import build_parser
from lmshards.preprocess.local import runs_without_beam
from lmshards.preprocess.options import PreprocessConfig, config_from_flags
from lmshards.preprocess.pipeline_options import config_from_options

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
TOKENIZER = str(GOLDEN / "tokenizer.json")
INPUTS = ["--input", str(GOLDEN / "docs.jsonl"), "--input", str(GOLDEN / "corpus" / "en.txt")]
COMMON = ["--seq_len", "48", "--validation_fraction", "0.1", "--packing_group_tokens", "1500"]
# Beam's FnApiRunner in this process: the same one step, run as a pipeline of one element.
BEAM_STEP = ["--direct_running_mode=in_memory"]
CASES = {
    "concat": [],
    "best_fit_keep_tokens": ["--packing", "best_fit", "--keep_tokens", "--shard_multiple", "2"],
    # curation loads Beam's modules (its stage lives beside them) but runs in the same one step
    "dedup_quality": ["--dedup", "exact", "--quality_filters", "gopher_quality"],
}


def _without_created_at(data: bytes, *, part_names: bool = False) -> bytes:
    manifest = json.loads(data)
    manifest.pop("created_at")
    if part_names:  # a token store's parts are named at random (part-{uuid4}); their bytes are kept
        for info in manifest["files"]:
            info.pop("path")
    return json.dumps(manifest, sort_keys=True).encode()


def _files(output: Path) -> dict[str, bytes]:
    """Every file of an output: manifests without their creation time, token parts by their bytes."""
    files = {}
    for path in sorted(output.rglob("*")):
        name, data = (
            path.relative_to(output).as_posix(),
            path.read_bytes() if path.is_file() else b"",
        )
        if not path.is_file():
            continue
        if name == "manifest.json":
            data = _without_created_at(data)
        elif name == "tokens/manifest.json":
            data = _without_created_at(data, part_names=True)
        elif name.startswith("tokens/part-"):
            name = f"tokens/part {hashlib.sha256(data).hexdigest()}"
        files[name] = data
    return files


@pytest.mark.parametrize("case", sorted(CASES))
def test_without_beam_the_run_writes_the_bytes_of_the_step_inside_beam(case, tmp_path):
    argv = ["preprocess", *INPUTS, "--tokenizer", TOKENIZER, *COMMON, *CASES[case]]
    assert lmshards_main([*argv, "--output", str(tmp_path / "local")]) == 0
    assert lmshards_main([*argv, "--output", str(tmp_path / "beam"), *BEAM_STEP]) == 0
    local, beam = _files(tmp_path / "local"), _files(tmp_path / "beam")
    assert local == beam
    assert sum(name.endswith(".tfrecord") for name in local) >= 2
    if case == "dedup_quality":
        assert any(name.startswith("curation/") for name in local)  # the audit, byte for byte too


def test_a_run_without_a_beam_flag_never_imports_beam(tmp_path):
    output = tmp_path / "out"
    script = (
        "import sys\n"
        "from lmshards.command.cli import main\n"
        f"code = main({['preprocess', *INPUTS, '--tokenizer', TOKENIZER, '--output', str(output), *COMMON]!r})\n"
        "print(code, sorted(m for m in ('apache_beam', 'tensorflow') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "0 []"
    assert (output / "manifest.json").is_file()


def test_a_beam_flag_or_a_remote_output_runs_the_beam_pipeline():
    config = PreprocessConfig(inputs=("in.txt",), tokenizer=TOKENIZER, output="/tmp/out")
    assert runs_without_beam(config, [])
    assert not runs_without_beam(config, ["--runner", "DirectRunner"])
    assert not runs_without_beam(config, ["--direct_num_workers=2"])
    remote = PreprocessConfig(inputs=("in.txt",), tokenizer=TOKENIZER, output="gs://bucket/out")
    assert not runs_without_beam(remote, [])


FLAG_SETS = [
    [],
    ["--packing", "best_fit", "--seed", "7", "--target_shard_mb", "500MB", "--keep_tokens"],
    ["--num_shards", "8", "--shard_multiple", "4", "--remainder", "pad", "--overwrite"],
    ["--dedup", "near", "--minhash_bands", "10", "--minhash_rows", "5", "--decontaminate", "e.txt"],
    [
        "--quality_filters",
        "gopher_quality,c4_quality",
        "--tokenizer_threads",
        "3",
        "--range_mb",
        "8",
    ],
    ["--doc_separator", "blank_line", "--text_field", "body", "--skip_binary", "--verbose"],
]


@pytest.mark.parametrize("flags", FLAG_SETS, ids=lambda flags: " ".join(flags[:2]) or "defaults")
def test_our_parser_and_beams_make_the_same_config_of_the_same_flags(flags):
    argv = ["--input", "a.txt", "--input", "b/*.jsonl", "--tokenizer", TOKENIZER, "--output", "o"]
    argv += flags
    args, others = build_parser().parse_known_args(argv)
    assert others == []
    ours = config_from_flags(args)
    assert ours == config_from_options(PipelineOptions(argv))
    assert ours.inputs == ("a.txt", "b/*.jsonl")
