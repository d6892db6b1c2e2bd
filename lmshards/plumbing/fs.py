"""Filesystem helpers over fsspec, so local paths and gs:// behave the same on both sides."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import posixpath
import re
import shutil
import urllib.parse
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar

# gcsfs probes every bucket over gRPC first; against an emulator each open then waits 60 s.
if os.environ.get("STORAGE_EMULATOR_HOST"):
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

import fsspec  # noqa: E402  (must follow the environment set-up above)
import fsspec.exceptions  # noqa: E402

from lmshards.plumbing.errors import OutputError, StorageError  # noqa: E402

# How long a command waits for a gs:// bucket's first answer before it stops with one error line (gcsfs
# alone retries for about a minute). LMSHARDS_GCS_TIMEOUT_S overrides it.
GCS_REACH_TIMEOUT_S = float(os.environ.get("LMSHARDS_GCS_TIMEOUT_S", "20"))
# Every gs:// request (a read above all) fails once it goes this long without a byte: a stalled
# connection, or a body that stops short of its Content-Length, would otherwise wait forever (aiohttp
# sets no read timeout). LMSHARDS_GCS_READ_TIMEOUT_S overrides it.
GCS_READ_TIMEOUT_S = float(os.environ.get("LMSHARDS_GCS_READ_TIMEOUT_S", "60"))
# The retry budget of one request that failed on the network or with a 5xx/408/429: this many attempts
# in all, waiting GCS_BACKOFF_S, then twice as long each time (at most GCS_MAX_BACKOFF_S), in between.
GCS_ATTEMPTS = 6
GCS_BACKOFF_S = 1.0
GCS_MAX_BACKOFF_S = 16.0
_GCS_SCHEMES = ("gs://", "gcs://")
_ANSWERED: set[tuple[str, str]] = set()  # (endpoint, bucket) that answered once in this process
# A bucket in a gcsfs error's text: `b/BUCKET/o/...` or `gs://BUCKET/...`.
_BUCKET_IN_TEXT_RE = re.compile(r"(?:\bb/|gs://)([a-z0-9][a-z0-9._-]{1,221})")
# The bucket and object of a JSON API path or URL: .../b/BUCKET/o/OBJECT?...
_OBJECT_IN_URL_RE = re.compile(r"(?:^|/)b/([^/?]+)(?:/o/?([^?]*))?")

# The lease a writing command holds on its output (lmshards.plumbing.lease): inside it, or `.{name}.lmshards-lease`
# beside an output that is renamed into place; `.gone-{uuid4 hex}` while it is being removed.
LEASE_NAME = ".lmshards-lease"
_LEASE_NAME_RE = re.compile(r"^(?:\.[^/]+)?\.lmshards-lease(?:\.gone-[0-9a-f]{32})?$")


def is_lease_name(name: str) -> bool:
    """True for a lease file's base name (lmshards.plumbing.lease): never output data, never an input."""
    return bool(_LEASE_NAME_RE.match(name))


def is_remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def filesystem(path: str) -> tuple[Any, str]:
    """Returns (fsspec filesystem, path without protocol for it).

    The first time a process touches a gs:// bucket, one bounded request checks that it answers.

    Raises:
      StorageError: the bucket cannot be reached within GCS_REACH_TIMEOUT_S, does not exist, or refuses
        these credentials; the message names the bucket and what to check.
    """
    fs, stripped = fsspec.core.url_to_fs(path, **_storage_options(path))
    if path.startswith(_GCS_SCHEMES):
        _bound_requests(fs)
        _check_bucket(fs, stripped.split("/", 1)[0], fs._location)
    return fs, stripped


