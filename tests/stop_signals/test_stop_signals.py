"""SIGTERM and SIGINT stop every writing command the same way: exit 130, one line and never a traceback,
no lease and no partial output left; a writer whose lease was deleted or taken over stops at once.
Real processes and real signals; each command is signalled once it holds its output's lease, or, in the
sweep, at many moments after it installs its handlers. A signal that lands where Python cannot raise
(a garbage-collection callback, a `__del__`) is never lost."""

from __future__ import annotations

import gc
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lmshards.plumbing import lease, stopping
from lmshards.schemas.constants import MANIFEST_NAME, MODEL_CONFIG_JSON, MODEL_SAFETENSORS
from lmshards.schemas.layouts import RUN_SUMMARY_JSON, STATS_JSON
from tests.helpers.shard_factory import write_sample_shards

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "data" / "sample"
TIMEOUT_S = 300
PREPROCESS_COPIES = 4
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
    # The sample four times over (copies under other names): the sample alone is done about a second
    # after its lease appears on a fast machine, when the signal is sent.
    corpus = tmp_path / "corpus"
    for copy in range(PREPROCESS_COPIES):
        shutil.copytree(SAMPLE, corpus / f"copy{copy}")
    argv = {
        "preprocess": ["preprocess", "--input", str(corpus), "--tokenizer", str(sample_tokenizer)],
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


# ---------------------------------------------------------------- a signal where Python cannot raise


def _spin(seconds: float) -> None:
    """Runs Python code (where a pending signal handler runs) for about `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pass


def _signal_inside_gc_callback(phase: str, info: dict) -> None:
    if phase == "start":
        os.kill(os.getpid(), signal.SIGTERM)
        _spin(0.05)  # the handler runs here, inside the callback, as it can in JAX's


class _SignalledInDel:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        _spin(0.05)


@pytest.mark.parametrize("where", ["gc callback", "__del__"])
def test_a_stop_raised_where_python_swallows_it_is_raised_again_and_never_printed(where, capfd):
    reached_after = []
    with pytest.raises(stopping.Stopped) as stopped:
        with stopping.stop_signals():
            if where == "gc callback":
                gc.callbacks.append(_signal_inside_gc_callback)
                try:
                    gc.collect()
                finally:
                    gc.callbacks.remove(_signal_inside_gc_callback)
            else:
                _SignalledInDel()  # dropped at once: __del__ runs here
            reached_after.append(True)
            _spin(5.0)  # the stop lands here, long before this ends
    assert stopped.value.signum == signal.SIGTERM
    assert reached_after == [True]
    assert capfd.readouterr().err == ""  # no "Exception ignored in ..."


def test_a_stop_inside_a_deferred_block_is_raised_when_it_ends():
    done = []
    with pytest.raises(stopping.Stopped):
        with stopping.stop_signals():
            with stopping.deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                _spin(0.05)
                done.append(True)
            done.append(False)
    assert done == [True]


def test_a_stop_belongs_to_the_command_it_arrived_in(capsys):
    """A caller that goes on after a stopped command: its next command's user error is that error
    (exit 2), not a stop (130), also for a command without stop_signals() (train keeps its own)."""
    from lmshards.plumbing.cli import EXIT_INTERRUPTED, EXIT_USAGE, one_line_errors
    from lmshards.plumbing.errors import LmshardsError

    with one_line_errors("first") as stopped, stopping.stop_signals():
        os.kill(os.getpid(), signal.SIGTERM)
        _spin(5.0)  # the stop lands here
    with one_line_errors("second") as failed:
        raise LmshardsError("bad flag --x; use --y")
    assert (stopped.code, failed.code) == (EXIT_INTERRUPTED, EXIT_USAGE)
    err = capsys.readouterr().err.splitlines()
    assert err[-2].startswith("lmshards first: error: stopped by SIGTERM")
    assert err[-1] == "lmshards second: error: bad flag --x; use --y"


ENDED = """
import os, signal
from lmshards.plumbing import stopping
stopping.ignore_signals()  # as the command line does once its command has ended
os.kill(os.getpid(), signal.SIGTERM)
os.kill(os.getpid(), signal.SIGINT)
print("exited on its own", flush=True)
"""


def test_a_signal_after_the_command_ended_leaves_its_exit_code():
    done = subprocess.run(
        [sys.executable, "-c", ENDED], cwd=REPO, env=environment(), capture_output=True, text=True
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "exited on its own\n", "")


# ---------------------------------------------------------------- the sweep: SIGTERM at many moments

SWEEP_LINES = 150  # lines of each sample file: every command still runs for seconds
TRAIN_STEPS = 4
# Seconds between a command installing its signal handlers and the SIGTERM: from its start-up through
# its imports (TensorFlow, JAX, Beam) and its work. None: no signal, the run must complete.
SWEEP_DELAYS = {
    "preprocess": (0.0, 1.0, 3.0),
    "repack": (0.0, 2.0),
    "stats": (0.5, 4.0),
    "train": (2.0, None),
    "export": (0.5, 3.0, 8.0),
}
STOPPED_EXIT = {"train": 75}  # train saves and exits to be resumed; every other command exits 130


def catches(pid: int, signum: int) -> bool:
    """Whether process pid has a handler of its own for signum (Linux: the SigCgt mask)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def signal_after_handlers(argv: list[str], delay: float | None) -> tuple[int, str]:
    """Runs `lmshards argv`, sends SIGTERM `delay` seconds after it installs its handler (unless it has
    ended, or delay is None); (exit code, stderr)."""
    proc = start(*argv)
    deadline = time.monotonic() + TIMEOUT_S
    while delay is not None and proc.poll() is None and not catches(proc.pid, signal.SIGTERM):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    if delay is not None:
        time.sleep(delay)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=TIMEOUT_S)
    return proc.returncode, err


