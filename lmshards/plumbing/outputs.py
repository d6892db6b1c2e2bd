"""Guards on the locations a command reads and writes, local and gs://.

- check_no_overlap: an output must not equal, lie inside, or contain an input.
- check_replaceable / check_file_output: before any work, a command's output must be new, empty, or an
  earlier output of its own kind (replaced only with --overwrite); never another kind's output (told by its
  signs), a directory inside one, or a directory holding anything the kind does not own.
- owned_entries / clear_owned_output: --overwrite (and `train --restart`) delete only what an earlier
  lmshards run wrote: what its OutputKind names and, where the output has a manifest, the shards it lists.
  A file whose name only looks like a shard is the user's when the manifest does not list it.
  Which files each kind of output holds is the contract's (lmshards.schemas.layouts); this module only applies it.
- check_writable / disk_error_message: a missing permission, a read-only file system or a full disk
  is found before any work starts, and is reported in one line when it happens mid-run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import posixpath
import re
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from lmshards.plumbing import bounded, fs
from lmshards.plumbing.errors import OutputError, StorageError, describe_disk_error, disk_errno

WRITE_PROBE_PREFIX = ".lmshards-write-probe-"

# What an interrupted atomic write (lmshards.plumbing.fs.atomic_local_path) leaves: `{final}.tmp-{uuid4 hex}`.
_ATOMIC_TMP_SUFFIX_RE = re.compile(r"\.tmp-[0-9a-f]{32}$")
_GLOB_CHARS_RE = re.compile(r"[*?[]")
# fsspec spells Google Cloud Storage both ways.
_SCHEME_ALIASES = {"gcs": "gs"}
_PROBE_BYTES = b"lmshards write probe\n"
# How much of an existing one-file output is read to tell whether lmshards wrote it.
FILE_HEAD_BYTES = 4096
# How many foreign entries an error message names before "and N more".
_FOREIGN_SHOWN = 5
log = logging.getLogger(__name__)


# ------------------------------------------------------------------------ inputs vs outputs


@dataclasses.dataclass(frozen=True)
class _Location:
    scheme: str  # "" for a local path, else e.g. "gs"
    parts: tuple[str, ...]  # resolved path components; the bucket first for object stores


def _location(path: str) -> _Location:
    """Where `path` points, cut at its first glob component (a glob may match anything below that)."""
    scheme, sep, rest = path.partition("://")
    if not sep or scheme == "file":
        local = _before_glob((rest if sep else path).split(os.sep))
        resolved = os.path.realpath(os.sep.join(local) if local != [""] else os.sep)
        return _Location("", tuple(p for p in resolved.split(os.sep) if p))
    parts = [p for p in posixpath.normpath("/" + rest).split("/") if p]
    return _Location(_SCHEME_ALIASES.get(scheme, scheme), tuple(_before_glob(parts)))


def _before_glob(parts: list[str]) -> list[str]:
    for i, part in enumerate(parts):
        if _GLOB_CHARS_RE.search(part):
            return parts[:i]
    return parts


def _relation(output: _Location, source: _Location) -> str | None:
    """How output lies relative to source: 'same', 'inside', 'contains', or None when apart."""
    if output.scheme != source.scheme:
        return None
    if output.parts == source.parts:
        return "same"
    if output.parts[: len(source.parts)] == source.parts:
        return "inside"
    if source.parts[: len(output.parts)] == output.parts:
        return "contains"
    return None


_OVERLAP_MESSAGES = {
    "same": "{of} {output!r} is the same location as {inf} {source!r}; write the output to a separate directory.",
    "inside": (
        "{of} {output!r} is inside {inf} {source!r}: the output would be read back as input and --overwrite "
        "could delete inputs; choose an {of} outside every input."
    ),
    "contains": (
        "{of} {output!r} contains {inf} {source!r}: --overwrite would delete inputs; choose an {of} "
        "that holds no input."
    ),
}


def check_no_overlap(
    inputs: Sequence[str],
    output: str,
    *,
    output_flag: str = "--output",
    input_flag: str = "--input",
) -> None:
    """Raises OutputError when `output` is equal to, inside, or contains any input.

    Inputs may be files, directories or globs (a glob counts as its directory before the first
    wildcard). Local paths are compared after resolving symlinks, `..` and the working directory;
    object-store paths by bucket and path components, so gs://b/data and gs://b/data2 are apart.
    No I/O beyond os.path.realpath.
    """
    target = _location(output)
    for source in inputs:
        if not source.strip():
            continue
        relation = _relation(target, _location(source))
        if relation:
            raise OutputError(
                _OVERLAP_MESSAGES[relation].format(
                    of=output_flag, output=output, inf=input_flag, source=source
                )
            )


# ------------------------------------------------------------------------ lmshards-owned outputs


@dataclasses.dataclass(frozen=True)
class OutputKind:
    """A kind of lmshards output, by the entries it puts in its directory."""

    name: str  # as messages name it: "an earlier lmshards {name} output"
    marker: str  # written last, deleted first: the sign of a complete output
    marker_format: str | None = (
        None  # the marker's JSON "format" value, when it has one: a same-named file is not ours
    )
    files: frozenset[str] = frozenset()
    file_pattern: re.Pattern[str] | None = None
    scratch_dirs: frozenset[str] = frozenset()  # owned with everything they hold
    shard_dirs: frozenset[str] = frozenset()  # owned while they hold only shards of their split
    # The split a file name is a shard of (None: no shard name); needed with shard_dirs.
    shard_split: Callable[[str], str | None] | None = None
    # The shard paths a marker of marker_format lists, from its parsed JSON; needed with shard_dirs.
    listed_shards: Callable[[Any], Iterable[str]] | None = None
    nested: tuple[tuple[str, OutputKind], ...] = ()  # (directory name, kind of the output it holds)
    # (directory name, pattern): owned while every file below it matches, by its path relative to it
    pattern_dirs: tuple[tuple[str, re.Pattern[str]], ...] = ()
    # What it is, as a refusal names it: "a training run (written by `lmshards train`)".
    what: str = ""
    # Entries whose presence says a directory is (or is becoming) this kind of output; the marker when
    # empty. A marker of marker_format counts only when its "format" says so.
    signs: tuple[str, ...] = ()
    # Directories inside it that another command writes into (`lmshards stats` into a shard set's stats/).
    open_dirs: frozenset[str] = frozenset()


class OwnedEntries(NamedTuple):
    owned: tuple[str, ...]  # top-level names an lmshards run wrote, the completion marker first
    foreign: tuple[str, ...]  # paths (relative, '/'-separated) of everything else


@dataclasses.dataclass(frozen=True)
class _Entry:
    name: str
    type: str  # "file", "directory", or "other" (a symlink, a socket, ...)

    @property
    def shown(self) -> str:
        return f"{self.name}/" if self.type == "directory" else self.name


def _list(filesystem: Any, path: str) -> list[_Entry]:
    entries = []
    for info in filesystem.ls(path, detail=True):
        name = info["name"].rstrip("/")
        if name == path.rstrip("/"):  # an object store's placeholder for the directory itself
            continue
        # The running command's own lease: never listed, so never deleted here.
        if fs.is_lease_name(posixpath.basename(name)):
            continue
        kind = "other" if info.get("islink") else info["type"]
        entries.append(
            _Entry(posixpath.basename(name), kind if kind in ("file", "directory") else "other")
        )
    return sorted(entries, key=lambda e: e.name)


def _is_owned_file(name: str, layout: OutputKind) -> bool:
    name = _ATOMIC_TMP_SUFFIX_RE.sub("", name)
    if name == layout.marker or name in layout.files or name.startswith(WRITE_PROBE_PREFIX):
        return True
    return bool(layout.file_pattern and layout.file_pattern.match(name))


def _is_shard_of(name: str, split: str, layout: OutputKind) -> bool:
    return layout.shard_split is not None and layout.shard_split(name) == split


def _foreign_in(
    filesystem: Any, path: str, name: str, layout: OutputKind, listed: frozenset[str] | None
) -> list[str]:
    """Foreign relative paths inside the top-level directory `name`; every one of them when it is not ours.

    listed: the shard paths the output's manifest lists; None when it has none (an interrupted run's
    shards are then known by their names).
    """
    if name in layout.scratch_dirs:
        return []
    if name in layout.shard_dirs:
        return [
            f"{name}/{e.shown}"
            for e in _list(filesystem, path)
            if not (e.type == "file" and _is_shard_of(e.name, name, layout))
            or (listed is not None and f"{name}/{e.name}" not in listed)
        ]
    for directory, kind in layout.nested:
        if name == directory:
            return [f"{name}/{f}" for f in _classify(filesystem, path, kind).foreign]
    for directory, pattern in layout.pattern_dirs:
        if name == directory:
            return [f"{name}/{f}" for f in _files_below(filesystem, path) if not pattern.match(f)]
    return [f"{name}/"]


def _files_below(filesystem: Any, path: str, prefix: str = "") -> list[str]:
    """Relative paths of everything below path: files, and symlinks and the like as they are (never followed)."""
    found = []
    for entry in _list(filesystem, path):
        if entry.type == "directory":
            found += _files_below(
                filesystem, posixpath.join(path, entry.name), f"{prefix}{entry.name}/"
            )
        else:
            found.append(
                f"{prefix}{entry.shown}" if entry.type == "file" else f"{prefix}{entry.name}@"
            )
    return found


def _listed_shards(filesystem: Any, path: str, layout: OutputKind) -> frozenset[str] | None:
    """The shard paths the output's own manifest lists; None when it has no manifest of its kind."""
    if not layout.shard_dirs:
        return None
    try:
        data = bounded.load_json(
            filesystem.cat_file(posixpath.join(path, layout.marker)),
            what=f"{layout.marker} in {path!r}",
            max_bytes=bounded.MAX_MANIFEST_BYTES,
        )
        if data.get("format") != layout.marker_format:
            return None
        return frozenset(layout.listed_shards(data)) if layout.listed_shards else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def json_format(data: bytes) -> str | None:
    """The "format" value of a JSON object; None for any other JSON.

    Raises:
      ValueError: data is not JSON, or over a read limit (UnicodeDecodeError, ReadLimitError included).
    """
    parsed = bounded.load_json(data, what="a marker file", max_bytes=bounded.MAX_MANIFEST_BYTES)
    value = parsed.get("format") if isinstance(parsed, dict) else None
    return value if isinstance(value, str) else None


