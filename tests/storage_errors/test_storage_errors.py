"""gs:// failures end in one `lmshards COMMAND: error:` line naming the bucket and what to check, after a
bounded wait: an endpoint that does not answer (a closed port on 127.0.0.1), a bucket that does not
exist (the emulator's 404) and a permission error (gcsfs' 403; the emulator has no permissions)."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from lmshards.plumbing import cli, fs
from lmshards.plumbing.errors import StorageError
from lmshards.preprocess import inspect_cli
from tests.helpers.gcs_emulator import emulator_env

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


def _entry(body) -> int:
    """A command's main as the commands write it, around body."""
    with cli.one_line_errors("inspect") as failed:
        return body()
    return failed.code


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

    assert _entry(body) == 2
    line = _one_error_line(capsys.readouterr().err, "inspect")
    assert "permission denied on bucket 'team-bucket'" in line
    assert "credentials" in line and "roles/storage.objectAdmin" in line


def test_other_errors_keep_their_traceback():
    def body():
        raise OSError("some local failure")

    with pytest.raises(OSError, match="some local failure"):
        _entry(body)


class _LyingGcs(http.server.BaseHTTPRequestHandler):
    """Just enough of GCS's JSON API for gcsfs to read gs://bkt/obj: its listing and metadata answer
    honestly; its media download promises OBJECT_BYTES bytes (Content-Length) and sends SENT_BYTES,
    then closes the connection (`stall` False) or keeps it open without a byte more."""

    OBJECT_BYTES, SENT_BYTES = 1000, 10
    stall = False
    downloads = 0

    def do_GET(self):
        if "/download/" in self.path:
            type(self).downloads += 1
            self.send_response(200)
            self.send_header("Content-Length", str(self.OBJECT_BYTES))
            self.end_headers()
            self.wfile.write(b"x" * self.SENT_BYTES)
            self.wfile.flush()
            if self.stall:
                time.sleep(5)
            self.close_connection = True
            return
        if "/o/" in self.path:
            body = {
                "name": "obj",
                "bucket": "bkt",
                "size": str(self.OBJECT_BYTES),
                "generation": "1",
            }
        else:
            body = {"kind": "storage#objects", "items": []}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):  # quiet
        pass


class _QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):  # the client hung up on a lie: expected
        pass


@pytest.fixture
def lying_gcs(monkeypatch):
    """gs:// pointed at a _LyingGcs on 127.0.0.1, with a retry budget of 2 attempts 10 ms apart."""
    server = _QuietServer(("127.0.0.1", 0), _LyingGcs)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    for name, value in emulator_env(f"http://127.0.0.1:{server.server_port}").items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(fs, "GCS_ATTEMPTS", 2)
    monkeypatch.setattr(fs, "GCS_BACKOFF_S", 0.01)
    monkeypatch.setattr(fs, "GCS_READ_TIMEOUT_S", 0.5)
    _LyingGcs.downloads = 0
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_body_shorter_than_its_content_length_is_an_error_naming_the_object(lying_gcs):
    with pytest.raises(StorageError) as e:
        fs.read_bytes("gs://bkt/obj")
    assert str(e.value) == (
        "Reading gs://bkt/obj failed 2 times (its body was shorter than the size the answer promised "
        f"(Content-Length)). Check the network and the endpoint (STORAGE_EMULATOR_HOST={lying_gcs}), "
        "then run the command again."
    )
    assert _LyingGcs.downloads == 2  # the whole retry budget, no more


def test_a_read_that_stalls_ends_after_the_read_timeout_of_each_attempt(lying_gcs, monkeypatch):
    monkeypatch.setattr(_LyingGcs, "stall", True)
    started = time.monotonic()
    with pytest.raises(StorageError) as e:
        fs.read_bytes("gs://bkt/obj")
    assert time.monotonic() - started < 4  # 2 attempts of 0.5 s, never the server's 5 s stall
    assert str(e.value).startswith("Reading gs://bkt/obj failed 2 times (no data for 0.5 s).")


def test_a_request_failure_is_one_line_from_any_command(lying_gcs, capsys):
    assert inspect_cli.main(["gs://bkt"]) == 2  # the manifest read fails like any object
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines() == [
        "lmshards inspect: error: Reading gs://bkt/manifest.json failed 2 times (its body was shorter than "
        "the size the answer promised (Content-Length)). Check the network and the endpoint "
        f"(STORAGE_EMULATOR_HOST={lying_gcs}), then run the command again."
    ]