def _bound_requests(filesystem: Any) -> None:
    """Gives a gcsfs filesystem our retry budget (GCS_ATTEMPTS) in place of gcsfs' own, and a request that
    fails through it a StorageError naming the object. Once per (cached) filesystem instance."""
    # gcsfs' request without its retries
    raw = getattr(type(filesystem)._request, "__wrapped__", None)
    if raw is None or "_request" in vars(filesystem):
        return

    async def request(method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        return await _retried(filesystem, raw, method, path, *args, **kwargs)

    filesystem._request = request


async def _retried(
    filesystem: Any, raw: Any, method: str, path: str, *args: Any, **kwargs: Any
) -> Any:
    from gcsfs.retry import is_retriable

    for attempt in range(1, GCS_ATTEMPTS + 1):
        try:
            return await raw(filesystem, method, path, *args, **kwargs)
        except Exception as e:
            if not (is_retriable(e) or isinstance(e, asyncio.TimeoutError)):
                raise
            if attempt == GCS_ATTEMPTS:
                raise StorageError(request_failure(method, _object_of(path, args), e)) from e
        await asyncio.sleep(min(GCS_BACKOFF_S * 2 ** (attempt - 1), GCS_MAX_BACKOFF_S))
    raise AssertionError("unreachable: the last attempt returns or raises")


def request_failure(method: str, target: str, exc: BaseException) -> str:
    """One line on a gs:// request that failed every attempt of the retry budget, naming the object."""
    import aiohttp

    if isinstance(exc, aiohttp.ClientPayloadError):
        what = "its body was shorter than the size the answer promised (Content-Length)"
    elif isinstance(exc, asyncio.TimeoutError):  # aiohttp's read timeouts are TimeoutErrors too
        what = f"no data for {GCS_READ_TIMEOUT_S:g} s"
    else:
        what = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    verb = {"GET": "Reading", "DELETE": "Deleting"}.get(method.upper(), "Writing")
    return (
        f"{verb} {target} failed {GCS_ATTEMPTS} times ({what}). Check the network and the endpoint "
        f"({endpoint_hint()}), then run the command again."
    )


def _object_of(path: str, args: tuple[Any, ...]) -> str:
    """gs://BUCKET/OBJECT of a gcsfs request path ('b/{}/o/{}' with its args, or a download URL)."""
    if args and "{}" in path:
        path = path.format(*args)
    match = _OBJECT_IN_URL_RE.search(path)
    if match is None:
        return path
    return f"gs://{match[1]}/{urllib.parse.unquote(match[2])}" if match[2] else f"gs://{match[1]}"


def _check_bucket(filesystem: Any, bucket: str, endpoint: str) -> None:
    if (endpoint, bucket) in _ANSWERED:
        return
    try:
        filesystem.call(
            "GET", "b/{}/o", bucket, maxResults="1", json_out=True, timeout=GCS_REACH_TIMEOUT_S
        )
    except FileNotFoundError as e:
        raise StorageError(
            f"bucket {bucket!r} does not exist or your credentials cannot see it. Check the bucket name, "
            "or create the bucket first."
        ) from e
    except Exception as e:  # gcsfs, aiohttp and google-auth each raise their own classes
        raise StorageError(storage_problem(e, bucket)) from e
    _ANSWERED.add((endpoint, bucket))


def storage_problem(exc: BaseException, bucket: str | None = None) -> str:
    """One line on a failed gs:// request: what happened to which bucket, and what to check."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    bucket = bucket or _bucket_in(exc) or "?"
    if _status(exc) in (401, 403) or text.startswith("Forbidden"):
        return (
            f"permission denied on bucket {bucket!r} ({text[:200]}). Check that your credentials "
            "(`gcloud auth application-default login`, or the VM's service account) may read and write "
            "objects there (e.g. roles/storage.objectAdmin)."
        )
    what = (
        f"no answer within {GCS_REACH_TIMEOUT_S:.0f} s"
        if isinstance(exc, fsspec.exceptions.FSTimeoutError)
        else f"{type(exc).__name__}: {text[:200]}"
    )
    return (
        f"cannot reach bucket {bucket!r} ({what}). Check the network, the endpoint "
        f"({endpoint_hint()}) and your credentials (`gcloud auth application-default login`)."
    )


def is_storage_failure(exc: BaseException) -> bool:
    """True for a gs:// request that failed on the network or on permissions (gcsfs / aiohttp / google-auth)."""
    current: BaseException | None = exc
    while current is not None:
        module = type(current).__module__ or ""
        if module.startswith(("gcsfs", "aiohttp", "google.auth")) or isinstance(
            current, fsspec.exceptions.FSTimeoutError
        ):
            return True
        if isinstance(current, OSError) and str(current).startswith("Forbidden"):
            return True
        current = current.__cause__ or current.__context__
    return False


def endpoint_hint() -> str:
    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    return f"STORAGE_EMULATOR_HOST={emulator}" if emulator else "https://storage.googleapis.com"


def _status(exc: BaseException) -> int | None:
    code = getattr(exc, "code", None) or getattr(exc, "status", None)
    return code if isinstance(code, int) else None


def _bucket_in(exc: BaseException) -> str | None:
    match = _BUCKET_IN_TEXT_RE.search(str(exc))
    return match[1] if match else None


def _storage_options(path: str) -> dict[str, Any]:
    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    if not path.startswith(_GCS_SCHEMES):
        return {}
    import aiohttp

    options: dict[str, Any] = {
        "requests_timeout": aiohttp.ClientTimeout(
            total=None, sock_connect=GCS_REACH_TIMEOUT_S, sock_read=GCS_READ_TIMEOUT_S
        )
    }
    if emulator:
        endpoint = emulator if "://" in emulator else f"http://{emulator}"
        options.update(endpoint_url=endpoint, token="anon")
    return options


def join(base: str, *parts: str) -> str:
    if is_remote(base):
        return posixpath.join(base, *parts)
    return os.path.join(base, *parts)


def exists(path: str) -> bool:
    fs, p = filesystem(path)
    return fs.exists(p)


def isdir(path: str) -> bool:
    fs, p = filesystem(path)
    return fs.isdir(p)


def open_file(path: str, mode: str = "rb"):
    """Opens a local or remote file; text modes decode as UTF-8."""
    fs, p = filesystem(path)
    if "b" in mode:
        return fs.open(p, mode)
    return fs.open(p, mode, encoding="utf-8")


def read_text(path: str) -> str:
    with open_file(path, "r") as f:
        return f.read()


def read_bytes(path: str) -> bytes:
    with open_file(path, "rb") as f:
        return f.read()


# The most file pieces read_pieces fetches at once (concurrently on an object store).
READ_PIECES = 64

_Element = TypeVar("_Element")


def read_ranges(paths: Sequence[str], starts: Sequence[int], ends: Sequence[int]) -> list[bytes]:
    """The bytes [start, end) of each file, in order; every path on one filesystem (an object store's
    reads go concurrently: fsspec's cat_ranges)."""
    if not paths:
        return []
    filesystem_, _ = filesystem(paths[0])
    stripped = [filesystem(path)[1] for path in paths]
    return filesystem_.cat_ranges(stripped, list(starts), list(ends))


def read_pieces(elements: Iterable[_Element], kind: type) -> Iterator[tuple[_Element, bytes]]:
    """Each element, in order, with the bytes it points to where it is a `kind` (a place in a file: its
    `path`, `offset` and `nbytes`), else b""; the places of READ_PIECES elements are read at once."""
    pending = iter(elements)
    while window := list(itertools.islice(pending, READ_PIECES)):
        pieces: list[Any] = [element for element in window if isinstance(element, kind)]
        data = iter(
            read_ranges(
                [piece.path for piece in pieces],
                [piece.offset for piece in pieces],
                [piece.offset + piece.nbytes for piece in pieces],
            )
        )
        for element in window:
            yield element, next(data) if isinstance(element, kind) else b""


def write_bytes_atomic(path: str, data: bytes) -> None:
    """Writes data so that readers never see half a file.

    Locally: a temporary name, then rename. On object stores an object only appears once its
    upload is finalized, so a direct write is already atomic (and GCS has no cheap rename).
    """
    with open_atomic(path) as f:
        f.write(data)


@contextlib.contextmanager
def atomic_local_path(final: str) -> Iterator[str]:
    """Yields a temporary sibling path of `final` to fill (a file or a directory), renamed to `final` on success.

    On an error the temporary path is removed, so `final` is either absent or complete.
    """
    tmp = f"{final.rstrip(os.sep)}.tmp-{uuid.uuid4().hex}"
    try:
        yield tmp
        os.replace(tmp, final)
    except BaseException:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
        elif os.path.lexists(tmp):
            os.remove(tmp)
        raise


@contextlib.contextmanager
def open_atomic(path: str) -> Iterator[Any]:
    """A binary file to write in pieces whose readers only ever see it complete (write_bytes_atomic's
    promise): locally a temporary name renamed at the end; on an object store the upload is finalized
    only at the end, and on an error it is thrown away, never finalized with what was written so far."""
    fs, p = filesystem(path)
    if not is_remote(path):
        parent = os.path.dirname(p)
        if parent:
            fs.makedirs(parent, exist_ok=True)
        with atomic_local_path(p) as tmp, open(tmp, "wb") as f:
            yield f
        return
    f = fs.open(p, "wb")
    try:
        yield f
    except BaseException:
        f.discard()
        f.closed = True  # else closing it (fsspec does so when it is collected) would finalize it
        raise
    f.close()


def write_text_atomic(path: str, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def size(path: str) -> int:
    fs, p = filesystem(path)
    return int(fs.size(p))


def listdir(path: str) -> list[str]:
    """Full paths (with protocol for remote) of the entries directly under path."""
    fs, p = filesystem(path)
    entries = fs.ls(p, detail=False)
    if is_remote(path):
        protocol = path.split("://", 1)[0]
        return [f"{protocol}://{e}" for e in entries]
    return list(entries)


def makedirs(path: str) -> None:
    fs, p = filesystem(path)
    fs.makedirs(p, exist_ok=True)


def check_output_dir(path: str, *, overwrite: bool, flag: str = "--output") -> bool:
    """Checks that `path` can receive a new output: absent, an empty directory, or (with overwrite) a directory.

    Returns True when the directory exists and is not empty (so the caller will replace its content).
    The command's own lease file does not count.

    Raises:
      OutputError: path is a file, or a non-empty directory without overwrite.
    """
    if not exists(path):
        return False
    if not isdir(path):
        raise OutputError(f"{flag} {path!r} is a file; pass a directory path.")
    if not [e for e in listdir(path) if not is_lease_name(posixpath.basename(e.rstrip("/")))]:
        return False
    if not overwrite:
        raise OutputError(
            f"{flag} {path!r} is not empty; pass --overwrite to replace it, or choose a new directory."
        )
    return True