def _is_ours(filesystem: Any, path: str, name: str, layout: OutputKind) -> bool:
    if not _is_owned_file(name, layout):
        return False
    if layout.marker_format is None or name != layout.marker:
        return True
    # Another tool's manifest.json (a web app's, a dataset's) is the user's file, never deleted as ours;
    # so is one that is not JSON: deleting stays on the safe side.
    try:
        return json_format(filesystem.cat_file(posixpath.join(path, name))) == layout.marker_format
    except ValueError:
        return False


def _classify(filesystem: Any, path: str, layout: OutputKind) -> OwnedEntries:
    owned: list[str] = []
    foreign: list[str] = []
    listed = _listed_shards(filesystem, path, layout)
    for entry in _list(filesystem, path):
        if entry.type == "file":
            (owned if _is_ours(filesystem, path, entry.name, layout) else foreign).append(
                entry.name
            )
        elif entry.type == "directory":
            inner = _foreign_in(
                filesystem, posixpath.join(path, entry.name), entry.name, layout, listed
            )
            if inner:
                foreign.extend(inner)
            else:
                owned.append(entry.name)
        else:
            foreign.append(entry.shown)
    # The marker goes first, so that deleting in this order never leaves a complete-looking output.
    owned.sort(key=lambda n: _ATOMIC_TMP_SUFFIX_RE.sub("", n) != layout.marker)
    return OwnedEntries(tuple(owned), tuple(foreign))


