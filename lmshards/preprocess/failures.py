"""How a failed run is reported: one line, whatever runner ran it.

Beam hands a worker's exception back wrapped: as the same class with "[while running 'Step']"
appended (in-process runner), or as another exception holding the worker's traceback as text
(worker processes, Dask, Dataflow). It also logs that traceback before the run ends. Here both are
traced back to what happened: an error the user can fix (an LmshardsError: exit 2, its message) or
a full disk or lost permission (RunFailure: exit 1, one line naming the output); anything else is
left as it is.
"""

from __future__ import annotations

import logging
import re
import traceback
from collections.abc import Iterator

from lmshards.plumbing.errors import LmshardsError, disk_error_message

# What Beam appends to the message of an exception raised inside a step.
_WHILE_RUNNING_RE = re.compile(r"\s*\[while running '[^']*'\]")


class RunFailure(Exception):
    """The run failed on the machine's side (a full disk, a lost permission); the message says what to do."""


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """exc, then its causes and contexts."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _error_classes() -> list[type[LmshardsError]]:
    """Every LmshardsError subclass imported so far (the launcher imports every module a worker runs)."""
    found, pending = [], [LmshardsError]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


def _clean(message: str) -> str:
    return _WHILE_RUNNING_RE.sub("", message).strip()


def user_error(exc: BaseException) -> LmshardsError | None:
    """The error a user can fix that exc is, wraps, or quotes in its text (a worker's traceback), or None.

    The returned error has the class the worker raised and its message, without Beam's step suffix.
    """
    for current in _chain(exc):
        if isinstance(current, LmshardsError):
            return type(current)(_clean(str(current)))
    text = "\n".join(str(current) for current in _chain(exc))
    best: tuple[int, type[LmshardsError], str] | None = None
    for cls in _error_classes():
        marker = f"{cls.__module__}.{cls.__qualname__}: "
        at = text.rfind(marker)
        if at >= 0 and (best is None or at > best[0]):
            best = (at, cls, text[at + len(marker) :].split("\n", 1)[0])
    return best[1](_clean(best[2])) if best else None


def run_failure(exc: BaseException, output: str) -> LmshardsError | RunFailure | None:
    """What a failed run reports instead of exc: a user error, a disk error writing output, or None (a bug)."""
    error = user_error(exc)
    if error is not None:
        return error
    message = disk_error_message(exc, output)
    return RunFailure(message) if message else None


def is_reported_failure(record: logging.LogRecord) -> bool:
    """Whether a log record of Beam's carries a failure that run_failure reports in one line.

    Beam logs a failing step's traceback (in-process, with exc_info) or a worker's (as text, its
    newlines escaped) before the run ends; for these failures the one line is all a user needs.
    """
    if not record.name.startswith("apache_beam") or record.levelno < logging.ERROR:
        return False
    text = record.getMessage()
    if record.exc_info and record.exc_info[1] is not None:
        text += "\n" + "".join(traceback.format_exception(record.exc_info[1]))
    return run_failure(RuntimeError(text), "") is not None
