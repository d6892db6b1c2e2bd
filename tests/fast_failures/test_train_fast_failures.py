"""Quiet, fast failures: what `lmshards train` can check without TensorFlow ends in one line before TensorFlow loads;
what only the run finds (ids beyond the vocabulary, a full disk) ends in one line too."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lmshards.train.commands.cli import parse_config
from lmshards.train.config import preset_config
from tests.helpers.shard_factory import write_sample_shards

REPO = Path(__file__).resolve().parents[2]
SEQ_LEN = 32
ARGS = [
    "--steps",
    "6",
    "--per_replica_batch",
    "8",
    "--log_every",
    "1",
    "--checkpoint_every",
    "3",
    "--eval_every",
    "3",
    "--eval_batches",
    "2",
]
# Runs `lmshards ARGV` in a fresh interpreter and says, as the last stdout line, whether TensorFlow was imported.
PROBE = """
import sys
from lmshards.command.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exited:  # argparse's errors
    code = exited.code
print("TENSORFLOW " + ("IMPORTED" if "tensorflow" in sys.modules else "NOT IMPORTED"))
sys.exit(code)
"""


@pytest.fixture(scope="module")
def shards(tmp_path_factory, sample_tokenizer, sample_files) -> str:
    out = tmp_path_factory.mktemp("shards")
    write_sample_shards(out, sample_tokenizer, sample_files, seq_len=SEQ_LEN, max_lines_per_file=60)
    return str(out)


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    return {**env, "PYTHONPATH": str(REPO)}


def probe(*argv: str) -> tuple[int, list[str], list[str], bool]:
    """(exit code, stdout lines before the marker, stderr lines, whether TensorFlow was imported)."""
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *argv],
        cwd=REPO,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    *out, marker = proc.stdout.splitlines()
    return proc.returncode, out, proc.stderr.splitlines(), marker == "TENSORFLOW IMPORTED"


def test_missing_shards_exit_2_in_one_line_without_importing_tensorflow(tmp_path):
    output = tmp_path / "X"
    proc = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "lmshards",
            "train",
            "--shards",
            "DOES_NOT_EXIST",
            "--output",
            str(output),
            "--steps",
            "10",
        ],
        cwd=REPO,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    imports = [line for line in proc.stderr.splitlines() if line.startswith("import time:")]
    others = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
    assert proc.returncode == 2 and proc.stdout == ""
    assert others == [
        "lmshards train: error: No manifest.json in 'DOES_NOT_EXIST': incomplete or not a preprocess output. "
        "Run `lmshards preprocess ... --output DIR` to completion (the manifest is written last)."
    ]
    assert imports and not [line for line in imports if "tensorflow" in line or "keras" in line]
    assert not output.exists()  # nothing was written


def test_the_literal_command_without_a_length_is_one_line_too(tmp_path):
    code, out, err, imported = probe(
        "train", "--shards", "DOES_NOT_EXIST", "--output", str(tmp_path / "X")
    )
    assert (code, out, imported) == (2, [], False)
    assert len(err) == 1 and err[0].startswith(
        "lmshards train: error: one of the arguments --steps --epochs is required"
    )


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--steps_per_execution", "0"),
        ("--steps_per_execution", "many"),
        ("--eval_batches", "0"),
        ("--final_eval", "half"),
    ],
)
def test_bad_values_of_the_new_flags_are_one_line(tmp_path, flag, value):
    code, _, err, imported = probe(
        "train", "--shards", "s", "--output", str(tmp_path), "--steps", "5", flag, value
    )
    assert (
        (code, imported) == (2, False)
        and len(err) == 1
        and err[0].startswith("lmshards train: error: ")
    )
    assert flag in err[0]


def test_a_missing_shard_is_found_before_tensorflow_loads(shards, tmp_path):
    copy = tmp_path / "shards"
    shutil.copytree(shards, copy)
    victim = sorted((copy / "validation").iterdir())[1]
    victim.unlink()
    code, _, err, imported = probe(
        "train", "--shards", str(copy), "--output", str(tmp_path / "run"), *ARGS
    )
    assert (code, imported) == (2, False)
    assert err == [
        f"lmshards train: error: Shard {str(victim)!r} listed in the manifest is missing; re-run `lmshards preprocess`."
    ]


def test_a_foreign_tokenizer_is_found_before_tensorflow_loads(shards, sample_tokenizer, tmp_path):
    other = json.loads(sample_tokenizer.read_text())
    other["model"]["vocab"]["zzz-not-in-the-original"] = len(other["model"]["vocab"])
    (tmp_path / "tokenizer.json").write_text(json.dumps(other))
    code, _, err, imported = probe(
        "train",
        "--shards",
        shards,
        "--output",
        str(tmp_path / "run"),
        "--tokenizer",
        str(tmp_path / "tokenizer.json"),
        *ARGS,
    )
    assert (code, imported) == (2, False) and len(err) == 1 and "has fingerprint sha256:" in err[0]


def test_an_output_that_cannot_be_written_is_found_before_tensorflow_loads(shards, tmp_path):
    (tmp_path / "a-file").write_text("not a directory")
    output = tmp_path / "a-file" / "run"
    code, _, err, imported = probe("train", "--shards", shards, "--output", str(output), *ARGS)
    assert (code, imported) == (2, False) and len(err) == 1
    assert err[0].startswith(f"lmshards train: error: --output {str(output)!r} is not writable")


def recorded_run(shards: str, run: Path, argv: list[str]) -> None:
    """The run_config.json the first command `argv` of a run in `run` writes (the sections the checks read)."""
    config = parse_config(["--shards", shards, "--output", str(run), *argv])
    model = preset_config("tiny", family="roberta", vocabulary_size=2000)
    run.mkdir()
    (run / "run_config.json").write_text(
        json.dumps({"train": config.to_dict(), "model": model.to_dict()})
    )


def test_a_damaged_run_config_is_one_line_naming_the_file_and_the_fix(shards, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "run_config.json").write_text('{"train": {"steps": 6')
    code, _, err, imported = probe("train", "--shards", shards, "--output", str(run), *ARGS)
    assert (code, imported) == (2, False) and len(err) == 1
    assert err[0].startswith(
        f"lmshards train: error: {str(run / 'run_config.json')!r} is damaged: not valid JSON"
    )
    assert "--restart" in err[0]


def test_a_changed_schedule_is_refused_before_tensorflow_loads(shards, tmp_path):
    run = tmp_path / "run"
    recorded_run(shards, run, ARGS)
    code, _, err, imported = probe(
        "train", "--shards", shards, "--output", str(run), *ARGS, "--learning_rate", "0.01"
    )
    assert (code, imported) == (2, False) and len(err) == 1
    assert "--learning_rate 0.0005 in the run, 0.01 in this command" in err[0]


def test_a_finished_run_prints_its_summary_and_exits_0_without_tensorflow(shards, tmp_path):
    run = tmp_path / "run"
    recorded_run(shards, run, ARGS)
    summary = {
        "global_step": 6,
        "train_loss": 7.1,
        "eval_loss": 7.3,
        "eval_perplexity": 1480.3,
        "eval_accuracy": 0.02,
        "final_eval": "full",
        "eval_batches": 4,
        "strategy": "cpu",
        "replicas": 1,
        "device_kind": "CPU",
    }
    (run / "run_summary.json").write_text(json.dumps(summary))
    code, out, err, imported = probe("train", "--shards", shards, "--output", str(run), *ARGS)
    assert (code, imported) == (0, False)
    assert out[0] == f"run {run}: finished at step 6" and out[2].startswith(
        "eval loss 7.3000, perplexity 1480.30"
    )
    assert "has finished; nothing to train" in "\n".join(err)


# ---------------------------------------------------------------- found by the run itself (TensorFlow runs)


@pytest.mark.slow
def test_ids_beyond_the_manifests_vocabulary_are_one_error_line(shards, tmp_path, capsys):
    from lmshards.train.commands import cli

    copy = tmp_path / "shards"
    shutil.copytree(shards, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["tokenizer"]["vocab_size"] = 1000  # the shards hold ids up to 2000
    (copy / "manifest.json").write_text(json.dumps(manifest))
    assert cli.main(["--shards", str(copy), "--output", str(tmp_path / "run"), *ARGS]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith(
        "lmshards train: error: The shards hold token ids of 1000 or more, but "
        f"{str(copy / 'manifest.json')!r} says the tokenizer has vocab_size 1000"
    )
    assert "Re-run `lmshards preprocess`" in err[-1] and not [
        line for line in err if "Traceback" in line
    ]


@pytest.mark.slow
def test_a_full_disk_during_the_run_is_one_error_line_and_exit_1(
    shards, tmp_path, capsys, monkeypatch
):
    import tensorflow as tf

    from lmshards.train.backends.tensorflow_checkpoint import RunCheckpoints
    from lmshards.train.commands import cli

    def full_disk(self, step):
        raise tf.errors.ResourceExhaustedError(
            None, None, f"{self.directory}/ckpt-{step}_temp; No space left on device"
        )

    monkeypatch.setattr(RunCheckpoints, "save", full_disk)
    run = tmp_path / "run"
    assert cli.main(["--shards", shards, "--output", str(run), *ARGS]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == (
        f"lmshards train: error: Cannot write to {str(run)!r}: the disk is full (No space left on device); "
        "free some space or choose another location, then run the command again."
    )
    assert not (run / "run_summary.json").exists()


def test_an_os_error_of_the_disk_is_exit_1(shards, tmp_path, capsys, monkeypatch):
    from lmshards.train.commands import cli

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr("lmshards.train.loop.preflight.check_writable", read_only)
    assert cli.main(["--shards", shards, "--output", str(tmp_path / "run"), *ARGS]) == 1
    err = capsys.readouterr().err
    assert err.endswith(
        "the file system is read-only (Read-only file system); choose a location on a writable "
        "file system, then run the command again.\n"
    )


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_train_refuses_an_output_that_is_not_a_run_directory_and_leaves_it_as_it_was(
    shards, tmp_path, capsys
):
    from lmshards.train.commands import cli

    other = tmp_path / "other_shards"
    shutil.copytree(shards, other)
    home = tmp_path / "home"
    home.mkdir()
    (home / "thesis.tex").write_text("mine")
    cases = [
        (shards, "is the same location as --shards"),
        (str(Path(shards) / "run"), "is inside --shards"),
        (str(other), "is a shard set (written by `lmshards preprocess`), not a run directory"),
        (str(home), "holds files no training run wrote ('thesis.tex')"),
    ]
    for output, expected in cases:
        before = {p: tree(Path(p)) for p in (shards, other, home)}
        assert cli.main(["--shards", shards, "--output", output, *ARGS, "--restart"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("lmshards train: error: --output") and expected in err, err
        assert len(err.splitlines()) == 1
        assert {p: tree(Path(p)) for p in (shards, other, home)} == before
    assert not (Path(shards) / "run").exists()


def test_restart_never_deletes_a_users_file_in_the_run_directory(shards, tmp_path, capsys):
    from lmshards.train.commands import cli

    run = tmp_path / "run"
    recorded_run(shards, run, ARGS)
    (run / "checkpoints").mkdir(exist_ok=True)
    (run / "checkpoints" / "thesis.tex").write_text("mine")
    before = tree(run)
    assert cli.main(["--shards", shards, "--output", str(run), *ARGS, "--restart"]) == 2
    err = capsys.readouterr().err
    assert "holds files no training run wrote ('checkpoints/thesis.tex')" in err
    assert tree(run) == before