def _existing_directory(directory: str, flag: str) -> tuple[Any, str] | None:
    """(filesystem, path) of directory, or None when nothing is there; OutputError when it is a file."""
    filesystem, path = fs.filesystem(directory)
    filesystem.invalidate_cache(
        path
    )  # other processes (Beam workers) may have written since the last listing
    if not filesystem.exists(path):
        return None
    if not filesystem.isdir(path):
        raise OutputError(f"{flag} {directory!r} is a file; pass a directory path.")
    return filesystem, path


def owned_entries(directory: str, *, kind: OutputKind, flag: str = "--output") -> OwnedEntries:
    """Splits what `directory` holds into what an earlier lmshards `kind` output wrote and the rest.

    `kind`: e.g. lmshards.schemas.layouts.PREPROCESS_OUTPUT. Split directories count as owned only while they hold nothing
    but shard files of their split; symlinks are always foreign. A missing directory holds nothing.
    A lease file (lmshards.plumbing.lease) is in neither list: it belongs to the command that holds it.

    Raises:
      OutputError: directory is a file.
    """
    found = _existing_directory(directory, flag)
    if found is None:
        return OwnedEntries((), ())
    return _classify(*found, kind)


def _refuse_foreign(directory: str, foreign: Sequence[str], *, kind: OutputKind, flag: str) -> None:
    if foreign:
        shown = ", ".join(repr(f) for f in foreign[:_FOREIGN_SHOWN])
        more = f" and {len(foreign) - _FOREIGN_SHOWN} more" if len(foreign) > _FOREIGN_SHOWN else ""
        raise OutputError(
            f"{flag} {directory!r} holds files lmshards did not write ({shown}{more}); --overwrite only "
            f"replaces an earlier lmshards {kind.name} output. Move those files away or choose another {flag}."
        )


