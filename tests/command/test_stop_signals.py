"""SIGTERM and SIGINT stop every writing command the same way: exit 130, one line and never a traceback,
no lease and no partial output left; a writer whose lease was deleted or taken over stops at once.
Real processes and real signals; each command is signalled once it holds its output's lease."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lmshards.plumbing import lease
from tests.helpers.shard_factory import write_sample_shards

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "data" / "sample"
TIMEOUT_S = 300
NATIVE_LOG = re.compile(r"^[EWI]\d{4} \d\d:\d\d:")


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def start(*argv: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "lmshards", *argv],
        cwd=REPO,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def signal_once_writing(
    proc: subprocess.Popen, lease_file: Path, signum: int
) -> tuple[int, list[str]]:
    """Sends signum a second after lease_file appears; (exit code, stderr lines that are not INFO logs)."""
    deadline = time.monotonic() + TIMEOUT_S
    while not lease_file.exists():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(1.0)
    assert proc.poll() is None, "finished before the signal: give it more work"
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=TIMEOUT_S)
    # Progress logs and TensorFlow's native start-up lines (absl's `E0000 00:00:...` format) aside.
    return proc.returncode, [
        line for line in err.splitlines() if " INFO " not in line and not NATIVE_LOG.match(line)
    ]


@pytest.fixture(scope="module")
def shards(tmp_path_factory, sample_tokenizer, sample_files) -> Path:
    out = tmp_path_factory.mktemp("shards")
    write_sample_shards(out, sample_tokenizer, sample_files, seq_len=32, max_lines_per_file=400)
    return out


@pytest.mark.slow
@pytest.mark.parametrize(
    "command, signum",
    [("preprocess", signal.SIGINT), ("stats", signal.SIGTERM), ("tokenizer train", signal.SIGTERM)],
)
def test_a_signal_stops_a_writer_in_one_line_leaving_no_lease_and_no_partial_output(
    command, signum, shards, sample_tokenizer, tmp_path
):
    output = tmp_path / "out"
    argv = {
        "preprocess": ["preprocess", "--input", str(SAMPLE), "--tokenizer", str(sample_tokenizer)],
        "stats": ["stats", str(shards)],
        "tokenizer train": ["tokenizer", "train", "--input", str(SAMPLE), "--model", "bpe"],
    }[command]
    if command == "stats":
        output = shards / "stats"
    else:
        argv += ["--output", str(output)]
    before = sorted(os.listdir(shards))
    code, lines = signal_once_writing(start(*argv), output / lease.LEASE_NAME, signum)
    assert code == 130
    assert lines == [
        f"lmshards {command}: error: stopped by {signal.Signals(signum).name}; its lease and partial "
        "output were removed. Run the command again to start over."
    ]
    assert not output.exists()
    assert sorted(os.listdir(shards)) == before


HOLD = """
import sys, time
from lmshards.plumbing.lease import output_lease
with output_lease(sys.argv[1], command="preprocess", stale_after_s=float(sys.argv[2])):
    print("holding", flush=True)
    time.sleep(60)
"""


def hold(output: Path, stale_after_s: float) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(output), str(stale_after_s)],
        cwd=REPO,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline() == "holding\n"
    return proc


def test_a_writer_whose_lease_was_deleted_stops_at_once(tmp_path):
    output = tmp_path / "out"
    proc = hold(output, stale_after_s=1.0)  # renewed every 0.1 s
    (output / lease.LEASE_NAME).unlink()
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert err.splitlines() == [
        f"lmshards preprocess: error: lost the lease on {str(output)!r} (nothing holds it now (the lease file "
        "was deleted)); stopped at once, leaving the output to its new writer. Check which command should "
        "write there, and rerun this one with another --output if both should."
    ]


def test_a_writer_stopped_past_its_stale_time_finds_its_lease_taken_and_stops_naming_the_new_holder(
    tmp_path,
):
    output = tmp_path / "out"
    first = hold(output, stale_after_s=1.0)
    first.send_signal(signal.SIGSTOP)
    time.sleep(1.5)  # longer than its stale time: the lease may be taken over
    second = lease.acquire(str(output), command="train")
    try:
        first.send_signal(signal.SIGCONT)
        _, err = first.communicate(timeout=30)
        assert first.returncode == 1
        assert (
            f"lmshards preprocess: error: lost the lease on {str(output)!r} (it is now held by "
            in err
        )
        assert f"`lmshards train` on host {socket.gethostname()!r}, pid {os.getpid()}" in err
        found = json.loads((output / lease.LEASE_NAME).read_text())
        assert found["token"] == second.holder.token  # the new holder's lease is left alone
    finally:
        second.release()
