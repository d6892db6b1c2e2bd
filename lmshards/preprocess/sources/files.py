"""Finding the input files: local paths, directories and globs, or gs:// ones.

One rule for a directory, a glob and a named file:
- A directory stands for every file below it, recursively; a glob for every file it matches and every
  file below a directory it matches (an empty directory it matches is counted, not an error).
- Hidden names (starting with "." or "_", e.g. `_SUCCESS`, `.part-0.txt.crc`, `.git/`), which writers
  and tools leave beside their data, are skipped below a directory or a glob's wildcard, and counted
  (locally a hidden directory counts once; on gs:// each object below it counts);
  a file named outright is read, and so are hidden names the glob spells itself (`data/.*.txt`).
- Symbolic links to files and to directories are followed (locally); a link that loops back to a
  directory it lies in, or that points nowhere, is refused, naming it. A file reached twice (through
  a symbolic or hard link, or by two patterns; locally the same device and inode) is read once, under
  the first path that reached it (patterns in the order given, names sorted), and counted.
- Special files (FIFOs, sockets, devices) are refused before any work, naming them: reading one could
  hang the run or read nothing.

Files inside an lmshards output (a directory holding an lmshards manifest.json or .lmshards-tmp, see
lmshards.schemas.directory_kind.is_lmshards_output) are never read as text: a directory or glob input skips them (they
are counted and logged), and a file named as an input there is refused. An output keeps its files at
most OUTPUT_DEPTH levels down (manifest.json; train/<shard>, tokenizer/tokenizer.json), besides its
.lmshards-tmp, so a file's parent and grandparent are looked at (each directory once).

What discovery found goes into the reading report (InputDiscovery.counts -> ReadStats): files found,
duplicates, files inside lmshards outputs, hidden entries skipped and empty directories.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import posixpath
import re
import stat
from collections.abc import Sequence
from typing import Any

import fsspec.utils

from lmshards.plumbing import fs
from lmshards.preprocess.sources.core.options import InputError
from lmshards.schemas.constants import MANIFEST_NAME
from lmshards.schemas.directory_kind import is_lmshards_output
from lmshards.schemas.layouts import TEMP_DIR_NAME
from lmshards.schemas.manifest import InputFileInfo

logger = logging.getLogger(__name__)

_GLOB_CHARS = "*?["
_HIDDEN_PREFIXES = (".", "_")
# How many directories up from a file an lmshards output holding it can be (its parent, grandparent).
OUTPUT_DEPTH = 2
# How many paths an error or warning names before "and N more".
NAMES_SHOWN = 3
_OUTPUT_SIGN = f"a directory holding an lmshards {MANIFEST_NAME} or {TEMP_DIR_NAME}"


@dataclasses.dataclass(frozen=True)
class InputDiscovery:
    """The input files to read, and what else discovery found.

    files: sorted, de-duplicated, with their sizes in bytes.
    skipped: the lmshards output directories whose files were left out, sorted.
    skipped_files: how many files were left out there (ReadStats.files_skipped_lmshards_output).
    found: files found (a file reached twice counts twice); duplicates: those reached again;
    hidden: hidden entries skipped (a hidden directory counts once); empty_directories: directories
    found holding nothing at all. Read = found - duplicates - skipped_files.
    """

    files: tuple[InputFileInfo, ...]
    skipped: tuple[str, ...] = ()
    skipped_files: int = 0
    found: int = 0
    duplicates: int = 0
    hidden: int = 0
    empty_directories: int = 0

    def counts(self) -> dict[str, int]:
        """The ReadStats fields this discovery sets: the reading report's account of every entry."""
        return {
            "files_found": self.found,
            "files_duplicate": self.duplicates,
            "files_skipped_lmshards_output": self.skipped_files,
            "entries_skipped_hidden": self.hidden,
            "directories_empty": self.empty_directories,
        }