def _has_sign(filesystem: Any, path: str, kind: OutputKind) -> bool:
    for sign in kind.signs or (kind.marker,):
        if not filesystem.exists(posixpath.join(path, sign)):
            continue
        if sign != kind.marker or kind.marker_format is None:
            return True
        if _is_ours(filesystem, path, sign, kind):
            return True
    return False


def _kind_at(filesystem: Any, path: str, kinds: Sequence[OutputKind]) -> OutputKind | None:
    """The first of kinds that the directory at path is an output of, by its signs; None for none."""
    return next((kind for kind in kinds if _has_sign(filesystem, path, kind)), None)


def _ancestors(directory: str) -> list[tuple[str, str]]:
    """(ancestor, name of the entry below it on the way to directory), nearest first: every ancestor
    locally (symlinks resolved), the parent only on an object store (each look costs requests)."""
    if fs.is_remote(directory):
        scheme, _, rest = directory.partition("://")
        parent, name = posixpath.split(rest.rstrip("/"))
        return [(f"{scheme}://{parent}", name)] if parent and name else []
    path = os.path.realpath(directory.removeprefix("file://"))
    found: list[tuple[str, str]] = []
    while True:
        parent, name = os.path.split(path)
        if not name:
            return found
        found.append((parent, name))
        path = parent


def check_not_inside_output(directory: str, *, kinds: Sequence[OutputKind], flag: str) -> None:
    """Refuses a directory that lies inside an output of one of `kinds`; a directory that output's layout
    opens to other commands (open_dirs: a shard set's stats/) directly below it is fine.

    Raises:
      OutputError: naming the directory, the output it is inside and what that output is.
    """
    for depth, (ancestor, name) in enumerate(_ancestors(directory)):
        filesystem, path = fs.filesystem(ancestor)
        if not filesystem.isdir(path):
            continue
        outer = _kind_at(filesystem, path, kinds)
        if outer is not None and not (depth == 0 and name in outer.open_dirs):
            raise OutputError(
                f"{flag} {directory!r} is inside {ancestor!r}, which holds {outer.what}: writing there would "
                f"mix files into it. Choose a {flag} outside it."
            )