def complete_shard_set(output: Path) -> bool:
    """Its manifest is there and every shard it lists has the listed size and SHA-256."""
    if not (output / MANIFEST_NAME).exists():
        return False
    manifest = json.loads((output / MANIFEST_NAME).read_text())
    shards = [shard for split in manifest["splits"].values() for shard in split["shards"]]
    return bool(shards) and all(
        hashlib.sha256((output / shard["path"]).read_bytes()).hexdigest() == shard["sha256"]
        for shard in shards
    )


def complete_output(command: str, output: Path) -> bool:
    if command in ("preprocess", "repack"):
        return complete_shard_set(output)
    if command == "stats":
        return (output / STATS_JSON).exists()
    if command == "export":
        return (output / MODEL_CONFIG_JSON).exists() and (output / MODEL_SAFETENSORS).exists()
    summary = output / RUN_SUMMARY_JSON
    return summary.exists() and json.loads(summary.read_text())["global_step"] == TRAIN_STEPS


def stopped_cleanly(command: str, output: Path) -> bool:
    """A stopped command left nothing that looks complete (train: a run to resume, not finished)."""
    if command == "train":
        return not (output / RUN_SUMMARY_JSON).exists()
    lease_file = Path(lease.sibling_lease_path(str(output))) if command == "export" else output
    return not output.exists() and not lease_file.exists()


@pytest.fixture(scope="module")
def sweep_inputs(tmp_path_factory, sample_tokenizer, sample_files) -> dict[str, Path]:
    """A small corpus, its shard set with a token store, and a finished tiny JAX run to export."""
    root = tmp_path_factory.mktemp("sweep")
    corpus = root / "corpus"
    for path in sample_files:
        target = corpus / path.parent.name / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("\n".join(path.read_text(encoding="utf-8").splitlines()[:SWEEP_LINES]))
    inputs = {"corpus": corpus, "tokenizer": sample_tokenizer, "shards": root / "shards"}
    code, err = signal_after_handlers(sweep_argv("preprocess", inputs, inputs["shards"]), None)
    assert code == 0, err[-3000:]
    return inputs


def sweep_argv(command: str, inputs: dict[str, Path], output: Path) -> list[str]:
    if command == "preprocess":
        return [
            "preprocess",
            "--input",
            str(inputs["corpus"]),
            "--tokenizer",
            str(inputs["tokenizer"]),
            "--output",
            str(output),
            "--seq_len",
            "32",
            "--keep_tokens",
        ]
    if command == "repack":
        return [
            "repack",
            "--tokens",
            str(inputs["shards"]),
            "--output",
            str(output),
            "--seq_len",
            "64",
        ]
    if command == "stats":
        return ["stats", str(inputs["shards"]), "--output", str(output)]
    if command == "export":
        return ["export", str(inputs["run"]), "--output", str(output)]
    return [
        "train",
        "--shards",
        str(inputs["shards"]),
        "--output",
        str(output),
        "--backend",
        "jax",
        "--steps",
        str(TRAIN_STEPS),
        "--per_replica_batch",
        "4",
        "--checkpoint_every",
        "2",
        "--eval_every",
        str(TRAIN_STEPS),
        "--eval_batches",
        "1",
        "--final_eval",
        "none",
    ]


@pytest.mark.slow
@pytest.mark.parametrize("command", ["preprocess", "repack", "stats", "train", "export"])
def test_sigterm_at_any_moment_ends_stopped_with_nothing_complete_or_done_with_a_whole_output(
    command, sweep_inputs, tmp_path
):
    """Each command is signalled at several moments: while it starts, while TensorFlow, JAX or Beam load
    and run, and late in its work. Every run ends stopped (exit 130; train 75, resumable) with nothing
    that looks complete, or exit 0 with a whole output; never an "Exception ignored"."""
    outcomes = []
    for number, delay in enumerate(SWEEP_DELAYS[command]):
        output = tmp_path / f"out{number}"
        code, err = signal_after_handlers(sweep_argv(command, sweep_inputs, output), delay)
        assert "Exception ignored" not in err and "Traceback" not in err, err[-3000:]
        if code == 0:
            assert complete_output(command, output), (delay, err[-3000:])
            if command == "train":
                sweep_inputs["run"] = output  # the run export's sweep exports
        else:
            assert code == STOPPED_EXIT.get(command, 130), (delay, code, err[-3000:])
            assert stopped_cleanly(command, output), (delay, sorted(os.listdir(output.parent)))
        outcomes.append(code)
    assert None in SWEEP_DELAYS[command] or any(code != 0 for code in outcomes), outcomes
