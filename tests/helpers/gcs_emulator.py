"""A real GCS emulator (gcp-storage-emulator) on 127.0.0.1 for gs:// tests, and the env it needs.

It runs through gcs_emulator_main.py, which adds GCS's `ifGenerationMatch` preconditions (the
emulator alone ignores them; output leases rely on them).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

BUCKET = "lmshards-test"
_START_TIMEOUT_S = 30.0
_MAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gcs_emulator_main.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _no_beam_credentials() -> None:
    """Pre-sets Beam's per-process credentials cache to 'none': skips ~22 s of retried lookups."""
    with contextlib.suppress(ImportError):
        from apache_beam.internal.gcp import auth

        auth._Credentials._credentials_init = True
        auth._Credentials._credentials = None


def emulator_env(host: str) -> dict[str, str]:
    return {
        "STORAGE_EMULATOR_HOST": host,
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
        "GOOGLE_CLOUD_PROJECT": "lmshards-test",
    }


@contextlib.contextmanager
def running_emulator(workdir: str) -> Iterator[str]:
    """Starts the emulator with an empty default bucket; yields its host URL; sets the env for gcsfs and Beam."""
    port = _free_port()
    host = f"http://127.0.0.1:{port}"
    log = open(os.path.join(workdir, "gcs_emulator.log"), "wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            _MAIN,
            "start",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--in-memory",
            "--default-bucket",
            BUCKET,
            "-q",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    saved = {k: os.environ.get(k) for k in emulator_env(host)}
    try:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            try:
                urllib.request.urlopen(f"{host}/storage/v1/b/{BUCKET}", timeout=1).read()
                break
            except OSError as err:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"GCS emulator did not start; see {log.name}") from err
                time.sleep(0.2)
        os.environ.update(emulator_env(host))
        _no_beam_credentials()
        yield host
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        proc.terminate()
        proc.wait(timeout=10)
        log.close()