@dataclasses.dataclass
class _Found:
    """What expanding the patterns found so far (file paths with their protocol prefix)."""

    files: dict[str, int] = dataclasses.field(default_factory=dict)  # path -> size
    same_as: dict[str, str] = dataclasses.field(default_factory=dict)  # file identity -> first path
    count: int = 0
    duplicates: int = 0
    hidden: int = 0
    empty_directories: int = 0
    refused: list[str] = dataclasses.field(default_factory=list)  # why each bad entry is refused

    def add(self, path: str, size: int, real: str) -> None:
        self.count += 1
        if real in self.same_as:
            self.duplicates += 1
            return
        self.same_as[real] = path
        self.files[path] = size


def discover_inputs(patterns: Sequence[str]) -> InputDiscovery:
    """Resolves files, directories and globs (local or gs://) into the files to read (see the module doc).

    Files that directories and globs find inside an lmshards output are left out, counted, and
    logged in one warning naming the outputs.

    Raises:
      InputError: no pattern, a path that does not exist, a glob or directory that matches no file
        (or only files inside lmshards outputs), a file named as an input that lies inside an
        lmshards output, a special file, a symbolic link that loops or points nowhere, or a local
        file that cannot be opened.
    """
    if not patterns:
        raise InputError(
            "No input given. Pass --input FILE, DIRECTORY or GLOB (local or gs://); it can repeat."
        )
    outputs = _OutputDirectories()
    found = _Found()
    skipped: dict[str, str] = {}  # file -> the lmshards output holding it
    for pattern in patterns:
        skipped.update(_expand_pattern(pattern, outputs, found))
    if found.refused:
        raise InputError(
            f"--input holds entries that cannot be read as text: {'; '.join(found.refused[:NAMES_SHOWN])}"
            + (
                f" and {len(found.refused) - NAMES_SHOWN} more"
                if len(found.refused) > NAMES_SHOWN
                else ""
            )
            + ". Remove them from the input or name the files to read."
        )
    for path in found.files:
        if not fs.is_remote(path):
            _check_readable(path)
    discovery = InputDiscovery(
        files=tuple(InputFileInfo(path=p, bytes=found.files[p]) for p in sorted(found.files)),
        skipped=tuple(sorted(set(skipped.values()))),
        skipped_files=len(skipped),
        found=found.count + len(skipped),
        duplicates=found.duplicates,
        hidden=found.hidden,
        empty_directories=found.empty_directories,
    )
    if discovery.skipped_files:
        logger.warning(
            "Skipped %d files under lmshards outputs (never read as text): %s",
            discovery.skipped_files,
            shown_paths(discovery.skipped),
        )
    logger.info(
        "inputs: %d files found, %d to read; skipped: %d reached twice (links or repeated patterns), "
        "%d inside lmshards outputs, "
        "%d hidden entries; %d empty directories",
        discovery.found,
        len(discovery.files),
        discovery.duplicates,
        discovery.skipped_files,
        discovery.hidden,
        discovery.empty_directories,
    )
    return discovery


def expand_inputs(patterns: Sequence[str]) -> list[InputFileInfo]:
    """The files of discover_inputs(patterns): sorted, de-duplicated, none inside an lmshards output.

    Raises:
      InputError: as discover_inputs.
    """
    return list(discover_inputs(patterns).files)


def check_not_empty(files: Sequence[InputFileInfo]) -> None:
    """Refuses inputs that hold no bytes at all, before any reading is planned.

    Raises:
      InputError: every file is empty (0 bytes); the message names the first few and the count.
    """
    if any(f.bytes for f in files):
        return
    raise InputError(
        f"Every input file is empty (0 bytes): {shown_paths([f.path for f in files])} ({len(files):,} files). "
        "Nothing would be read; pass files that hold text."
    )