def describe_directory(directory: str, *, kind: OutputKind, others: Sequence[OutputKind]) -> str:
    """What a directory holds, as a refusal names it: the `what` of one of the `others` outputs it is, or
    the entries a `kind` output does not own ("files lmshards did not write ('notes.txt')"), else its
    entries."""
    found = _existing_directory(directory, "--output")
    if found is None:
        return "nothing"
    other = _kind_at(*found, others)
    if other is not None:
        return other.what
    foreign = _classify(*found, kind).foreign
    listed = foreign or tuple(entry.shown for entry in _list(*found))
    shown = ", ".join(repr(f) for f in listed[:_FOREIGN_SHOWN])
    more = f" and {len(listed) - _FOREIGN_SHOWN} more" if len(listed) > _FOREIGN_SHOWN else ""
    return f"files lmshards did not write ({shown}{more})" if foreign else f"{shown}{more}"


def check_replaceable(
    directory: str,
    *,
    kind: OutputKind,
    overwrite: bool,
    flag: str = "--output",
    others: Sequence[OutputKind] = (),
) -> bool:
    """Refuses, before any work starts, an output directory that a new `kind` output may not replace.

    Absent or empty directories are fine; a non-empty one needs `overwrite` and must hold nothing but an
    earlier lmshards `kind` output. Never replaced, with or without `overwrite`: a directory that is
    (by its signs) or lies inside one of the `others` outputs (e.g. lmshards.schemas.layouts.OUTPUT_KINDS),
    or that holds entries `kind` does not own. Returns True when an earlier output will be replaced.

    Raises:
      OutputError: naming the directory, what it holds and the fix.
    """
    check_not_inside_output(directory, kinds=(kind, *others), flag=flag)
    found = _existing_directory(directory, flag)
    if found is None or not _list(*found):
        return False
    filesystem, path = found
    if not _has_sign(filesystem, path, kind):
        other = _kind_at(filesystem, path, [o for o in others if o.name != kind.name])
        if other is not None:
            raise OutputError(
                f"{flag} {directory!r} holds {other.what}, which this command never replaces. "
                f"Choose a new or empty {flag}."
            )
    _refuse_foreign(directory, _classify(filesystem, path, kind).foreign, kind=kind, flag=flag)
    if not overwrite:
        raise OutputError(
            f"{flag} {directory!r} is not empty; pass --overwrite to replace what it holds "
            f"({kind.what or f'an earlier lmshards {kind.name} output'}), or choose a new directory."
        )
    return True


def check_file_output(
    path: str,
    *,
    ours: Callable[[bytes], bool],
    kinds: Sequence[OutputKind] = (),
    flag: str = "--output",
) -> None:
    """Refuses, before any work starts, a one-file output that would replace a file lmshards did not write
    (`ours` is given the file's first FILE_HEAD_BYTES), or go into one of the `kinds` outputs.

    Raises:
      OutputError: path is a directory, a file that is not ours, or inside another lmshards output.
    """
    check_not_inside_output(path, kinds=kinds, flag=flag)
    filesystem, stripped = fs.filesystem(path)
    if not filesystem.exists(stripped):
        return
    if filesystem.isdir(stripped):
        raise OutputError(f"{flag} {path!r} is a directory; pass the path of the file to write.")
    with filesystem.open(stripped, "rb") as f:
        head = f.read(FILE_HEAD_BYTES)
    if not ours(head):
        raise OutputError(
            f"{flag} {path!r} is a file lmshards did not write, which this command never replaces. "
            f"Choose a new file name for {flag}, or move that file away."
        )


def prepare_output(
    directory: str, *, kind: OutputKind, overwrite: bool, flag: str = "--output"
) -> None:
    """Makes `directory` an empty directory for a new `kind` output, deleting an earlier one (its marker first).

    Raises:
      OutputError: as check_replaceable.
    """
    if check_replaceable(directory, kind=kind, overwrite=overwrite, flag=flag):
        clear_owned_output(directory, kind=kind, flag=flag)
    fs.makedirs(directory)


