"""Finding the input files: local paths, directories and globs, or gs:// ones (all through fsspec).

A directory given as an input stands for every file below it, recursively, except hidden names
(starting with "." or "_", e.g. `_SUCCESS`, `.part-0.txt.crc`), which writers leave beside their data.

Files inside an lmshards output (a directory holding an lmshards manifest.json or .lmshards-tmp, see
plumbing.outputs.is_lmshards_output) are never read as text: a directory or glob input skips them (they
are counted and logged), and a file named as an input there is refused. An output keeps its files at
most OUTPUT_DEPTH levels down (manifest.json; train/<shard>, tokenizer/tokenizer.json), besides its
.lmshards-tmp, so a file's parent and grandparent are looked at (each directory once).
"""

from __future__ import annotations

import dataclasses
import logging
import posixpath
from collections.abc import Sequence
from typing import Any

from plumbing import fs
from plumbing.outputs import TEMP_DIR_NAME, is_lmshards_output
from preprocess.sources.options import InputError
from schemas.constants import MANIFEST_NAME
from schemas.manifest import InputFileInfo

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
    """The input files to read, and what was left out because it lies inside an lmshards output.

    files: sorted, de-duplicated, with their sizes in bytes.
    skipped: the lmshards output directories whose files were left out, sorted.
    skipped_files: how many files were left out (record it as ReadStats.files_skipped_lmshards_output).
    """

    files: tuple[InputFileInfo, ...]
    skipped: tuple[str, ...] = ()
    skipped_files: int = 0


def discover_inputs(patterns: Sequence[str]) -> InputDiscovery:
    """Resolves files, directories and globs (local or gs://) into the files to read.

    Files that directories and globs find inside an lmshards output are left out, counted, and
    logged in one warning naming the outputs.

    Raises:
      InputError: no pattern, a path that does not exist, a glob or directory that matches no file
        (or only files inside lmshards outputs), a file named as an input that lies inside an
        lmshards output, or a local file that cannot be opened.
    """
    if not patterns:
        raise InputError(
            "No input given. Pass --input FILE, DIRECTORY or GLOB (local or gs://); it can repeat."
        )
    outputs = _OutputDirectories()
    sizes: dict[str, int] = {}
    skipped: dict[str, str] = {}  # file -> the lmshards output holding it
    for pattern in patterns:
        found, inside = _expand_pattern(pattern, outputs)
        sizes.update(found)
        skipped.update(inside)
    discovery = InputDiscovery(
        files=tuple(InputFileInfo(path=path, bytes=sizes[path]) for path in sorted(sizes)),
        skipped=tuple(sorted(set(skipped.values()))),
        skipped_files=len(skipped),
    )
    if discovery.skipped_files:
        logger.warning(
            "Skipped %d files under lmshards outputs (never read as text): %s",
            discovery.skipped_files,
            shown_paths(discovery.skipped),
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


def _expand_pattern(
    pattern: str, outputs: _OutputDirectories
) -> tuple[dict[str, int], dict[str, str]]:
    """(file -> size, file -> the lmshards output holding it) for one pattern."""
    if not pattern.strip():
        raise InputError("An --input value is empty; give a file, directory or glob.")
    filesystem, stripped = fs.filesystem(pattern)
    prefix = pattern.split("://", 1)[0] + "://" if fs.is_remote(pattern) else ""
    named_file = False  # the pattern is one file, not a directory or glob
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
            named_file = entries[stripped]["type"] != "directory"
        else:
            raise InputError(
                f"--input {pattern!r} does not exist. Check the path (and the bucket, for gs://)."
            )
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
        kept, skipped = {}, {}
        for name, size in files.items():
            output = outputs.holding(prefix, name)
            if output is None:
                kept[prefix + name] = size
            elif named_file:
                raise InputError(
                    f"--input {pattern!r} lies inside the lmshards output {output!r} ({_OUTPUT_SIGN}); an "
                    "output is never read as text. Pass the corpus it was made from instead."
                )
            else:
                skipped[prefix + name] = output
    except OSError as e:
        raise InputError(f"--input {pattern!r} cannot be listed: {e}.") from e
    if not kept:
        raise InputError(
            f"--input {pattern!r}: every file it names lies inside an lmshards output "
            f"({shown_paths(sorted(set(skipped.values())))}: {_OUTPUT_SIGN}), which is never read as text. "
            "Pass the corpus instead."
        )
    if not prefix:
        for path in kept:
            _check_readable(path)
    return kept, skipped


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


def _directory_files(filesystem: Any, directory: str) -> dict[str, int]:
    found = filesystem.find(directory, detail=True)
    files = {}
    for name, info in found.items():
        relative = posixpath.relpath(name, directory)
        if info["type"] == "file" and not any(
            p.startswith(_HIDDEN_PREFIXES) for p in relative.split("/")
        ):
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
