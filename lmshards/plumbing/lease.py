"""One writer per output: a lease file that a command takes on its output before writing anything.

- Taking it is one atomic create that fails when the file exists: locally an O_CREAT|O_EXCL open, on
  gs:// an upload with the precondition `ifGenerationMatch=0` (how GCS-based locks work).
- A daemon thread renews it every tenth of its stale time (locally its mtime, on gs:// a rewrite
  conditioned on the generation this process wrote); the command deletes it when it ends, whatever the
  outcome, and on SIGTERM/SIGINT also the partial output (output_lease's partial_kind).
- Another process finding a live lease stops with LeaseHeldError (exit 2), naming the holder.
- A lease whose holder is gone is taken over with a warning: its pid is dead on this same host, or it
  was not renewed for the stale time its holder wrote in it (--lease_stale_s, default STALE_AFTER_S).
  A rerun after a preemption or `kill -9` needs no manual step.
- A writer that finds its lease deleted or taken over (it was stopped, e.g. SIGSTOP, for longer than
  the stale time) stops at once: one line naming the new holder, exit 1, and it touches nothing more.

The lease file (LEASE_NAME) is never a sign of a complete output, never read as an input, and
--overwrite leaves it alone as lmshards' own (see lmshards.plumbing.fs.is_lease_name).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import errno
import json
import logging
import os
import posixpath
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

from lmshards.plumbing import bounded, fs, stopping
from lmshards.plumbing.cli import EXIT_FAILURE, error_line
from lmshards.plumbing.errors import OutputError
from lmshards.plumbing.flag_types import whole
from lmshards.plumbing.outputs import OutputKind, check_writable, remove_partial_output

log = logging.getLogger(__name__)

LEASE_NAME = fs.LEASE_NAME
LEASE_FORMAT = "lmshards-lease"
# How long an unrenewed lease is respected (--lease_stale_s); its holder renews it every tenth of that.
STALE_AFTER_S = 300
STALE_AFTER_RANGE = whole(10, 86_400)
RENEWALS_PER_STALE_TIME = 10
# A takeover that keeps losing races gives up after this many tries (another live writer won).
_ACQUIRE_TRIES = 3


class LeaseHeldError(OutputError):
    """Another live process holds the lease on the output."""


@dataclasses.dataclass(frozen=True)
class Holder:
    """Who holds a lease: what the lease file says, and when it was last renewed (seconds since the epoch)."""

    host: str
    pid: int
    command: str
    started_at: float
    token: str
    renewed_at: float
    stale_after_s: float = STALE_AFTER_S  # how long the holder promised to renew within

    def describe(self) -> str:
        started = datetime.datetime.fromtimestamp(self.started_at, datetime.UTC)
        return (
            f"`lmshards {self.command}` on host {self.host!r}, pid {self.pid}, "
            f"started {started:%Y-%m-%d %H:%M:%S} UTC"
        )


def lease_path(output: str) -> str:
    """The lease file of an output directory: inside it."""
    return fs.join(output, LEASE_NAME)


def sibling_lease_path(output: str) -> str:
    """The lease file of a local output that is built elsewhere and renamed into place: beside it."""
    parent, name = os.path.split(os.path.abspath(output))
    return os.path.join(parent, f".{name}{LEASE_NAME}")


def live_holder(output: str) -> Holder | None:
    """Who is writing output now: the holder of its lease while that lease is live; None without one
    (no lease, or a stale one)."""
    found = _store(lease_path(output)).read()
    if found is None:
        return None
    holder = found[0]
    return None if stale_reason(holder, now=time.time(), host=socket.gethostname()) else holder


def stale_reason(holder: Holder, *, now: float, host: str, pid_alive: Any = None) -> str | None:
    """Why holder's lease may be taken over (its process is gone, or it expired); None while it is live."""
    alive = pid_alive or _pid_alive
    if holder.host == host and not alive(holder.pid):
        return f"its process {holder.pid} on this host has exited"
    age = now - holder.renewed_at
    if age > holder.stale_after_s:
        return f"it was last renewed {age:.0f} s ago (its lease expires after {holder.stale_after_s:.0f} s)"
    return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _encode(holder: Holder) -> bytes:
    return json.dumps({"format": LEASE_FORMAT, **dataclasses.asdict(holder)}, indent=1).encode()


def _decode(data: bytes, *, modified: float) -> Holder:
    """The holder a lease file names; a damaged one (or one over the JSON limits) counts as an unknown holder
    last renewed at `modified`."""
    try:
        fields = bounded.load_json(data, what="lease file", max_bytes=bounded.MAX_JSON_BYTES)
        return Holder(
            host=str(fields["host"]),
            pid=int(fields["pid"]),
            command=str(fields["command"]),
            started_at=float(fields["started_at"]),
            token=str(fields["token"]),
            renewed_at=max(float(fields["renewed_at"]), modified),
            stale_after_s=float(fields.get("stale_after_s", STALE_AFTER_S)),
        )
    except (ValueError, KeyError, TypeError):
        return Holder("unknown", -1, "unknown", modified, "", modified)


