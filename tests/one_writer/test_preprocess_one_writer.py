"""Two `lmshards preprocess` runs into one --output: the second exits 2 naming the first, writes nothing,
and the first completes an output that `inspect --verify` passes; locally and on gs://.

The first run is in this process and holds its lease while it is paused (just before it writes its
first file) until the second, a separate process, has finished: the race is forced, not hoped for.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from lmshards.plumbing import fs
from lmshards.plumbing.lease import LEASE_NAME, lease_path
from lmshards.preprocess import cli, inspect_cli, launch
from lmshards.schemas.manifest import read_manifest

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "data" / "golden"
TOKENIZER = GOLDEN / "tokenizer.json"
FAST = ["--seq_len", "16", "--tokenizer_threads", "1", "--shard_multiple", "2"]
_WAIT_S = 60.0


def _second_process(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "lmshards", "preprocess", *argv, *FAST],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def _listing(output: str) -> list[str]:
    filesystem, path = fs.filesystem(output)
    filesystem.invalidate_cache()
    return sorted(p.removeprefix(path.rstrip("/") + "/") for p in filesystem.find(path))


def _race(monkeypatch, corpus: str, output: str, capsys) -> subprocess.CompletedProcess:
    """Runs preprocess here, and a second one as its own process while the first holds the lease."""
    second_done = threading.Event()
    real_write = launch.write_known_files

    def paused_write(shard_set):
        assert second_done.wait(_WAIT_S)
        real_write(shard_set)

    monkeypatch.setattr(launch, "write_known_files", paused_write)
    codes: list[int] = []
    first = threading.Thread(
        target=lambda: codes.append(
            cli.main(["--input", corpus, "--tokenizer", str(TOKENIZER), "--output", output, *FAST])
        )
    )
    first.start()
    deadline = time.monotonic() + _WAIT_S
    while not fs.exists(lease_path(output)):
        assert time.monotonic() < deadline and first.is_alive(), capsys.readouterr().err
        time.sleep(0.05)
    second = _second_process(
        "--input", corpus, "--tokenizer", str(TOKENIZER), "--output", output, "--overwrite"
    )
    second_done.set()
    first.join(_WAIT_S * 4)
    assert codes == [0], capsys.readouterr().err
    return second


def _check_race(second: subprocess.CompletedProcess, output: str, capsys) -> None:
    assert second.returncode == 2, second.stderr
    assert "Traceback" not in second.stderr
    line = second.stderr.strip().splitlines()[-1]
    assert line.startswith("lmshards preprocess: error: --output ")
    assert f"on host {socket.gethostname()!r}, pid {os.getpid()}, started " in line
    assert "`lmshards preprocess`" in line
    # The first run's output is complete and only its own: every shard listed and verified.
    manifest = read_manifest(output)
    shards = {
        p.removeprefix(output.rstrip("/") + "/").removeprefix(fs.filesystem(output)[1] + "/")
        for split in manifest.splits
        for p in manifest.shard_paths(output, split)
    }
    listed = _listing(output)
    assert LEASE_NAME not in listed  # released
    assert {p for p in listed if p.startswith(("train/", "validation/"))} == shards
    capsys.readouterr()
    assert inspect_cli.main([output, "--verify"]) == 0


def test_a_second_local_preprocess_is_refused_and_the_first_completes(
    monkeypatch, tmp_path, capsys
):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text((GOLDEN / "corpus" / "en.txt").read_text(encoding="utf-8")[:20_000])
    before = corpus.read_bytes()
    output = str(tmp_path / "out")
    second = _race(monkeypatch, str(corpus), output, capsys)
    _check_race(second, output, capsys)
    assert corpus.read_bytes() == before


@pytest.mark.gcs
@pytest.mark.slow
def test_a_second_gcs_preprocess_is_refused_and_the_first_completes(
    monkeypatch, gcs_emulator, capsys
):
    corpus = f"{gcs_emulator}/race/corpus.txt"
    data = (GOLDEN / "corpus" / "en.txt").read_bytes()[:20_000]
    fs.write_bytes_atomic(corpus, data)
    output = f"{gcs_emulator}/race/out"
    second = _race(monkeypatch, corpus, output, capsys)
    _check_race(second, output, capsys)
    assert fs.read_bytes(corpus) == data
