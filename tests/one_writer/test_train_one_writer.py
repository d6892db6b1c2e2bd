"""Two `lmshards train` on one --output: the second exits 2 naming the first and touches nothing; the first
finishes a complete run. A lease left by a killed run is taken over. Locally, and on gs://.

TensorFlow cannot write to the GCS emulator (its gs:// file system has no emulator switch), so on gs://
the first writer is a process holding the lease as `train` does, and the second is a real `train`.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lmshards.plumbing import fs, lease
from tests.helpers.shard_factory import write_sample_shards

REPO = Path(__file__).resolve().parents[2]
TRAIN_ARGS = [
    "--steps",
    "3",
    "--per_replica_batch",
    "4",
    "--checkpoint_every",
    "3",
    "--eval_every",
    "3",
    "--eval_batches",
    "1",
    "--log_every",
    "1",
    "--shuffle_buffer",
    "16",
    "--model_preset",
    "tiny",
]


@pytest.fixture(scope="module")
def shards(tmp_path_factory, sample_tokenizer, sample_files) -> str:
    out = tmp_path_factory.mktemp("shards")
    write_sample_shards(out, sample_tokenizer, sample_files, seq_len=32, max_lines_per_file=30)
    return str(out)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def _second_train(shards: str, output: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lmshards", "train", "--shards", shards, "--output", output]
        + TRAIN_ARGS,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _assert_refused(second: subprocess.CompletedProcess, *, pid: int, output: str) -> None:
    assert second.returncode == 2, second.stderr
    assert "Traceback" not in second.stderr
    line = second.stderr.strip().splitlines()[-1]
    assert line.startswith(f"lmshards train: error: --output {output!r} is being written by ")
    assert f"`lmshards train` on host {socket.gethostname()!r}, pid {pid}, started " in line


@pytest.mark.slow
def test_a_second_train_is_refused_while_the_first_finishes_after_taking_over_a_dead_lease(
    shards, tmp_path, monkeypatch, capsys
):
    from lmshards.train.commands import cli

    run = tmp_path / "run"
    run.mkdir()
    # What a `kill -9`-ed train leaves: its lease, naming a process that no longer exists.
    dead = lease.Holder(
        socket.gethostname(), _dead_pid(), "train", time.time(), "d" * 32, time.time()
    )
    (run / lease.LEASE_NAME).write_text(json.dumps({"format": lease.LEASE_FORMAT, **dead.__dict__}))
    seconds: list[subprocess.CompletedProcess] = []
    real_preflight = cli.preflight

    def preflight_with_a_second_writer(config):
        seconds.append(_second_train(shards, str(run)))  # while this run holds the lease
        return real_preflight(config)

    monkeypatch.setattr(cli, "preflight", preflight_with_a_second_writer)
    code = cli.main(["--shards", shards, "--output", str(run), *TRAIN_ARGS])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "Taking over the lease" in err and f"process {dead.pid} on this host has exited" in err
    _assert_refused(seconds[0], pid=os.getpid(), output=str(run))
    summary = json.loads((run / "run_summary.json").read_text())
    assert summary["global_step"] == 3
    assert json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["step"] == 3
    assert not (run / lease.LEASE_NAME).exists()


@pytest.mark.gcs
@pytest.mark.slow
def test_a_train_on_a_gcs_output_held_by_another_process_is_refused_and_writes_nothing(
    shards, gcs_emulator
):
    output = f"{gcs_emulator}/held-run"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from lmshards.plumbing.lease import output_lease\n"
            f"with output_lease({output!r}, command='train'):\n"
            "    print('held', flush=True); sys.stdin.read()",
        ],
        env=_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        second = _second_train(shards, output)
        _assert_refused(second, pid=holder.pid, output=output)
        filesystem, path = fs.filesystem(output)
        filesystem.invalidate_cache()
        assert [p.rsplit("/", 1)[-1] for p in filesystem.find(path)] == [lease.LEASE_NAME]
    finally:
        holder.communicate("", timeout=60)
    assert holder.returncode == 0
    filesystem.invalidate_cache()
    assert not filesystem.exists(f"{path}/{lease.LEASE_NAME}")
