"""Finding the input files: local paths, directories and globs, or gs:// ones (all through fsspec).

A directory given as an input stands for every file below it, recursively, except hidden names
(starting with "." or "_", e.g. `_SUCCESS`, `.part-0.crc`), which writers leave beside their data.
"""

from __future__ import annotations

import posixpath
from typing import Any, Sequence

from preprocess.sources.options import InputError
from schemas import fs
from schemas.manifest import InputFileInfo

_GLOB_CHARS = "*?["
_HIDDEN_PREFIXES = (".", "_")


def expand_inputs(patterns: Sequence[str]) -> list[InputFileInfo]:
    """Resolves files, directories and globs (local or gs://) into sorted, de-duplicated files.

    Raises:
      InputError: no pattern, a path that does not exist, a glob or directory that matches no file,
        or a local file that cannot be opened.
    """
    if not patterns:
        raise InputError("No input given. Pass --input FILE, DIRECTORY or GLOB (local or gs://); it can repeat.")
    sizes: dict[str, int] = {}
    for pattern in patterns:
        sizes.update(_expand_pattern(pattern))
    return [InputFileInfo(path=path, bytes=sizes[path]) for path in sorted(sizes)]


def _expand_pattern(pattern: str) -> dict[str, int]:
    if not pattern.strip():
        raise InputError("An --input value is empty; give a file, directory or glob.")
    filesystem, stripped = fs.filesystem(pattern)
    prefix = pattern.split("://", 1)[0] + "://" if fs.is_remote(pattern) else ""
    try:
        if any(c in stripped for c in _GLOB_CHARS):
            entries = filesystem.glob(stripped, detail=True)
            if not entries:
                raise InputError(
                    f"--input {pattern!r} matches no file. Check the directory and the pattern, and quote "
                    "the glob so that your shell does not expand it (e.g. --input 'corpus/*.txt')."
                )
        elif filesystem.exists(stripped):
            entries = {stripped: filesystem.info(stripped)}
        else:
            raise InputError(f"--input {pattern!r} does not exist. Check the path (and the bucket, for gs://).")
        files: dict[str, int] = {}
        for name, info in entries.items():
            if info["type"] == "directory":
                found = _directory_files(filesystem, name)
                if not found:
                    raise InputError(
                        f"--input {pattern!r}: directory {prefix + name!r} holds no files "
                        "(hidden names starting with '.' or '_' are skipped)."
                    )
                files.update(found)
            else:
                files[name] = int(info["size"])
    except OSError as e:
        raise InputError(f"--input {pattern!r} cannot be listed: {e}.") from e
    result = {prefix + name: size for name, size in files.items()}
    if not prefix:
        for path in result:
            _check_readable(path)
    return result


def _directory_files(filesystem: Any, directory: str) -> dict[str, int]:
    found = filesystem.find(directory, detail=True)
    files = {}
    for name, info in found.items():
        relative = posixpath.relpath(name, directory)
        if info["type"] == "file" and not any(p.startswith(_HIDDEN_PREFIXES) for p in relative.split("/")):
            files[name] = int(info["size"])
    return files


def _check_readable(path: str) -> None:
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as e:
        raise InputError(
            f"Input file {path!r} cannot be read ({e.strerror or e}). Fix its permissions or leave it out of --input."
        ) from e
