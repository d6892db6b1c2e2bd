"""SIGTERM and SIGINT for every command: stop, release the output's lease, remove its partial files, one line.

lmshards.plumbing.cli.run_command holds StopSignals around a command's body. The first signal raises Stopped
(a KeyboardInterrupt) in the main thread and silences logging, so that what a library logs while it
unwinds (Beam's traceback of the interrupted step) never reaches the user; lmshards.plumbing.lease.output_lease
then removes the partial output and the lease, and run_command prints one line and returns
EXIT_INTERRUPTED. Later signals are ignored until the cleanup is done. `lmshards train` installs its own
handlers for its block (lmshards.train.loop.preemption: save a checkpoint, exit 75).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from typing import Any

SIGNALS = (signal.SIGTERM, signal.SIGINT)
_state: dict[str, int | None] = {"signal": None}
# > 0 inside deferred(): a native library's set-up (`import tensorflow`) that an exception raised in the
# middle of would abort the process instead of stopping it.
_deferring = [0]
_installed = [0]  # > 0 while stop_signals() holds the handlers


class Stopped(KeyboardInterrupt):
    """The command was asked to stop by a signal."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def requested() -> int | None:
    """The signal that asked this process to stop, or None."""
    return _state["signal"]


def signal_name() -> str:
    signum = requested()
    return signal.Signals(signum).name if signum is not None else "SIGINT"


def _handle(signum: int, frame: Any) -> None:
    if _state["signal"] is not None:
        return  # already stopping: let the cleanup finish
    _state["signal"] = signum
    logging.disable(logging.CRITICAL)  # a library's traceback of the interrupted work is noise now
    threading.excepthook = lambda args: None  # and so is a worker thread's
    if not _deferring[0]:
        raise Stopped(signum)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A signal inside the block stops the command when the block ends, not in its middle."""
    _deferring[0] += 1
    try:
        yield
    finally:
        _deferring[0] -= 1
    signum = _state["signal"]
    if not _deferring[0] and signum is not None and _installed[0]:
        raise Stopped(signum)


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """Turns SIGTERM and SIGINT into Stopped in the main thread while the block runs (elsewhere: nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _state["signal"] = None
    hook = threading.excepthook
    previous = {s: signal.signal(s, _handle) for s in SIGNALS}
    _installed[0] += 1
    try:
        yield
    finally:
        _installed[0] -= 1
        for s, handler in previous.items():
            signal.signal(s, handler)
        if _state["signal"] is not None:  # what ran next in this process logs again
            logging.disable(logging.NOTSET)
            threading.excepthook = hook