def _expand_pattern(pattern: str, outputs: _OutputDirectories, found: _Found) -> dict[str, str]:
    """Adds what one pattern names to `found`; returns its files that lie inside lmshards outputs."""
    if not pattern.strip():
        raise InputError("An --input value is empty; give a file, directory or glob.")
    local = not fs.is_remote(pattern)
    mine = _Found()
    try:
        named_file = _local_entries(pattern, mine) if local else _remote_entries(pattern, mine)
    except OSError as e:
        raise InputError(f"--input {pattern!r} cannot be listed: {e}.") from e
    found.refused += mine.refused
    found.hidden += mine.hidden
    found.empty_directories += mine.empty_directories
    prefix = "" if local else pattern.split("://", 1)[0] + "://"
    skipped, kept = {}, 0
    for path, size in mine.files.items():
        bare = path.removeprefix(prefix)
        output = outputs.holding(prefix, bare)
        if output is None:
            kept += 1
            found.add(path, size, _file_identity(path) if local else path)
        elif named_file:
            raise InputError(
                f"--input {pattern!r} lies inside the lmshards output {output!r} ({_OUTPUT_SIGN}); an "
                "output is never read as text. Pass the corpus it was made from instead."
            )
        else:
            skipped[path] = output
    found.count += mine.duplicates
    found.duplicates += mine.duplicates
    if not kept and not mine.refused:
        if skipped:
            raise InputError(
                f"--input {pattern!r}: every file it names lies inside an lmshards output "
                f"({shown_paths(sorted(set(skipped.values())))}: {_OUTPUT_SIGN}), which is never read as text. "
                "Pass the corpus instead."
            )
        raise InputError(
            f"--input {pattern!r} holds no files (hidden names starting with '.' or '_' are skipped)."
        )
    return skipped


def _is_glob(path: str) -> bool:
    return any(c in path for c in _GLOB_CHARS)


def _spells_hidden(pattern: str) -> bool:
    """True when a component of the pattern itself starts with a hidden prefix: those names were asked for."""
    return any(part.startswith(_HIDDEN_PREFIXES) for part in pattern.split("/") if part)


# ---------------------------------------------------------------- local paths


def _local_entries(pattern: str, found: _Found) -> bool:
    """Adds the files a local file, directory or glob names; True when it names one file outright."""
    path = pattern.removeprefix("file://")
    if not _is_glob(path):
        if not os.path.lexists(path):
            raise InputError(
                f"--input {pattern!r} does not exist. Check the path (and the bucket, for gs://)."
            )
        kind = _local_kind(path, found)
        if kind == "file":
            found.add(os.path.abspath(path), os.path.getsize(path), _file_identity(path))
            return True
        if kind == "directory":
            _walk(os.path.abspath(path), found, hidden_ok=False, ancestors=())
        return False
    parts = os.path.abspath(path).split(os.sep)
    fixed = next(i for i, part in enumerate(parts) if _is_glob(part))
    root = os.sep.join(parts[:fixed]) or os.sep
    matcher = re.compile(fsspec.utils.glob_translate(os.path.abspath(path)))
    depth = None if "**" in path else len(parts) - fixed
    before = found.count + found.duplicates
    if os.path.isdir(root):
        _walk_glob(root, matcher, found, depth=depth, hidden_ok=_spells_hidden(path[len(root) :]))
    if (
        found.count + found.duplicates == before
        and not found.refused
        and not found.empty_directories
    ):
        raise InputError(
            f"--input {pattern!r} matches no file. Check the directory and the pattern, and quote "
            "the glob so that your shell does not expand it (e.g. --input 'corpus/*.txt')."
        )
    return False


def _file_identity(path: str) -> str:
    """What makes two local paths the same file: its device and inode, so that a symbolic link and a
    hard link to a file already found are both the same file."""
    st = os.stat(path)
    return f"{st.st_dev}:{st.st_ino}"