def clear_owned_output(
    directory: str, *, kind: OutputKind, flag: str = "--output"
) -> tuple[str, ...]:
    """Deletes what an earlier lmshards `kind` output left in directory (the marker first); returns the names.

    Nothing is deleted unless everything there belongs to lmshards.

    Raises:
      OutputError: directory is a file, or holds entries lmshards did not write (a few are named).
    """
    owned, foreign = owned_entries(directory, kind=kind, flag=flag)
    _refuse_foreign(directory, foreign, kind=kind, flag=flag)
    filesystem, path = fs.filesystem(directory)
    for name in owned:
        filesystem.rm(posixpath.join(path, name), recursive=True)
    return owned


def remove_partial_output(
    directory: str, *, kind: OutputKind, flag: str = "--output"
) -> tuple[str, ...]:
    """Deletes what an interrupted `kind` writer left in directory; returns the names deleted.

    A complete output (its marker, written last, is there and ours) is kept: it is an earlier run's that
    this one had not started replacing, or this run's own, finished just before the stop. Anything
    lmshards did not write stays too (nothing is deleted then, with a warning).
    """
    found = _existing_directory(directory, flag)
    if found is None:
        return ()
    filesystem, path = found
    if filesystem.exists(posixpath.join(path, kind.marker)) and _is_ours(
        filesystem, path, kind.marker, kind
    ):
        return ()
    try:
        return clear_owned_output(directory, kind=kind, flag=flag)
    except OutputError as e:
        log.warning("Left the partial output in %s as it is: %s", directory, e)
        return ()


# ------------------------------------------------------------------------ preflight and disk errors


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def check_writable(location: str, *, flag: str = "--output") -> None:
    """Creates location if missing (locally), then writes and removes a small probe file in it.

    Object stores have no directories to create (and creating a bucket on a typo would be worse).

    Raises:
      OutputError: location is a file, or a file cannot be created and removed there; the message
        names the location, the cause (permissions, read-only, full disk) and the fix.
    """
    probe_name = f"{WRITE_PROBE_PREFIX}{uuid.uuid4().hex}"
    try:
        if fs.is_remote(location):
            _probe_remote(location, probe_name, flag)
        else:
            _probe_local(location, probe_name, flag)
    except OutputError:
        raise
    except StorageError as e:
        raise OutputError(f"{flag} {location!r} is not writable: {e}") from e
    # Any failure here means the command could not write its output; remote stores raise their own
    # error classes (gcsfs: OSError for 403 but HttpError for others), so all become one message.
    except Exception as e:
        code = disk_errno(e)
        if code is not None:
            raise OutputError(
                f"{flag} {location!r} is not writable: {describe_disk_error(code)}."
            ) from e
        raise OutputError(
            f"{flag} {location!r} is not writable: a test file cannot be created and removed there "
            f"({_one_line(e)}). Check the path, its permissions (for gs://: the bucket and your credentials), "
            "or choose another location."
        ) from e


def _probe_local(location: str, probe_name: str, flag: str) -> None:
    directory = location.removeprefix("file://")
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise OutputError(f"{flag} {location!r} is a file; pass a directory path.")
    os.makedirs(directory, exist_ok=True)
    probe = os.path.join(directory, probe_name)
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_PROBE_BYTES)
            f.flush()
            os.fsync(f.fileno())  # a full disk may only show when the data reaches it
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(probe)
        raise
    os.remove(probe)


def _probe_remote(location: str, probe_name: str, flag: str) -> None:
    filesystem, path = fs.filesystem(location)
    if filesystem.isfile(path):
        raise OutputError(f"{flag} {location!r} is a file; pass a directory path.")
    probe = posixpath.join(path.rstrip("/"), probe_name)
    try:
        filesystem.pipe_file(probe, _PROBE_BYTES)
    except FileNotFoundError as e:  # an upload only fails with 404 when the bucket is missing
        bucket = path.split("/", 1)[0]
        raise OutputError(
            f"{flag} {location!r} is not writable: bucket {bucket!r} does not exist or your credentials cannot "
            "see it. Check the bucket name, or create the bucket first."
        ) from e
    except BaseException:
        with contextlib.suppress(Exception):
            filesystem.rm_file(probe)
        raise
    filesystem.rm_file(probe)
