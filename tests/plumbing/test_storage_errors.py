"""gs:// failures end in one `lmshards COMMAND: error:` line naming the bucket and what to check, after a
bounded wait: an endpoint that does not answer (a closed port on 127.0.0.1), a bucket that does not
exist (the emulator's 404) and a permission error (gcsfs' 403; the emulator has no permissions)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lmshards.plumbing import cli
from lmshards.preprocess import inspect_cli

REPO = Path(__file__).resolve().parents[2]
_BOUND_S = 3


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _lmshards(*argv: str, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "lmshards", *argv],
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done, time.monotonic() - started


def _one_error_line(err: str, command: str) -> str:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"lmshards {command}: error: "), err
    return lines[0]


@pytest.mark.parametrize("command", ["inspect", "train"])
def test_an_unreachable_endpoint_is_one_line_after_a_bounded_wait(command, tmp_path):
    env = {
        "STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{_closed_port()}",
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
        "LMSHARDS_GCS_TIMEOUT_S": str(_BOUND_S),
    }
    run = tmp_path / "run"
    argv = {
        "inspect": ["inspect", "gs://some-bucket/shards", "--verify"],
        "train": [
            "train",
            "--shards",
            "gs://some-bucket/shards",
            "--output",
            str(run),
            "--steps",
            "1",
        ],
    }[command]
    done, seconds = _lmshards(*argv, env=env)
    assert done.returncode == 2
    line = _one_error_line(done.stderr, command)
    assert f"cannot reach bucket 'some-bucket' (no answer within {_BOUND_S} s)" in line
    assert "Check the network, the endpoint (STORAGE_EMULATOR_HOST=http://127.0.0.1:" in line
    assert seconds < _BOUND_S + 25  # start-up included; gcsfs alone retries for about a minute
    assert not run.exists()  # nothing written, not even the lease's directory


@pytest.mark.gcs
def test_a_missing_bucket_is_named_in_one_line(gcs_emulator, capsys, tmp_path):
    assert inspect_cli.main(["gs://lmshards-no-such-bucket/shards"]) == 2
    line = _one_error_line(capsys.readouterr().err, "inspect")
    assert (
        "bucket 'lmshards-no-such-bucket' does not exist or your credentials cannot see it" in line
    )


def test_a_permission_error_mid_run_is_one_line_naming_the_bucket(capsys):
    def body():
        # What gcsfs raises for HTTP 403 (gcsfs.retry.validate_response).
        raise OSError(
            "Forbidden: b/team-bucket/o/shards%2Fmanifest.json\ncaller lacks storage.objects.get"
        )

    assert cli.run_command("inspect", body) == 2
    line = _one_error_line(capsys.readouterr().err, "inspect")
    assert "permission denied on bucket 'team-bucket'" in line
    assert "credentials" in line and "roles/storage.objectAdmin" in line


def test_other_errors_keep_their_traceback():
    def body():
        raise OSError("some local failure")

    with pytest.raises(OSError, match="some local failure"):
        cli.run_command("inspect", body)