def _local_kind(path: str, found: _Found) -> str | None:
    """'file', 'directory', or None after recording why the entry is refused (special, dangling link)."""
    try:
        mode = os.stat(path).st_mode  # follows symbolic links
    except FileNotFoundError:
        found.refused.append(
            f"{path!r} is a symbolic link to {os.readlink(path)!r}, which does not exist"
        )
        return None
    except OSError as e:  # ELOOP: a link to itself
        found.refused.append(f"{path!r} cannot be followed ({e.strerror or e})")
        return None
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    found.refused.append(f"{path!r} is a {_special_kind(mode)}")
    return None


def _special_kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "FIFO (named pipe)"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
    ):
        if test(mode):
            return name
    return "special file"


def _walk(directory: str, found: _Found, *, hidden_ok: bool, ancestors: tuple[str, ...]) -> None:
    """Adds every file below directory, following symbolic links; refuses a link back into its own path."""
    real = os.path.realpath(directory)
    if real in ancestors:
        found.refused.append(
            f"{directory!r} is a symbolic link back to {real!r}, a directory it lies in (a loop)"
        )
        return
    names = sorted(os.listdir(directory))
    if not names:
        found.empty_directories += 1
    for name in names:
        path = os.path.join(directory, name)
        if name.startswith(_HIDDEN_PREFIXES) and not hidden_ok:
            found.hidden += 1
            continue
        kind = _local_kind(path, found)
        if kind == "file":
            found.add(path, os.path.getsize(path), _file_identity(path))
        elif kind == "directory":
            _walk(path, found, hidden_ok=hidden_ok, ancestors=(*ancestors, real))


def _walk_glob(
    root: str, matcher: re.Pattern[str], found: _Found, *, depth: int | None, hidden_ok: bool
) -> None:
    """Adds the files under root that matcher matches, and every file below a directory it matches.

    Without `**`, a glob matches at exactly `depth` levels below root, so nothing deeper is listed.
    """
    stack: list[tuple[str, int, tuple[str, ...]]] = [(root, 0, ())]
    while stack:
        directory, level, ancestors = stack.pop()
        real = os.path.realpath(directory)
        if real in ancestors:
            found.refused.append(
                f"{directory!r} is a symbolic link back to {real!r}, a directory it lies in (a loop)"
            )
            continue
        deeper = []
        for name in sorted(os.listdir(directory)):
            path = os.path.join(directory, name)
            if name.startswith(_HIDDEN_PREFIXES) and not hidden_ok:
                found.hidden += 1
                continue
            matched = bool(matcher.match(path))
            if not matched and depth is not None and level + 1 >= depth:
                continue
            kind = _local_kind(path, found)
            if kind == "file" and matched:
                found.add(path, os.path.getsize(path), _file_identity(path))
            elif kind == "directory" and matched:
                _walk(path, found, hidden_ok=hidden_ok, ancestors=(*ancestors, real))
            elif kind == "directory":
                deeper.append((path, level + 1, (*ancestors, real)))
        stack.extend(reversed(deeper))  # depth first, in name order


# ---------------------------------------------------------------- gs:// and other object stores


def _remote_entries(pattern: str, found: _Found) -> bool:
    """Adds the objects a remote file, directory or glob names; True when it names one file outright."""
    filesystem, stripped = fs.filesystem(pattern)
    prefix = pattern.split("://", 1)[0] + "://"
    if _is_glob(stripped):
        entries = filesystem.glob(stripped, detail=True)
        if not entries:
            raise InputError(
                f"--input {pattern!r} matches no file. Check the directory and the pattern, and quote "
                "the glob so that your shell does not expand it (e.g. --input 'corpus/*.txt')."
            )
        root = stripped[: min(stripped.index(c) for c in _GLOB_CHARS if c in stripped)]
        hidden_ok = _spells_hidden(stripped[len(root) :])
    elif filesystem.exists(stripped):
        entries = {stripped: filesystem.info(stripped)}
        root, hidden_ok = stripped, False
    else:
        raise InputError(
            f"--input {pattern!r} does not exist. Check the path (and the bucket, for gs://)."
        )
    named_file = len(entries) == 1 and entries.get(stripped, {}).get("type") == "file"
    # A `**` glob lists a directory and the objects below it: each object counts once.
    objects: dict[str, int] = {}
    hidden: set[str] = set()
    for name, info in sorted(entries.items()):
        if not hidden_ok and _hidden_below(name, root):
            # On an object store a hidden entry is counted by the objects it holds.
            hidden.update(filesystem.find(name) if info["type"] == "directory" else [name])
        elif info["type"] == "directory":
            below = _directory_objects(filesystem, name, hidden)
            if not below:
                found.empty_directories += 1
            objects.update(below)
        else:
            objects[name] = int(info["size"])
    found.hidden += len(hidden)
    for name, size in objects.items():
        found.add(prefix + name, size, prefix + name)
    return named_file


