"""Every writing command takes the lease on its output first: with another live writer holding it, each
exits 2 naming the holder, before it reads, writes or deletes anything there."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from lmshards.command.cli import main
from lmshards.plumbing import lease

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    "command",
    ["tokenizer train", "dataset export", "stats", "export", "preprocess", "train"],
)
def test_each_writer_refuses_an_output_another_process_holds(command, tmp_path, capsys):
    output = tmp_path / "out"
    output.mkdir()
    (output / "earlier.txt").write_text("the user's")
    corpus = GOLDEN / "corpus" / "en.txt"
    argv = {
        "tokenizer train": ["tokenizer", "train", "--input", str(corpus), "--output", str(output)],
        "dataset export": [
            "dataset",
            "export",
            "x",
            "--output",
            str(output),
            "--overwrite",
        ],
        "stats": ["stats", str(tmp_path / "shards"), "--output", str(output)],
        "export": ["export", str(tmp_path / "run"), "--output", str(output), "--overwrite"],
        "preprocess": [
            "preprocess",
            "--input",
            str(corpus),
            "--tokenizer",
            str(GOLDEN / "tokenizer.json"),
            "--output",
            str(output),
            "--overwrite",
        ],
        "train": [
            "train",
            "--shards",
            str(tmp_path / "shards"),
            "--output",
            str(output),
            "--steps",
            "1",
        ],
    }[command]
    path = lease.sibling_lease_path(str(output)) if command == "export" else None
    with lease.output_lease(str(output), command="other", path=path):  # a live holder: this process
        before = _tree(tmp_path)
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert _tree(tmp_path) == before
    line = err.strip().splitlines()[-1]
    assert line.startswith(
        f"lmshards {command}: error: --output {str(output)!r} is being written by "
    )
    assert f"on host {socket.gethostname()!r}, pid {os.getpid()}" in line
