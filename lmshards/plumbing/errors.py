"""Errors on user input (each message names the bad value and how to fix it), and the disk errors a
run may meet while writing, told apart from bugs so that they get one line instead of a traceback."""

from __future__ import annotations

import errno
import os
import re


class LmshardsError(Exception):
    """Base class for errors a user can fix; the CLI prints the message without a traceback."""


class TokenizerError(LmshardsError):
    """The tokenizer path is missing, unreadable or not a tokenizer."""


class ManifestError(LmshardsError):
    """The manifest is missing, corrupt or does not describe a complete output."""


class StorageError(LmshardsError):
    """A gs:// bucket cannot be reached in time, does not exist, or refuses these credentials."""


class OutputError(LmshardsError):
    """The output location is a file, not empty, not writable, or overlaps an input."""


class FailedRunError(LmshardsError):
    """The run could not give what was asked of valid input (e.g. it removed every document): one line, exit 1."""


# errno -> (what happened, how to fix it)
_DISK_ERRORS = {
    errno.ENOSPC: ("the disk is full", "free some space or choose another location"),
    errno.EDQUOT: (
        "the disk quota is exceeded",
        "free some space, raise the quota or choose another location",
    ),
    errno.EROFS: ("the file system is read-only", "choose a location on a writable file system"),
    errno.EACCES: ("permission denied", "fix its permissions or choose another location"),
    errno.EPERM: ("permission denied", "fix its permissions or choose another location"),
}
# Beam re-raises a worker's error as text (e.g. RuntimeError("... OSError: [Errno 28] ...")).
_ERRNO_IN_TEXT_RE = re.compile(r"\[Errno (\d+)\]")


def disk_errno(exc: BaseException) -> int | None:
    """The errno of the first disk error in exc, its causes and contexts, or in their text."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _DISK_ERRORS:
            return current.errno
        for match in _ERRNO_IN_TEXT_RE.finditer(str(current)):
            if int(match[1]) in _DISK_ERRORS:
                return int(match[1])
        # TensorFlow's file systems give only the errno's text ("...; No space left on device").
        for code in _DISK_ERRORS:
            if os.strerror(code) in str(current):
                return code
        current = current.__cause__ or current.__context__
    return None


def describe_disk_error(code: int) -> str:
    """What a disk errno means and how to fix it, e.g. 'the disk is full (No space left on device); free ...'."""
    what, fix = _DISK_ERRORS[code]
    return f"{what} ({os.strerror(code)}); {fix}"


def disk_error_message(exc: BaseException, path: str) -> str | None:
    """One line naming path, the cause and the fix when exc is (or wraps) a full disk, quota, read-only or
    permission error; None for any other error."""
    code = disk_errno(exc)
    if code is None:
        return None
    return f"Cannot write to {path!r}: {describe_disk_error(code)}, then run the command again."