def _hidden_below(name: str, root: str) -> bool:
    relative = name[len(root) :] if name.startswith(root) else name
    return any(p.startswith(_HIDDEN_PREFIXES) for p in relative.split("/") if p)


def _directory_objects(filesystem: Any, directory: str, hidden: set[str]) -> dict[str, int]:
    files = {}
    for name, info in filesystem.find(directory, detail=True).items():
        if info["type"] != "file":
            continue
        if _hidden_below(name, directory):
            hidden.add(name)
            continue
        files[name] = int(info["size"])
    return files


class _OutputDirectories:
    """Finds the lmshards output a file lies in; each directory is looked up once."""

    def __init__(self) -> None:
        self._known: dict[str, bool] = {}

    def holding(self, prefix: str, name: str) -> str | None:
        """The lmshards output (prefix + directory) that file `name` (a path without prefix) lies in, if any."""
        parts = name.split("/")
        if TEMP_DIR_NAME in parts[:-1]:
            return prefix + "/".join(parts[: parts.index(TEMP_DIR_NAME)])
        directory = name
        for _ in range(OUTPUT_DEPTH):
            parent = posixpath.dirname(directory)
            if not parent or parent == directory:
                break
            directory = parent
            if self._is_output(prefix + directory):
                return prefix + directory
        return None

    def _is_output(self, directory: str) -> bool:
        if directory not in self._known:
            self._known[directory] = is_lmshards_output(directory)
        return self._known[directory]


def shown_paths(names: Sequence[str]) -> str:
    """The first NAMES_SHOWN names, quoted, then "and N more"."""
    shown = ", ".join(repr(n) for n in names[:NAMES_SHOWN])
    return shown + (f" and {len(names) - NAMES_SHOWN:,} more" if len(names) > NAMES_SHOWN else "")


@dataclasses.dataclass(frozen=True)
class FileState:
    """A local input file's size and modification time (ns) when its reading was planned."""

    bytes: int
    mtime_ns: int


def file_state(path: str) -> FileState | None:
    """The state of a local file; None for object stores, whose objects are replaced whole, never edited."""
    if fs.is_remote(path):
        return None
    st = os.stat(path.removeprefix("file://"))
    return FileState(st.st_size, st.st_mtime_ns)


def check_unchanged(path: str, planned: FileState | None, *, when: str) -> None:
    """Refuses a file that changed since its reading was planned: what was read would not be what the
    manifest records.

    Raises:
      InputError: its size or modification time differs from `planned` (or it is gone); names it.
    """
    if planned is None:
        return
    try:
        now = file_state(path)
    except FileNotFoundError:
        now = None
    if now == planned:
        return
    found = f"now {now.bytes:,} bytes, modified at {now.mtime_ns} ns" if now else "now it is gone"
    raise InputError(
        f"Input file {path!r} changed {when} (planned: {planned.bytes:,} bytes, modified at "
        f"{planned.mtime_ns} ns; {found}). Run again once nothing writes to it, or copy it and pass the copy."
    )


def _check_readable(path: str) -> None:
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as e:
        raise InputError(
            f"Input file {path!r} cannot be read ({e.strerror or e}). Fix its permissions or leave it out of --input."
        ) from e