def add_lease_flag(parser: argparse.ArgumentParser) -> None:
    """--lease_stale_s: how long this writer's lease holds without renewal (every writing command has it)."""
    parser.add_argument(
        "--lease_stale_s",
        type=STALE_AFTER_RANGE,
        default=STALE_AFTER_S,
        help="seconds after which another command may take over this command's lease on its output when "
        "this one stopped renewing it (it renews every tenth of that); this command stops when its lease "
        "was taken over",
    )


# ------------------------------------------------------------------------ where the lease lives


class _LocalStore:
    """A lease file on a local file system. Its version is the holder's token; its mtime is its renewal time."""

    def __init__(self, path: str) -> None:
        self.path = path

    def create(self, holder: Holder) -> str:
        """Writes the lease; returns its version. Raises FileExistsError when a lease is there."""
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(_encode(holder))
            f.flush()
            os.fsync(f.fileno())
        return holder.token

    def read(self) -> tuple[Holder, str] | None:
        """(holder, version) of the lease there, or None."""
        try:
            return _read_local(self.path)
        except FileNotFoundError:
            return None

    def renew(self, holder: Holder, version: str) -> str | None:
        """Refreshes the lease while it is still `version`; returns the new version, None when it is not ours."""
        found = self.read()
        if found is None or found[1] != version:
            return None
        os.utime(self.path)
        return version

    def remove(self, version: str) -> bool:
        """Deletes the lease if it is still `version`; False when another one is there.

        The file is first renamed aside (atomic), then checked: a fresh lease that another process put
        there since `version` was read is put back (a link: never over a newer one).
        """
        aside = f"{self.path}.gone-{uuid.uuid4().hex}"
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return True
        try:
            if _read_local(aside)[1] != version:
                with contextlib.suppress(FileExistsError):
                    os.link(aside, self.path)
                return False
            return True
        finally:
            os.remove(aside)


def _read_local(path: str) -> tuple[Holder, str]:
    with open(path, "rb") as f:
        # A lease is a few hundred bytes: one over the limit is damaged whatever follows.
        data = f.read(bounded.MAX_JSON_BYTES + 1)
        holder = _decode(data, modified=os.fstat(f.fileno()).st_mtime)
    return holder, holder.token


class _GcsStore:
    """A lease object on gs://, written and deleted only under generation preconditions.

    Its version is the object's generation: a renewal or a release only succeeds on the very object
    this process wrote (HTTP 412 otherwise, which gcsfs raises as FileExistsError).
    """

    def __init__(self, path: str) -> None:
        self.filesystem, stripped = fs.filesystem(path)
        self.bucket, self.key = stripped.split("/", 1)

    def _upload(self, holder: Holder, *, if_generation: str) -> str:
        out = self.filesystem.call(
            "POST",
            f"{self.filesystem._location}/upload/storage/v1/b/{self.bucket}/o",
            uploadType="media",
            name=self.key,
            ifGenerationMatch=if_generation,  # "0": only when no such object exists
            headers={"Content-Type": "application/octet-stream"},
            data=_encode(holder),
            json_out=True,
        )
        return str(out["generation"])

    def create(self, holder: Holder) -> str:
        return self._upload(holder, if_generation="0")

    def read(self) -> tuple[Holder, str] | None:
        try:
            info = self.filesystem.call("GET", "b/{}/o/{}", self.bucket, self.key, json_out=True)
            generation = str(info["generation"])
            _, data = self.filesystem.call(
                "GET", "b/{}/o/{}", self.bucket, self.key, alt="media", generation=generation
            )
        except FileNotFoundError:
            return None
        return _decode(data, modified=0.0), generation

    def renew(self, holder: Holder, version: str) -> str | None:
        try:
            return self._upload(
                dataclasses.replace(holder, renewed_at=time.time()), if_generation=version
            )
        except FileExistsError:
            return None

    def remove(self, version: str) -> bool:
        try:
            self.filesystem.call(
                "DELETE", "b/{}/o/{}", self.bucket, self.key, ifGenerationMatch=version
            )
        except FileNotFoundError:
            return True
        except FileExistsError:
            return False
        return True


def _store(path: str) -> _LocalStore | _GcsStore:
    if fs.is_remote(path):
        if not path.startswith(("gs://", "gcs://")):
            raise OutputError(
                f"{path!r}: lmshards can only lease outputs on local disks and gs://; "
                "write the output to one of those."
            )
        return _GcsStore(path)
    return _LocalStore(path.removeprefix("file://"))


# ------------------------------------------------------------------------ taking, renewing, releasing


