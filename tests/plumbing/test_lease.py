"""One writer per output: the lease is exclusive, renewed, released, and taken over only from a holder
that is gone (dead pid on this host, or not renewed for STALE_AFTER_S), locally and on gs://."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lmshards.plumbing import fs, lease
from lmshards.plumbing.outputs import clear_owned_output, owned_entries
from lmshards.schemas.constants import MANIFEST_FORMAT
from lmshards.schemas.layouts import PREPROCESS_OUTPUT


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _write_lease(path: str, *, host: str, pid: int, renewed_at: float) -> None:
    holder = lease.Holder(host, pid, "preprocess", renewed_at - 5, "f" * 32, renewed_at)
    data = json.dumps({"format": lease.LEASE_FORMAT, **holder.__dict__}).encode()
    filesystem, p = fs.filesystem(path)
    if not fs.is_remote(path):
        os.makedirs(os.path.dirname(p), exist_ok=True)
    filesystem.pipe_file(p, data)
    if not fs.is_remote(path):
        os.utime(p, (renewed_at, renewed_at))


@pytest.fixture(params=["local", "gcs"])
def output(request, tmp_path) -> str:
    if request.param == "local":
        return str(tmp_path / "out")
    prefix = request.getfixturevalue("gcs_emulator")
    return f"{prefix}/{request.node.name.replace('[', '_').rstrip(']')}-{time.time_ns()}"


def test_a_second_writer_is_refused_naming_the_holder_and_the_lease_goes_at_release(output):
    first = lease.acquire(output, command="preprocess")
    with pytest.raises(lease.LeaseHeldError) as refused:
        lease.acquire(output, command="train")
    message = str(refused.value)
    assert f"on host {socket.gethostname()!r}, pid {os.getpid()}, started " in message
    assert "`lmshards preprocess`" in message and lease.lease_path(output) in message
    assert "Wait for it to finish" in message and f"{lease.STALE_AFTER_S:.0f} s" in message
    first.release()
    assert not fs.exists(lease.lease_path(output))
    lease.acquire(output, command="train").release()  # free again


def test_a_lease_of_a_dead_process_on_this_host_is_taken_over_with_a_warning(output, caplog):
    _write_lease(
        lease.lease_path(output), host=socket.gethostname(), pid=_dead_pid(), renewed_at=time.time()
    )
    with caplog.at_level(logging.WARNING, logger="lmshards.plumbing.lease"):
        taken = lease.acquire(output, command="train")
    assert "Taking over the lease" in caplog.text and "has exited" in caplog.text
    assert taken.holder.pid == os.getpid()
    with pytest.raises(lease.LeaseHeldError):  # now ours, and live
        lease.acquire(output, command="train")
    taken.release()


def test_an_expired_lease_of_another_host_is_taken_over(output, caplog):
    old = time.time() - lease.STALE_AFTER_S - 10
    _write_lease(lease.lease_path(output), host="another-host", pid=os.getpid(), renewed_at=old)
    with caplog.at_level(logging.WARNING, logger="lmshards.plumbing.lease"):
        lease.acquire(output, command="train").release()
    assert "last renewed" in caplog.text and "another-host" in caplog.text


def test_a_fresh_lease_of_another_host_is_respected_even_if_its_pid_is_dead_here(output):
    _write_lease(
        lease.lease_path(output), host="another-host", pid=_dead_pid(), renewed_at=time.time()
    )
    with pytest.raises(lease.LeaseHeldError, match="another-host"):
        lease.acquire(output, command="train")


def _take_over_gcs(store, other: lease.Holder) -> None:
    """Replaces the lease object at the generation read just before, as a new writer would; a renewal landing
    in between moves the generation, so that try is refused and the next one reads it again."""
    for _ in range(20):
        found = store.read()
        assert found is not None
        try:
            store._upload(other, if_generation=found[1])
            return
        except FileExistsError:
            continue
    raise AssertionError("the lease's holder renewed before every one of 20 takeovers")


def test_the_holder_renews_and_notices_when_its_lease_was_taken(output):
    held = lease.acquire(output, command="train", stale_after_s=0.5)  # renewed every 0.05 s
    stops: list[tuple[str, str]] = []
    held.on_lost = lambda command, message: stops.append((command, message))
    first_version = held._version
    time.sleep(0.5)
    found = held._store.read()
    assert found is not None and found[0].token == held.holder.token
    if fs.is_remote(output):
        assert held._version != first_version  # every renewal is a new generation
    else:
        assert time.time() - os.stat(held.path).st_mtime < 0.4
    # Another process takes it over (as after an expiry): the holder stops, naming the new holder, and its
    # release leaves the new lease in place.
    # Replaced in one step, so that the holder never sees the lease missing in between.
    other = lease.Holder("another-host", 1, "train", time.time(), "e" * 32, time.time())
    if fs.is_remote(output):
        _take_over_gcs(held._store, other)
    else:
        Path(f"{held.path}.new").write_bytes(lease._encode(other))
        os.replace(f"{held.path}.new", held.path)
    time.sleep(1.0)
    held.release()
    assert held.lost and len(stops) == 1 and stops[0][0] == "train"
    assert "lost the lease" in stops[0][1] and "host 'another-host', pid 1" in stops[0][1]
    found = held._store.read()
    assert found is not None and found[0].token == "e" * 32


def test_the_lease_is_neither_output_data_nor_deleted_by_overwrite(tmp_path):
    output = tmp_path / "out"
    with lease.output_lease(str(output), command="preprocess"):
        (output / "manifest.json").write_text(json.dumps({"format": MANIFEST_FORMAT}))
        assert owned_entries(str(output), kind=PREPROCESS_OUTPUT).owned == ("manifest.json",)
        assert not fs.check_output_dir(str(tmp_path / "out2"), overwrite=False)
        clear_owned_output(str(output), kind=PREPROCESS_OUTPUT)
        assert sorted(os.listdir(output)) == [lease.LEASE_NAME]
        # An output holding only its lease is empty to the next check.
        assert fs.check_output_dir(str(output), overwrite=False) is False
    assert not output.exists()  # created for the lease, empty again: removed


def test_lease_names():
    assert fs.is_lease_name(".lmshards-lease")
    assert fs.is_lease_name(".model.lmshards-lease")
    assert fs.is_lease_name(".lmshards-lease.gone-" + "0" * 32)
    assert not fs.is_lease_name("lmshards-lease") and not fs.is_lease_name("a.txt")
    assert fs.is_lease_name(os.path.basename(lease.sibling_lease_path("/x/model")))