class Lease:
    """A held lease; renewed by a daemon thread until release()."""

    def __init__(
        self,
        store: _LocalStore | _GcsStore,
        holder: Holder,
        version: str,
        *,
        output: str,
        path: str,
        created_dir: str | None,
    ) -> None:
        self._store = store
        self.holder = holder
        self._version = version
        self.output = output
        self.path = path
        self._created_dir = created_dir
        self.lost = False
        self.on_lost = _stop_writing
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew_loop, name="lmshards-lease", daemon=True)
        self._thread.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.holder.stale_after_s / RENEWALS_PER_STALE_TIME):
            try:
                version = self._store.renew(self.holder, self._version)
            except (
                Exception
            ) as e:  # a network blip: the next renewal may succeed, well before expiry
                log.warning("Could not renew the lease on %s (%s); retrying.", self.output, e)
                continue
            if version is None:
                self.lost = True
                self.on_lost(self.holder.command, self._lost_message())
                return
            self._version = version

    def _lost_message(self) -> str:
        try:
            found = self._store.read()
        except Exception:  # the reason to stop stands without the new holder's name
            found = None
        now = (
            f"it is now held by {found[0].describe()}"
            if found is not None
            else "nothing holds it now (the lease file was deleted)"
        )
        return (
            f"lost the lease on {self.output!r} ({now}); stopped at once, leaving the output to its new "
            "writer. Check which command should write there, and rerun this one with another --output if "
            "both should."
        )

    def release(self) -> None:
        """Stops renewing and deletes the lease (if still ours); removes the output directory it created
        when nothing else was written there (a command refused on a bad flag leaves nothing behind)."""
        self._stop.set()
        self._thread.join()
        if self.lost:
            return
        try:
            self._store.remove(self._version)
        except Exception as e:  # the output is already written; an expired lease harms no later run
            log.warning("Could not remove the lease %s (%s); it expires by itself.", self.path, e)
        if self._created_dir:
            with contextlib.suppress(OSError):
                os.rmdir(self._created_dir)


def _stop_writing(command: str, message: str) -> None:
    """What a writer does on losing its lease: one line and exit 1 at once, touching the output no more
    (no cleanup, no flush of a half-written file: the output is another command's now)."""
    sys.stderr.write(error_line(command, message) + "\n")
    sys.stderr.flush()
    os._exit(EXIT_FAILURE)


def acquire(
    output: str,
    *,
    command: str,
    flag: str = "--output",
    path: str | None = None,
    stale_after_s: float = STALE_AFTER_S,
) -> Lease:
    """Takes the lease on output, or takes over a stale one; creates a local output directory.

    path: the lease file (default: lease_path(output)); its directory must be writable.
    stale_after_s: how long this lease holds without renewal (written in it, for others to judge).

    Raises:
      LeaseHeldError: another live process holds it; the message names it and what to do.
      OutputError: the lease cannot be written there (permissions, missing bucket, ...).
    """
    path = path or lease_path(output)
    directory = posixpath.dirname(path) if fs.is_remote(path) else os.path.dirname(path)
    created_dir = None if fs.is_remote(path) or os.path.isdir(directory) else directory
    check_writable(
        directory,
        flag=flag if directory.rstrip("/") == output.rstrip("/") else f"the directory of {flag}",
    )
    store = _store(path)
    host = socket.gethostname()
    now = time.time()
    ours = Holder(host, os.getpid(), command, now, uuid.uuid4().hex, now, float(stale_after_s))
    for _ in range(_ACQUIRE_TRIES):
        try:
            version = store.create(ours)
            return Lease(store, ours, version, output=output, path=path, created_dir=created_dir)
        except FileExistsError:
            pass
        except OSError as e:
            if e.errno != errno.EEXIST:
                raise OutputError(
                    f"{flag} {output!r}: cannot write the lease {path!r} ({e})."
                ) from e
        found = store.read()
        if found is None:  # released between our create and our read
            continue
        holder, version = found
        reason = stale_reason(holder, now=time.time(), host=host)
        if reason is None:
            raise LeaseHeldError(_held_message(output, holder, path, flag))
        log.warning("Taking over the lease on %s from %s: %s.", output, holder.describe(), reason)
        store.remove(version)
    found = store.read()
    if found is None:
        raise LeaseHeldError(
            f"{flag} {output!r}: other processes keep taking its lease; run the command again."
        )
    raise LeaseHeldError(_held_message(output, found[0], path, flag))


def _held_message(output: str, holder: Holder, path: str, flag: str) -> str:
    return (
        f"{flag} {output!r} is being written by {holder.describe()} (lease {path!r}). "
        "Wait for it to finish, or stop it; if that process is gone, run this command again after "
        f"{holder.stale_after_s:.0f} s without renewal (or at once on its host). Or choose another {flag}."
    )


@contextlib.contextmanager
def output_lease(
    output: str,
    *,
    command: str,
    flag: str = "--output",
    path: str | None = None,
    stale_after_s: float = STALE_AFTER_S,
    partial_kind: OutputKind | None = None,
) -> Iterator[Lease]:
    """Holds the lease on output while the block runs; see acquire.

    partial_kind: the kind of lmshards output (lmshards.schemas.layouts) the block writes in output: when a
      SIGTERM or SIGINT stops the block, what it wrote there is removed before the lease (an output that
      is complete, its marker written, is kept).
    """
    lease = acquire(output, command=command, flag=flag, path=path, stale_after_s=stale_after_s)
    try:
        yield lease
    except BaseException:
        if partial_kind is not None and stopping.requested() is not None:
            remove_partial_output(output, kind=partial_kind, flag=flag)
        raise
    finally:
        lease.release()
